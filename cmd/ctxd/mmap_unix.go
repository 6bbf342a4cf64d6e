//go:build unix

package main

import (
	"os"
	"syscall"
)

// mapFile maps the size bytes of a regular file into memory, read-only;
// unmap releases them.
func mapFile(f *os.File, size int64) (data []byte, unmap func(), err error) {
	data, err = syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return data, func() { syscall.Munmap(data) }, nil
}
