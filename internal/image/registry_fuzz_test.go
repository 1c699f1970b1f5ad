package image

import (
	"net"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// FuzzRegistryHost feeds arbitrary strings to the registry host parsers:
// NormalizeRegistryHost (registries.allow entries) and the name check of
// image references and request URLs. Neither may panic; a normalized entry
// is stable and matches itself; no address literal that BuiltinDenied
// refuses gets past the name check, and a URL to an unlisted host refused by
// name is refused by checkURL too.
func FuzzRegistryHost(f *testing.F) {
	for _, s := range []string{
		"registry.example.com", "Registry.Example.COM.", "127.0.0.1:5000", "[::1]:5000", "[::1]", "::1",
		"localhost", "LOCALHOST:80", "a.localhost", "127.1", "2130706433", "0x7f.1", "0177.0.0.1", "1.2.3.4.5",
		"169.254.169.254", "[fe80::1%eth0]:5000", "x:0", "x:65536", "x:05000", "http://x", "x/y", "", ":", "[]",
		"10.0.0.1:443", "[::ffff:127.0.0.1]:1", "cafe.be", "example.123", "host:port",
	} {
		f.Add(s)
	}
	p, err := NewPolicy(nil, nil, Limits{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		key, err := NormalizeRegistryHost(s)
		if err == nil {
			again, err := NormalizeRegistryHost(key)
			if err != nil && !strings.HasPrefix(s, "[") {
				// A portless "[v6]" entry normalizes to the bare address,
				// which is not an entry spelling itself; others must be.
				t.Fatalf("%q -> %q, which is refused: %v", s, key, err)
			}
			if err == nil && again != key {
				t.Fatalf("%q -> %q -> %q: not stable", s, key, again)
			}
			if strings.ContainsAny(key, "/@?# ") {
				t.Fatalf("%q -> %q", s, key)
			}
			one, err := NewPolicy([]Registry{{Host: s}}, nil, Limits{})
			if err != nil {
				t.Fatalf("%q: normalized but NewPolicy refuses it: %v", s, err)
			}
			host, port, err := net.SplitHostPort(key)
			if err != nil {
				host, port = key, ""
			}
			if _, ok := one.allowed(host, port); !ok {
				t.Fatalf("%q (%q) does not match itself (%q, %q)", s, key, host, port)
			}
		}
		why := p.denyHost(s)
		if ip, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil && ip.Zone() == "" && BuiltinDenied(ip) != "" && why == "" {
			t.Fatalf("address %q passes the name check", s)
		}
		if why != "" {
			h := s
			if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") {
				h = "[" + h + "]"
			}
			u, err := url.Parse("https://" + net.JoinHostPort(strings.Trim(h, "[]"), "443"))
			if err == nil && u.Hostname() == strings.Trim(s, "[]") {
				if err := p.checkURL(u); err == nil {
					t.Fatalf("%q refused by name but not in a URL", s)
				}
			}
		}
	})
}
