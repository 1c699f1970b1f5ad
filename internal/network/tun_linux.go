package network

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// createTUN creates a TUN device in the network namespace of the process
// behind pidfd (a pidfd or a network namespace's fd), configures it (MTU,
// addresses, default routes, up) and returns its fd. With persist the
// device outlives the fd (TUNSETPERSIST), and a device of that name that
// is already there is attached to as it is, not configured again: a
// gVisor sandbox's kernel keeps a packet socket on it across a daemon
// restart. Only the open of /dev/net/tun and of a netlink socket
// happen inside the namespace, on a locked thread of a goroutine of their
// own: were the switch back to fail, that thread dies with its goroutine
// instead of returning to the scheduler in the wrong namespace.
func createTUN(pidfd int, name string, mtu int, persist bool) (*os.File, error) {
	var res struct{ tun, nl int }
	res.tun, res.nl = -1, -1
	err := inNetns(pidfd, func() error {
		var err error
		if res.tun, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
			return fmt.Errorf("network: open /dev/net/tun: %w", err)
		}
		if res.nl, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE); err != nil {
			return fmt.Errorf("network: netlink socket: %w", err)
		}
		return nil
	})
	if err != nil {
		if res.tun >= 0 {
			unix.Close(res.tun)
		}
		if res.nl >= 0 {
			unix.Close(res.nl)
		}
		return nil, err
	}
	defer unix.Close(res.nl)
	_, lerr := (&rtnl{fd: res.nl}).linkIndex(name)
	existed := lerr == nil
	tun := os.NewFile(uintptr(res.tun), "tun:"+name)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		tun.Close()
		return nil, fmt.Errorf("network: tun: %w", err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(res.tun, unix.TUNSETIFF, ifr); err != nil {
		tun.Close()
		return nil, fmt.Errorf("network: TUNSETIFF: %w", err)
	}
	if persist {
		if err := unix.IoctlSetInt(res.tun, unix.TUNSETPERSIST, 1); err != nil {
			tun.Close()
			return nil, fmt.Errorf("network: TUNSETPERSIST: %w", err)
		}
		if existed {
			return tun, nil
		}
	}
	if err := configureLink(res.nl, name, mtu); err != nil {
		tun.Close()
		return nil, err
	}
	return tun, nil
}

// readdress puts wd0's addresses and routes back in the namespace behind
// nsfd (runsc removes them from the device once its kernel has taken them
// over; a restore reads them again). Ones still there are kept.
func readdress(nsfd int, name string, mtu int) error {
	nl := -1
	err := inNetns(nsfd, func() error {
		var err error
		nl, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		return err
	})
	if err != nil {
		if nl >= 0 {
			unix.Close(nl)
		}
		return fmt.Errorf("network: netlink socket: %w", err)
	}
	defer unix.Close(nl)
	c := &rtnl{fd: nl}
	idx, err := c.linkIndex(name)
	if err != nil {
		return err
	}
	keep := func(err error) error {
		if errors.Is(err, unix.EEXIST) {
			return nil
		}
		return err
	}
	if err := c.setLink(idx, mtu); err != nil {
		return err
	}
	if err := keep(c.addAddr(idx, SandboxAddr4, SandboxPrefix4.Bits())); err != nil {
		return err
	}
	if err := keep(c.addRoute(idx, Gateway4)); err != nil {
		return err
	}
	if err := keep(c.addAddr(idx, SandboxAddr6, SandboxPrefix6.Bits())); err == nil {
		return keep(c.addRoute(idx, Gateway6))
	}
	return nil
}

