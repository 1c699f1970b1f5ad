package network

import (
	"net/netip"
	"testing"
	"time"
)

func TestDestinationPolicy(t *testing.T) {
	d := NewDestinationPolicy([]netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")})
	for _, s := range []string{"127.0.0.1", "::1", "10.1.2.3", "192.168.0.1", "169.254.169.254", "fe80::1", "100.64.0.1",
		"::ffff:127.0.0.1", "64:ff9b::a9fe:a9fe", "203.0.113.7", "0.0.0.0"} {
		if d.Denied(netip.MustParseAddr(s)) == "" {
			t.Errorf("%s allowed", s)
		}
	}
	for _, s := range []string{"8.8.8.8", "2606:4700::1111"} {
		if why := d.Denied(netip.MustParseAddr(s)); why != "" {
			t.Errorf("%s denied: %s", s, why)
		}
	}
	// The host's own addresses.
	d.host.list = nil
	d.host.set = map[netip.Addr]struct{}{netip.MustParseAddr("198.51.100.9"): {}}
	d.host.at = time.Now().Add(time.Hour) // not refreshed during the test
	if d.Denied(netip.MustParseAddr("198.51.100.10")) != "" {
		t.Error("198.51.100.10 denied")
	}
	if d.Denied(netip.MustParseAddr("198.51.100.9")) == "" {
		t.Error("a host address is allowed")
	}
}
