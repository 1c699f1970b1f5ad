package network

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// Timing of the proxy.
const (
	nicID = tcpip.NICID(1)
	// dialTimeout bounds the host-side connect of a proxied flow.
	dialTimeout = 15 * time.Second
	// firstDataWait is how long a name-checked connection (80/443 in
	// allowlist mode) waits for the client to speak before wardend dials
	// anyway, for protocols where the server speaks first; the client's
	// first bytes are inspected before they are forwarded in every case.
	firstDataWait = 2 * time.Second
	// sniffTimeout bounds reading a whole ClientHello or request head
	// once its first byte has arrived.
	sniffTimeout = 10 * time.Second
	// udpIdle closes a UDP flow without traffic in either direction.
	udpIdle = 60 * time.Second
	// maxInFlightSYN bounds handshakes being decided at once.
	maxInFlightSYN = 512
	copyBuf        = 64 << 10
)

// netstack is the userspace TCP/IP stack that terminates one sandbox's
// traffic.
type netstack struct {
	l   *Link
	s   *stack.Stack
	ep  stack.LinkEndpoint
	ctx context.Context
	end context.CancelFunc

	mu    sync.Mutex
	conns map[io.Closer]struct{} // open flows and DNS sockets, closed with the stack
	wg    sync.WaitGroup         // flow and server goroutines
}

// newNetstack builds the stack on ep and starts the forwarders and the DNS
// server. mtu is the link MTU (for the TCP window sizing only).
func newNetstack(l *Link, ep stack.LinkEndpoint) (*netstack, error) {
	s := stack.New(stack.Options{
		NetworkProtocols: []stack.NetworkProtocolFactory{
			ipv4.NewProtocol,
			ipv6.NewProtocolWithOptions(ipv6.Options{
				// A point-to-point TUN: no duplicate address detection, no
				// link-local address, no router solicitations.
				DADConfigs: stack.DADConfigurations{DupAddrDetectTransmits: 0},
			}),
		},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	ctx, cancel := context.WithCancel(context.Background())
	n := &netstack{l: l, s: s, ep: ep, ctx: ctx, end: cancel, conns: map[io.Closer]struct{}{}}
	fail := func(what string, err any) (*netstack, error) {
		cancel()
		s.Destroy()
		return nil, fmt.Errorf("network stack: %s: %v", what, err)
	}
	sack := tcpip.TCPSACKEnabled(true)
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack); err != nil {
		return fail("sack", err)
	}
	// Buffers grow with use (receive auto-tuning); idle flows hold little.
	rcv := tcpip.TCPReceiveBufferSizeRangeOption{Min: tcp.MinBufferSize, Default: 256 << 10, Max: 8 << 20}
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &rcv); err != nil {
		return fail("receive buffer", err)
	}
	snd := tcpip.TCPSendBufferSizeRangeOption{Min: tcp.MinBufferSize, Default: 256 << 10, Max: 8 << 20}
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &snd); err != nil {
		return fail("send buffer", err)
	}
	mod := tcpip.TCPModerateReceiveBufferOption(true)
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &mod); err != nil {
		return fail("receive auto-tuning", err)
	}
	if err := s.CreateNICWithOptions(nicID, ep, stack.NICOptions{Name: "wd0"}); err != nil {
		return fail("create NIC", err)
	}
	for _, a := range []struct {
		proto tcpip.NetworkProtocolNumber
		pfx   netip.Prefix
		addr  netip.Addr
	}{{ipv4.ProtocolNumber, SandboxPrefix4, Gateway4}, {ipv6.ProtocolNumber, SandboxPrefix6, Gateway6}} {
		pa := tcpip.ProtocolAddress{Protocol: a.proto, AddressWithPrefix: tcpip.AddressWithPrefix{
			Address: tcpip.AddrFromSlice(a.addr.AsSlice()), PrefixLen: a.pfx.Bits()}}
		if err := s.AddProtocolAddress(nicID, pa, stack.AddressProperties{}); err != nil {
			return fail("address "+a.addr.String(), err)
		}
	}
	// Promiscuous: accept packets for any destination. Spoofing: answer
	// from that destination. Every flow then reaches the forwarders.
	if err := s.SetPromiscuousMode(nicID, true); err != nil {
		return fail("promiscuous mode", err)
	}
	if err := s.SetSpoofing(nicID, true); err != nil {
		return fail("spoofing", err)
	}
	s.SetRouteTable([]tcpip.Route{
		{Destination: header.IPv4EmptySubnet, NIC: nicID},
		{Destination: header.IPv6EmptySubnet, NIC: nicID},
	})
	tcpFwd := tcp.NewForwarder(s, 0, maxInFlightSYN, n.onTCP)
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, tcpFwd.HandlePacket)
	udpFwd := udp.NewForwarder(s, n.onUDP)
	s.SetTransportProtocolHandler(udp.ProtocolNumber, udpFwd.HandlePacket)
	if err := n.startDNS(); err != nil {
		return fail("dns", err)
	}
	if err := n.startLocal(); err != nil {
		return fail("local", err)
	}
	return n, nil
}

