package network

import (
	"net"
	"net/netip"

	"github.com/miekg/dns"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
)

// LocalName is the name under which a sandbox reaches Warden itself when
// Config.Local is set: Warden's DNS answers it with the gateway addresses
// (whatever the policy), and connections to the gateway on LocalPort are
// handed to Config.Local in wardend. Nothing is dialled: the route never
// leaves the sandbox's own stack, so it works in allowlist mode with no
// rules (deny everything else).
const LocalName = "warden.internal"

// LocalPort is the gateway port Config.Local serves (plain HTTP: the
// bytes never leave wardend's process).
const LocalPort = 80

// localTTL is the TTL of LocalName's answers.
const localTTL = 300

// answerLocal answers a question for LocalName; false for other names or
// when the Manager serves nothing locally.
func (l *Link) answerLocal(resp *dns.Msg, name string, qtype uint16) bool {
	if l.m.cfg.Local == nil || name != LocalName {
		return false
	}
	hdr := dns.RR_Header{Name: dns.Fqdn(name), Class: dns.ClassINET, Ttl: localTTL}
	switch qtype {
	case dns.TypeA:
		hdr.Rrtype = dns.TypeA
		resp.Answer = append(resp.Answer, &dns.A{Hdr: hdr, A: net.IP(Gateway4.AsSlice())})
	case dns.TypeAAAA:
		hdr.Rrtype = dns.TypeAAAA
		resp.Answer = append(resp.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.IP(Gateway6.AsSlice())})
	}
	return true
}

// startLocal listens on the gateway addresses' LocalPort when Config.Local
// is set; each connection from the sandbox is handed to it, counted as a
// flow and closed with the stack.
func (n *netstack) startLocal() error {
	if n.l.m.cfg.Local == nil {
		return nil
	}
	for _, gw := range []struct {
		addr  netip.Addr
		proto tcpip.NetworkProtocolNumber
	}{{Gateway4, ipv4.ProtocolNumber}, {Gateway6, ipv6.ProtocolNumber}} {
		fa := tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFromSlice(gw.addr.AsSlice()), Port: LocalPort}
		ln, err := gonet.ListenTCP(n.s, fa, gw.proto)
		if err != nil {
			return err
		}
		n.track(ln)
		n.goTracked(func() { n.serveLocal(ln) })
	}
	return nil
}

func (n *netstack) serveLocal(ln *gonet.TCPListener) {
	local := n.l.m.cfg.Local
	n.serveTCP(ln, func(c net.Conn) { local(n.l.id, c) })
}
