package network

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

// These tests run the real stack, forwarders, DNS and policy in-process,
// without root: a second gVisor stack plays the sandbox's kernel, wired to
// the link's stack by two channel endpoints; Config.Dial maps the fake
// internet's addresses to loopback servers and records every dial, so the
// tests can check that a denied destination is never even dialled.

// fakeDialer routes the fake internet to local listeners.
type fakeDialer struct {
	mu     sync.Mutex
	routes map[string]string // "tcp 198.51.100.10:80" -> "127.0.0.1:1234"
	pass   map[string]bool   // addresses dialled as they are (the DNS upstream)
	dials  []string          // "tcp 198.51.100.10:80", in order (not pass-through ones)
}

func (f *fakeDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	f.mu.Lock()
	key := network + " " + addr
	target, ok := f.routes[key]
	pass := f.pass[addr]
	if !pass {
		f.dials = append(f.dials, key)
	}
	f.mu.Unlock()
	var d net.Dialer
	if pass {
		return d.DialContext(ctx, network, addr)
	}
	if !ok {
		return nil, fmt.Errorf("fake internet: no route to %s", key)
	}
	return d.DialContext(ctx, network, target)
}

func (f *fakeDialer) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.dials
	f.dials = nil
	return d
}

type harness struct {
	t       *testing.T
	m       *Manager
	l       *Link
	client  *stack.Stack
	srvEP   *channel.Endpoint
	fd      *fakeDialer
	mu      sync.Mutex
	denied  []string
	queries []string
}

func listenLocal(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// startLocalDNS serves fakeRecords on one 127.0.0.1 port, UDP and TCP.
func startLocalDNS(t *testing.T) string {
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err != nil {
			pc.Close()
			continue
		}
		startDNS(t, pc, ln)
		return pc.LocalAddr().String()
	}
	t.Fatal("no port for the fake DNS")
	return ""
}

func newHarness(t *testing.T, p Policy, mut func(*Config)) *harness {
	t.Helper()
	h := &harness{t: t, fd: &fakeDialer{routes: map[string]string{}, pass: map[string]bool{}}}
	dnsAddr := startLocalDNS(t)
	h.fd.pass[dnsAddr] = true
	httpLn, tlsLn, bannerLn := listenLocal(t), listenLocal(t), listenLocal(t)
	serveHTTP(t, httpLn, nil)
	serveHTTP(t, tlsLn, testCert(t))
	serveBanner(t, bannerLn)
	udpEcho, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveUDPEcho(t, udpEcho)
	for _, ip := range []string{"198.51.100.10", "198.51.100.11", "[2001:db8:1::10]"} {
		h.fd.routes["tcp "+ip+":80"] = httpLn.Addr().String()
		h.fd.routes["tcp "+ip+":443"] = tlsLn.Addr().String()
	}
	h.fd.routes["tcp 198.51.100.12:443"] = bannerLn.Addr().String()
	h.fd.routes["udp 203.0.113.20:7"] = udpEcho.LocalAddr().String()
	// In open mode these would be dialled: route them to the HTTP server
	// too so a broken policy shows up as a successful connection.
	for _, a := range []string{"127.0.0.1:80", "10.0.0.5:80", "169.254.169.254:80", "[::1]:80", "[::ffff:127.0.0.1]:80", "[fe80::1]:80"} {
		h.fd.routes["tcp "+a] = httpLn.Addr().String()
	}

	cfg := Config{
		DNSUpstream: dnsAddr,
		Dial:        h.fd.dial,
		OnDeny: func(sb, target, reason string) {
			h.mu.Lock()
			h.denied = append(h.denied, target+": "+reason)
			h.mu.Unlock()
		},
		OnQuery: func(sb, name, qtype, decision string) {
			h.mu.Lock()
			h.queries = append(h.queries, name+" "+qtype+" "+decision)
			h.mu.Unlock()
		},
	}
	if mut != nil {
		mut(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	const mtu = 65520
	h.srvEP = channel.New(512, mtu, "")
	cliEP := channel.New(512, mtu, "")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	pump := func(from, to *channel.Endpoint) {
		defer wg.Done()
		for {
			pkt := from.ReadContext(ctx)
			if pkt == nil {
				return
			}
			np := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: pkt.ToBuffer()})
			proto := pkt.NetworkProtocolNumber
			pkt.DecRef()
			to.InjectInbound(proto, np)
			np.DecRef()
		}
	}
	l, err := m.attachEndpoint("sb-test", h.srvEP, p)
	if err != nil {
		t.Fatal(err)
	}
	h.l = l
	h.client = newClientStack(t, cliEP)
	wg.Add(2)
	go pump(h.srvEP, cliEP)
	go pump(cliEP, h.srvEP)
	t.Cleanup(func() {
		l.Close()
		cancel()
		wg.Wait()
		h.client.Close()
		h.client.Wait()
	})
	return h
}

