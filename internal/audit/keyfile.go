package audit

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

// LoadOrCreateKey returns the HMAC key stored in the file at path, creating
// the file (mode 0600, directory 0700) with a new random key on first use.
//
// The key must live outside the database, in a file only the daemon's user
// (root) can read: whoever can read it can forge a chain that verifies.
// The file holds the key in hex on one line. A key file that group or
// others can access, that belongs to another user, or that does not hold
// exactly KeySize bytes is refused.
func LoadOrCreateKey(path string) ([]byte, error) {
	key, err := readKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit key: %w", err)
	}
	key = make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("audit key: %w", err)
	}
	if err := writeNewFile(path, []byte(hex.EncodeToString(key)+"\n")); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Lost a race with another creator: use theirs.
			return readKey(path)
		}
		return nil, fmt.Errorf("audit key: %w", err)
	}
	return key, nil
}

func readKey(path string) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("audit key: %w", err)
	}
	if err := checkPrivate(path, fi); err != nil {
		return nil, fmt.Errorf("audit key: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit key: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != KeySize {
		return nil, fmt.Errorf("audit key %s: want %d bytes in hex", path, KeySize)
	}
	return key, nil
}

// checkPrivate refuses anything but a regular file that only its owner, the
// current user, can access.
func checkPrivate(path string, fi fs.FileInfo) error {
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
