// Package safefile writes and reads the daemon's own files safely: atomic
// replacement (readers see the old content or the new, never a part, and a
// crash leaves one of the two), and key files that only the daemon's user
// can read.
package safefile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// WriteAtomic replaces path with data, mode 0600: a temporary file in the
// same directory, fsynced, renamed over path, then the directory fsynced.
func WriteAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-") // mode 0600
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// LoadOrCreateKey returns the size-byte key stored in hex on one line in the
// file at path, creating the file (mode 0600, its directory 0700) with a
// fresh random key on first use. Whoever reads a key file holds the key, so
// one that group or others can access, that belongs to another user, that
// is not a regular file or that does not hold exactly size bytes is refused.
func LoadOrCreateKey(path string, size int) ([]byte, error) {
	key, err := readKey(path, size)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	key = make([]byte, size)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if err := writeNewFile(path, []byte(hex.EncodeToString(key)+"\n")); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return readKey(path, size) // lost a race with another creator: use theirs
		}
		return nil, err
	}
	return key, nil
}

func readKey(path string, size int) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if err := CheckPrivate(path, fi); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != size {
		return nil, fmt.Errorf("%s: want %d bytes in hex", path, size)
	}
	return key, nil
}

// CheckPrivate refuses anything but a regular file that only its owner,
// the current user, can access.
func CheckPrivate(path string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s has mode %04o; want 0600 (no group or other access)", path, perm)
	}
	if uid, ok := fileOwner(fi); ok && uid != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not by this process (uid %d)", path, uid, os.Geteuid())
	}
	return nil
}

// writeNewFile creates path (failing if it exists) with mode 0600, writes
// data and syncs it.
func writeNewFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
	}
	return err
}