// close stops every flow and the stack. The link endpoint's own resources
// (the TUN fd) are the caller's.
func (n *netstack) close() {
	n.end()
	n.mu.Lock()
	conns := n.conns
	n.conns = nil
	n.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	// Stop the link's packet goroutines first, holding no stack lock:
	// Stack.Wait removes the NIC (and waits for them) with the stack's
	// lock held, which a packet being delivered may be waiting for.
	n.ep.Attach(nil)
	n.s.Close()
	n.wg.Wait()
	n.s.Wait()
}

// track registers c to be closed with the stack; false if it is closing.
func (n *netstack) track(cs ...io.Closer) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns == nil {
		return false
	}
	for _, c := range cs {
		n.conns[c] = struct{}{}
	}
	return true
}

func (n *netstack) untrack(cs ...io.Closer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range cs {
		delete(n.conns, c)
	}
}

// enter registers a goroutine the stack waits for on close (the caller
// calls n.wg.Done); false if the stack is closing.
func (n *netstack) enter() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns == nil {
		return false
	}
	n.wg.Add(1)
	return true
}

// goTracked runs f in a goroutine the stack waits for on close.
func (n *netstack) goTracked(f func()) bool {
	if !n.enter() {
		return false
	}
	go func() {
		defer n.wg.Done()
		f()
	}()
	return true
}

func toAddr(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip
}

// fromSandbox reports whether src is the sandbox's own address: anything
// else on the link is spoofed and dropped.
func fromSandbox(src netip.Addr) bool {
	return src == SandboxAddr4 || src == SandboxAddr6
}

// onTCP decides a new TCP connection from the sandbox. It runs in its own
// goroutine (the forwarder starts one per SYN).
func (n *netstack) onTCP(r *tcp.ForwarderRequest) {
	id := r.ID()
	l := n.l
	src := toAddr(id.RemoteAddress)
	dst := netip.AddrPortFrom(toAddr(id.LocalAddress).Unmap(), id.LocalPort)
	if !fromSandbox(src) {
		r.Complete(false)
		return
	}
	pol := l.pol.Load()
	d := l.decide(pol, "tcp", dst)
	if d.reason != "" {
		l.deny("tcp", dst, d.reason)
		r.Complete(true)
		return
	}
	if !l.acquire() {
		l.deny("tcp", dst, "too many open connections")
		r.Complete(true)
		return
	}
	if !n.enter() { // closing
		l.release()
		r.Complete(true)
		return
	}
	defer n.wg.Done()
	defer l.release()
	governed := l.governs()
	if d.inspect || (dst.Port() == 443 && l.m.cfg.TLSIntercept != nil) || (governed && (dst.Port() == 80 || dst.Port() == 443)) {
		n.proxyInspected(r, pol, dst, d.inspect, governed)
		return
	}
	if governed {
		// Decided before the handshake completes: a refusal reaches the
		// sandbox as a reset, "connection refused".
		if err := n.governFlow("tcp", dst, l.flowHosts(dst, nil), ""); err != nil {
			r.Complete(true)
			return
		}
	}
	// Dial first so a refused or unreachable destination reaches the
	// sandbox as a reset, like a direct connection.
	ctx, cancel := context.WithTimeout(n.ctx, dialTimeout)
	up, err := l.m.dial(ctx, "tcp", dst.String())
	cancel()
	if err != nil {
		l.stats.dialErrors.Add(1)
		r.Complete(true)
		return
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		up.Close()
		r.Complete(true)
		return
	}
	r.Complete(false)
	l.stats.tcp.Add(1)
	c := gonet.NewTCPConn(&wq, ep)
	n.splice(c, ep, up, nil, false)
}

