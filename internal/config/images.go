package config

import (
	"errors"
	"fmt"

	"github.com/warden-sandbox/warden/internal/image"
)

// RegistriesConfig is the operator's part of image pulls (imports and
// Dockerfile FROM). wardend refuses registries on the addresses the sandbox
// egress path refuses (loopback, link-local and cloud metadata, private
// ranges, the host's own addresses, network.deny), checked on every request
// and redirect at connection time, and speaks only HTTPS, unless a registry
// is listed here.
type RegistriesConfig struct {
	// Allow lists registries pulls may reach although they are on such
	// addresses.
	Allow []RegistryAllow `yaml:"allow"`
}

// RegistryAllow is one allowed registry.
type RegistryAllow struct {
	// Host is "host" or "host:port" as in image references (IPv6 in
	// brackets); without a port it matches ports 443 and 80.
	Host string `yaml:"host"`
	// Insecure lets wardend use plain HTTP for this registry: the only way
	// it does. An API caller's insecure flag is honoured only for these.
	Insecure bool `yaml:"insecure"`
}

// ImagesConfig bounds one image import (registry pull, uploaded archive or
// Dockerfile FROM), counted as the layers stream in; layers already stored
// do not count.
type ImagesConfig struct {
	// MaxUncompressedBytes bounds the uncompressed layers of an image.
	MaxUncompressedBytes int64 `yaml:"max_uncompressed_bytes"`
	// MaxEntries bounds the files, directories and other entries of an
	// image (tar entries plus the parent directories they imply).
	MaxEntries int64 `yaml:"max_entries"`
	// MaxRatio bounds how many times its compressed size a layer may
	// expand to, checked once it is past RatioMinBytes uncompressed.
	MaxRatio      int64 `yaml:"max_ratio"`
	RatioMinBytes int64 `yaml:"ratio_min_bytes"`
	// MaxDownloadBytes bounds the compressed layers of an image.
	MaxDownloadBytes int64 `yaml:"max_download_bytes"`
}

// DefaultImages returns the default import limits (the same as
// internal/image's DefaultLimits).
func DefaultImages() ImagesConfig {
	l := image.DefaultLimits()
	return ImagesConfig{
		MaxUncompressedBytes: l.MaxBytes,
		MaxEntries:           l.MaxEntries,
		MaxRatio:             l.MaxRatio,
		RatioMinBytes:        l.RatioMinBytes,
		MaxDownloadBytes:     l.MaxDownloadBytes,
	}
}

// validateImages checks the registries and images sections.
func (c *Config) validateImages() error {
	seen := map[string]bool{}
	for _, r := range c.Registries.Allow {
		key, err := image.NormalizeRegistryHost(r.Host)
		if err != nil {
			return fmt.Errorf("config: registries.allow: %w", err)
		}
		if seen[key] {
			return fmt.Errorf("config: registries.allow lists %q twice", r.Host)
		}
		seen[key] = true
	}
	im := c.Images
	if im.MaxUncompressedBytes <= 0 || im.MaxEntries <= 0 || im.MaxRatio <= 0 || im.RatioMinBytes <= 0 || im.MaxDownloadBytes <= 0 {
		return errors.New("config: images: max_uncompressed_bytes, max_entries, max_ratio, ratio_min_bytes and max_download_bytes must be positive")
	}
	return nil
}
