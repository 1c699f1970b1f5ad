package template

import (
	"fmt"
	"os"
	"path/filepath"
)

// EnsureEmptyBase records in the template store at root a base template
// whose layers are empty directories, so that OpenStore needs no root to
// build the real one. It is for tests whose backend ignores layers (the fake
// backend, internal/backend/fake); a sandbox of a real backend cannot start
// from it.
func EnsureEmptyBase(root string) error {
	fp, err := hostFingerprint()
	if err != nil {
		return fmt.Errorf("fingerprint host files: %w", err)
	}
	version := baseVersion + "-" + fp
	dir := filepath.Join(root, BaseName, version)
	for _, d := range []string{rootfsName, usrName} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("empty base template: %w", err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, stampName), []byte(version+"\n"), 0o644); err != nil {
		return fmt.Errorf("empty base template: %w", err)
	}
	return nil
}