// proxyInspected accepts the connection and reads the client's first bytes
// before dialling: with enforce, the names they carry (TLS SNI, HTTP Host)
// must be allowed; with governed, the Governor decides the flow for them; a
// TLS connection to port 443 whose server name TLSIntercept claims goes to
// TLSHandoff instead of being spliced.
func (n *netstack) proxyInspected(r *tcp.ForwarderRequest, pol *compiled, dst netip.AddrPort, enforce, governed bool) {
	l := n.l
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		r.Complete(true)
		return
	}
	r.Complete(false)
	c := gonet.NewTCPConn(&wq, ep)
	if !n.track(c) {
		ep.Abort()
		return
	}
	defer n.untrack(c)
	abort := func() {
		ep.Abort()
		c.Close()
	}
	dial := func() (net.Conn, bool) {
		ctx, cancel := context.WithTimeout(n.ctx, dialTimeout)
		up, err := l.m.dial(ctx, "tcp", dst.String())
		cancel()
		if err != nil {
			l.stats.dialErrors.Add(1)
			abort()
			return nil, false
		}
		l.stats.tcp.Add(1)
		return up, true
	}

	chunk := make([]byte, 16<<10)
	c.SetReadDeadline(time.Now().Add(firstDataWait))
	k, err := c.Read(chunk)
	if isTimeout(err) {
		// The client is silent: maybe a server-first protocol. Connect and
		// let the server speak, but still inspect the client's first bytes
		// (and decide again on the names they carry, if any).
		if governed && n.governFlow("tcp", dst, l.flowHosts(dst, nil), "") != nil {
			abort()
			return
		}
		up, ok := dial()
		if !ok {
			return
		}
		c.SetReadDeadline(time.Time{})
		n.splice(c, ep, up, func() ([]byte, bool) {
			k, err := c.Read(chunk)
			data, names, ok := n.finishSniff(c, pol, dst, append([]byte(nil), chunk[:k]...), chunk, err, enforce)
			if ok && governed && len(names) > 0 && n.governFlow("tcp", dst, l.flowHosts(dst, names), sniOf(data, names)) != nil {
				return nil, false
			}
			return data, ok
		}, true)
		return
	}
	data, names, ok := n.finishSniff(c, pol, dst, append([]byte(nil), chunk[:k]...), chunk, err, enforce)
	if !ok {
		abort()
		return
	}
	if governed {
		if gerr := n.governFlow("tcp", dst, l.flowHosts(dst, names), sniOf(data, names)); gerr != nil {
			if refuseGoverned(c, data, gerr) {
				// Let the answer reach the client: half-close, drain what it
				// sends for a moment, then close.
				c.CloseWrite()
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				io.Copy(io.Discard, io.LimitReader(c, 1<<20))
				c.Close()
			} else {
				abort()
			}
			return
		}
	}
	if h := n.intercept(dst, data, names); h != nil {
		n.handoff(c, ep, dst, data, h)
		return
	}
	up, ok := dial()
	if !ok {
		return
	}
	n.splice(c, ep, up, func() ([]byte, bool) { return data, true }, false)
}

// intercept returns TLSHandoff when TLSIntercept claims the server name of
// this connection's ClientHello.
func (n *netstack) intercept(dst netip.AddrPort, data []byte, names []string) func(context.Context, string, net.Conn, netip.AddrPort, []string) error {
	cfg := &n.l.m.cfg
	if cfg.TLSIntercept == nil || cfg.TLSHandoff == nil || dst.Port() != 443 || len(data) == 0 || classifyFirst(data[0]) != kindTLS || len(names) != 1 {
		return nil
	}
	name, err := canonicalName(names[0])
	if err != nil || !cfg.TLSIntercept(n.l.id, name) {
		return nil
	}
	return cfg.TLSHandoff
}

