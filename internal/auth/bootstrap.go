package auth

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// Bootstrap prepares a fresh installation. When the store has no
// principals it creates the user principal "admin" with one key holding
// ScopeAdmin, writes that key to path (mode 0600; missing directories are
// created 0700) and returns path so the daemon can log where the key is.
// When principals exist it does nothing and returns "".
//
// The key file is written before the principal is stored and removed if
// storing fails, so a failure never leaves an admin whose key is nowhere.
// An existing file is never overwritten: if path exists while the store
// has no principals (a bootstrap interrupted by a crash, or a file from
// another installation), Bootstrap fails and asks for the file to be moved.
func Bootstrap(ctx context.Context, st store.Store, path string) (string, error) {
	n, err := st.CountPrincipals(ctx)
	if err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	if n > 0 {
		return "", nil
	}
	if _, err := os.Lstat(path); err == nil {
		return "", fmt.Errorf("bootstrap: %s exists but the store has no principals; "+
			"it is not overwritten: move it away and restart to create a new admin key", path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("bootstrap: %w", err)
	}

	now := time.Now()
	p, err := newPrincipal(store.PrincipalUser, "admin", "", now)
	if err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	k, rec, err := newKey(p.ID, "bootstrap", []Scope{ScopeAdmin}, now)
	if err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	if err := writeNewFile(path, []byte(k.String()+"\n")); err != nil {
		return "", fmt.Errorf("bootstrap: write key file: %w", err)
	}
	if err := st.CreatePrincipal(ctx, p, rec); err != nil {
		_ = os.Remove(path)
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	return path, nil
}

// writeNewFile creates path, failing if it exists, with mode 0600, and
// writes and syncs data.
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
