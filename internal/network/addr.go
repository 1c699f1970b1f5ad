package network

import (
	"net/netip"
	"strconv"
	"strings"
)

// The sandbox side of every link uses the same addresses: each sandbox has
// its own network namespace and its own userspace stack, so they never meet.
var (
	// SandboxPrefix4 is the IPv4 /30 of a sandbox's wd0: the gateway
	// (wardend's stack, also the DNS resolver) is .1, the sandbox .2.
	SandboxPrefix4 = netip.MustParsePrefix("10.254.0.0/30")
	Gateway4       = netip.MustParseAddr("10.254.0.1")
	SandboxAddr4   = netip.MustParseAddr("10.254.0.2")
	// SandboxPrefix6 is the IPv6 /126 ("wa" "rd" in the third group).
	SandboxPrefix6 = netip.MustParsePrefix("fd7a:7761:7264::/126")
	Gateway6       = netip.MustParseAddr("fd7a:7761:7264::1")
	SandboxAddr6   = netip.MustParseAddr("fd7a:7761:7264::2")
)

// Deny reasons for addresses (see classify).
const (
	reasonInvalid     = "invalid address"
	reasonUnspecified = "unspecified address"
	reasonThisNet     = "this-network range 0.0.0.0/8"
	reasonLoopback    = "loopback"
	reasonLinkLocal   = "link-local"
	reasonMetadata    = "link-local (cloud metadata service)"
	reasonPrivate     = "private range (RFC 1918)"
	reasonCGNAT       = "shared address space 100.64.0.0/10 (CGNAT)"
	reasonULA         = "unique local IPv6 (fc00::/7)"
	reasonIETF        = "IETF protocol assignments 192.0.0.0/24"
	reasonBenchmark   = "benchmarking range 198.18.0.0/15"
	reasonMulticast   = "multicast"
	reasonBroadcast   = "broadcast"
	reasonReserved    = "reserved range"
	reasonCompat      = "IPv4-compatible IPv6 (::/96)"
	reasonNAT64Local  = "local-use NAT64 (64:ff9b:1::/48)"
	reasonTeredo      = "Teredo (2001::/32)"
	reasonSiteLocal   = "site-local IPv6 (fec0::/10)"
	reasonOwnNet      = "the sandbox's own link"
	reasonHost        = "an address of the host"
	reasonOperator    = "denied by the operator's configuration"
)

type rangeClass struct {
	prefix netip.Prefix
	reason string
	// private marks ranges an operator may open with allow_private; the
	// others (loopback, link-local, multicast, ...) are never dialled.
	private bool
}

var deniedRanges = func() []rangeClass {
	r := func(p, reason string, private bool) rangeClass {
		return rangeClass{netip.MustParsePrefix(p), reason, private}
	}
	return []rangeClass{
		// IPv4
		r("0.0.0.0/8", reasonThisNet, false),
		r("10.0.0.0/8", reasonPrivate, true),
		r("100.64.0.0/10", reasonCGNAT, true),
		r("127.0.0.0/8", reasonLoopback, false),
		r("169.254.169.254/32", reasonMetadata, false),
		r("169.254.0.0/16", reasonLinkLocal, false),
		r("172.16.0.0/12", reasonPrivate, true),
		r("192.0.0.0/24", reasonIETF, true),
		r("192.88.99.0/24", reasonReserved, false), // deprecated 6to4 relay anycast
		r("192.168.0.0/16", reasonPrivate, true),
		r("198.18.0.0/15", reasonBenchmark, true),
		r("224.0.0.0/4", reasonMulticast, false),
		r("255.255.255.255/32", reasonBroadcast, false),
		r("240.0.0.0/4", reasonReserved, false),
		// IPv6 (IPv4-mapped, -compatible, NAT64 and 6to4 forms are handled
		// in classify before these).
		r("::1/128", reasonLoopback, false),
		r("::/128", reasonUnspecified, false),
		r("100::/64", reasonReserved, false), // discard-only
		r("2001::/32", reasonTeredo, false),
		r("2001:10::/28", reasonReserved, false), // ORCHID
		r("2001:20::/28", reasonReserved, false), // ORCHIDv2
		r("fc00::/7", reasonULA, true),
		r("fe80::/10", reasonLinkLocal, false),
		r("fec0::/10", reasonSiteLocal, false),
		r("ff00::/8", reasonMulticast, false),
	}
}()

var (
	nat64Prefix      = netip.MustParsePrefix("64:ff9b::/96")
	nat64LocalPrefix = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFourPrefix  = netip.MustParsePrefix("2002::/16")
)

