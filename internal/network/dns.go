package network

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
)

// Warden's DNS: the sandbox's resolver is the gateway address of its link
// (10.254.0.1 and fd7a:7761:7264::1, UDP and TCP port 53), served by the
// sandbox's own stack. It answers A and AAAA questions (with their CNAME
// chains) for the names the policy allows by forwarding them upstream,
// drops answer records that point at addresses no sandbox may reach, and
// remembers which addresses it handed out for which name: in allowlist mode
// those are the addresses TCP may then connect to.

const (
	dnsTimeout      = 4 * time.Second // per upstream attempt
	dnsMaxInFlight  = 32              // concurrent UDP queries per sandbox
	dnsTCPIdle      = 10 * time.Second
	dnsTCPMaxPerCon = 256
	dnsUpstreamSize = 1232 // EDNS buffer size advertised upstream
)

// DNS decisions passed to OnQuery.
const (
	QueryAllowed = "allowed"
	QueryDenied  = "denied"
	QueryNoData  = "nodata"  // allowed name, a type other than A/AAAA: empty answer
	QueryRefused = "refused" // malformed or unsupported query
	QueryError   = "error"   // the upstream failed
)

func (n *netstack) startDNS() error {
	for _, gw := range []struct {
		addr  netip.Addr
		proto tcpip.NetworkProtocolNumber
	}{{Gateway4, ipv4.ProtocolNumber}, {Gateway6, ipv6.ProtocolNumber}} {
		fa := tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFromSlice(gw.addr.AsSlice()), Port: 53}
		uc, err := gonet.DialUDP(n.s, &fa, nil, gw.proto)
		if err != nil {
			return fmt.Errorf("udp %s: %w", gw.addr, err)
		}
		ln, err := gonet.ListenTCP(n.s, fa, gw.proto)
		if err != nil {
			uc.Close()
			return fmt.Errorf("tcp %s: %w", gw.addr, err)
		}
		n.track(uc, ln)
		n.goTracked(func() { n.serveDNSUDP(uc) })
		n.goTracked(func() { n.serveDNSTCP(ln) })
	}
	return nil
}

func addrOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.UDPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(a.IP)
		return ip
	}
	return netip.Addr{}
}

func (n *netstack) serveDNSUDP(uc *gonet.UDPConn) {
	sem := make(chan struct{}, dnsMaxInFlight)
	buf := make([]byte, 64<<10)
	for {
		k, from, err := uc.ReadFrom(buf)
		if err != nil {
			return
		}
		if !fromSandbox(addrOf(from)) {
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			continue // overloaded: the client retries
		}
		q := append([]byte(nil), buf[:k]...)
		if !n.goTracked(func() {
			defer func() { <-sem }()
			if resp := n.l.answerDNS(n.ctx, q, true); resp != nil {
				uc.WriteTo(resp, from)
			}
		}) {
			return
		}
	}
}

func (n *netstack) serveDNSTCP(ln *gonet.TCPListener) { n.serveTCP(ln, n.serveDNSConn) }

// serveTCP accepts the sandbox's connections on ln and serves each with
// serve on a tracked goroutine, within the link's connection limit, until
// ln or the stack closes.
func (n *netstack) serveTCP(ln *gonet.TCPListener, serve func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if !fromSandbox(addrOf(c.RemoteAddr())) || !n.l.acquire() {
			c.Close()
			continue
		}
		if !n.track(c) || !n.goTracked(func() {
			defer n.l.release()
			defer n.untrack(c)
			defer c.Close()
			serve(c)
		}) {
			n.l.release()
			c.Close()
			return
		}
	}
}

func (n *netstack) serveDNSConn(c net.Conn) {
	var lb [2]byte
	for i := 0; i < dnsTCPMaxPerCon; i++ {
		c.SetReadDeadline(time.Now().Add(dnsTCPIdle))
		if _, err := io.ReadFull(c, lb[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(lb[:]))
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		resp := n.l.answerDNS(n.ctx, q, false)
		if resp == nil {
			return
		}
		c.SetWriteDeadline(time.Now().Add(dnsTCPIdle))
		if _, err := c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(resp)))); err != nil {
			return
		}
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}

