package hostproc

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/warden-sandbox/warden/internal/backend"
)

// ValidID reports whether id can name a sandbox: 1 to 63 bytes of a-z, 0-9
// and '-', the rule backend.Spec.Validate enforces. Such an id is safe as a
// file name in a run directory (no '/', no '.', never "." or ".."), and
// names there that are not valid ids are the backend's own (".runsc",
// ".sudo-fs", a copy of the agent).
func ValidID(id string) bool {
	if id == "" || len(id) > 63 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Table is a backend's table of live sandboxes: the ones it created or
// recovered and has not yet forgotten, by id. B is the backend's per-sandbox
// state (a pointer). It is safe for concurrent use; its lock is never held
// while calling out, so a backend may call it with its own locks held.
type Table[B comparable] struct {
	mu sync.Mutex
	m  map[string]B
}

// Reserve records b as sandbox id's and reports true, or reports false
// and changes nothing when id is already live.
func (t *Table[B]) Reserve(id string, b B) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.m[id]; dup {
		return false
	}
	if t.m == nil {
		t.m = map[string]B{}
	}
	t.m[id] = b
	return true
}

// Get returns sandbox id's state.
func (t *Table[B]) Get(id string) (B, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.m[id]
	return b, ok
}

// Lookup returns sandbox id's state, or an error wrapping
// backend.ErrNotFound.
func (t *Table[B]) Lookup(id string) (B, error) {
	b, ok := t.Get(id)
	if !ok {
		return b, fmt.Errorf("%s: %w", id, backend.ErrNotFound)
	}
	return b, nil
}

// Live reports whether sandbox id is in the table.
func (t *Table[B]) Live(id string) bool {
	_, ok := t.Get(id)
	return ok
}

// Replace puts b in place of old as sandbox id's state and reports true
// when old is still its state; otherwise it changes nothing.
func (t *Table[B]) Replace(id string, old, b B) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.m[id]; !ok || cur != old {
		return false
	}
	t.m[id] = b
	return true
}

// Delete removes sandbox id when b is still its state (a later sandbox
// with the same id is left alone) and reports whether it did.
func (t *Table[B]) Delete(id string, b B) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.m[id]; !ok || cur != b {
		return false
	}
	delete(t.m, id)
	return true
}

// IDs returns the live sandboxes' ids, sorted.
func (t *Table[B]) IDs() []string {
	t.mu.Lock()
	ids := make([]string, 0, len(t.m))
	for id := range t.m {
		ids = append(ids, id)
	}
	t.mu.Unlock()
	sort.Strings(ids)
	return ids
}

// Each calls f for each live sandbox, in id order, on a snapshot taken
// first: f may call the table.
func (t *Table[B]) Each(f func(id string, b B)) {
	t.mu.Lock()
	type entry struct {
		id string
		b  B
	}
	all := make([]entry, 0, len(t.m))
	for id, b := range t.m {
		all = append(all, entry{id, b})
	}
	t.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].id < all[j].id })
	for _, e := range all {
		f(e.id, e.b)
	}
}

// Orphans lists, sorted, the sandboxes that have a directory in dir but
// are not in the table: what a crash between a backend's create and the
// store's write leaves behind. An entry names sandbox id when it is a
// directory called id, or id+suffix when suffix is set (a checkpoint being
// written); entries whose name is not a valid sandbox id (ValidID) are the
// backend's own and skipped. Each id is listed once. Reading dir is the
// only error.
func (t *Table[B]) Orphans(dir, suffix string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range ents {
		id := e.Name()
		if suffix != "" {
			id = strings.TrimSuffix(id, suffix)
		}
		if !e.IsDir() || !ValidID(id) || seen[id] || t.Live(id) {
			continue
		}
		seen[id] = true
		out = append(out, id)
	}
	sort.Strings(out)
	return out, nil
}

// Purge runs the backend's cleanup for sandbox id, an orphan Orphans
// listed, unless id is no valid sandbox id (cleanup then never sees a path
// outside the run directory) or a sandbox by that id is live (recovered or
// created since the scan); then it does nothing.
func (t *Table[B]) Purge(id string, cleanup func(id string) error) error {
	if !ValidID(id) || t.Live(id) {
		return nil
	}
	return cleanup(id)
}
