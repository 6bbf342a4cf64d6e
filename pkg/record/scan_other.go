//go:build !amd64

package record

// plainPrefix returns how many bytes at the start of b are known to be
// printable ASCII other than '"' and '\\' without a closer look: none,
// where no vector scan is written.
func plainPrefix(b []byte) int { return 0 }
