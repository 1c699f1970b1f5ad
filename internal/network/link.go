package network

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Link is one sandbox's network: its policy, its userspace stack (when the
// mode is not none) and its counters.
type Link struct {
	m   *Manager
	id  string
	pid int

	pol   atomic.Pointer[compiled]
	names ipNames
	stats counters

	mu      sync.Mutex // serialises SetPolicy and Close
	policy  Policy
	closed  bool
	ns      *netstack
	tunFile *os.File // the TUN device; closing it removes wd0 (unless netns is set)
	pidfd   *os.File // the sandbox's PID 1 (its netns and root), nil in tests
	// netns is the sandbox's network namespace when the link was made
	// before the sandbox ran (AttachNetNS): the device persists and the
	// sandbox writes its own resolv.conf.
	netns *os.File
	done  chan struct{}

	denyMu   sync.Mutex
	denials  []Denial // newest last, at most maxDenials
	reported map[string]time.Time
}

// Denial is one refused flow or lookup.
type Denial struct {
	Time   time.Time `json:"time"`
	Proto  string    `json:"proto"` // tcp, udp or dns
	Target string    `json:"target"`
	Reason string    `json:"reason"`
}

// Stats are a link's counters since Attach.
type Stats struct {
	Mode Mode `json:"mode"`
	// BytesOut counts payload bytes from the sandbox to the internet,
	// BytesIn the other way (TCP and UDP payload, DNS not included).
	BytesOut uint64 `json:"bytes_out"`
	BytesIn  uint64 `json:"bytes_in"`
	// TCPConnections and UDPFlows count flows that were allowed and
	// connected; ActiveFlows is how many are open now.
	TCPConnections uint64 `json:"tcp_connections"`
	UDPFlows       uint64 `json:"udp_flows"`
	ActiveFlows    int64  `json:"active_flows"`
	// DialErrors counts allowed flows whose destination could not be reached.
	DialErrors uint64 `json:"dial_errors"`
	// Denied counts refused flows and lookups; RecentDenials lists the
	// latest (oldest first).
	Denied        uint64   `json:"denied"`
	RecentDenials []Denial `json:"recent_denials,omitempty"`
	// DNSQueries counts queries to Warden's resolver, DNSDenied those
	// refused by the policy, DNSFiltered the answer records dropped for
	// pointing at a denied address (DNS rebinding).
	DNSQueries  uint64 `json:"dns_queries"`
	DNSDenied   uint64 `json:"dns_denied"`
	DNSFiltered uint64 `json:"dns_filtered"`
}

type counters struct {
	bytesIn, bytesOut     atomic.Uint64
	tcp, udp              atomic.Uint64
	active                atomic.Int64
	flows                 atomic.Int64 // slots taken (active + being set up)
	dialErrors            atomic.Uint64
	denied                atomic.Uint64
	dnsQueries, dnsDenied atomic.Uint64
	dnsFiltered           atomic.Uint64
}

const (
	maxDenials = 32
	// reportEvery rate-limits OnDeny for the same target and reason (a
	// UDP stream to a denied address would otherwise call it per packet).
	reportEvery = time.Second
	maxReported = 4096
)

// ID returns the sandbox id.
func (l *Link) ID() string { return l.id }

// Policy returns the policy in force (normalised).
func (l *Link) Policy() Policy {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.policy
}

// SetPolicy changes the policy. New connections and lookups see it at once;
// open connections continue. Switching from none to another mode creates the
// device then; switching to none keeps it but refuses everything.
func (l *Link) SetPolicy(p Policy) error {
	c, err := compile(p)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if c.mode != ModeNone && l.ns == nil {
		if l.pidfd == nil && l.netns == nil {
			return errors.New("network: link has no sandbox process to attach to")
		}
		if err := l.startLocked(); err != nil {
			return err
		}
	}
	l.pol.Store(c)
	l.policy = c.src
	return nil
}