// answerDNS answers one query from the sandbox; nil drops it.
func (l *Link) answerDNS(ctx context.Context, raw []byte, udp bool) []byte {
	var q dns.Msg
	if err := q.Unpack(raw); err != nil || q.Response {
		return nil
	}
	l.stats.dnsQueries.Add(1)
	resp := new(dns.Msg)
	resp.SetReply(&q)
	resp.RecursionAvailable = true
	resp.Authoritative = false
	maxSize := dns.MinMsgSize
	if opt := q.IsEdns0(); opt != nil {
		maxSize = max(int(opt.UDPSize()), dns.MinMsgSize)
		resp.SetEdns0(dnsUpstreamSize, false)
	}
	finish := func(decision, name, qtype string) []byte {
		if l.m.cfg.OnQuery != nil {
			l.m.cfg.OnQuery(l.id, name, qtype, decision)
		}
		if udp {
			resp.Truncate(maxSize)
		}
		b, err := resp.Pack()
		if err != nil {
			return nil
		}
		return b
	}
	if q.Opcode != dns.OpcodeQuery {
		resp.Rcode = dns.RcodeNotImplemented
		return finish(QueryRefused, "", dns.OpcodeToString[q.Opcode])
	}
	if len(q.Question) != 1 {
		resp.Rcode = dns.RcodeFormatError
		return finish(QueryRefused, "", "")
	}
	qq := q.Question[0]
	qtype := dns.TypeToString[qq.Qtype]
	if qtype == "" {
		qtype = fmt.Sprintf("TYPE%d", qq.Qtype)
	}
	if qq.Qclass != dns.ClassINET {
		resp.Rcode = dns.RcodeRefused
		return finish(QueryRefused, qq.Name, qtype)
	}
	pol := l.pol.Load()
	name, err := canonicalName(qq.Name)
	if err == nil && l.answerLocal(resp, name, qq.Qtype) {
		return finish(QueryAllowed, name, qtype)
	}
	if err != nil || !pol.nameAllowed(name, 0) {
		shown := name
		if err != nil {
			shown = strings.ToLower(qq.Name)
		}
		l.stats.dnsDenied.Add(1)
		l.denyTarget("dns", shown+" "+qtype, "name not allowed by the network policy")
		resp.Rcode = dns.RcodeNameError
		return finish(QueryDenied, shown, qtype)
	}
	if qq.Qtype != dns.TypeA && qq.Qtype != dns.TypeAAAA {
		return finish(QueryNoData, name, qtype)
	}
	up, err := l.m.exchange(ctx, name, qq.Qtype)
	if err != nil {
		resp.Rcode = dns.RcodeServerFailure
		return finish(QueryError, name, qtype)
	}
	switch up.Rcode {
	case dns.RcodeSuccess, dns.RcodeNameError:
		resp.Rcode = up.Rcode
	default:
		resp.Rcode = dns.RcodeServerFailure
	}
	resp.Answer = l.filterAnswers(name, qq.Qtype, up.Answer)
	return finish(QueryAllowed, name, qtype)
}

// filterAnswers keeps the CNAME chain from name and the A/AAAA records at
// its end whose addresses may be dialled, and records those addresses.
func (l *Link) filterAnswers(name string, qtype uint16, rrs []dns.RR) []dns.RR {
	chain := map[string]bool{dns.Fqdn(name): true}
	for i := 0; i < 16; i++ { // follow CNAMEs in any order
		grew := false
		for _, rr := range rrs {
			if c, ok := rr.(*dns.CNAME); ok && chain[strings.ToLower(c.Hdr.Name)] && !chain[strings.ToLower(c.Target)] {
				chain[strings.ToLower(c.Target)] = true
				grew = true
			}
		}
		if !grew {
			break
		}
	}
	now := time.Now()
	var out []dns.RR
	for _, rr := range rrs {
		h := rr.Header()
		if !chain[strings.ToLower(h.Name)] {
			continue
		}
		var ip netip.Addr
		switch r := rr.(type) {
		case *dns.CNAME:
			h.Ttl = min(h.Ttl, maxAnswerTTL)
			out = append(out, rr)
			continue
		case *dns.A:
			if qtype != dns.TypeA {
				continue
			}
			ip, _ = netip.AddrFromSlice(r.A.To4())
		case *dns.AAAA:
			if qtype != dns.TypeAAAA {
				continue
			}
			ip, _ = netip.AddrFromSlice(r.AAAA.To16())
		default:
			continue
		}
		if reason := l.m.addrs.check(ip); reason != "" {
			l.stats.dnsFiltered.Add(1)
			l.denyTarget("dns", name+" -> "+ip.String(), "answer dropped (DNS rebinding): "+reason)
			continue
		}
		ttl := time.Duration(h.Ttl) * time.Second
		h.Ttl = min(h.Ttl, maxAnswerTTL)
		l.names.add(ip, name, ttl, now)
		out = append(out, rr)
	}
	return out
}

// exchange asks the upstream resolvers for name/qtype, over UDP and, when the
// answer is truncated, TCP.
func (m *Manager) exchange(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	if len(m.upstreams) == 0 {
		return nil, errors.New("no DNS upstream configured")
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	q.RecursionDesired = true
	q.SetEdns0(dnsUpstreamSize, false)
	var last error
	for _, up := range m.upstreams {
		var idb [2]byte
		rand.Read(idb[:])
		q.Id = binary.BigEndian.Uint16(idb[:])
		r, err := m.exchangeOne(ctx, "udp", up, q)
		if err == nil && r.Truncated {
			r, err = m.exchangeOne(ctx, "tcp", up, q)
		}
		if err == nil {
			return r, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

func (m *Manager) exchangeOne(ctx context.Context, network, addr string, q *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, dnsTimeout)
	defer cancel()
	c, err := m.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	wire, err := q.Pack()
	if err != nil {
		return nil, err
	}
	if network == "tcp" {
		wire = append(binary.BigEndian.AppendUint16(nil, uint16(len(wire))), wire...)
	}
	if _, err := c.Write(wire); err != nil {
		return nil, err
	}
	for {
		var buf []byte
		if network == "tcp" {
			var lb [2]byte
			if _, err := io.ReadFull(c, lb[:]); err != nil {
				return nil, err
			}
			buf = make([]byte, binary.BigEndian.Uint16(lb[:]))
			if _, err := io.ReadFull(c, buf); err != nil {
				return nil, err
			}
		} else {
			buf = make([]byte, 64<<10)
			k, err := c.Read(buf)
			if err != nil {
				return nil, err
			}
			buf = buf[:k]
		}
		r := new(dns.Msg)
		if err := r.Unpack(buf); err != nil {
			if network == "tcp" {
				return nil, err
			}
			continue // junk on a UDP socket: keep waiting for the answer
		}
		if r.Id != q.Id || !r.Response || len(r.Question) != 1 ||
			!strings.EqualFold(r.Question[0].Name, q.Question[0].Name) || r.Question[0].Qtype != q.Question[0].Qtype {
			if network == "tcp" {
				return nil, errors.New("mismatched DNS answer")
			}
			continue
		}
		return r, nil
	}
}
