package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// A backend's section of the configuration is backends.<id>: a mapping
// that the backend decodes into its own configuration struct (the config
// package does not know what it holds), plus one key every backend has:
//
//	backends:
//	  native:
//	    landlock: require
//	  gvisor:
//	    disabled: false   # any backend: true leaves it out
//	    directfs: false
//
// The older top-level keys still load, and win over a section: landlock
// (and --landlock, WARDEN_LANDLOCK) is backends.native.landlock, and
// gvisor.disabled and gvisor.directfs are those keys of backends.gvisor.

// disabledKey turns a backend off in its section.
const disabledKey = "disabled"

// backendSection decodes the section of backend id into a map (nil when
// there is none).
func (c *Config) backendSection(id string) (map[string]any, error) {
	n, ok := c.Backends[id]
	if !ok || n.Kind == 0 {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("config: backends.%s must be a mapping", id)
	}
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		return nil, fmt.Errorf("config: backends.%s: %w", id, err)
	}
	return m, nil
}

// BackendDisabled reports whether the configuration turns backend id off
// (backends.<id>.disabled, or the older gvisor.disabled).
func (c *Config) BackendDisabled(id string) bool {
	if id == "gvisor" && c.GVisor.Disabled {
		return true
	}
	m, _ := c.backendSection(id)
	d, _ := m[disabledKey].(bool)
	return d
}

// BackendDecoder returns the function a backend's registration decodes its
// section with (backend.Registration.New): it fills v, the backend's own
// configuration struct with its `yaml` tags, from backends.<id> and the
// older top-level keys, refusing keys v does not have; without either it
// leaves v as it is.
func (c *Config) BackendDecoder(id string) func(v any) error {
	return func(v any) error {
		m, err := c.backendSection(id)
		if err != nil {
			return err
		}
		delete(m, disabledKey)
		legacy := map[string]any{}
		switch id {
		case "native":
			if c.Landlock != "" {
				legacy["landlock"] = c.Landlock
			}
		case "gvisor":
			if c.GVisor.DirectFS {
				legacy["directfs"] = true
			}
		}
		if len(m) == 0 && len(legacy) == 0 {
			return nil
		}
		if m == nil {
			m = map[string]any{}
		}
		for k, val := range legacy {
			m[k] = val
		}
		raw, err := yaml.Marshal(m)
		if err != nil {
			return fmt.Errorf("config: backends.%s: %w", id, err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("config: backends.%s: %w", id, err)
		}
		return nil
	}
}

// validateBackends checks what the config package can know of the backend
// sections: each is a mapping whose disabled key, if any, is a boolean, and
// the default backend is not disabled. Whether a backend of that name
// exists, and what its section may hold, the daemon checks against the
// backends this build registers.
func (c *Config) validateBackends() error {
	if c.Backend == "" {
		return errors.New("config: backend must be set")
	}
	for id := range c.Backends {
		m, err := c.backendSection(id)
		if err != nil {
			return err
		}
		if d, ok := m[disabledKey]; ok {
			if _, ok := d.(bool); !ok {
				return fmt.Errorf("config: backends.%s.disabled must be true or false", id)
			}
		}
	}
	if c.BackendDisabled(c.Backend) {
		return fmt.Errorf("config: backend %s is the default but is disabled", c.Backend)
	}
	return nil
}
