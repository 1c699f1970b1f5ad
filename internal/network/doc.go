// Package network is the egress networking of native sandboxes: a
// per-sandbox network whose enforcement lives entirely in wardend, as a
// userspace TCP/IP stack (gVisor's pkg/tcpip, the way tailscale's userspace
// networking uses it). docs/networking.md is the operator's view; this is
// the design.
//
// # Shape
//
// A sandbox's network namespace gets one TUN device, wd0 (MTU 65520 by
// default), with 10.254.0.2/30 and fd7a:7761:7264::2/126 and default routes
// via 10.254.0.1 and fd7a:7761:7264::1. Attach creates it from wardend:
// on a locked OS thread of a goroutine of its own it enters the sandbox's
// netns (setns on a pidfd of the sandbox's PID 1, so the pid cannot be
// reused under it), opens /dev/net/tun and a NETLINK_ROUTE socket, and
// returns to its own namespace (if that failed, the thread would stay
// locked and die with the goroutine); TUNSETIFF (IFF_TUN|IFF_NO_PI) and the
// rtnetlink configuration (MTU and up, addresses without DAD, routes) then
// run from any thread on those fds. wardend keeps the TUN fd. No veth, no
// host routes, no nftables: nothing on the host's network changes, and the
// sandbox never has a path to anything but wardend's stack. Attach also
// writes /etc/resolv.conf in the sandbox's root (openat2 with
// RESOLVE_IN_ROOT and no symlinks, so the sandbox cannot redirect the write).
//
// The other end of the TUN fd is a gVisor stack (link/fdbased) with the
// gateway addresses, in promiscuous and spoofing mode, with a TCP and a UDP
// forwarder: every connection the sandbox opens terminates in wardend,
// which applies the policy and, if the flow is allowed, dials the real
// destination from the host and splices bytes. A TCP connection to an
// allowed destination is dialled before the handshake with the sandbox
// completes, so a refused or unreachable destination looks like one (RST).
// A denied one is reset (TCP) or dropped (UDP) and reported. Packets whose
// source is not the sandbox's address are dropped. ICMP is not forwarded.
//
// # Policy
//
// Modes: none (no device at all: loopback only, the default), allowlist
// and open. Rules name domains ("pypi.org", "*.github.com" for the names
// below github.com) or CIDRs, with ports (default 80 and 443).
//
// Allowlist: a TCP connection to ip:port is allowed when a CIDR rule covers
// it, or when Warden's DNS returned ip to this sandbox for a name a host
// rule allows on port (a per-link map address -> names, kept at least ten
// minutes past the lookup; answers handed out are capped at 300 s of TTL so
// that clients ask again before that). On ports 80 and 443 the names the
// client's first bytes carry (TLS SNI; HTTP Host and absolute-form target)
// must then also be allowed, which stops domain fronting through a shared
// address; a numeric Host must be the dialled address. The client's first
// bytes are always inspected before they are forwarded: a client silent
// for two seconds (a server-first protocol) gets its connection dialled,
// but its first bytes are still checked. TLS or HTTP that cannot be
// parsed is refused. UDP needs a CIDR rule. DNS (53) and DoT (853)
// anywhere but Warden's resolver are refused unless a CIDR rule names the
// port explicitly.
//
// Open: any destination that is not always denied.
//
// Always denied, in every mode, on the address actually dialled (after
// unmapping IPv4-mapped forms; IPv4-compatible ::/96 is refused outright;
// NAT64 64:ff9b::/96 and 6to4 2002::/16 are checked by the IPv4 address they
// embed): loopback, unspecified, 0/8, link-local (169.254.169.254
// included, fe80::/10), multicast and broadcast, 240/4, 192.0.0/24,
// benchmarking 198.18/15, RFC 1918, CGNAT 100.64/10, ULA fc00::/7,
// site-local, Teredo, ORCHID, discard-only, local-use NAT64, the sandbox's
// own link, the host's own addresses (its interfaces, re-read at most every
// second) and Config.Deny. Config.AllowPrivate may open the private ranges
// (RFC 1918, CGNAT, ULA, benchmarking, 192.0.0/24) and nothing else.
// Numeric spellings of addresses in Host and SNI (2130706433, 0x7f.1,
// 0177.0.0.1, 127.1, [::ffff:127.0.0.1]) are parsed the way inet_aton does;
// a string that reads as an address is never treated as a name.
//
// SetPolicy applies to new connections and lookups at once (the compiled
// policy is swapped atomically); open connections continue.
//
// # DNS
//
// The gateway addresses serve DNS on UDP and TCP port 53 from the sandbox's
// own stack. Only A and AAAA questions are forwarded upstream
// (Config.DNSUpstream, default the host's resolv.conf), and only for names
// the policy allows (every valid name in open mode); others get NXDOMAIN,
// other types of allowed names an empty answer. The answer keeps the CNAME
// chain from the question and the A/AAAA records at its end whose address
// is not denied: answers pointing at denied ranges (DNS rebinding) are
// dropped and never become dialable. Every query is reported to OnQuery.
//
// # Warden itself (local.go)
//
// With Config.Local, the DNS answers LocalName (warden.internal) with the
// gateway addresses whatever the policy, and the stack listens on the
// gateway addresses' LocalPort (80): each connection is handed to Local
// in wardend (nothing is dialled), which decides which sandboxes it
// serves (hosted agents' runs reach the LLM and MCP gateways this way).
//
// # Measured (this repository's test VM: 2 shared cores, kernel 6.18)
//
// Attach, median of 21 (TestSandboxMeasure): 1.0-1.4 ms over five runs
// (single attaches 0.84-2.6 ms); TUN creation in the netns with its
// netlink configuration 0.5-0.67 ms, stack and DNS server 0.26-0.32 ms,
// resolv.conf 0.1 ms. Below the 2 ms budget, so nothing is pre-created.
//
// Throughput, 200 MiB over HTTP from the test's fake internet (a veth into a
// network namespace; the servers run in the test process): direct from the
// host 1.8-2.6 GB/s; from a sandbox through wardend, MTU 65520, 0.66-1.03
// GB/s down and 0.67-1.12 GB/s up; with MTU 1500, 68-122 MB/s down and
// 0.21-0.32 GB/s up. Most of the cost is per packet (one read or write
// syscall and one pass through the stack each), hence the large MTU: the
// sandbox's kernel then sends 64 KiB segments.
//
// An idle link costs about 180 KiB of wardend's heap (TestStackFootprint
// run alone) and 8 goroutines.
package network
