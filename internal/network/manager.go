package network

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
)

// Config configures the Manager.
type Config struct {
	// DNSUpstream is the resolver Warden's DNS forwards allowed queries to:
	// "host" or "host:port", several separated by commas, tried in order.
	// Default: the nameservers of the host's /etc/resolv.conf.
	DNSUpstream string
	// AllowPrivate lists private ranges (RFC 1918, CGNAT, ULA, benchmark,
	// 192.0.0.0/24) sandboxes may reach when their policy allows them.
	// Loopback, link-local, multicast, the host's own addresses and the
	// sandbox's link can never be allowed.
	AllowPrivate []netip.Prefix
	// Deny lists more destinations no sandbox may reach, checked like the
	// host's own addresses: for example the host's public address behind
	// a cloud 1:1 NAT (it is on no interface, and a connection to it would
	// come back to the host), a load balancer in front of wardend, or a
	// public range of the operator's own infrastructure.
	Deny []netip.Prefix
	// OnDeny is called for refused flows and lookups, rate-limited to one
	// call a second per sandbox, target and reason, from a goroutine of
	// the Manager (in order; never on the packet path).
	OnDeny func(sandbox, target, reason string)
	// OnQuery is called for every query to Warden's DNS, with the
	// decision: allowed, denied, nodata, refused or error.
	OnQuery func(sandbox, name, qtype, decision string)
	// Dial connects to allowed destinations and to the DNS upstream
	// (tests); default: a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// TLSIntercept and TLSHandoff let another component take over allowed
	// TLS connections to port 443 (the credential broker, internal/broker):
	// when TLSIntercept(sandbox, serverName) is true for the ClientHello's
	// server name (normalised), the connection is passed to TLSHandoff, which
	// reads it from the ClientHello on, dials target itself and returns when
	// it is done; targetNames are the names Warden's DNS resolved to target
	// for this sandbox. Setting them makes every port-443 connection wait for
	// its ClientHello before wardend dials, in every mode.
	TLSIntercept func(sandboxID, serverName string) bool
	TLSHandoff   func(ctx context.Context, sandboxID string, client net.Conn, target netip.AddrPort, targetNames []string) error
	// Govern, if set, decides each flow the policy allowed through the
	// governed path (EgressGovernor): after the policy, before the dial
	// (or, on ports 80 and 443, once the client's first bytes name the
	// host). While Govern.Governs() is true, connections to ports 80 and
	// 443 wait for their first bytes in every mode. A refused flow is
	// counted and listed in Stats but not reported to OnDeny (the Governor
	// audits it).
	Govern Governor
	// MTU of the sandbox's device (default 65520: one large segment per
	// read and write; see docs/networking.md).
	MTU int
	// MaxFlows bounds the open TCP connections and UDP flows of one
	// sandbox (default 1024); each holds a socket in wardend.
	MaxFlows int
	// Local, if set, serves Warden itself to sandboxes (local.go): DNS
	// answers LocalName with the gateway addresses, and each connection
	// to a gateway address on LocalPort is passed to Local, which serves
	// it and returns when it is done (the connection is closed then, and
	// with the link). Local decides which sandboxes it serves.
	Local func(sandboxID string, c net.Conn)
}

// DefaultMTU is the device MTU unless configured.
const DefaultMTU = 65520

// Manager owns the links of all sandboxes.
type Manager struct {
	cfg       Config
	upstreams []string
	addrs     addrPolicy
	host      hostAddrs

	mu    sync.Mutex
	links map[string]*Link

	// OnDeny runs on one goroutine, off the packet path.
	reportOnce sync.Once
	reports    chan denyReport
}

type denyReport struct{ sandbox, target, reason string }

// report queues a denial for OnDeny; when the callback falls far behind,
// reports are dropped (the counters still count every denial).
func (m *Manager) report(sandbox, target, reason string) {
	if m.cfg.OnDeny == nil {
		return
	}
	m.reportOnce.Do(func() {
		m.reports = make(chan denyReport, 4096)
		go func() {
			for r := range m.reports {
				m.cfg.OnDeny(r.sandbox, r.target, r.reason)
			}
		}()
	})
	select {
	case m.reports <- denyReport{sandbox, target, reason}:
	default:
	}
}

