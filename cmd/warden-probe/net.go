//go:build linux

package main

// Probes 16–21: no network, raw and packet sockets, cloud metadata, host
// loopback, sibling sandboxes, host unix sockets.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const dialTimeout = 2 * time.Second

// dialFails tries a TCP connection; it reports whether it failed and how.
func dialFails(network, addr string) (bool, string) {
	c, err := net.DialTimeout(network, addr, dialTimeout)
	if err == nil {
		c.Close()
		return false, "connected to " + addr
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true, "timed out (no answer)"
	}
	return true, describe(err)
}

// udpSendFails sends one datagram; it reports whether sending failed.
func udpSendFails(network, addr string) (bool, string) {
	c, err := net.DialTimeout(network, addr, dialTimeout)
	if err != nil {
		return true, "connect: " + describe(err)
	}
	defer c.Close()
	_, err = c.Write([]byte("warden-probe"))
	if err != nil {
		return true, "send: " + describe(err)
	}
	return false, "datagram sent to " + addr
}

func probeNoNetwork(r *reporter) {
	const id = 16
	ifs, err := net.Interfaces()
	if err != nil {
		r.fail(id, "interfaces", describe(err))
	} else {
		var names []string
		for _, i := range ifs {
			names = append(names, i.Name)
		}
		r.check(id, "interfaces", len(names) == 1 && names[0] == "lo", fmt.Sprintf("interfaces %v, want only lo", names))
	}
	// /proc/net/dev agrees (it does not depend on netlink).
	if lines, err := readLines("/proc/net/dev"); err == nil && len(lines) > 2 {
		var devs []string
		for _, l := range lines[2:] {
			if n, _, ok := strings.Cut(l, ":"); ok {
				devs = append(devs, strings.TrimSpace(n))
			}
		}
		r.check(id, "proc-net-dev", len(devs) == 1 && devs[0] == "lo", fmt.Sprintf("devices %v", devs))
	}
	// No IPv4 route at all; IPv6 routes only through lo.
	if lines, err := readLines("/proc/net/route"); err != nil {
		r.check(id, "routes-ipv4", isOneOf(err, unix.ENOENT), "read /proc/net/route: "+describe(err))
	} else {
		r.check(id, "routes-ipv4", len(lines) <= 1, fmt.Sprintf("%d IPv4 routes", max(len(lines)-1, 0)))
	}
	if lines, err := readLines("/proc/net/ipv6_route"); err == nil {
		var foreign []string
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) >= 10 && f[9] != "lo" {
				foreign = append(foreign, l)
			}
		}
		r.check(id, "routes-ipv6", len(foreign) == 0, fmt.Sprintf("%d IPv6 routes, %d not through lo", len(lines), len(foreign)))
	}
	// connect() on UDP picks a route without sending anything.
	for _, a := range []string{"8.8.8.8:53", "[2001:4860:4860::8888]:53", "1.1.1.1:443"} {
		c, err := net.Dial("udp", a)
		if err == nil {
			c.Close()
		}
		r.expect(id, "route-to:"+a, err, unix.ENETUNREACH, unix.EHOSTUNREACH, unix.EPERM, unix.EACCES, unix.EADDRNOTAVAIL)
	}
	for _, a := range []string{"8.8.8.8:53", "[2001:4860:4860::8888]:53"} {
		ok, d := udpSendFails("udp", a)
		r.check(id, "udp-out:"+a, ok, d)
	}
	for _, a := range []string{"1.1.1.1:443", "[2606:4700:4700::1111]:443"} {
		ok, d := dialFails("tcp", a)
		r.check(id, "tcp-out:"+a, ok, d)
	}
	// An ICMP echo socket cannot send either.
	if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP); err == nil {
		echo := []byte{8, 0, 0, 0, 0, 0, 0, 1}
		err = unix.Sendto(fd, echo, 0, &unix.SockaddrInet4{Addr: [4]byte{8, 8, 8, 8}})
		unix.Close(fd)
		r.check(id, "icmp-out", err != nil, "ping 8.8.8.8: "+describe(err))
	} else {
		r.check(id, "icmp-out", true, "ICMP socket refused: "+describe(err))
	}
	// DNS: any answer, even "no such host", means a resolver was reached.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	res := &net.Resolver{PreferGo: true}
	addrs, err := res.LookupHost(ctx, "example.com")
	var de *net.DNSError
	switch {
	case err == nil:
		r.fail(id, "dns", fmt.Sprintf("example.com resolved to %v", addrs))
	case errors.As(err, &de) && de.IsNotFound:
		r.fail(id, "dns", "a DNS server answered: "+err.Error())
	default:
		r.pass(id, "dns", err.Error())
	}
}

