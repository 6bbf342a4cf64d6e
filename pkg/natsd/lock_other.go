//go:build !unix

package natsd

import "os"

// lockStore does not lock where flock is missing: one server per store
// directory is then the user's to keep.
func lockStore(string) (*os.File, error) { return nil, nil }
