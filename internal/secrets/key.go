package secrets

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// KeySize is the size of the key that encrypts secret values at rest
// (AES-256).
const KeySize = 32

// LoadOrCreateKey returns the encryption key stored in hex in the file at
// path, creating the file (mode 0600, its directory 0700) with a fresh random
// key on first use.
//
// Whoever reads the file can decrypt every secret, so it must live outside
// the data file, readable by the daemon's user only. A key file that group
// or others can access, that belongs to another user, that is not a regular
// file or that does not hold exactly KeySize bytes is refused.
func LoadOrCreateKey(path string) ([]byte, error) {
	key, err := readKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	key = make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	if err := writeNewFile(path, []byte(hex.EncodeToString(key)+"\n")); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return readKey(path) // lost a race with another creator: use theirs
		}
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return key, nil
}

func readKey(path string) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("secrets key: %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("secrets key: %s has mode %04o; want 0600 (no group or other access)", path, perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("secrets key: %s is owned by uid %d, not by this process (uid %d)", path, st.Uid, os.Geteuid())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != KeySize {
		return nil, fmt.Errorf("secrets key %s: want %d bytes in hex", path, KeySize)
	}
	return key, nil
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
