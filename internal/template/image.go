package template

import (
	"slices"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/image"
)

// FromImage returns the manifest of a template made from an imported image:
// its layers (top-first), environment, user, working directory, exposed
// ports and labels. The image's ENTRYPOINT and CMD become the start command
// only when withStart is set: most images' CMD is an interactive shell or
// interpreter, which would exit at once in a sandbox nobody attaches to.
func FromImage(r image.Result, source string, withStart bool) *Manifest {
	m := &Manifest{
		Env:     map[string]string{},
		User:    r.Config.User,
		Workdir: r.Config.WorkingDir,
		Expose:  slices.Clone(r.Config.ExposedPorts),
		Labels:  r.Config.Labels,
		Source:  source,
		Created: time.Now().UTC(),
	}
	for i := len(r.Layers) - 1; i >= 0; i-- {
		m.Layers = append(m.Layers, LayerRef{Target: "/", ID: r.Layers[i]})
	}
	for _, kv := range r.Config.Env {
		k, v, _ := strings.Cut(kv, "=")
		if k != "" {
			m.Env[k] = v
		}
	}
	if _, ok := m.Env["PATH"]; !ok {
		m.Env["PATH"] = DefaultPath
	}
	if m.User == "" {
		m.User = "root"
	}
	if m.Workdir == "" {
		m.Workdir = "/"
	}
	if withStart {
		if cmd := append(slices.Clone(r.Config.Entrypoint), r.Config.Cmd...); len(cmd) > 0 {
			m.Start = &Start{Cmd: cmd}
		}
	}
	return m
}

// Layers resolves layer references to the directories a backend mounts.
func (s *Store) Layers(refs []LayerRef) ([]backend.Layer, error) {
	out := make([]backend.Layer, 0, len(refs))
	for _, l := range refs {
		p, err := s.layerPath(l.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, backend.Layer{Target: l.Target, Path: p})
	}
	return out, nil
}
