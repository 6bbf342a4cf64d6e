//go:build unix

package natsd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockStore takes the store directory's lock file, or fails with
// ErrStoreInUse when another process (or another server of this one)
// holds it: two servers on one store corrupt it, and one does not see
// what the other writes. The lock goes with the returned file's close,
// and with the process.
func lockStore(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("natsd: store lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s (is a ctxd serve running on it?)", ErrStoreInUse, dir)
		}
		return nil, fmt.Errorf("natsd: store lock: %w", err)
	}
	return f, nil
}
