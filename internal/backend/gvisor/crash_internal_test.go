package gvisor

import (
	"os"
	"path/filepath"
	"testing"
)

// TestHoldsUnder: recovery waits for a save by the image files the sentry
// holds open, deleted ones included.
func TestHoldsUnder(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "sb-x.new")
	if err := os.Mkdir(img, 0o700); err != nil {
		t.Fatal(err)
	}
	prefixes := []string{dir + "/"}
	if holdsUnder(os.Getpid(), prefixes) {
		t.Fatal("holds a file before opening one")
	}
	f, err := os.Create(filepath.Join(img, "pages.img"))
	if err != nil {
		t.Fatal(err)
	}
	if !holdsUnder(os.Getpid(), prefixes) {
		t.Fatal("an open image file is not seen")
	}
	os.RemoveAll(img) // the daemon removed the partial image; the sentry still writes
	if !holdsUnder(os.Getpid(), prefixes) {
		t.Fatal("a deleted open image file is not seen")
	}
	f.Close()
	if holdsUnder(os.Getpid(), prefixes) {
		t.Fatal("a closed file is still seen")
	}
	if holdsUnder(1<<30, prefixes) {
		t.Fatal("a process that does not exist holds files")
	}
}
