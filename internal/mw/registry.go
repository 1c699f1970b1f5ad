package mw

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// Sources of an installed middleware.
const (
	SourceConfig = "config" // the daemon's config file: read-only through the API
	SourceAPI    = "api"    // added through /v1/middleware, kept in the registry's file
)

// Entry is an installed middleware and where it comes from.
type Entry struct {
	Middleware
	Source string `json:"source"`
}

// Registry errors.
var (
	ErrNotFound = errors.New("middleware not found")
	ErrReadOnly = errors.New("middleware is configured in the config file")
)

// Registry is the installed middleware of a Set: the config file's (first,
// in their order, read-only) and those added through the API (after them,
// in the order added), which are kept in a JSON file written atomically
// (a temporary file renamed over it, mode 0600). Every change recompiles
// the whole list into the Set; a change that does not compile, or cannot
// be saved, changes nothing.
type Registry struct {
	set    *Set
	path   string
	mu     sync.Mutex
	config []Middleware
	api    []Middleware
}

// OpenRegistry loads the API-added middleware from path (none when it does
// not exist) and installs them after config into set.
func OpenRegistry(set *Set, path string, config []Middleware) (*Registry, error) {
	r := &Registry{set: set, path: path, config: slices.Clone(config)}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read middleware file: %w", err)
	default:
		var f struct {
			Middleware []Middleware `json:"middleware"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("middleware file %s: %w", path, err)
		}
		r.api = f.Middleware
	}
	if err := set.Replace(r.all(r.api)...); err != nil {
		return nil, fmt.Errorf("middleware file %s: %w", path, err)
	}
	return r, nil
}

func (r *Registry) all(api []Middleware) []Middleware {
	return append(slices.Clone(r.config), api...)
}

// Set is the registry's Set (what the govern stage runs).
func (r *Registry) Set() *Set { return r.set }

// List returns every installed middleware, config file's first.
func (r *Registry) List() []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Entry, 0, len(r.config)+len(r.api))
	for _, m := range r.config {
		out = append(out, Entry{Middleware: m, Source: SourceConfig})
	}
	for _, m := range r.api {
		out = append(out, Entry{Middleware: m, Source: SourceAPI})
	}
	return out
}

// Get returns the installed middleware name.
func (r *Registry) Get(name string) (Entry, error) {
	for _, e := range r.List() {
		if e.Name == name {
			return e, nil
		}
	}
	return Entry{}, fmt.Errorf("%w: %s", ErrNotFound, name)
}

// Put adds m, or replaces the API-added middleware of its name in place;
// created says it was new. A config-file middleware cannot be replaced.
func (r *Registry) Put(m Middleware) (created bool, err error) {
	if err := m.Validate(); err != nil {
		return false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.ContainsFunc(r.config, func(c Middleware) bool { return c.Name == m.Name }) {
		return false, fmt.Errorf("%w: %s (change it there)", ErrReadOnly, m.Name)
	}
	api := slices.Clone(r.api)
	i := slices.IndexFunc(api, func(c Middleware) bool { return c.Name == m.Name })
	if i < 0 {
		api, created = append(api, m), true
	} else {
		api[i] = m
	}
	return created, r.commit(api)
}

// Delete removes the API-added middleware name.
func (r *Registry) Delete(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.ContainsFunc(r.config, func(c Middleware) bool { return c.Name == name }) {
		return fmt.Errorf("%w: %s (remove it there)", ErrReadOnly, name)
	}
	i := slices.IndexFunc(r.api, func(c Middleware) bool { return c.Name == name })
	if i < 0 {
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return r.commit(slices.Delete(slices.Clone(r.api), i, i+1))
}

// commit compiles config+api, saves api and installs the list; on any
// error nothing changes. r.mu is held.
func (r *Registry) commit(api []Middleware) error {
	probe := &Set{}
	if err := probe.Replace(r.all(api)...); err != nil {
		return err
	}
	if err := r.save(api); err != nil {
		return err
	}
	if err := r.set.Replace(r.all(api)...); err != nil {
		return err // compiled above: not expected
	}
	r.api = api
	return nil
}

func (r *Registry) save(api []Middleware) error {
	if api == nil {
		api = []Middleware{}
	}
	b, err := json.MarshalIndent(struct {
		Middleware []Middleware `json:"middleware"`
	}{api}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode middleware: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(r.path), ".middleware-*.json")
	if err != nil {
		return fmt.Errorf("save middleware: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing to remove
	if _, err = tmp.Write(append(b, '\n')); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o600)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), r.path)
	}
	if err != nil {
		return fmt.Errorf("save middleware: %w", err)
	}
	return nil
}
