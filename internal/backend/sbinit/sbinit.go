// Package sbinit is the in-sandbox setup that more than one backend's init
// uses (native's nsinit, gvisor's ginit): the wire form of the seccomp
// filter wardend assembles and the init installs, the privilege drop every
// process the agent starts inherits, and bringing up loopback in a network
// namespace. It imports nothing of the agent, so the host side of a backend
// (which encodes the filter, and for gvisor brings up loopback in the
// namespaces it makes) may use it too without linking the agent.
package sbinit

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/isolation/caps"
	"github.com/warden-sandbox/warden/internal/isolation/seccomp"
)

// EncodeProgram packs an assembled seccomp program as struct sock_filter
// entries (8 bytes each, little-endian), for an init's configuration.
func EncodeProgram(prog []bpf.RawInstruction) []byte {
	b := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		b = binary.LittleEndian.AppendUint16(b, in.Op)
		b = append(b, in.Jt, in.Jf)
		b = binary.LittleEndian.AppendUint32(b, in.K)
	}
	return b
}

// DecodeProgram reverses EncodeProgram.
func DecodeProgram(b []byte) ([]bpf.RawInstruction, error) {
	if len(b) == 0 || len(b)%8 != 0 {
		return nil, fmt.Errorf("seccomp program of %d bytes", len(b))
	}
	prog := make([]bpf.RawInstruction, len(b)/8)
	for i := range prog {
		e := b[8*i:]
		prog[i] = bpf.RawInstruction{Op: binary.LittleEndian.Uint16(e), Jt: e[2], Jf: e[3], K: binary.LittleEndian.Uint32(e[4:])}
	}
	return prog, nil
}

// InstallSeccomp decodes an EncodeProgram filter and installs it on every
// thread of the calling process (TSYNC). It comes last in an init's
// lockdown: it forbids what the steps before it need.
func InstallSeccomp(encoded []byte) error {
	prog, err := DecodeProgram(encoded)
	if err != nil {
		return err
	}
	if err := seccomp.InstallProgram(prog); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	return nil
}

// DropPrivileges is the part of the agent's spawn thread setup both inits
// share: an empty capability bounding set (root keeps only rootCaps, within
// the sandbox) and no_new_privs, on the calling thread, whose state every
// process it starts inherits.
func DropPrivileges(rootCaps []int) error {
	if err := caps.DropThreadExcept(rootCaps); err != nil {
		return err
	}
	return unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
}

// LoopbackUp brings up lo, the only interface of the calling thread's
// network namespace, so that 127.0.0.1 and ::1 work inside the sandbox (a
// dev server and its client, a database on localhost). It reaches nothing
// outside. (The gvisor backend uses it on the host for the namespaces it
// makes.)
func LoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: bring up: %w", err)
	}
	return nil
}