// newClientStack is the sandbox's side: its addresses and default routes.
func newClientStack(t *testing.T, ep stack.LinkEndpoint) *stack.Stack {
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocolWithOptions(ipv6.Options{DADConfigs: stack.DADConfigurations{}})},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	if err := s.CreateNIC(1, ep); err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		p    tcpip.NetworkProtocolNumber
		addr netip.Addr
		bits int
	}{{ipv4.ProtocolNumber, SandboxAddr4, 30}, {ipv6.ProtocolNumber, SandboxAddr6, 126}} {
		if err := s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: a.p, AddressWithPrefix: tcpip.AddressWithPrefix{
			Address: tcpip.AddrFromSlice(a.addr.AsSlice()), PrefixLen: a.bits}}, stack.AddressProperties{}); err != nil {
			t.Fatal(err)
		}
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}, {Destination: header.IPv6EmptySubnet, NIC: 1}})
	return s
}

func fullAddr(ap netip.AddrPort) (tcpip.FullAddress, tcpip.NetworkProtocolNumber) {
	proto := tcpip.NetworkProtocolNumber(ipv4.ProtocolNumber)
	if ap.Addr().Is6() {
		proto = ipv6.ProtocolNumber
	}
	return tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFromSlice(ap.Addr().AsSlice()), Port: ap.Port()}, proto
}

func (h *harness) dialTCP(dst string) (net.Conn, error) {
	ap := netip.MustParseAddrPort(dst)
	fa, proto := fullAddr(ap)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return gonet.DialContextTCP(ctx, h.client, fa, proto)
}

// lookup queries Warden's DNS (the gateway) or, with server set, another
// address.
func (h *harness) lookup(name string, qtype uint16, useTCP bool, server string) (*dns.Msg, error) {
	if server == "" {
		server = "10.254.0.1:53"
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	ap := netip.MustParseAddrPort(server)
	fa, proto := fullAddr(ap)
	var c net.Conn
	var err error
	if useTCP {
		c, err = h.dialTCP(server)
	} else {
		c, err = gonet.DialUDP(h.client, nil, &fa, proto)
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	co := &dns.Conn{Conn: c}
	if !useTCP {
		co = &dns.Conn{Conn: udpOnly{c}}
	}
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if err := co.WriteMsg(q); err != nil {
		return nil, err
	}
	return co.ReadMsg()
}

// udpOnly makes dns.Conn treat a connected gonet UDP conn as a datagram socket.
type udpOnly struct{ net.Conn }

func (u udpOnly) ReadFrom(b []byte) (int, net.Addr, error) {
	n, err := u.Read(b)
	return n, u.RemoteAddr(), err
}
func (u udpOnly) WriteTo(b []byte, _ net.Addr) (int, error) { return u.Write(b) }

func answers(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch r := rr.(type) {
		case *dns.A:
			out = append(out, r.A.String())
		case *dns.AAAA:
			out = append(out, r.AAAA.String())
		case *dns.CNAME:
			out = append(out, "CNAME "+r.Target)
		}
	}
	return out
}

// httpGet sends a GET with the given Host over c and returns the response
// body, or an error when the connection is refused or cut.
func httpGet(c net.Conn, host string) (string, error) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return string(b), err
	}
	if !strings.HasPrefix(string(b), "HTTP/1.1 200") {
		return string(b), fmt.Errorf("no HTTP answer: %q", b)
	}
	return string(b[strings.Index(string(b), "\r\n\r\n")+4:]), nil
}

