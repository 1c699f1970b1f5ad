package safefile

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteAtomic(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	for _, data := range [][]byte{[]byte("one"), []byte("two, longer")} {
		if err := WriteAtomic(p, data); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		fi, _ := os.Stat(p)
		if err != nil || !bytes.Equal(got, data) || fi.Mode().Perm() != 0o600 {
			t.Fatalf("after writing %q: %q %v, mode %v", data, got, err, fi.Mode())
		}
	}
	if ents, _ := os.ReadDir(filepath.Dir(p)); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
	if err := WriteAtomic(filepath.Join(p, "under-a-file"), nil); err == nil {
		t.Error("a write under a regular file succeeded")
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "k")
	k1, err := LoadOrCreateKey(p, 32)
	if err != nil || len(k1) != 32 {
		t.Fatalf("create: %x %v", k1, err)
	}
	if k2, err := LoadOrCreateKey(p, 32); err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("reload: %x %v", k2, err)
	}
	if _, err := LoadOrCreateKey(p, 16); err == nil {
		t.Error("a 32-byte key was accepted as 16 bytes")
	}
	os.Chmod(p, 0o644)
	if _, err := LoadOrCreateKey(p, 32); err == nil {
		t.Error("a world-readable key file was accepted")
	}
}
