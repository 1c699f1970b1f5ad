package network

import (
	"net"
	"net/netip"
	"testing"
)

func TestCheckDialAttackAddresses(t *testing.T) {
	for _, s := range []string{"169.254.169.254", "127.0.0.1", "::ffff:127.0.0.1", "10.0.0.5", "100.64.1.1",
		"fd00::1", "fe80::1", "0.0.0.0", "::", "240.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::1", "10.254.0.1"} {
		if CheckDial(netip.MustParseAddr(s)) == "" {
			t.Errorf("CheckDial(%s) allowed", s)
		}
	}
	for _, s := range []string{"8.8.8.8", "2606:4700::1111"} {
		if why := CheckDial(netip.MustParseAddr(s)); why != "" {
			t.Errorf("CheckDial(%s) = %q", s, why)
		}
	}
	// The host's own (non-loopback) addresses are refused too.
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, a := range addrs {
		pn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, _ := netip.AddrFromSlice(pn.IP)
		ip = ip.Unmap()
		n++
		if CheckDial(ip) == "" {
			t.Errorf("host address %s allowed", ip)
		}
	}
	if n == 0 {
		t.Log("NOTE: no interface addresses to check")
	}
}

func TestParseHostIPSpellings(t *testing.T) {
	for s, want := range map[string]string{
		"2130706433":         "127.0.0.1",
		"0x7f.1":             "127.0.0.1",
		"0177.0.0.1":         "127.0.0.1",
		"127.1":              "127.0.0.1",
		"[::ffff:127.0.0.1]": "::ffff:127.0.0.1",
		"169.254.169.254.":   "169.254.169.254",
	} {
		ip, ok := ParseHostIP(s)
		if !ok || ip.String() != want {
			t.Errorf("ParseHostIP(%q) = %v, %v; want %s", s, ip, ok, want)
		}
		if CheckDial(ip) == "" {
			t.Errorf("%q (%s) allowed", s, ip)
		}
	}
	for _, s := range []string{"example.com", "a.b.c.d.e", "[fe80::1%eth0]", ""} {
		if ip, ok := ParseHostIP(s); ok {
			t.Errorf("ParseHostIP(%q) = %v, want not an address", s, ip)
		}
	}
}
