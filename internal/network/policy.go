package network

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Mode is a sandbox's network mode.
type Mode string

const (
	// ModeNone gives the sandbox loopback only: no device, no DNS. The default.
	ModeNone Mode = "none"
	// ModeAllowlist lets the sandbox reach the names and CIDRs of its rules.
	ModeAllowlist Mode = "allowlist"
	// ModeOpen lets the sandbox reach any public address.
	ModeOpen Mode = "open"
)

// DefaultPorts are the ports a rule without ports allows.
var DefaultPorts = []int{80, 443}

// Limits on a policy's size.
const (
	MaxRules        = 512
	MaxPortsPerRule = 64
)

// Rule allows one destination: a domain name (exact, or "*.example.com" for
// every name below example.com) or a CIDR (an address alone is a /32 or
// /128), on Ports (default 80 and 443). Exactly one of Host and CIDR is set.
type Rule struct {
	Host  string `json:"host,omitempty"`
	CIDR  string `json:"cidr,omitempty"`
	Ports []int  `json:"ports,omitempty"`
}

// Policy is a sandbox's network policy.
type Policy struct {
	Mode  Mode   `json:"mode"`
	Allow []Rule `json:"allow,omitempty"`
}

// Validate reports whether p is a well-formed policy.
func (p Policy) Validate() error {
	_, err := compile(p)
	return err
}

// Normalized returns p with its mode defaulted ("" is none), host names
// lowercased without a trailing dot, CIDRs in canonical form and ports
// explicit; it fails where Validate does.
func (p Policy) Normalized() (Policy, error) {
	c, err := compile(p)
	if err != nil {
		return Policy{}, err
	}
	return c.src, nil
}

// compiled is a validated policy in matching form.
type compiled struct {
	src   Policy // normalised copy
	mode  Mode
	hosts []hostRule
	cidrs []cidrRule
}

type hostRule struct {
	name     string // exact name, or the suffix (".example.com") of a wildcard
	wildcard bool
	ports    []uint16
}

type cidrRule struct {
	prefix netip.Prefix
	ports  []uint16
}

func compile(p Policy) (*compiled, error) {
	c := &compiled{mode: p.Mode}
	if c.mode == "" {
		c.mode = ModeNone
	}
	switch c.mode {
	case ModeNone, ModeOpen:
		if len(p.Allow) > 0 {
			return nil, fmt.Errorf("network policy: allow rules need mode %q, not %q", ModeAllowlist, c.mode)
		}
	case ModeAllowlist:
	default:
		return nil, fmt.Errorf("network policy: unknown mode %q (want none, allowlist or open)", p.Mode)
	}
	if len(p.Allow) > MaxRules {
		return nil, fmt.Errorf("network policy: %d rules, at most %d", len(p.Allow), MaxRules)
	}
	c.src.Mode = c.mode
	for i, r := range p.Allow {
		ports, err := compilePorts(r.Ports)
		if err != nil {
			return nil, fmt.Errorf("network policy: rule %d: %w", i, err)
		}
		nr := Rule{Ports: make([]int, len(ports))}
		for j, pt := range ports {
			nr.Ports[j] = int(pt)
		}
		switch {
		case r.Host != "" && r.CIDR != "":
			return nil, fmt.Errorf("network policy: rule %d sets both host and cidr", i)
		case r.Host != "":
			h, err := compileHost(r.Host)
			if err != nil {
				return nil, fmt.Errorf("network policy: rule %d: %w", i, err)
			}
			for _, pt := range ports {
				if isDNSPort(pt) {
					return nil, fmt.Errorf("network policy: rule %d: port %d (DNS) can only be opened by a cidr rule; names resolve through Warden's DNS", i, pt)
				}
			}
			h.ports = ports
			c.hosts = append(c.hosts, h)
			nr.Host = h.String()
		case r.CIDR != "":
			pfx, err := parseCIDR(r.CIDR)
			if err != nil {
				return nil, fmt.Errorf("network policy: rule %d: %w", i, err)
			}
			c.cidrs = append(c.cidrs, cidrRule{prefix: pfx, ports: ports})
			nr.CIDR = pfx.String()
		default:
			return nil, fmt.Errorf("network policy: rule %d sets neither host nor cidr", i)
		}
		c.src.Allow = append(c.src.Allow, nr)
	}
	return c, nil
}