// addrPolicy is what decides whether an address may ever be dialled: the
// fixed deny list, the operator's allow_private exceptions and the host's
// own addresses.
type addrPolicy struct {
	allowPrivate []netip.Prefix
	deny         []netip.Prefix        // the operator's extra denials
	isHost       func(netip.Addr) bool // nil: no host addresses known
}

// check returns why ip must not be dialled, or "" if it may be.
func (a *addrPolicy) check(ip netip.Addr) string {
	return a.checkDepth(ip, 0)
}

func (a *addrPolicy) checkDepth(ip netip.Addr, depth int) string {
	if !ip.IsValid() {
		return reasonInvalid
	}
	ip = ip.WithZone("").Unmap()
	if SandboxPrefix4.Contains(ip) || SandboxPrefix6.Contains(ip) {
		return reasonOwnNet
	}
	if ip.Is6() {
		b := ip.As16()
		switch {
		case isZero(b[:12]):
			// ::/96: the unspecified address, loopback and the deprecated
			// IPv4-compatible form; nothing legitimate is dialled there.
			switch {
			case ip == netip.IPv6Unspecified():
				return reasonUnspecified
			case ip == netip.IPv6Loopback():
				return reasonLoopback
			}
			return reasonCompat
		case nat64Prefix.Contains(ip):
			if depth > 0 {
				return reasonReserved
			}
			v4 := netip.AddrFrom4([4]byte(b[12:16]))
			if r := a.checkDepth(v4, depth+1); r != "" {
				return "NAT64 of " + v4.String() + ": " + r
			}
		case nat64LocalPrefix.Contains(ip):
			return reasonNAT64Local
		case sixToFourPrefix.Contains(ip):
			if depth > 0 {
				return reasonReserved
			}
			v4 := netip.AddrFrom4([4]byte(b[2:6]))
			if r := a.checkDepth(v4, depth+1); r != "" {
				return "6to4 of " + v4.String() + ": " + r
			}
		}
	}
	var private *rangeClass
	for i := range deniedRanges {
		r := &deniedRanges[i]
		if !r.prefix.Contains(ip) {
			continue
		}
		if !r.private {
			return r.reason
		}
		private = r
		break
	}
	if a.isHost != nil && a.isHost(ip) {
		return reasonHost
	}
	for _, p := range a.deny {
		if p.Contains(ip) {
			return reasonOperator
		}
	}
	if private != nil {
		for _, p := range a.allowPrivate {
			if p.Contains(ip) {
				return ""
			}
		}
		return private.reason
	}
	return ""
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// parseHostIP parses the host part of an SNI, Host header or URL authority
// as an address the way resolvers do, so that every numeric spelling of an
// IPv4 address is recognised: dotted quads, fewer parts ("127.1"), decimal
// ("2130706433"), octal ("0177.0.0.1") and hex ("0x7f.1") parts, as
// inet_aton accepts them; bracketed or bare IPv6 (zones refused); one
// trailing dot. It reports false for anything that is not an address.
func parseHostIP(s string) (netip.Addr, bool) {
	bracketed := strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]")
	if bracketed {
		s = s[1 : len(s)-1]
	}
	if bracketed || strings.Contains(s, ":") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" || !a.Is6() {
			return netip.Addr{}, false
		}
		return a, true
	}
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return netip.Addr{}, false
	}
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var vals [4]uint64
	for i, p := range parts {
		v, ok := parseInetAtonPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	n := len(parts)
	for i := 0; i < n-1; i++ {
		if vals[i] > 0xff {
			return netip.Addr{}, false
		}
	}
	var max uint64 = 1<<(8*(5-n)) - 1
	if vals[n-1] > max {
		return netip.Addr{}, false
	}
	var u uint32
	for i := 0; i < n-1; i++ {
		u |= uint32(vals[i]) << (24 - 8*i)
	}
	u |= uint32(vals[n-1])
	return netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)}), true
}

func parseInetAtonPart(p string) (uint64, bool) {
	if p == "" {
		return 0, false
	}
	base := 10
	switch {
	case len(p) >= 2 && (p[:2] == "0x" || p[:2] == "0X"):
		base, p = 16, p[2:]
		if p == "" {
			return 0, true // inet_aton takes a bare "0x" as 0
		}
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	if len(p) > 12 {
		return 0, false
	}
	for _, c := range []byte(p) {
		if !isDigitIn(c, base) {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(p, base, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

func isDigitIn(c byte, base int) bool {
	switch base {
	case 8:
		return c >= '0' && c <= '7'
	case 10:
		return c >= '0' && c <= '9'
	}
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}