// handoff gives the connection (from its first byte) to h, counting bytes.
func (n *netstack) handoff(c *gonet.TCPConn, ep tcpip.Endpoint, dst netip.AddrPort, first []byte, h func(context.Context, string, net.Conn, netip.AddrPort, []string) error) {
	l := n.l
	l.stats.tcp.Add(1)
	l.stats.active.Add(1)
	defer l.stats.active.Add(-1)
	cc := &countingConn{Conn: c, prefix: first, in: &l.stats.bytesIn, out: &l.stats.bytesOut}
	if err := h(n.ctx, l.id, cc, dst, l.names.lookup(dst.Addr(), time.Now())); err != nil {
		ep.Abort()
	}
	c.Close()
}

// countingConn is the sandbox side of a handed-off connection: it replays
// the bytes already read, then reads on, and counts both directions.
type countingConn struct {
	net.Conn
	prefix  []byte
	in, out *atomic.Uint64
}

func (c *countingConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		k := copy(b, c.prefix)
		c.prefix = c.prefix[k:]
		c.out.Add(uint64(k))
		return k, nil
	}
	k, err := c.Conn.Read(b)
	c.out.Add(uint64(k))
	return k, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	k, err := c.Conn.Write(b)
	c.in.Add(uint64(k))
	return k, err
}

// CloseWrite half-closes the sandbox side.
func (c *countingConn) CloseWrite() error { return c.Conn.(*gonet.TCPConn).CloseWrite() }

// finishSniff reads until the client's first bytes can be judged. With
// enforce, the names in them must be allowed and TLS or HTTP that cannot be
// parsed is refused; without, the bytes are only looked at. It returns the
// bytes to forward and the names found, or false when the connection must
// be refused (the denial is recorded).
func (n *netstack) finishSniff(c *gonet.TCPConn, pol *compiled, dst netip.AddrPort, buf, chunk []byte, err error, enforce bool) ([]byte, []string, bool) {
	l := n.l
	if err != nil && len(buf) == 0 {
		return nil, nil, false
	}
	c.SetReadDeadline(time.Now().Add(sniffTimeout))
	defer c.SetReadDeadline(time.Time{})
	for {
		names, perr := sniffNames(buf)
		if perr == nil {
			if !enforce {
				return buf, names, true
			}
			if reason := checkNames(pol, dst, names); reason != "" {
				l.deny("tcp", dst, reason)
				return nil, nil, false
			}
			return buf, names, true
		}
		if !errors.Is(perr, errNeedMore) {
			if !enforce {
				return buf, nil, true
			}
			l.deny("tcp", dst, "unparseable client hello or request head on port "+fmt.Sprint(dst.Port())+": "+perr.Error())
			return nil, nil, false
		}
		if err != nil {
			if !enforce && len(buf) > 0 {
				return buf, nil, true // forward what came; the splice sees the end
			}
			if isTimeout(err) {
				l.deny("tcp", dst, "incomplete client hello or request head (timeout)")
			}
			return nil, nil, false
		}
		var k int
		k, err = c.Read(chunk)
		buf = append(buf, chunk[:k]...)
	}
}

// checkNames returns why the names a client sent to dst are refused, or "".
func checkNames(pol *compiled, dst netip.AddrPort, names []string) string {
	for _, raw := range names {
		if ip, ok := parseHostIP(raw); ok {
			if ip.Unmap() != dst.Addr() {
				return fmt.Sprintf("domain fronting: the client names %s but connects to %s", ip, dst.Addr())
			}
			continue
		}
		name, err := canonicalName(raw)
		if err != nil {
			return "domain fronting: " + err.Error()
		}
		if !pol.nameAllowed(name, dst.Port()) {
			return fmt.Sprintf("domain fronting: the client names %s, which is not allowed on port %d", name, dst.Port())
		}
	}
	return ""
}

// sniOf returns the TLS server name among names when data is a ClientHello.
func sniOf(data []byte, names []string) string {
	if len(data) == 0 || classifyFirst(data[0]) != kindTLS || len(names) != 1 {
		return ""
	}
	if n, err := canonicalName(names[0]); err == nil {
		return n
	}
	return strings.ToLower(names[0])
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, copyBuf); return &b }}

