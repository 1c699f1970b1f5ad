package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
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
	return ImagesConfig{
		MaxUncompressedBytes: 8 << 30,
		MaxEntries:           1_000_000,
		MaxRatio:             100,
		RatioMinBytes:        64 << 20,
		MaxDownloadBytes:     4 << 30,
	}
}

// validateImages checks the registries and images sections.
func (c *Config) validateImages() error {
	seen := map[string]bool{}
	for _, r := range c.Registries.Allow {
		key, err := NormalizeRegistryHost(r.Host)
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

// NormalizeRegistryHost checks a registries.allow host ("host" or
// "host:port", IPv6 addresses in brackets; DNS names of letters, digits, '-'
// and '_', or IP addresses without a zone) and returns it lower-cased. It
// is internal/image's NormalizeRegistryHost (a fuzz test there keeps the two
// in step); config does not import that package.
func NormalizeRegistryHost(s string) (string, error) {
	host, port := s, ""
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return "", fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, port)
		}
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
		if ip, err := netip.ParseAddr(host); err != nil || !ip.Is6() {
			return "", fmt.Errorf("%q is not an IPv6 address in brackets", s)
		}
	} else if strings.Contains(s, ":") {
		return "", fmt.Errorf("%q is not host or host:port (IPv6 addresses go in brackets)", s)
	}
	host = strings.ToLower(host)
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return "", fmt.Errorf("%q: zoned addresses are not allowed", s)
		}
		if ip.Is6() && port == "" && !strings.HasPrefix(s, "[") {
			return "", fmt.Errorf("%q: IPv6 addresses go in brackets", s)
		}
		host = ip.String()
	} else if !dnsName(strings.TrimSuffix(host, ".")) {
		return "", fmt.Errorf("%q is not host or host:port", s)
	} else {
		host = strings.TrimSuffix(host, ".")
	}
	if port == "" {
		return host, nil
	}
	return net.JoinHostPort(host, port), nil
}

// dnsName reports whether s is a DNS name of labels of letters, digits,
// '-' and '_'.
func dnsName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
