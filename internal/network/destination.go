package network

import "net/netip"

// DestinationPolicy is the egress path's classification of addresses, for
// other parts of wardend that connect somewhere on behalf of untrusted input
// (image pulls from registries named by API callers): loopback, link-local
// (cloud metadata included), private and other special ranges, the host's
// own addresses and the operator's extra denials are refused. Unlike a
// sandbox policy it has no allow_private exceptions: callers make their
// own, narrower exceptions (an explicitly allowed registry).
type DestinationPolicy struct {
	addrs addrPolicy
	host  hostAddrs
}

// NewDestinationPolicy returns a policy that also refuses the prefixes in
// deny (network.deny in the configuration).
func NewDestinationPolicy(deny []netip.Prefix) *DestinationPolicy {
	d := &DestinationPolicy{}
	for _, p := range deny {
		if p.IsValid() {
			d.addrs.deny = append(d.addrs.deny, p)
		}
	}
	d.addrs.isHost = d.host.contains
	return d
}

// Denied returns why wardend must not connect to ip, or "" if it may.
func (d *DestinationPolicy) Denied(ip netip.Addr) string {
	return d.addrs.check(ip)
}
