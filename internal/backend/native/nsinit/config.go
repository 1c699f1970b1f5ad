// Package nsinit is the in-sandbox half of the native backend: the code that
// warden-agent runs as PID 1 of a new set of namespaces ("warden-agent init").
// It receives its configuration and the template's idmapped layer mounts from
// wardend over an inherited socket, builds the sandbox's root filesystem,
// pivots into it, locks itself down (no bounding capabilities, no_new_privs,
// Landlock, seccomp on every thread) and then serves the agent protocol on an
// inherited listener. Every process the agent later starts inherits those
// restrictions.
//
// The handshake on the sync socket (fd 3) is:
//
//	wardend -> init: one message: Config as JSON, with the layer mount fds as SCM_RIGHTS
//	init -> wardend: "ok\n" once serving, or "error: <message>\n"
package nsinit

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent"
)

// Fds inherited by "warden-agent init".
const (
	SyncFd     = 3
	ListenerFd = 4
)

// Layer is a template layer: the mount fd at index Fd of the SCM_RIGHTS set,
// to be stacked at Target.
type Layer struct {
	Target string `json:"target"`
	Fd     int    `json:"fd"`
}

// Config is what wardend sends to the init.
type Config struct {
	Hostname  string       `json:"hostname"`
	StageDir  string       `json:"stage_dir"` // empty host directory to build the root in
	Layers    []Layer      `json:"layers"`    // top-first per target
	Uppers    []Layer      `json:"uppers"`    // captured writable layers (builds), by target
	RootCaps  []int        `json:"root_caps"` // capabilities root processes keep (builds)
	DiskBytes int64        `json:"disk_bytes"`
	ShmBytes  int64        `json:"shm_bytes"`
	TmpBytes  int64        `json:"tmp_bytes"`
	StageDisk bool         `json:"stage_disk,omitempty"` // wardend mounted a disk image of DiskBytes on StageDir: no tmpfs for it or /tmp
	OpenFiles int64        `json:"open_files"`
	Landlock  string       `json:"landlock"` // "require", "best-effort" or "off"
	Seccomp   []byte       `json:"seccomp"`  // the assembled filter, see EncodeProgram
	Agent     agent.Config `json:"agent"`
}

// Send writes cfg and the layer fds to the init over conn.
func Send(conn *net.UnixConn, cfg Config, fds []int) error {
	b, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encode init config: %w", err)
	}
	if _, _, err := conn.WriteMsgUnix(b, unix.UnixRights(fds...), nil); err != nil {
		return fmt.Errorf("send init config: %w", err)
	}
	return nil
}

// WaitReady reads the init's answer.
func WaitReady(conn *net.UnixConn, deadline time.Time) error {
	conn.SetReadDeadline(deadline)
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		return fmt.Errorf("wait for sandbox init: %w", err)
	}
	msg := strings.TrimSpace(string(buf[:n]))
	if msg == "ok" {
		return nil
	}
	return fmt.Errorf("sandbox init: %s", strings.TrimPrefix(msg, "error: "))
}

func receive() (Config, []int, error) {
	var cfg Config
	f := os.NewFile(SyncFd, "sync")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return cfg, nil, fmt.Errorf("sync socket: %w", err)
	}
	uc := c.(*net.UnixConn)
	syncConn = uc
	buf := make([]byte, 1<<20)
	oob := make([]byte, unix.CmsgSpace(64*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return cfg, nil, fmt.Errorf("read init config: %w", err)
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return cfg, nil, fmt.Errorf("parse layer fds: %w", err)
		}
		for i := range msgs {
			fs, err := unix.ParseUnixRights(&msgs[i])
			if err != nil {
				return cfg, nil, fmt.Errorf("parse layer fds: %w", err)
			}
			fds = append(fds, fs...)
		}
	}
	for _, fd := range fds {
		unix.CloseOnExec(fd)
	}
	if err := json.Unmarshal(buf[:n], &cfg); err != nil {
		return cfg, nil, fmt.Errorf("decode init config: %w", err)
	}
	return cfg, fds, nil
}

var syncConn *net.UnixConn

func reply(msg string) {
	if syncConn != nil {
		syncConn.Write([]byte(msg + "\n"))
		syncConn.Close()
		syncConn = nil
	}
}

// EncodeProgram packs an assembled seccomp program as struct sock_filter
// entries (8 bytes each, little-endian), for Config.Seccomp.
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