func (h hostRule) String() string {
	if h.wildcard {
		return "*" + h.name
	}
	return h.name
}

func compilePorts(ps []int) ([]uint16, error) {
	if len(ps) == 0 {
		ps = DefaultPorts
	}
	if len(ps) > MaxPortsPerRule {
		return nil, fmt.Errorf("%d ports, at most %d", len(ps), MaxPortsPerRule)
	}
	out := make([]uint16, 0, len(ps))
	for _, p := range ps {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("port %d out of range 1-65535", p)
		}
		out = append(out, uint16(p))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func compileHost(s string) (hostRule, error) {
	wild := false
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		wild, s = true, rest
	}
	if _, ok := parseHostIP(s); ok {
		return hostRule{}, fmt.Errorf("host %q is an address: use a cidr rule", s)
	}
	name, ok := normalizeName(s)
	if !ok {
		return hostRule{}, fmt.Errorf("host %q is not a valid domain name (letters, digits, '-' and '_' in dot-separated labels, optionally prefixed by \"*.\"; internationalised names in their xn-- form)", s)
	}
	if !strings.Contains(name, ".") && !wild {
		// Single-label names would be searched through the host's search
		// domains by some resolvers; require a dot to avoid surprises.
		return hostRule{}, fmt.Errorf("host %q has a single label: name a fully qualified domain", s)
	}
	if wild {
		return hostRule{name: "." + name, wildcard: true}, nil
	}
	return hostRule{name: name}, nil
}

func parseCIDR(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("cidr %q: not an address or prefix", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("cidr %q: %w", s, err)
	}
	if p.Addr().Is4In6() {
		if p.Bits() < 96 {
			return netip.Prefix{}, fmt.Errorf("cidr %q: an IPv4-mapped prefix shorter than /96", s)
		}
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// normalizeName lowercases s, drops one trailing dot and checks that it is a
// plausible DNS name: 1-63 byte labels of [a-z0-9-_], at most 253 bytes, a
// last label starting with a letter (so no numeric form of an address passes
// as a name).
func normalizeName(s string) (string, bool) {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return "", false
	}
	b := []byte(s)
	start := 0
	for i := 0; i <= len(b); i++ {
		if i == len(b) || b[i] == '.' {
			l := i - start
			if l == 0 || l > 63 {
				return "", false
			}
			if b[start] == '-' || b[i-1] == '-' {
				return "", false
			}
			start = i + 1
			continue
		}
		c := b[i]
		switch {
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return "", false
		}
	}
	last := b[strings.LastIndexByte(string(b), '.')+1:]
	if last[0] < 'a' || last[0] > 'z' {
		return "", false
	}
	return string(b), true
}

func isDNSPort(p uint16) bool { return p == 53 || p == 853 }

func hasPort(ports []uint16, p uint16) bool {
	_, ok := slices.BinarySearch(ports, p)
	return ok
}

func (h *hostRule) match(name string) bool {
	if h.wildcard {
		return len(name) > len(h.name) && strings.HasSuffix(name, h.name)
	}
	return name == h.name
}

// nameAllowed reports whether a host rule allows the normalised name on
// port; port 0 asks whether any port is allowed (for DNS).
func (c *compiled) nameAllowed(name string, port uint16) bool {
	if c.mode == ModeOpen {
		return true
	}
	if c.mode != ModeAllowlist {
		return false
	}
	for i := range c.hosts {
		h := &c.hosts[i]
		if h.match(name) && (port == 0 || hasPort(h.ports, port)) {
			return true
		}
	}
	return false
}

// cidrAllowed reports whether a CIDR rule allows ip on port.
func (c *compiled) cidrAllowed(ip netip.Addr, port uint16) bool {
	if c.mode != ModeAllowlist {
		return false
	}
	ip = ip.Unmap()
	for _, r := range c.cidrs {
		if r.prefix.Contains(ip) && hasPort(r.ports, port) {
			return true
		}
	}
	return false
}

var errEmptyName = errors.New("empty name")

// canonicalName normalises a name seen on the wire (DNS question, SNI, Host
// header) for matching.
func canonicalName(s string) (string, error) {
	if s == "" {
		return "", errEmptyName
	}
	n, ok := normalizeName(s)
	if !ok {
		return "", fmt.Errorf("invalid name %q", s)
	}
	return n, nil
}
