package server

// blockList is a list whose versions share their prefixes: it is held in
// blocks of blockLen, and a version made from the first k items of
// another shares its full blocks, so that making one costs k/blockLen,
// not k. No version's items are ever written: a later version appends
// past what the one it was made from holds.
type blockList[T any] struct {
	b [][]T
	n int
}

const blockLen = 512

func (l *blockList[T]) len() int { return l.n }

func (l *blockList[T]) at(i int) T { return l.b[i/blockLen][i%blockLen] }

// prefix returns a list of the first k items. With inPlace (k is the
// length, and no other version was made from l in place) the last block
// is shared and appended to past l's items; else it is copied.
func (l *blockList[T]) prefix(k int, inPlace bool) blockList[T] {
	nb := (k + blockLen - 1) / blockLen
	out := blockList[T]{b: make([][]T, nb, nb+1), n: k}
	copy(out.b, l.b[:nb])
	if r := k % blockLen; r > 0 {
		last := out.b[nb-1][:r:r]
		if inPlace && k == l.n {
			last = out.b[nb-1][:r]
		} else {
			last = append(make([]T, 0, blockLen), last...)
		}
		out.b[nb-1] = last
	}
	return out
}

func (l *blockList[T]) add(v T) {
	if l.n%blockLen == 0 {
		l.b = append(l.b, make([]T, 0, blockLen))
	}
	last := len(l.b) - 1
	l.b[last] = append(l.b[last], v)
	l.n++
}
