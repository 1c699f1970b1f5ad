// Package nswire is what wardend's native backend and its in-sandbox init
// ("warden-agent init", package nsinit) exchange: the init's configuration
// and the handshake on the sync socket. It is apart from nsinit so that the
// daemon links these types and not the init (and through it the agent).
//
// The handshake on the sync socket (fd 3) is:
//
//	wardend -> init: one message: Config as JSON, with the layer mount fds as SCM_RIGHTS
//	init -> wardend: "ok\n" once serving, or "error: <message>\n"
package nswire

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent/agentcfg"
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

// Volume is a persistent volume: the detached, idmapped, nosuid, nodev
// (and, if ReadOnly, read-only) mount at index Fd of the SCM_RIGHTS set,
// to be attached at Target.
type Volume struct {
	Target   string `json:"target"`
	Fd       int    `json:"fd"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Config is what wardend sends to the init.
type Config struct {
	Hostname  string          `json:"hostname"`
	StageDir  string          `json:"stage_dir"` // empty host directory to build the root in
	Layers    []Layer         `json:"layers"`    // top-first per target
	Uppers    []Layer         `json:"uppers"`    // captured writable layers (builds), by target
	RootCaps  []int           `json:"root_caps"` // capabilities root processes keep (builds)
	DiskBytes int64           `json:"disk_bytes"`
	ShmBytes  int64           `json:"shm_bytes"`
	TmpBytes  int64           `json:"tmp_bytes"`
	StageDisk bool            `json:"stage_disk,omitempty"` // wardend mounted a disk image of DiskBytes on StageDir: no tmpfs for it or /tmp
	OpenFiles int64           `json:"open_files"`
	Landlock  string          `json:"landlock"`          // "require", "best-effort" or "off"
	Seccomp   []byte          `json:"seccomp"`           // the assembled filter, see sbinit.EncodeProgram
	SudoFd    *int            `json:"sudo_fd,omitempty"` // index of the fd of a detached read-only mount of the agent binary, for /usr/local/bin/sudo
	Volumes   []Volume        `json:"volumes,omitempty"` // persistent volumes, bound after the root is built
	Agent     agentcfg.Config `json:"agent"`
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
