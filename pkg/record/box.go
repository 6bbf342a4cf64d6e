package record

import "unsafe"

// A string or an integer held in an interface is boxed: converting it to
// any allocates a copy of it, one allocation for each of a record's
// strings and numbers. The decoders box them in slabs instead (see
// slab), so that a record's scalars cost a few allocations together.
//
// An interface is a type word and a pointer to the value; boxed builds
// one pointing at a value in a slab, as the conversion would point at its
// own allocation. The value is never written again.

// eface is the layout of an empty interface.
type eface struct {
	typ  unsafe.Pointer
	data unsafe.Pointer
}

func typeWord(v any) unsafe.Pointer { return (*eface)(unsafe.Pointer(&v)).typ }

var (
	stringType = typeWord("")
	int64Type  = typeWord(int64(0))
	sliceType  = typeWord([]any(nil))
)

// boxed returns the interface of type typ whose value is at p.
func boxed(typ, p unsafe.Pointer) (v any) {
	e := (*eface)(unsafe.Pointer(&v))
	e.typ, e.data = typ, p
	return v
}

// boxes keeps the slabs a decoder boxes scalars in.
type boxes struct {
	strs   slab[string]
	ints   slab[int64]
	slices slab[[]any]
}

// slice returns a as an interface; see str. Only a ShapeReader boxes
// slices: a whole record has too few arrays for a slab to save anything.
func (b *boxes) slice(a []any, left int) any {
	p := &b.slices.take(1, left/256)[0]
	*p = a
	return boxed(sliceType, unsafe.Pointer(p))
}

func (b *boxes) rewind() {
	b.strs.rewind()
	b.ints.rewind()
	b.slices.rewind()
}

// str returns s as an interface; left is the input not yet read, which
// sizes a new slab.
func (b *boxes) str(s string, left int) any {
	if s == "" {
		return "" // no allocation
	}
	p := &b.strs.take(1, left/32)[0]
	*p = s
	return boxed(stringType, unsafe.Pointer(p))
}

// int returns n as an interface; see str.
func (b *boxes) int(n int64, left int) any {
	if n >= 0 && n < 256 {
		return n // the runtime's own boxes of small integers
	}
	p := &b.ints.take(1, left/64)[0]
	*p = n
	return boxed(int64Type, unsafe.Pointer(p))
}