func (h *harness) get(dst, host string) (string, error) {
	c, err := h.dialTCP(dst)
	if err != nil {
		return "", err
	}
	return httpGet(c, host)
}

func (h *harness) tlsGet(dst, sni string) (string, error) {
	c, err := h.dialTCP(dst)
	if err != nil {
		return "", err
	}
	tc := tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
	return httpGet(tc, sni)
}

func (h *harness) deniedLog() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.denied...)
}

func mustAllow(t *testing.T, what string, body string, err error, want string) {
	t.Helper()
	if err != nil || !strings.Contains(body, want) {
		t.Fatalf("%s: got %q, %v; want a body with %q", what, body, err, want)
	}
}

func mustDeny(t *testing.T, what string, body string, err error) {
	t.Helper()
	if err == nil || strings.Contains(body, "hello") {
		t.Fatalf("%s: got %q, %v; want the connection refused", what, body, err)
	}
}

func (h *harness) noDials(what string) {
	h.t.Helper()
	if d := h.fd.take(); len(d) > 0 {
		h.t.Fatalf("%s: wardend dialled %v", what, d)
	}
}

var allowPolicy = Policy{Mode: ModeAllowlist, Allow: []Rule{
	{Host: "allowed.test"},
	{Host: "*.wild.test"},
	{Host: "banner.allowed.test", Ports: []int{443}},
	{Host: "www.allowed.test"},
	{Host: "partly.test"},
	{Host: "rebind.test"},
	{Host: "mapped.test"},
}}

