package network

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// FuzzSniff: the SNI/Host parser never panics, and once it has decided on
// a prefix of the stream more bytes do not change the decision (the proxy
// decides on what it has read so far).
func FuzzSniff(f *testing.F) {
	f.Add(clientHello(f, "allowed.test"), []byte("more"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"), []byte("GET / HTTP/1.1\r\nHost: b\r\n\r\n"))
	f.Add([]byte("GET http://a.test/ HTTP/1.1\r\nHost: [::1]:80\r\n\r\n"), []byte{})
	f.Add([]byte("CONNECT a.test:443 HTTP/1.1\r\n\r\n"), []byte("x"))
	f.Add([]byte("SSH-2.0-x\r\n"), []byte("GET"))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0}, []byte{0x16})
	f.Fuzz(func(t *testing.T, data, more []byte) {
		names, err := sniffNames(data)
		for _, n := range names {
			if n == "" {
				t.Fatalf("empty name from %q", data)
			}
		}
		if errors.Is(err, errNeedMore) {
			return
		}
		names2, err2 := sniffNames(append(append([]byte(nil), data...), more...))
		if (err == nil) != (err2 == nil) || !reflect.DeepEqual(names, names2) {
			t.Fatalf("decision changed with more bytes: %q %v -> %q %v (data %q)", names, err, names2, err2, data)
		}
	})
}

// FuzzHostMatch: a host rule matches exactly its name (or the names below
// a wildcard), and nothing that reads as an address ever matches.
func FuzzHostMatch(f *testing.F) {
	for _, s := range [][2]string{{"pypi.org", "pypi.org"}, {"*.github.com", "api.github.com"}, {"*.github.com", "github.com"},
		{"a.test", "A.TEST."}, {"a.test", "2130706433"}, {"x.test", "0x7f.1"}, {"*.b.test", "a.b.test.evil"}} {
		f.Add(s[0], s[1], uint16(443))
	}
	f.Fuzz(func(t *testing.T, rule, name string, port uint16) {
		c, err := compile(Policy{Mode: ModeAllowlist, Allow: []Rule{{Host: rule, Ports: []int{443}}}})
		if _, isIP := parseHostIP(name); isIP {
			if _, err := canonicalName(name); err == nil {
				t.Fatalf("%q reads as an address and as a name", name)
			}
		}
		if err != nil {
			return
		}
		cn, err := canonicalName(name)
		if err != nil {
			return
		}
		if !c.nameAllowed(cn, port) {
			return
		}
		if port != 443 && port != 0 {
			t.Fatalf("rule %q allows %q on port %d", rule, cn, port)
		}
		r := c.src.Allow[0].Host
		if base, ok := strings.CutPrefix(r, "*."); ok {
			if !strings.HasSuffix(cn, "."+base) || cn == base {
				t.Fatalf("wildcard %q matches %q", r, cn)
			}
		} else if cn != r {
			t.Fatalf("rule %q matches %q", r, cn)
		}
		if strings.ToLower(strings.TrimSuffix(name, ".")) != cn {
			t.Fatalf("canonical %q of %q", cn, name)
		}
	})
}

// FuzzParseHostIP: numeric host parsing is stable and every spelling of a
// denied address is denied.
func FuzzParseHostIP(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "2130706433", "0x7f.1", "0177.1", "[::ffff:127.0.0.1]", "1.2.3", "0x", "08"} {
		f.Add(s)
	}
	a := &addrPolicy{}
	f.Fuzz(func(t *testing.T, s string) {
		ip, ok := parseHostIP(s)
		if !ok {
			return
		}
		again, ok := parseHostIP(ip.String())
		if !ok || again != ip {
			t.Fatalf("%q -> %v -> %v", s, ip, again)
		}
		v4 := ip.Unmap()
		if v4.Is4() {
			mapped := netip.AddrFrom16(v4.As16())
			if (a.check(v4) == "") != (a.check(mapped) == "") {
				t.Fatalf("%v and %v disagree", v4, mapped)
			}
			nat64 := netip.AddrFrom16([16]byte{0, 0x64, 0xff, 0x9b, 12: v4.As4()[0], v4.As4()[1], v4.As4()[2], v4.As4()[3]})
			if a.check(v4) != "" && a.check(nat64) == "" {
				t.Fatalf("NAT64 %v of denied %v allowed", nat64, v4)
			}
		}
	})
}
