package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadOrCreateSecret(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "presign.key")
	key, err := loadOrCreateSecret(p)
	if err != nil || len(key) != 32 {
		t.Fatalf("create: %d bytes, %v", len(key), err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("created with %v, %v; want 0600", fi.Mode(), err)
	}
	again, err := loadOrCreateSecret(p)
	if err != nil || !bytes.Equal(again, key) {
		t.Fatalf("reload: %x, %v; want %x", again, err, key)
	}

	// A secret others can read is no secret: refused, not used.
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := loadOrCreateSecret(p); err == nil || !strings.Contains(err.Error(), "mode") {
		t.Fatalf("group-readable secret: err = %v", err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}

	// Nor one another user owns (they could have written it).
	if os.Geteuid() != 0 {
		t.Log("not root: the foreign owner case needs chown and is not run")
	} else {
		if err := os.Chown(p, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		if _, err := loadOrCreateSecret(p); err == nil || !strings.Contains(err.Error(), "owned by") {
			t.Fatalf("foreign-owned secret: err = %v", err)
		}
	}

	// Nor a link to some other file.
	l := filepath.Join(dir, "link.key")
	if err := os.Symlink(p, l); err != nil {
		t.Fatal(err)
	}
	if _, err := loadOrCreateSecret(l); err == nil || !strings.Contains(err.Error(), "regular file") {
		t.Fatalf("symlinked secret: err = %v", err)
	}
}