// Readdress puts the device's addresses and routes back after the sandbox's
// own kernel took them off it (gVisor's runsc does at boot and reads them
// again at a restore). Only links made with AttachNetNS have it to do.
func (l *Link) Readdress() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.netns == nil || l.ns == nil {
		return nil
	}
	return readdress(fdOf(l.netns), "wd0", l.m.cfg.MTU)
}

// ErrClosed is returned by operations on a closed link.
var ErrClosed = errors.New("network: link closed")

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	s := Stats{
		Mode:           l.pol.Load().mode,
		BytesOut:       l.stats.bytesOut.Load(),
		BytesIn:        l.stats.bytesIn.Load(),
		TCPConnections: l.stats.tcp.Load(),
		UDPFlows:       l.stats.udp.Load(),
		ActiveFlows:    l.stats.active.Load(),
		DialErrors:     l.stats.dialErrors.Load(),
		Denied:         l.stats.denied.Load(),
		DNSQueries:     l.stats.dnsQueries.Load(),
		DNSDenied:      l.stats.dnsDenied.Load(),
		DNSFiltered:    l.stats.dnsFiltered.Load(),
	}
	l.denyMu.Lock()
	s.RecentDenials = slices.Clone(l.denials)
	l.denyMu.Unlock()
	return s
}

// Done is closed when the link has closed (Close, or the sandbox exited).
func (l *Link) Done() <-chan struct{} { return l.done }

// Close removes the device, stops the stack and ends every flow. It is safe
// to call more than once.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.pol.Store(noneCompiled)
	ns, tun, pidfd, netns := l.ns, l.tunFile, l.pidfd, l.netns
	l.ns, l.tunFile = nil, nil
	l.mu.Unlock()
	if netns != nil {
		defer netns.Close()
	}
	if ns != nil {
		ns.close()
	}
	if tun != nil {
		tun.Close()
	}
	if pidfd != nil {
		pidfd.Close()
	}
	l.m.remove(l)
	close(l.done)
	return nil
}

var noneCompiled = &compiled{mode: ModeNone, src: Policy{Mode: ModeNone}}

// acquire takes a flow slot.
func (l *Link) acquire() bool {
	if l.stats.flows.Add(1) > int64(l.m.cfg.MaxFlows) {
		l.stats.flows.Add(-1)
		return false
	}
	return true
}

func (l *Link) release() { l.stats.flows.Add(-1) }

// decision is the verdict on a new flow: a deny reason, or allowed (with
// inspect set when the client's first bytes must name an allowed host).
type decision struct {
	reason  string
	inspect bool
}

// decide applies pol to a new flow to dst.
func (l *Link) decide(pol *compiled, proto string, dst netip.AddrPort) decision {
	ip, port := dst.Addr().Unmap(), dst.Port()
	if pol.mode == ModeNone {
		return decision{reason: "network mode none"}
	}
	if r := l.m.addrs.check(ip); r != "" {
		return decision{reason: r}
	}
	if port == 0 {
		return decision{reason: "port 0"}
	}
	if pol.mode == ModeOpen {
		return decision{}
	}
	if pol.cidrAllowed(ip, port) {
		return decision{}
	}
	if isDNSPort(port) {
		return decision{reason: "DNS or DoT outside Warden's resolver"}
	}
	if proto != "tcp" {
		return decision{reason: "not in the allowlist (UDP needs a cidr rule)"}
	}
	names := l.names.lookup(ip, time.Now())
	for _, name := range names {
		if pol.nameAllowed(name, port) {
			return decision{inspect: port == 80 || port == 443}
		}
	}
	if len(names) > 0 {
		return decision{reason: fmt.Sprintf("port %d not allowed for %s", port, names[0])}
	}
	return decision{reason: "not in the allowlist (no allowed name resolved to this address through Warden's DNS)"}
}

// deny records a refused flow.
func (l *Link) deny(proto string, dst netip.AddrPort, reason string) {
	target := proto + " " + dst.String()
	if names := l.names.lookup(dst.Addr(), time.Now()); len(names) > 0 {
		target += " (" + names[0] + ")"
	}
	l.denyTarget(proto, target, reason)
}

