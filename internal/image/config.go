package image

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Config is the runtime configuration of an image.
type Config struct {
	Env          []string          // "KEY=value" entries
	User         string            // "user", "uid", "user:group" or "uid:gid"; empty means root
	WorkingDir   string            // empty means "/"
	Entrypoint   []string          // may be empty
	Cmd          []string          // may be empty
	ExposedPorts []string          // sorted, e.g. "8080/tcp"
	Labels       map[string]string // nil when the image has none
}

// ImageConfig reads the runtime configuration from the config file of img.
func ImageConfig(img v1.Image) (Config, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return Config{}, fmt.Errorf("read image config: %w", err)
	}
	if cf == nil {
		return Config{}, errors.New("read image config: image has no config file")
	}
	c := cf.Config
	cfg := Config{
		Env:        slices.Clone(c.Env),
		User:       c.User,
		WorkingDir: c.WorkingDir,
		Entrypoint: slices.Clone(c.Entrypoint),
		Cmd:        slices.Clone(c.Cmd),
	}
	if len(c.ExposedPorts) > 0 {
		cfg.ExposedPorts = slices.Sorted(maps.Keys(c.ExposedPorts))
	}
	if len(c.Labels) > 0 {
		cfg.Labels = maps.Clone(c.Labels)
	}
	return cfg, nil
}
