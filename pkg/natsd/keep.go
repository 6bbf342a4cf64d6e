package natsd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// A stream update rewrites the stream's configuration file (meta.inf)
// and then its checksum (meta.sum), each atomically but one after the
// other. A server killed between the two leaves them disagreeing, and
// the next server to open the store skips the stream as if it did not
// exist (it logs "checksums do not match"): every record looks gone, and
// a ctxd serve would create the stream again, empty. With the embedded
// server, killing the command that updates a stream kills the server.
// KeepStreamConfig keeps the files as they were until the update is
// done, and Open puts them back when the process died meanwhile.

// keptDir holds the configuration files kept by KeepStreamConfig, as
// keptDir/<account>/<stream>/<file>. It is renamed into place whole, and
// renamed away before it is removed, so that it is never seen partly
// written or partly removed.
const keptDir = "ctxd-kept"

// configFiles are the files of a stream's configuration in its
// directory; meta.key only on an encrypted store.
var configFiles = []string{"meta.inf", "meta.sum", "meta.key"}

// KeepStreamConfig keeps a copy of the named stream's configuration files
// (in every account that has the stream) aside in the store directory,
// before an update of the stream's configuration; drop removes it once
// the update is done. A server that opens the store while the copy is
// there (the process died before drop) puts the files back first, and
// the stream is as it was before the update.
func (s *Server) KeepStreamConfig(stream string) (drop func() error, err error) {
	if s.ns == nil {
		return nil, errors.New("natsd: not open")
	}
	if stream == "" || strings.ContainsAny(stream, `/\`) || stream == "." || stream == ".." {
		return nil, fmt.Errorf("natsd: stream name %q", stream)
	}
	dir := s.storeDir
	kept := filepath.Join(dir, keptDir)
	if _, err := os.Stat(kept); err == nil {
		return nil, fmt.Errorf("natsd: %s exists: an update kept there is not done", kept)
	}
	tmp, err := os.MkdirTemp(dir, keptDir+".tmp-")
	if err != nil {
		return nil, fmt.Errorf("natsd: keep stream %s: %w", stream, err)
	}
	defer os.RemoveAll(tmp) // gone once renamed, or on an error
	accounts, err := os.ReadDir(filepath.Join(dir, "jetstream"))
	if err != nil {
		return nil, fmt.Errorf("natsd: keep stream %s: %w", stream, err)
	}
	for _, acc := range accounts {
		src := filepath.Join(dir, "jetstream", acc.Name(), "streams", stream)
		if _, err := os.Stat(filepath.Join(src, "meta.inf")); err != nil {
			continue
		}
		dst := filepath.Join(tmp, acc.Name(), stream)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return nil, fmt.Errorf("natsd: keep stream %s: %w", stream, err)
		}
		for _, name := range configFiles {
			data, err := os.ReadFile(filepath.Join(src, name))
			if errors.Is(err, fs.ErrNotExist) && name == "meta.key" {
				continue
			}
			if err == nil {
				err = os.WriteFile(filepath.Join(dst, name), data, 0o644)
			}
			if err != nil {
				return nil, fmt.Errorf("natsd: keep stream %s: %w", stream, err)
			}
		}
	}
	if err := os.Rename(tmp, kept); err != nil {
		return nil, fmt.Errorf("natsd: keep stream %s: %w", stream, err)
	}
	return func() error { return removeKept(dir) }, nil
}

// removeKept removes the kept files: renamed away first, so that what is
// left of them when the process dies is never put back.
func removeKept(dir string) error {
	gone := filepath.Join(dir, keptDir+".gone")
	if err := os.RemoveAll(gone); err != nil {
		return fmt.Errorf("natsd: %w", err)
	}
	if err := os.Rename(filepath.Join(dir, keptDir), gone); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("natsd: %w", err)
	}
	if err := os.RemoveAll(gone); err != nil {
		return fmt.Errorf("natsd: %w", err)
	}
	return nil
}

// restoreKept puts back the configuration files KeepStreamConfig kept, if
// any, before the server starts on the store, and removes what an
// interrupted keep or drop left. It returns the streams put back.
func restoreKept(dir string) ([]string, error) {
	leftovers, err := filepath.Glob(filepath.Join(dir, keptDir+".*"))
	if err != nil {
		return nil, fmt.Errorf("natsd: %w", err)
	}
	for _, l := range leftovers {
		if err := os.RemoveAll(l); err != nil {
			return nil, fmt.Errorf("natsd: %w", err)
		}
	}
	kept := filepath.Join(dir, keptDir)
	accounts, err := os.ReadDir(kept)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("natsd: %w", err)
	}
	var restored []string
	for _, acc := range accounts {
		streams, err := os.ReadDir(filepath.Join(kept, acc.Name()))
		if err != nil {
			return nil, fmt.Errorf("natsd: %w", err)
		}
		for _, st := range streams {
			src := filepath.Join(kept, acc.Name(), st.Name())
			dst := filepath.Join(dir, "jetstream", acc.Name(), "streams", st.Name())
			if _, err := os.Stat(dst); errors.Is(err, fs.ErrNotExist) {
				continue // the stream was deleted since
			}
			for _, name := range configFiles {
				data, err := os.ReadFile(filepath.Join(src, name))
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err == nil {
					err = writeAtomically(filepath.Join(dst, name), data)
				}
				if err != nil {
					return nil, fmt.Errorf("natsd: put back the configuration of stream %s: %w", st.Name(), err)
				}
			}
			restored = append(restored, acc.Name()+"/"+st.Name())
		}
	}
	return restored, removeKept(dir)
}

// writeAtomically replaces a file with data: a process killed meanwhile
// leaves the old file or the new one, never part of it.
func writeAtomically(name string, data []byte) error {
	tmp := name + ".ctxd-tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}