func (l *Link) denyTarget(proto, target, reason string) {
	now := l.recordDenial(proto, target, reason)
	l.denyMu.Lock()
	key := target + "\x00" + reason
	report := now.Sub(l.reported[key]) >= reportEvery
	if report && len(l.reported) >= maxReported {
		for k, t := range l.reported {
			if now.Sub(t) >= reportEvery {
				delete(l.reported, k)
			}
		}
		// A flood of distinct targets: report what fits, count the rest.
		report = len(l.reported) < maxReported
	}
	if report {
		l.reported[key] = now
	}
	l.denyMu.Unlock()
	if report {
		l.m.report(l.id, target, reason)
	}
}

// recordDenial counts a refused flow or lookup and lists it among the
// recent denials; it returns the time it recorded.
func (l *Link) recordDenial(proto, target, reason string) time.Time {
	l.stats.denied.Add(1)
	now := time.Now()
	l.denyMu.Lock()
	defer l.denyMu.Unlock()
	if len(l.denials) == maxDenials {
		copy(l.denials, l.denials[1:])
		l.denials = l.denials[:maxDenials-1]
	}
	l.denials = append(l.denials, Denial{Time: now, Proto: proto, Target: target, Reason: reason})
	return now
}

// watch closes the link when the sandbox's PID 1 exits.
func (l *Link) watch() {
	rc, err := l.pidfd.SyscallConn()
	if err != nil {
		return
	}
	go func() {
		first := true
		err := rc.Read(func(uintptr) bool {
			if first {
				first = false
				return false // wait for readiness: the process has exited
			}
			return true
		})
		if err == nil {
			l.Close()
		}
	}()
}

// fdOf returns f's descriptor without switching it to blocking mode (as
// f.Fd would), for use while f stays open.
func fdOf(f *os.File) int {
	fd := -1
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(u uintptr) { fd = int(u) })
	}
	return fd
}

// openPidfd opens a non-blocking pidfd (pollable by the runtime).
func openPidfd(pid int) (*os.File, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("network: open sandbox process %d: %w", pid, err)
	}
	return os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", pid)), nil
}

// ipNames maps the addresses Warden's DNS gave the sandbox to the names it
// asked for, until their TTL (raised to minNameTTL) runs out.
type ipNames struct {
	mu sync.Mutex
	m  map[netip.Addr]map[string]time.Time // name -> expiry
}

const (
	// minNameTTL: an address stays dialable at least this long after the
	// lookup that returned it (clients cache answers a little longer than
	// their TTL). Answers handed to the sandbox are capped at maxAnswerTTL
	// so that a client refreshes before its entry expires.
	minNameTTL   = 10 * time.Minute
	maxAnswerTTL = 300
	maxNameAddrs = 8192
)

func (t *ipNames) add(ip netip.Addr, name string, ttl time.Duration, now time.Time) {
	ip = ip.Unmap()
	exp := now.Add(max(ttl, minNameTTL))
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[netip.Addr]map[string]time.Time{}
	}
	if _, ok := t.m[ip]; !ok && len(t.m) >= maxNameAddrs {
		t.sweepLocked(now)
	}
	names := t.m[ip]
	if names == nil {
		names = map[string]time.Time{}
		t.m[ip] = names
	}
	if old, ok := names[name]; !ok || old.Before(exp) {
		if !ok && len(names) >= 64 {
			return // an address shared by many names: the first 64 are enough
		}
		names[name] = exp
	}
}

// sweepLocked drops expired entries, then arbitrary ones until there is room.
func (t *ipNames) sweepLocked(now time.Time) {
	for ip, names := range t.m {
		for n, exp := range names {
			if !exp.After(now) {
				delete(names, n)
			}
		}
		if len(names) == 0 {
			delete(t.m, ip)
		}
	}
	for ip := range t.m {
		if len(t.m) < maxNameAddrs*7/8 {
			break
		}
		delete(t.m, ip)
	}
}

// lookup returns the unexpired names of ip, sorted.
func (t *ipNames) lookup(ip netip.Addr, now time.Time) []string {
	ip = ip.Unmap()
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for n, exp := range t.m[ip] {
		if exp.After(now) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}