// inNetns runs fn on a locked thread of a goroutine of its own, inside the
// network namespace behind nsfd (a pidfd or a namespace fd), for the opens
// that must happen there. Were the switch back to fail, that thread stays
// locked and dies with its goroutine instead of returning to the scheduler
// in the wrong namespace.
func inNetns(nsfd int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("network: open own netns: %w", err)
			return
		}
		defer unix.Close(self)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("network: enter sandbox netns: %w", err)
			return
		}
		err = fn()
		if serr := unix.Setns(self, unix.CLONE_NEWNET); serr != nil {
			errc <- errors.Join(err, fmt.Errorf("network: return to own netns: %w", serr))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// configureLink sets up the device over a NETLINK_ROUTE socket opened in the
// sandbox's namespace.
func configureLink(nl int, name string, mtu int) error {
	c := &rtnl{fd: nl}
	idx, err := c.linkIndex(name)
	if err != nil {
		return err
	}
	if err := c.setLink(idx, mtu); err != nil {
		return err
	}
	if err := c.addAddr(idx, SandboxAddr4, SandboxPrefix4.Bits()); err != nil {
		return err
	}
	if err := c.addRoute(idx, Gateway4); err != nil {
		return err
	}
	// IPv6 is best effort: a kernel or namespace without it keeps IPv4.
	if err := c.addAddr(idx, SandboxAddr6, SandboxPrefix6.Bits()); err == nil {
		if err := c.addRoute(idx, Gateway6); err != nil {
			return err
		}
	} else if !errors.Is(err, unix.EAFNOSUPPORT) && !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	return nil
}

// rtnl is a minimal rtnetlink client: requests with acks, one at a time.
type rtnl struct {
	fd  int
	seq uint32
	buf [8192]byte
}

type nlAttr struct {
	typ  uint16
	data []byte
}

func (c *rtnl) request(typ, flags uint16, hdr []byte, attrs []nlAttr, reply func([]byte) error) error {
	c.seq++
	msg := make([]byte, unix.SizeofNlMsghdr, 128)
	msg = append(msg, hdr...)
	for _, a := range attrs {
		l := unix.SizeofRtAttr + len(a.data)
		msg = binary.NativeEndian.AppendUint16(msg, uint16(l))
		msg = binary.NativeEndian.AppendUint16(msg, a.typ)
		msg = append(msg, a.data...)
		for len(msg)%4 != 0 {
			msg = append(msg, 0)
		}
	}
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], flags|unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(msg[8:], c.seq)
	if err := unix.Sendto(c.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	for {
		n, _, err := unix.Recvfrom(c.fd, c.buf[:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(c.buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Seq != c.seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return errors.New("short netlink error")
				}
				if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
					return syscall.Errno(-e)
				}
				return nil
			case unix.NLMSG_DONE:
				return nil
			default:
				if reply != nil {
					if err := reply(m.Data); err != nil {
						return err
					}
				}
			}
		}
	}
}

func ifinfomsg(family uint8, index int32, flags, change uint32) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	b[0] = family
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	binary.NativeEndian.PutUint32(b[8:], flags)
	binary.NativeEndian.PutUint32(b[12:], change)
	return b
}

func (c *rtnl) linkIndex(name string) (int32, error) {
	var idx int32
	err := c.request(unix.RTM_GETLINK, 0, ifinfomsg(unix.AF_UNSPEC, 0, 0, 0),
		[]nlAttr{{unix.IFLA_IFNAME, append([]byte(name), 0)}},
		func(b []byte) error {
			if len(b) >= unix.SizeofIfInfomsg {
				idx = int32(binary.NativeEndian.Uint32(b[4:]))
			}
			return nil
		})
	if err != nil {
		return 0, fmt.Errorf("network: find %s: %w", name, err)
	}
	if idx == 0 {
		return 0, fmt.Errorf("network: find %s: no index", name)
	}
	return idx, nil
}

func (c *rtnl) setLink(idx int32, mtu int) error {
	mtuB := binary.NativeEndian.AppendUint32(nil, uint32(mtu))
	err := c.request(unix.RTM_NEWLINK, 0, ifinfomsg(unix.AF_UNSPEC, idx, unix.IFF_UP, unix.IFF_UP),
		[]nlAttr{{unix.IFLA_MTU, mtuB}}, nil)
	if err != nil {
		return fmt.Errorf("network: set mtu and up: %w", err)
	}
	return nil
}