func TestStackAllowlist(t *testing.T) {
	h := newHarness(t, allowPolicy, nil)

	// DNS: allowed names resolve, others are NXDOMAIN without reaching
	// the upstream, rebinding answers are dropped.
	for _, c := range []struct {
		name  string
		qtype uint16
		tcp   bool
		rcode int
		want  []string
	}{
		{"allowed.test", dns.TypeA, false, dns.RcodeSuccess, []string{"198.51.100.10"}},
		{"allowed.test", dns.TypeAAAA, true, dns.RcodeSuccess, []string{"2001:db8:1::10"}},
		{"ALLOWED.test.", dns.TypeA, true, dns.RcodeSuccess, []string{"198.51.100.10"}},
		{"www.allowed.test", dns.TypeA, false, dns.RcodeSuccess, []string{"CNAME allowed.test.", "198.51.100.10"}},
		{"sub.wild.test", dns.TypeA, false, dns.RcodeSuccess, []string{"198.51.100.10"}},
		{"deep.sub.wild.test", dns.TypeA, false, dns.RcodeSuccess, []string{"198.51.100.10"}},
		{"wild.test", dns.TypeA, false, dns.RcodeNameError, nil},
		{"other.test", dns.TypeA, false, dns.RcodeNameError, nil},
		{"other.test", dns.TypeA, true, dns.RcodeNameError, nil},
		{"rebind.test", dns.TypeA, false, dns.RcodeSuccess, nil},
		{"mapped.test", dns.TypeAAAA, false, dns.RcodeSuccess, nil},
		{"partly.test", dns.TypeA, false, dns.RcodeSuccess, []string{"198.51.100.10"}},
		{"allowed.test", dns.TypeTXT, false, dns.RcodeSuccess, nil},
		{"2130706433", dns.TypeA, false, dns.RcodeNameError, nil},
	} {
		m, err := h.lookup(c.name, c.qtype, c.tcp, "")
		if err != nil {
			t.Fatalf("lookup %s %s: %v", c.name, dns.TypeToString[c.qtype], err)
		}
		if got := answers(m); m.Rcode != c.rcode || strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("lookup %s %s (tcp %v) = %s %v, want %s %v", c.name, dns.TypeToString[c.qtype], c.tcp,
				dns.RcodeToString[m.Rcode], got, dns.RcodeToString[c.rcode], c.want)
		}
	}
	st := h.l.Stats()
	if st.DNSDenied != 4 || st.DNSFiltered != 5 {
		t.Errorf("dns stats: denied %d filtered %d, want 4 and 5", st.DNSDenied, st.DNSFiltered)
	}

	// Allowed by name: HTTP and TLS.
	body, err := h.get("198.51.100.10:80", "allowed.test")
	mustAllow(t, "http allowed.test", body, err, "hello allowed.test")
	body, err = h.tlsGet("198.51.100.10:443", "allowed.test")
	mustAllow(t, "https allowed.test", body, err, "hello allowed.test")
	body, err = h.get("[2001:db8:1::10]:80", "allowed.test:80")
	mustAllow(t, "http allowed.test over IPv6", body, err, "hello allowed.test")
	body, err = h.get("198.51.100.10:80", "sub.wild.test")
	mustAllow(t, "http wildcard", body, err, "hello sub.wild.test")
	body, err = h.get("198.51.100.10:80", "198.51.100.10")
	mustAllow(t, "http with the address as Host", body, err, "hello 198.51.100.10")
	h.fd.take()

	// Not resolved through Warden's DNS (other.test is not allowed).
	_, err = h.dialTCP("198.51.100.11:80")
	if err == nil {
		t.Fatal("connected to other.test's address")
	}
	h.noDials("other.test")

	// Domain fronting: an allowed address, a name that is not allowed.
	body, err = h.get("198.51.100.10:80", "other.test")
	mustDeny(t, "http Host other.test on allowed address", body, err)
	body, err = h.tlsGet("198.51.100.10:443", "other.test")
	mustDeny(t, "tls SNI other.test on allowed address", body, err)
	body, err = h.get("198.51.100.10:80", "2130706433")
	mustDeny(t, "http Host 2130706433 on allowed address", body, err)
	body, err = h.get("198.51.100.10:80", "0x7f.1")
	mustDeny(t, "http Host 0x7f.1 on allowed address", body, err)
	body, err = h.get("198.51.100.10:80", "[::ffff:127.0.0.1]")
	mustDeny(t, "http Host [::ffff:127.0.0.1] on allowed address", body, err)
	body, err = h.get("198.51.100.10:80", "wild.test")
	mustDeny(t, "http Host wild.test (apex of a wildcard) on allowed address", body, err)
	h.noDials("domain fronting")
	// An absolute-form target naming another host.
	c, err := h.dialTCP("198.51.100.10:80")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET http://other.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(c); err == nil || strings.Contains(string(b), "hello") {
		t.Fatalf("absolute-form fronting: %q %v", b, err)
	}
	c.Close()
	h.noDials("absolute-form fronting")

	// Port not allowed for the name.
	if _, err := h.dialTCP("198.51.100.10:8080"); err == nil {
		t.Fatal("connected to allowed.test:8080")
	}
	h.noDials("port 8080")

	// A server-first protocol on 443: the client is silent, wardend dials
	// after firstDataWait and the banner comes through; the client's first
	// bytes are still checked.
	if _, err := h.lookup("banner.allowed.test", dns.TypeA, false, ""); err != nil {
		t.Fatal(err)
	}
	c, err = h.dialTCP("198.51.100.12:443")
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || line != "BANNER\n" {
		t.Fatalf("server-first: %q %v", line, err)
	}
	fmt.Fprintf(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("server-first echo: %q %v", line, err)
	}
	c.Close()
	c, err = h.dialTCP("198.51.100.12:443")
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br = bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || line != "BANNER\n" {
		t.Fatalf("server-first: %q %v", line, err)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
	if b, err := io.ReadAll(br); err == nil {
		t.Fatalf("server-first then fronting: connection not cut (%q)", b)
	}
	c.Close()
	h.fd.take()

	// Denied addresses, whatever the policy says and however they were
	// reached (the rebinding answers never became dialable either).
	for _, dst := range []string{"169.254.169.254:80", "10.0.0.5:80", "192.168.1.1:80", "100.64.0.1:80",
		"[fe80::1]:80", "[fd00::1]:80", "[64:ff9b::7f00:1]:80", "[::ffff:10.0.0.5]:80", "10.254.0.1:80", "[fd7a:7761:7264::1]:80",
		"198.18.0.1:80", "224.0.0.1:80", "0.1.2.3:80"} {
		if _, err := h.dialTCP(dst); err == nil {
			t.Errorf("connected to %s", dst)
		}
	}
	h.noDials("private destinations")

	// DNS anywhere but Warden's resolver gets nothing.
	if m, err := h.lookup("allowed.test", dns.TypeA, false, "198.51.100.53:53"); err == nil {
		t.Fatalf("raw UDP DNS answered: %v", m)
	}
	if m, err := h.lookup("allowed.test", dns.TypeA, true, "198.51.100.53:53"); err == nil {
		t.Fatalf("raw TCP DNS answered: %v", m)
	}
	if _, err := h.dialTCP("198.51.100.10:853"); err == nil {
		t.Fatal("DoT to an allowed address connected")
	}
	h.noDials("raw DNS")

	// UDP needs a cidr rule.
	if got := h.udpEcho("203.0.113.20:7"); got != "" {
		t.Fatalf("udp without a rule: %q", got)
	}
	h.noDials("udp")

	st = h.l.Stats()
	if st.TCPConnections == 0 || st.BytesIn == 0 || st.BytesOut == 0 || st.Denied == 0 || len(st.RecentDenials) == 0 {
		t.Errorf("stats: %+v", st)
	}
	if len(h.deniedLog()) == 0 {
		t.Error("OnDeny never called")
	}
	t.Logf("stats: %+v", st)
}

