package hostproc

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/warden-sandbox/warden/internal/backend"
)

type tbox struct{ n int }

func TestValidIDMatchesSpec(t *testing.T) {
	for _, id := range []string{
		"sb-1", "a", "0", "-", strings.Repeat("a", 63), strings.Repeat("a", 64), "",
		".", "..", ".runsc", ".sudo-fs", "a/b", "a.b", "A", "sb_1", "sb 1", "é", "sb-x.new",
	} {
		spec := backend.Spec{ID: id, Layers: []backend.Layer{{Path: "/x", Target: "/"}}}
		want := spec.Validate() == nil
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, Spec.Validate accepts it: %v", id, got, want)
		}
	}
}

func TestTable(t *testing.T) {
	var tb Table[*tbox] // the zero table is ready
	a, a2, b := &tbox{1}, &tbox{2}, &tbox{3}
	if _, ok := tb.Get("a"); ok || tb.Live("a") {
		t.Fatal("empty table has a")
	}
	if _, err := tb.Lookup("a"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("lookup in empty table: %v, want ErrNotFound", err)
	}
	if !tb.Reserve("a", a) || !tb.Reserve("b", b) {
		t.Fatal("reserve of free ids failed")
	}
	if tb.Reserve("a", a2) {
		t.Fatal("reserved a live id twice")
	}
	if got, err := tb.Lookup("a"); err != nil || got != a {
		t.Fatalf("lookup a: %v %v (a duplicate reservation replaced it?)", got, err)
	}
	if got := tb.IDs(); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("ids %v", got)
	}
	// Replace and Delete act only on the state they name: a stale caller
	// (an earlier sandbox with the same id) changes nothing.
	if tb.Replace("a", a2, b) || tb.Replace("zz", a, b) {
		t.Fatal("replace with a stale old state succeeded")
	}
	if !tb.Replace("a", a, a2) {
		t.Fatal("replace failed")
	}
	if tb.Delete("a", a) {
		t.Fatal("delete of a replaced state succeeded")
	}
	if got, _ := tb.Get("a"); got != a2 {
		t.Fatalf("a is %v after a stale delete", got)
	}
	var seen []string
	tb.Each(func(id string, bx *tbox) {
		seen = append(seen, id)
		tb.Live(id) // f may call the table: no deadlock
	})
	if !reflect.DeepEqual(seen, []string{"a", "b"}) {
		t.Fatalf("each saw %v", seen)
	}
	if !tb.Delete("a", a2) || tb.Live("a") {
		t.Fatal("delete failed")
	}
	if !tb.Reserve("a", a) {
		t.Fatal("a deleted id cannot be reserved again")
	}
}

func TestTableConcurrentReserve(t *testing.T) {
	var tb Table[*tbox]
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if tb.Reserve("x", &tbox{}) {
				mu.Lock()
				won++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d reservations of one id succeeded", won)
	}
}

func TestOrphans(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"sb-live", "sb-gone", "sb-two", ".runsc", ".sudo-fs", "Upper", "a.b", "sb-cp.new", "sb-two.new"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// Files are never sandbox directories (the agent copy is one).
	for _, f := range []string{"warden-agent", "sb-file"} {
		os.WriteFile(filepath.Join(dir, f), nil, 0o600)
	}
	os.Symlink(filepath.Join(dir, "sb-gone"), filepath.Join(dir, "sb-link"))
	var tb Table[*tbox]
	tb.Reserve("sb-live", &tbox{})
	got, err := tb.Orphans(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"sb-gone", "sb-two"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("orphans %v, want %v", got, want)
	}
	// With a suffix, id and id+suffix name the same sandbox, listed once.
	got, err = tb.Orphans(dir, ".new")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"sb-cp", "sb-gone", "sb-two"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("orphans with suffix %v, want %v", got, want)
	}
	if _, err := tb.Orphans(filepath.Join(dir, "missing"), ""); err == nil {
		t.Fatal("scan of a missing directory succeeded")
	}
}

func TestPurge(t *testing.T) {
	var tb Table[*tbox]
	tb.Reserve("sb-live", &tbox{})
	var cleaned []string
	cleanup := func(id string) error {
		cleaned = append(cleaned, id)
		if id == "sb-bad" {
			return errors.New("boom")
		}
		return nil
	}
	for _, id := range []string{"sb-live", "", ".", "..", "../x", "a/b", "a.b", "sb-gone"} {
		if err := tb.Purge(id, cleanup); err != nil {
			t.Fatalf("purge %q: %v", id, err)
		}
	}
	if err := tb.Purge("sb-bad", cleanup); err == nil {
		t.Fatal("the cleanup's error was lost")
	}
	if want := []string{"sb-gone", "sb-bad"}; !reflect.DeepEqual(cleaned, want) {
		t.Fatalf("cleaned %v, want %v", cleaned, want)
	}
}