func probeRawSockets(r *reporter) {
	const id = 17
	htons := func(v uint16) int { return int(v>>8 | v<<8) }
	refused := []unix.Errno{unix.EPERM, unix.EACCES, unix.EAFNOSUPPORT, unix.EPROTONOSUPPORT, unix.ESOCKTNOSUPPORT, unix.EINVAL}
	for _, s := range []struct {
		name        string
		domain, typ int
		proto       int
		strictEPERM bool
	}{
		{"packet-raw", unix.AF_PACKET, unix.SOCK_RAW, htons(unix.ETH_P_ALL), true},
		{"packet-dgram", unix.AF_PACKET, unix.SOCK_DGRAM, htons(unix.ETH_P_ALL), true},
		{"inet-packet", unix.AF_INET, unix.SOCK_PACKET, htons(unix.ETH_P_ALL), true},
		{"inet-raw", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW, true},
		{"inet-raw-icmp", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP, true},
		{"inet-raw-tcp", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP, true},
		{"inet6-raw", unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_RAW, true},
		{"inet6-raw-icmp", unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_ICMPV6, true},
		{"inet-sctp", unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_SCTP, false},
		{"inet-udplite", unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_UDPLITE, false},
		{"vsock", unix.AF_VSOCK, unix.SOCK_STREAM, 0, false},
		{"netlink-audit", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT, false},
		{"netlink-netfilter", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER, false},
		{"netlink-uevent", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_KOBJECT_UEVENT, false},
		{"netlink-xfrm", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_XFRM, false},
		{"netlink-generic", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_GENERIC, false},
		{"alg", unix.AF_ALG, unix.SOCK_SEQPACKET, 0, false},
		{"key", unix.AF_KEY, unix.SOCK_RAW, 2 /* PF_KEY_V2 */, false},
		{"xdp", unix.AF_XDP, unix.SOCK_RAW, 0, false},
		{"bluetooth", unix.AF_BLUETOOTH, unix.SOCK_RAW, 0, false},
		{"can", unix.AF_CAN, unix.SOCK_RAW, 1, false},
		{"tipc", unix.AF_TIPC, unix.SOCK_RDM, 0, false},
		{"rds", unix.AF_RDS, unix.SOCK_SEQPACKET, 0, false},
		{"llc", unix.AF_LLC, unix.SOCK_DGRAM, 0, false},
		{"x25", unix.AF_X25, unix.SOCK_SEQPACKET, 0, false},
		{"ax25", unix.AF_AX25, unix.SOCK_DGRAM, 0, false},
		{"appletalk", unix.AF_APPLETALK, unix.SOCK_DGRAM, 0, false},
		{"phonet", unix.AF_PHONET, unix.SOCK_DGRAM, 0, false},
		{"ieee802154", unix.AF_IEEE802154, unix.SOCK_RAW, 0, false},
		{"qipcrtr", unix.AF_QIPCRTR, unix.SOCK_DGRAM, 0, false},
		{"smc", unix.AF_SMC, unix.SOCK_STREAM, 0, false},
		{"rxrpc", unix.AF_RXRPC, unix.SOCK_DGRAM, unix.AF_INET, false},
		{"mctp", unix.AF_MCTP, unix.SOCK_DGRAM, 0, false},
	} {
		fd, err := unix.Socket(s.domain, s.typ|unix.SOCK_CLOEXEC, s.proto)
		if err == nil {
			unix.Close(fd)
		}
		if s.strictEPERM {
			r.expect(id, s.name, err, unix.EPERM, unix.EACCES)
		} else {
			r.expect(id, s.name, err, refused...)
		}
	}
}

func probeMetadata(r *reporter) {
	const id = 18
	for _, a := range []string{"169.254.169.254:80", "[fd00:ec2::254]:80", "169.254.170.2:80", "100.100.100.200:80", "[fd00:ec2::23]:53"} {
		ok, d := dialFails("tcp", a)
		r.check(id, "tcp:"+a, ok, d)
	}
	for _, a := range []string{"169.254.169.254:53", "[fd00:ec2::254]:53", "169.254.169.253:53"} {
		ok, d := udpSendFails("udp", a)
		r.check(id, "udp:"+a, ok, d)
	}
}

