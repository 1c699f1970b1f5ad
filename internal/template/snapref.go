package template

import (
	"fmt"
	"maps"
	"path/filepath"
	"strings"
)

// ManifestOf returns a copy of the manifest of the template with id (what
// a sandbox records as its template id): a stored manifest, or, for a base
// version ("base:<version>"), one that describes that version's layers,
// environment, user and working directory. Filesystem snapshots
// (internal/snapshot) stack a sandbox's captured writable layers on it.
func (s *Store) ManifestOf(id string) (*Manifest, error) {
	if v, ok := strings.CutPrefix(id, "base:"); ok {
		dir := filepath.Join(s.root, BaseName, v)
		if strings.ContainsAny(v, "/\x00") || v == "" || v == "." || v == ".." || !complete(dir) {
			return nil, fmt.Errorf("base version %q: %w", v, ErrUnknown)
		}
		t := baseTemplate(dir, v)
		_, usr := usrLayer(dir, v)
		return &Manifest{
			Layers:  []LayerRef{{Target: "/", ID: id}, {Target: "/usr", ID: usr}},
			Env:     t.Env,
			User:    t.User,
			Workdir: t.Workdir,
			Source:  "base",
		}, nil
	}
	m, err := s.Manifest(id)
	if err != nil {
		return nil, err
	}
	c := *m
	c.Layers = append([]LayerRef(nil), m.Layers...)
	c.Env = maps.Clone(m.Env)
	c.Labels = maps.Clone(m.Labels)
	c.Expose = append([]string(nil), m.Expose...)
	return &c, nil
}