// splice copies between the sandbox side c and the host side up until both
// directions end, counting bytes. first, when set, yields the client's first
// bytes (already inspected) or false to refuse; with early the server side
// starts before first returns.
func (n *netstack) splice(c *gonet.TCPConn, ep tcpip.Endpoint, up net.Conn, first func() ([]byte, bool), early bool) {
	l := n.l
	if !n.track(c, up) {
		ep.Abort()
		up.Close()
		return
	}
	l.stats.active.Add(1)
	defer l.stats.active.Add(-1)
	defer n.untrack(c, up)
	var once sync.Once
	kill := func() {
		once.Do(func() {
			ep.Abort()
			if tc, ok := up.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			up.Close()
			c.Close()
		})
	}
	down := make(chan struct{})
	startDown := func() {
		go func() {
			defer close(down)
			if err := copyCount(c, up, &l.stats.bytesIn); err != nil {
				kill()
				return
			}
			c.CloseWrite()
		}()
	}
	if early {
		startDown()
	}
	if first != nil {
		data, ok := first()
		if !ok {
			kill()
			if early {
				<-down
			}
			return
		}
		if len(data) > 0 {
			if _, err := up.Write(data); err != nil {
				kill()
				if early {
					<-down
				}
				return
			}
			l.stats.bytesOut.Add(uint64(len(data)))
		}
	}
	if !early {
		startDown()
	}
	if err := copyCount(up, c, &l.stats.bytesOut); err != nil {
		kill()
	} else if cw, ok := up.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	<-down
	once.Do(func() {
		up.Close()
		c.Close()
	})
}

// copyCount copies src to dst until EOF (nil) or an error.
func copyCount(dst io.Writer, src io.Reader, count *atomic.Uint64) error {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return werr
			}
			count.Add(uint64(k))
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// onUDP decides a new UDP flow. It runs on the stack's packet path: it must
// not block.
func (n *netstack) onUDP(r *udp.ForwarderRequest) bool {
	id := r.ID()
	l := n.l
	src := toAddr(id.RemoteAddress)
	dst := netip.AddrPortFrom(toAddr(id.LocalAddress).Unmap(), id.LocalPort)
	if !fromSandbox(src) {
		return true // consumed: dropped
	}
	pol := l.pol.Load()
	if d := l.decide(pol, "udp", dst); d.reason != "" {
		l.deny("udp", dst, d.reason)
		return true
	}
	if !l.acquire() {
		l.deny("udp", dst, "too many open connections")
		return true
	}
	var wq waiter.Queue
	ep, err := r.CreateEndpoint(&wq)
	if err != nil {
		l.release()
		return true
	}
	c := gonet.NewUDPConn(&wq, ep)
	governed := l.governs()
	if !n.goTracked(func() {
		defer l.release()
		// Decided here, off the packet path.
		if governed && n.governFlow("udp", dst, l.flowHosts(dst, nil), "") != nil {
			c.Close()
			return
		}
		n.relayUDP(c, dst)
	}) {
		c.Close()
		l.release()
	}
	return true
}

func (n *netstack) relayUDP(c *gonet.UDPConn, dst netip.AddrPort) {
	l := n.l
	ctx, cancel := context.WithTimeout(n.ctx, dialTimeout)
	up, err := l.m.dial(ctx, "udp", dst.String())
	cancel()
	if err != nil {
		l.stats.dialErrors.Add(1)
		c.Close()
		return
	}
	if !n.track(c, up) {
		c.Close()
		up.Close()
		return
	}
	defer n.untrack(c, up)
	l.stats.udp.Add(1)
	l.stats.active.Add(1)
	defer l.stats.active.Add(-1)
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	relay := func(dst, src net.Conn, count *atomic.Uint64) {
		buf := make([]byte, 64<<10)
		for {
			src.SetReadDeadline(time.Now().Add(udpIdle))
			k, err := src.Read(buf)
			if err != nil {
				if isTimeout(err) && time.Since(time.Unix(0, last.Load())) < udpIdle {
					continue
				}
				if errors.Is(err, syscall.ECONNREFUSED) {
					continue // an ICMP port unreachable from the destination
				}
				return
			}
			last.Store(time.Now().UnixNano())
			if _, err := dst.Write(buf[:k]); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
				return
			}
			count.Add(uint64(k))
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		relay(c, up, &l.stats.bytesIn)
		c.Close()
		up.Close()
	}()
	relay(up, c, &l.stats.bytesOut)
	c.Close()
	up.Close()
	<-done
}