func family(a netip.Addr) uint8 {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

func (c *rtnl) addAddr(idx int32, a netip.Addr, bits int) error {
	hdr := make([]byte, unix.SizeofIfAddrmsg)
	hdr[0] = family(a)
	hdr[1] = uint8(bits)
	hdr[2] = unix.IFA_F_NODAD
	hdr[3] = unix.RT_SCOPE_UNIVERSE
	binary.NativeEndian.PutUint32(hdr[4:], uint32(idx))
	flags := binary.NativeEndian.AppendUint32(nil, unix.IFA_F_NODAD)
	err := c.request(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, hdr,
		[]nlAttr{{unix.IFA_LOCAL, a.AsSlice()}, {unix.IFA_ADDRESS, a.AsSlice()}, {unix.IFA_FLAGS, flags}}, nil)
	if err != nil {
		return fmt.Errorf("network: add address %s: %w", a, err)
	}
	return nil
}

func (c *rtnl) addRoute(idx int32, gw netip.Addr) error {
	hdr := make([]byte, unix.SizeofRtMsg)
	hdr[0] = family(gw)
	hdr[4] = unix.RT_TABLE_MAIN
	hdr[5] = unix.RTPROT_BOOT
	hdr[6] = unix.RT_SCOPE_UNIVERSE
	hdr[7] = unix.RTN_UNICAST
	oif := binary.NativeEndian.AppendUint32(nil, uint32(idx))
	err := c.request(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL, hdr,
		[]nlAttr{{unix.RTA_GATEWAY, gw.AsSlice()}, {unix.RTA_OIF, oif}}, nil)
	if err != nil {
		return fmt.Errorf("network: default route via %s: %w", gw, err)
	}
	return nil
}

// ResolvConf is what a networked sandbox finds in /etc/resolv.conf.
const ResolvConf = "# Written by Warden: the sandbox's resolver is wardend, which answers for\n" +
	"# the names the network policy allows.\n" +
	"nameserver 10.254.0.1\n" +
	"nameserver fd7a:7761:7264::1\n" +
	"options timeout:2 attempts:2\n"

// writeResolvConf points the sandbox's /etc/resolv.conf at Warden's
// resolver. The path is resolved inside the sandbox's root (openat2 with
// RESOLVE_IN_ROOT and no symlinks at all), so nothing the sandbox planted
// can redirect the write to a host file; a symlinked resolv.conf is
// replaced by a regular file.
func writeResolvConf(pidfd int, pid int) error {
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("network: open sandbox root: %w", err)
	}
	defer unix.Close(root)
	// The pid could have been reused before the open: the pidfd says
	// whether the sandbox's process is still the one alive.
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		return fmt.Errorf("network: sandbox process: %w", err)
	}
	how := unix.OpenHow{Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	etcHow := how
	etcHow.Flags = unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC
	etc, err := unix.Openat2(root, "etc", &etcHow)
	if err != nil {
		return fmt.Errorf("network: open sandbox /etc: %w", err)
	}
	defer unix.Close(etc)
	fileHow := how
	fileHow.Flags = unix.O_WRONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	fd, err := unix.Openat2(etc, "resolv.conf", &fileHow)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOENT) {
		// A symlink (or nothing): replace it with a regular file.
		unix.Unlinkat(etc, "resolv.conf", 0)
		fileHow.Flags |= unix.O_CREAT | unix.O_EXCL
		fileHow.Mode = 0o644
		fd, err = unix.Openat2(etc, "resolv.conf", &fileHow)
	}
	if err != nil {
		return fmt.Errorf("network: open sandbox /etc/resolv.conf: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errors.New("network: sandbox /etc/resolv.conf is not a regular file")
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		return fmt.Errorf("network: write sandbox /etc/resolv.conf: %w", err)
	}
	if _, err := unix.Write(fd, []byte(ResolvConf)); err != nil {
		return fmt.Errorf("network: write sandbox /etc/resolv.conf: %w", err)
	}
	return nil
}