func probeHostLoopback(r *reporter) {
	const id = 19
	if opts.HostPort == 0 && opts.HostPort6 == 0 && opts.HostUDPPort == 0 {
		r.skip(id, "host-loopback", "no -host-port given")
		return
	}
	if opts.HostPort != 0 {
		ok, d := dialFails("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.HostPort)))
		r.check(id, "tcp-127.0.0.1", ok, d)
		// The whole 127/8 and the "any" address lead to the sandbox's own lo.
		ok, d = dialFails("tcp", net.JoinHostPort("127.0.0.2", strconv.Itoa(opts.HostPort)))
		r.check(id, "tcp-127.0.0.2", ok, d)
		ok, d = dialFails("tcp", net.JoinHostPort("0.0.0.0", strconv.Itoa(opts.HostPort)))
		r.check(id, "tcp-0.0.0.0", ok, d)
	}
	if opts.HostUDPPort != 0 {
		// A datagram to our own lo may well be "sent"; the host's UDP canary
		// records whether anything arrived. Here only the attempt is made.
		_, d := udpSendFails("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.HostUDPPort)))
		r.note(id, "udp-127.0.0.1", d+" (the host checks its UDP canary received nothing)")
	}
	if opts.HostPort6 != 0 {
		ok, d := dialFails("tcp", net.JoinHostPort("::1", strconv.Itoa(opts.HostPort6)))
		r.check(id, "tcp-::1", ok, d)
		ok, d = dialFails("tcp", net.JoinHostPort("::ffff:127.0.0.1", strconv.Itoa(opts.HostPort)))
		r.check(id, "tcp-v4mapped", ok, d)
	}
}

func probeSibling(r *reporter) {
	const id = 20
	if opts.SiblingPort == 0 && opts.SiblingAbs == "" && opts.IPCKey == 0 {
		r.skip(id, "sibling", "no sibling canaries given (-sibling-port, -sibling-abstract, -ipc-key)")
		return
	}
	if opts.SiblingPort != 0 {
		ok, d := dialFails("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.SiblingPort)))
		r.check(id, "sibling-loopback-port", ok, d)
	}
	if opts.SiblingIP != "" {
		ok, d := dialFails("tcp", net.JoinHostPort(opts.SiblingIP, strconv.Itoa(opts.SiblingPort)))
		r.check(id, "sibling-ip", ok, d)
	} else {
		r.skip(id, "sibling-ip", "no -sibling-ip: sandboxes have no network address")
	}
	if opts.SiblingAbs != "" {
		ok, d := dialFails("unix", "@"+opts.SiblingAbs)
		r.check(id, "sibling-abstract-socket", ok, d)
	}
	if opts.IPCKey != 0 {
		key := opts.IPCKey
		_, err := unix.SysvShmGet(key, 0, 0)
		r.expect(id, "sysv-shm", err, unix.ENOENT)
		r.expectErrno(id, "sysv-msg", rawErr(unix.SYS_MSGGET, uintptr(key), 0), unix.ENOENT)
		r.expectErrno(id, "sysv-sem", rawErr(unix.SYS_SEMGET, uintptr(key), 0, 0), unix.ENOENT)
		var seen []string
		for _, f := range []string{"shm", "msg", "sem"} {
			lines, _ := readLines("/proc/sysvipc/" + f)
			if len(lines) > 1 {
				seen = append(seen, fmt.Sprintf("%s: %d", f, len(lines)-1))
			}
		}
		r.check(id, "sysvipc-empty", len(seen) == 0, fmt.Sprintf("foreign SysV IPC objects: %v", seen))
	}
}

// Well-known host sockets: container runtimes, init, the bus, Warden itself.
var wellKnownSockets = []string{
	"/run/docker.sock", "/var/run/docker.sock", "/run/containerd/containerd.sock", "/run/crio/crio.sock",
	"/run/podman/podman.sock", "/run/systemd/private", "/run/systemd/notify", "/run/systemd/journal/socket",
	"/run/dbus/system_bus_socket", "/var/run/dbus/system_bus_socket", "/run/warden/warden.sock",
	"/run/warden/api.sock", "/var/run/warden.sock", "/run/user/0/bus", "/run/snapd.socket",
	"/run/firecracker.socket", "/tmp/.X11-unix/X0",
}

func probeUnixSockets(r *reporter) {
	const id = 21
	for _, p := range opts.HostSockets {
		ok, d := dialFails("unix", p)
		r.check(id, "host-socket:"+p, ok, d)
	}
	for _, n := range opts.HostAbstract {
		ok, d := dialFails("unix", "@"+n)
		r.check(id, "host-abstract:@"+n, ok, d)
	}
	var reachable []string
	for _, p := range wellKnownSockets {
		if ok, d := dialFails("unix", p); !ok {
			reachable = append(reachable, p+" ("+d+")")
		}
	}
	r.check(id, "well-known-sockets", len(reachable) == 0, fmt.Sprintf("%d tried; reachable: %v", len(wellKnownSockets), reachable))
	// Every socket file the walk met must be the sandbox's own, i.e. nobody
	// answers (nothing in this sandbox listens while the probe runs).
	reachable = nil
	for _, p := range socketsFound {
		if ok, d := dialFails("unix", p); !ok {
			reachable = append(reachable, p+" ("+d+")")
		}
	}
	if len(opts.Tokens) == 0 {
		r.skip(id, "socket-files", "the filesystem walk did not run (no -canary-token)")
	} else {
		r.check(id, "socket-files", len(reachable) == 0, fmt.Sprintf("%d socket files found by the walk; answering: %v", len(socketsFound), reachable))
	}
	// The sandbox's own socket table holds nothing of the host's.
	if lines, err := readLines("/proc/net/unix"); err == nil {
		var leaked []string
		for _, l := range lines {
			for _, p := range opts.HostSockets {
				if strings.HasSuffix(l, " "+p) {
					leaked = append(leaked, p)
				}
			}
		}
		r.check(id, "proc-net-unix", len(leaked) == 0, fmt.Sprintf("%d sockets in this network namespace; host sockets listed: %v", max(len(lines)-1, 0), leaked))
	}
}
