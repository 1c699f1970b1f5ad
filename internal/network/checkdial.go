package network

import (
	"net/netip"
	"sync"
)

var (
	checkDialOnce sync.Once
	checkDialPol  *DestinationPolicy
)

// CheckDial returns why wardend must never connect to ip on behalf of
// untrusted input, or "" if it may: the egress path's always-denied
// classification (loopback, link-local and cloud metadata, private, CGNAT,
// unique-local, multicast and reserved ranges, NAT64/6to4 forms of those,
// the sandbox link and the host's own addresses), without the operator's
// network.deny (use [NewDestinationPolicy] for that). It is what
// internal/network/safedial dials through.
func CheckDial(ip netip.Addr) string {
	checkDialOnce.Do(func() { checkDialPol = NewDestinationPolicy(nil) })
	return checkDialPol.Denied(ip)
}

// ParseHostIP parses the host part of a URL authority (or SNI, or Host
// header) as an address the way resolvers do: dotted quads, fewer parts
// ("127.1"), decimal ("2130706433"), octal and hex parts ("0x7f.1"),
// bracketed or bare IPv6 (zones refused), one trailing dot. It reports
// false for anything that is not an address, so a caller can tell a name
// (to be resolved and its addresses checked) from an address spelt in an
// unusual way (to be checked as it is).
func ParseHostIP(s string) (netip.Addr, bool) {
	return parseHostIP(s)
}
