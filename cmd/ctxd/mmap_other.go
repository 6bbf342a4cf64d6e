//go:build !unix

package main

import (
	"errors"
	"os"
)

// mapFile is not available here: files are read.
func mapFile(f *os.File, size int64) ([]byte, func(), error) {
	return nil, nil, errors.New("no memory mapping on this system")
}