// New checks cfg and returns a Manager.
func New(cfg Config) (*Manager, error) {
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
	}
	if cfg.MTU < 1280 || cfg.MTU > 65535 {
		return nil, fmt.Errorf("network: mtu %d out of range 1280-65535", cfg.MTU)
	}
	if cfg.MaxFlows == 0 {
		cfg.MaxFlows = 1024
	}
	if cfg.Dial == nil {
		d := &net.Dialer{KeepAlive: 30 * time.Second}
		cfg.Dial = d.DialContext
	}
	for _, p := range cfg.AllowPrivate {
		if err := checkAllowPrivate(p); err != nil {
			return nil, err
		}
	}
	m := &Manager{cfg: cfg, links: map[string]*Link{}}
	for _, p := range cfg.Deny {
		if !p.IsValid() {
			return nil, fmt.Errorf("network: deny: invalid prefix %v", p)
		}
	}
	m.addrs = addrPolicy{allowPrivate: cfg.AllowPrivate, deny: cfg.Deny, isHost: m.host.contains}
	var err error
	if cfg.DNSUpstream != "" {
		m.upstreams, err = parseUpstreams(cfg.DNSUpstream)
	} else {
		m.upstreams, err = resolvConfUpstreams("/etc/resolv.conf")
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// checkAllowPrivate refuses an allow_private prefix that reaches into a range
// that can never be opened.
func checkAllowPrivate(p netip.Prefix) error {
	if !p.IsValid() {
		return fmt.Errorf("network: allow_private: invalid prefix %v", p)
	}
	if p.Addr().Is4In6() {
		return fmt.Errorf("network: allow_private %v: write IPv4 prefixes unmapped", p)
	}
	for _, r := range deniedRanges {
		if !r.private && r.prefix.Overlaps(p) {
			return fmt.Errorf("network: allow_private %v overlaps %v (%s), which can never be allowed", p, r.prefix, r.reason)
		}
	}
	// Overlapping the sandbox link (10.0.0.0/8, fd00::/8) is fine: the
	// link itself stays denied.
	return nil
}

func parseUpstreams(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if ap, err := netip.ParseAddrPort(f); err == nil {
			out = append(out, ap.String())
			continue
		}
		a, err := netip.ParseAddr(strings.Trim(f, "[]"))
		if err != nil {
			return nil, fmt.Errorf("network: dns upstream %q: not an address or address:port", f)
		}
		out = append(out, netip.AddrPortFrom(a, 53).String())
	}
	if len(out) == 0 {
		return nil, errors.New("network: dns upstream: no address")
	}
	return out, nil
}

// resolvConfUpstreams reads the nameservers of a resolv.conf; none is not an
// error (lookups then fail with SERVFAIL).
func resolvConfUpstreams(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "nameserver" {
			if a, err := netip.ParseAddr(fs[1]); err == nil && a.Zone() == "" {
				out = append(out, netip.AddrPortFrom(a, 53).String())
			}
		}
	}
	return out, nil
}

// Upstreams returns the resolvers Warden's DNS forwards to.
func (m *Manager) Upstreams() []string { return append([]string(nil), m.upstreams...) }

func (m *Manager) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return m.cfg.Dial(ctx, network, addr)
}

// Link returns the link of a sandbox, or nil.
func (m *Manager) Link(sandboxID string) *Link {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.links[sandboxID]
}

func (m *Manager) remove(l *Link) {
	m.mu.Lock()
	if m.links[l.id] == l {
		delete(m.links, l.id)
	}
	m.mu.Unlock()
}

func (m *Manager) newLink(sandboxID string, pid int, c *compiled) (*Link, error) {
	l := &Link{m: m, id: sandboxID, pid: pid, policy: c.src, done: make(chan struct{}), reported: map[string]time.Time{}}
	l.pol.Store(c)
	for {
		m.mu.Lock()
		old := m.links[sandboxID]
		if old == nil {
			m.links[sandboxID] = l
			m.mu.Unlock()
			return l, nil
		}
		m.mu.Unlock()
		old.Close() // a sandbox has one link: the new one replaces it
	}
}

