// Package nsinit is the in-sandbox half of the native backend: the code that
// warden-agent runs as PID 1 of a new set of namespaces ("warden-agent init").
// It receives its configuration and the template's idmapped layer mounts from
// wardend over an inherited socket, builds the sandbox's root filesystem,
// pivots into it, locks itself down (no bounding capabilities, no_new_privs,
// Landlock, seccomp on every thread) and then serves the agent protocol on an
// inherited listener. Every process the agent later starts inherits those
// restrictions.
//
// The configuration and the handshake on the sync socket (fd 3) are in
// package nswire, which the backend imports without linking the init.
package nsinit

import (
	"encoding/json"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend/native/nsinit/nswire"
)

// The wire types, under the names the init uses.
type (
	Config = nswire.Config
	Layer  = nswire.Layer
	Volume = nswire.Volume
)

// Fds inherited by "warden-agent init".
const (
	SyncFd     = nswire.SyncFd
	ListenerFd = nswire.ListenerFd
)

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