func (h *harness) udpEcho(dst string) string {
	ap := netip.MustParseAddrPort(dst)
	fa, proto := fullAddr(ap)
	c, err := gonet.DialUDP(h.client, nil, &fa, proto)
	if err != nil {
		h.t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	c.Write([]byte("ping"))
	buf := make([]byte, 100)
	n, err := c.Read(buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

func TestStackOpenAndLivePolicy(t *testing.T) {
	h := newHarness(t, Policy{Mode: ModeOpen}, nil)
	m, err := h.lookup("other.test", dns.TypeA, false, "")
	if err != nil || strings.Join(answers(m), ",") != "198.51.100.11" {
		t.Fatalf("open: lookup other.test = %v %v", m, err)
	}
	m, err = h.lookup("rebind.test", dns.TypeA, false, "")
	if err != nil || len(answers(m)) != 0 {
		t.Fatalf("open: lookup rebind.test = %v %v", answers(m), err)
	}
	// Any public address, by name or not, and no name check.
	body, err := h.get("198.51.100.11:80", "other.test")
	mustAllow(t, "open: http other.test", body, err, "hello other.test")
	body, err = h.get("198.51.100.10:80", "anything.example")
	mustAllow(t, "open: http any Host", body, err, "hello anything.example")
	if got := h.udpEcho("203.0.113.20:7"); got != "echo:ping" {
		t.Fatalf("open: udp echo = %q", got)
	}
	h.fd.take()
	for _, dst := range []string{"169.254.169.254:80", "10.0.0.5:80", "[fe80::1]:80", "[::ffff:10.0.0.5]:80", "[64:ff9b::a00:5]:80"} {
		if _, err := h.dialTCP(dst); err == nil {
			t.Errorf("open: connected to %s", dst)
		}
	}
	h.noDials("open: private destinations")

	// Live change: a connection opened under open continues; new ones
	// follow the new policy at once.
	keep, err := h.dialTCP("198.51.100.11:80")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.l.SetPolicy(Policy{Mode: ModeAllowlist, Allow: []Rule{{Host: "allowed.test"}}}); err != nil {
		t.Fatal(err)
	}
	if got := h.l.Policy(); got.Mode != ModeAllowlist || len(got.Allow) != 1 || len(got.Allow[0].Ports) != 2 {
		t.Fatalf("Policy() = %+v", got)
	}
	body, err = httpGet(keep, "other.test")
	mustAllow(t, "existing connection after the change", body, err, "hello other.test")
	if _, err := h.dialTCP("198.51.100.11:80"); err == nil {
		t.Fatal("new connection to other.test after switching to allowlist")
	}
	if m, _ := h.lookup("other.test", dns.TypeA, false, ""); m == nil || m.Rcode != dns.RcodeNameError {
		t.Fatalf("lookup other.test after switching: %v", m)
	}
	// The address other.test resolved to under open is still in the map,
	// but no rule names it any more.
	h.fd.take()
	if err := h.l.SetPolicy(Policy{Mode: ModeAllowlist, Allow: []Rule{{Host: "allowed.test"}, {Host: "other.test"}}}); err != nil {
		t.Fatal(err)
	}
	body, err = h.get("198.51.100.11:80", "other.test")
	mustAllow(t, "other.test after adding it", body, err, "hello other.test")
	if err := h.l.SetPolicy(Policy{Mode: ModeAllowlist, Allow: []Rule{{CIDR: "203.0.113.0/24", Ports: []int{7}}}}); err != nil {
		t.Fatal(err)
	}
	if got := h.udpEcho("203.0.113.20:7"); got != "echo:ping" {
		t.Fatalf("allowlist cidr: udp echo = %q", got)
	}
	if _, err := h.dialTCP("198.51.100.11:80"); err == nil {
		t.Fatal("other.test after removing it")
	}
	if err := h.l.SetPolicy(Policy{Mode: ModeNone}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.dialTCP("198.51.100.10:80"); err == nil {
		t.Fatal("connected in mode none")
	}
	if m, err := h.lookup("allowed.test", dns.TypeA, false, ""); err != nil || m.Rcode != dns.RcodeNameError {
		t.Fatalf("lookup in mode none: %v %v", m, err)
	}
	if err := h.l.SetPolicy(Policy{Mode: "bogus"}); err == nil {
		t.Fatal("SetPolicy accepted a bad policy")
	}
}

func TestStackMetrics(t *testing.T) {
	h := newHarness(t, Policy{Mode: ModeOpen}, nil)
	body, err := h.get("198.51.100.10:80", "x.test")
	mustAllow(t, "open", body, err, "hello")
	h.dialTCP("10.0.0.5:80")
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(h.m); err != nil {
		t.Fatal(err)
	}
	n, err := testutil.GatherAndCount(reg)
	if err != nil || n != 10 {
		t.Fatalf("gathered %d series, %v; want 10", n, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP warden_network_denied_total Flows and lookups of a sandbox refused by its network policy.
# TYPE warden_network_denied_total counter
warden_network_denied_total{sandbox="sb-test"} 1
`), "warden_network_denied_total"); err != nil {
		t.Fatal(err)
	}
}

// TestStackRawPackets injects hand-made SYNs and datagrams for destinations
// a kernel would not send over the device (loopback, IPv4-mapped IPv6,
// spoofed sources): nothing is dialled.
func TestStackRawPackets(t *testing.T) {
	h := newHarness(t, Policy{Mode: ModeOpen}, nil)
	for _, c := range []struct{ src, dst string }{
		{"10.254.0.2:40000", "127.0.0.1:80"},
		{"[fd7a:7761:7264::2]:40000", "[::1]:80"},
		{"[fd7a:7761:7264::2]:40000", "[::ffff:127.0.0.1]:80"},
		{"[fd7a:7761:7264::2]:40000", "[::ffff:10.0.0.5]:80"},
		{"[fd7a:7761:7264::2]:40000", "[::127.0.0.1]:80"},
		{"[fd7a:7761:7264::2]:40000", "[64:ff9b::a9fe:a9fe]:80"},
		{"[fd7a:7761:7264::2]:40000", "[2002:7f00:1::1]:80"},
		{"10.254.0.3:40000", "198.51.100.10:80"},   // spoofed source
		{"192.0.2.99:40000", "198.51.100.10:80"},   // spoofed source
		{"10.254.0.2:40000", "255.255.255.255:80"}, // broadcast
	} {
		src, dst := netip.MustParseAddrPort(c.src), netip.MustParseAddrPort(c.dst)
		injectSYN(h.srvEP, src, dst)
		injectUDP(h.srvEP, src, dst)
	}
	time.Sleep(200 * time.Millisecond)
	h.noDials("raw packets")
	// Sanity: the same path with a legitimate packet does dial.
	injectSYN(h.srvEP, netip.MustParseAddrPort("10.254.0.2:40001"), netip.MustParseAddrPort("198.51.100.10:80"))
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		h.fd.mu.Lock()
		n := len(h.fd.dials)
		h.fd.mu.Unlock()
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("an injected legitimate SYN was not proxied")
}

func injectSYN(ep *channel.Endpoint, src, dst netip.AddrPort) {
	tcpHdr := make([]byte, header.TCPMinimumSize)
	header.TCP(tcpHdr).Encode(&header.TCPFields{SrcPort: src.Port(), DstPort: dst.Port(), SeqNum: 1000,
		DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagSyn, WindowSize: 65535})
	injectL4(ep, src, dst, header.TCPProtocolNumber, tcpHdr, func(b []byte, sum uint16) {
		header.TCP(b).SetChecksum(^header.TCP(b).CalculateChecksum(sum))
	})
}

func injectUDP(ep *channel.Endpoint, src, dst netip.AddrPort) {
	u := make([]byte, header.UDPMinimumSize+4)
	header.UDP(u).Encode(&header.UDPFields{SrcPort: src.Port(), DstPort: dst.Port(), Length: uint16(len(u))})
	copy(u[header.UDPMinimumSize:], "ping")
	injectL4(ep, src, dst, header.UDPProtocolNumber, u, func(b []byte, sum uint16) {
		xsum := checksum.Checksum(b[header.UDPMinimumSize:], sum)
		header.UDP(b).SetChecksum(^header.UDP(b).CalculateChecksum(xsum))
	})
}

func injectL4(ep *channel.Endpoint, src, dst netip.AddrPort, proto tcpip.TransportProtocolNumber, l4 []byte, setSum func([]byte, uint16)) {
	s, d := tcpip.AddrFromSlice(src.Addr().AsSlice()), tcpip.AddrFromSlice(dst.Addr().AsSlice())
	var pkt []byte
	var netProto tcpip.NetworkProtocolNumber
	if src.Addr().Is4() {
		pkt = make([]byte, header.IPv4MinimumSize+len(l4))
		ip := header.IPv4(pkt)
		ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(pkt)), TTL: 64, Protocol: uint8(proto), SrcAddr: s, DstAddr: d})
		ip.SetChecksum(^ip.CalculateChecksum())
		netProto = ipv4.ProtocolNumber
		copy(pkt[header.IPv4MinimumSize:], l4)
		setSum(pkt[header.IPv4MinimumSize:], header.PseudoHeaderChecksum(proto, s, d, uint16(len(l4))))
	} else {
		pkt = make([]byte, header.IPv6MinimumSize+len(l4))
		header.IPv6(pkt).Encode(&header.IPv6Fields{PayloadLength: uint16(len(l4)), TransportProtocol: proto, HopLimit: 64, SrcAddr: s, DstAddr: d})
		netProto = ipv6.ProtocolNumber
		copy(pkt[header.IPv6MinimumSize:], l4)
		setSum(pkt[header.IPv6MinimumSize:], header.PseudoHeaderChecksum(proto, s, d, uint16(len(l4))))
	}
	pb := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(pkt)})
	ep.InjectInbound(netProto, pb)
	pb.DecRef()
}

// newTestWire is a link endpoint with nothing on the other side.
func newTestWire() (stack.LinkEndpoint, func()) {
	ep := channel.New(64, DefaultMTU, "")
	return ep, ep.Close
}

// Bounds on what an idle link may cost in wardend: generous (docs/networking.md
// gives the measured figures, about 180 KiB and 8 goroutines), but a link that
// grows a buffer pool or a goroutine per flow slot fails.
const (
	maxIdleLinkHeap       = 1 << 20
	maxIdleLinkGoroutines = 16
)

// TestStackFootprint checks what an idle link costs in wardend, and logs it.
func TestStackFootprint(t *testing.T) {
	m, err := New(Config{DNSUpstream: "127.0.0.1:53"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	var links []*Link
	for i := range n {
		ep, _ := newTestWire()
		l, err := m.attachEndpoint(fmt.Sprintf("fp-%d", i), ep, Policy{Mode: ModeOpen})
		if err != nil {
			t.Fatal(err)
		}
		links = append(links, l)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	g1 := runtime.NumGoroutine()
	heap := (int64(after.HeapInuse) - int64(before.HeapInuse)) / n
	goroutines := (g1 - g0) / n
	t.Logf("idle link: %d KiB of heap, %d goroutines (without the TUN reader, which adds 2)", heap/1024, goroutines)
	if heap > maxIdleLinkHeap {
		t.Errorf("an idle link holds %d KiB of heap, over the bound of %d KiB", heap/1024, maxIdleLinkHeap/1024)
	}
	if goroutines < 1 || goroutines > maxIdleLinkGoroutines {
		t.Errorf("an idle link runs %d goroutines, want 1 to %d", goroutines, maxIdleLinkGoroutines)
	}
	for _, l := range links {
		l.Close()
	}
	// Closed links give their goroutines back.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > g0+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > g0+2 {
		t.Errorf("%d goroutines after closing %d links, %d before: closed links leak goroutines", g, n, g0)
	}
}

// attachEndpoint is Attach for tests: the stack runs on ep, with no device
// and no sandbox process.
func (m *Manager) attachEndpoint(sandboxID string, ep stack.LinkEndpoint, p Policy) (*Link, error) {
	c, err := compile(p)
	if err != nil {
		return nil, err
	}
	l, err := m.newLink(sandboxID, 0, c)
	if err != nil {
		return nil, err
	}
	ns, err := newNetstack(l, ep)
	if err != nil {
		l.Close()
		return nil, err
	}
	l.ns = ns
	return l, nil
}

func TestStackTLSIntercept(t *testing.T) {
	type handed struct {
		target netip.AddrPort
		names  []string
		hello  []byte
	}
	got := make(chan handed, 1)
	h := newHarness(t, allowPolicy, func(c *Config) {
		c.TLSIntercept = func(sb, name string) bool { return sb == "sb-test" && name == "allowed.test" }
		c.TLSHandoff = func(ctx context.Context, sb string, client net.Conn, target netip.AddrPort, names []string) error {
			buf := make([]byte, 64<<10)
			n, _ := client.Read(buf)
			client.Write([]byte("INTERCEPTED\n"))
			client.Close()
			got <- handed{target, names, buf[:n]}
			return nil
		}
	})
	if _, err := h.lookup("allowed.test", dns.TypeA, false, ""); err != nil {
		t.Fatal(err)
	}
	c, err := h.dialTCP("198.51.100.10:443")
	if err != nil {
		t.Fatal(err)
	}
	hello := clientHello(t, "ALLOWED.test")
	c.Write(hello)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "INTERCEPTED\n" {
		t.Fatalf("intercepted connection: %q %v", line, err)
	}
	c.Close()
	hd := <-got
	if hd.target.String() != "198.51.100.10:443" || strings.Join(hd.names, ",") != "allowed.test" || !bytes.Equal(hd.hello, hello) {
		t.Fatalf("handoff got target %v names %v, hello %d bytes (want %d)", hd.target, hd.names, len(hd.hello), len(hello))
	}
	h.noDials("intercepted")
	// Another allowed name on the same address is spliced as usual, and
	// fronting is still refused before any interception.
	body, err := h.tlsGet("198.51.100.10:443", "www.allowed.test")
	mustAllow(t, "not intercepted", body, err, "hello www.allowed.test")
	body, err = h.tlsGet("198.51.100.10:443", "other.test")
	mustDeny(t, "fronting with interception on", body, err)
	if st := h.l.Stats(); st.BytesOut < uint64(len(hello)) || st.BytesIn < 12 {
		t.Errorf("handoff bytes not counted: %+v", st)
	}
}