// Attach gives the sandbox whose PID 1 is pid its network under policy p:
// for modes other than none, a TUN device wd0 in the process's network
// namespace (10.254.0.2/30 and fd7a:7761:7264::2/126, default routes via
// .1 and ::1), /etc/resolv.conf in its root pointing at Warden's resolver,
// and a userspace stack in wardend that enforces p on every flow. In mode
// none nothing is created until SetPolicy asks for another mode. A link the
// sandbox already has is closed first (re-attaching after a daemon restart
// or a failed call is safe). The link closes itself when the process
// exits; Close it on sandbox deletion.
func (m *Manager) Attach(ctx context.Context, sandboxID string, pid int, p Policy) (*Link, error) {
	c, err := compile(p)
	if err != nil {
		return nil, err
	}
	if sandboxID == "" {
		return nil, errors.New("network: empty sandbox id")
	}
	pidfd, err := openPidfd(pid)
	if err != nil {
		return nil, err
	}
	l, err := m.newLink(sandboxID, pid, c)
	if err != nil {
		pidfd.Close()
		return nil, err
	}
	l.pidfd = pidfd
	return m.startLink(l, c, true)
}

// AttachNetNS is Attach for a sandbox that does not run yet, in the network
// namespace netns (which the link then owns): gVisor's kernel reads its
// devices when it boots. The device persists (a daemon restart attaches to
// it again without touching it) until the namespace goes, the sandbox writes
// its own /etc/resolv.conf (ResolvConf), and the link does not close itself:
// Close it when the sandbox is deleted.
func (m *Manager) AttachNetNS(ctx context.Context, sandboxID string, netns *os.File, p Policy) (*Link, error) {
	c, err := compile(p)
	if err != nil {
		netns.Close()
		return nil, err
	}
	if sandboxID == "" {
		netns.Close()
		return nil, errors.New("network: empty sandbox id")
	}
	l, err := m.newLink(sandboxID, 0, c)
	if err != nil {
		netns.Close()
		return nil, err
	}
	l.netns = netns
	return m.startLink(l, c, false)
}

// startLink starts a new link's device and stack unless its mode is none.
func (m *Manager) startLink(l *Link, c *compiled, watch bool) (*Link, error) {
	if c.mode != ModeNone {
		l.mu.Lock()
		err := l.startLocked()
		l.mu.Unlock()
		if err != nil {
			l.Close()
			return nil, err
		}
	}
	if watch {
		l.watch()
	}
	return l, nil
}

// startLocked creates the device and the stack; the caller holds l.mu.
func (l *Link) startLocked() error {
	m := l.m
	target := l.pidfd
	if l.netns != nil {
		target = l.netns
	}
	pidfd := fdOf(target) // valid while l.mu is held: Close waits for it
	tun, err := createTUN(pidfd, "wd0", m.cfg.MTU, l.netns != nil)
	if err != nil {
		return err
	}
	ep, err := fdbased.New(&fdbased.Options{
		FDs:                []int{int(tun.Fd())},
		MTU:                uint32(m.cfg.MTU),
		PacketDispatchMode: fdbased.Readv,
		// One packet processor per sandbox: flows of one sandbox share a
		// goroutine, sandboxes run in parallel.
		ProcessorsPerChannel: 1,
	})
	if err != nil {
		tun.Close()
		return fmt.Errorf("network: link endpoint: %w", err)
	}
	ns, err := newNetstack(l, ep)
	if err != nil {
		tun.Close()
		return err
	}
	if l.netns == nil { // else the sandbox writes its own resolv.conf
		if err := writeResolvConf(pidfd, l.pid); err != nil {
			ns.close()
			tun.Close()
			return err
		}
	}
	l.ns, l.tunFile = ns, tun
	return nil
}

// hostAddrs caches the host's own addresses (those of wardend's network
// namespace), refreshed at most every second.
type hostAddrs struct {
	mu   sync.Mutex
	at   time.Time
	set  map[netip.Addr]struct{}
	list func() ([]net.Addr, error) // tests
}

func (h *hostAddrs) contains(ip netip.Addr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.at) > time.Second || h.set == nil {
		list := h.list
		if list == nil {
			list = net.InterfaceAddrs
		}
		if addrs, err := list(); err == nil {
			set := make(map[netip.Addr]struct{}, len(addrs))
			for _, a := range addrs {
				if pn, ok := a.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(pn.IP); ok {
						set[ip.Unmap()] = struct{}{}
					}
				}
			}
			h.set, h.at = set, time.Now()
		}
	}
	_, ok := h.set[ip.WithZone("").Unmap()]
	return ok
}
