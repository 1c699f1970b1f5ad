package gvisor

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend/gvisor/ginit/gwire"
)

// The host half of the memory watchdog.
//
// The agent's watchdog (ginit/oom.go) enforces the sandbox's memory limit
// from inside, but every wake-up inside gVisor costs CPU, so it looks only
// about once a second on its own. The host tells it when to look: the
// sandbox's memory is charged to its host cgroup, and the kernel signals an
// eventfd when that charge crosses a registered threshold (cgroup v1
// cgroup.event_control; on v2, which has no thresholds, the host reads the
// charge every memPoll instead, a cheap read on the host). Thresholds are
// set every sixteenth of the sandbox's limit from a quarter of it up to the
// host limit; each crossing writes a byte on a connection to the watchdog's
// socket in the control directory (kept open), and the watchdog then
// measures the sandbox's memory exactly,
// kills if it is over the limit, and keeps watching closely while it grows.
// The host's charge includes the sentry's and gofer's own memory, so it is
// a superset of the sandbox's: a crossing is a hint, never a kill by itself.

// memPoll is the v2 polling interval.
const memPoll = 25 * time.Millisecond

// memThresholds are the host charges at which the watchdog is woken.
func memThresholds(limit, headroom int64) []int64 {
	step := max(limit/16, 1<<20)
	var ts []int64
	for t := limit / 4; t <= limit+headroom; t += step {
		ts = append(ts, t)
	}
	return ts
}

// watchMemory wakes bx's watchdog whenever the host charge crosses a
// threshold, until the sandbox is gone or has stopped.
func (b *Backend) watchMemory(bx *box, exited chan struct{}) {
	cg, err := bx.group()
	if err != nil {
		return
	}
	usage := cg.MemoryUsageFile()
	ts := memThresholds(bx.spec.Limits.MemoryBytes, b.cfg.MemoryHeadroom)
	if bx.spec.Limits.MemoryBytes == 0 {
		// A recovered sandbox: the handle does not carry its limits. Take
		// them from the host cgroup (limit + headroom).
		if lim := hostMemoryLimit(usage); lim > b.cfg.MemoryHeadroom {
			ts = memThresholds(lim-b.cfg.MemoryHeadroom, b.cfg.MemoryHeadroom)
		}
	}
	if len(ts) == 0 {
		return
	}
	// One connection, kept open: a byte per wake-up.
	sock := filepath.Join(bx.state.control(), gwire.WatchdogSocketName)
	var conn net.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	wake := func() {
		for try := 0; try < 2; try++ {
			if conn == nil {
				c, err := net.DialTimeout("unix", sock, time.Second)
				if err != nil {
					return
				}
				conn = c
			}
			conn.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := conn.Write([]byte{1}); err == nil {
				return
			}
			conn.Close()
			conn = nil
		}
	}
	wake() // connect now, not at the first crossing
	if efd, err := registerThresholds(usage, ts); err == nil {
		f := os.NewFile(uintptr(efd), "memory-thresholds")
		go func() {
			select {
			case <-bx.gone:
			case <-bx.done:
			case <-exited:
			}
			f.Close() // ends the read below
		}()
		var buf [8]byte
		for {
			if _, err := f.Read(buf[:]); err != nil {
				return
			}
			wake()
		}
	}
	// No thresholds (cgroup v2): poll.
	t := time.NewTicker(memPoll)
	defer t.Stop()
	level := -1
	for {
		select {
		case <-bx.gone:
			return
		case <-bx.done:
			return
		case <-exited:
			return
		case <-t.C:
		}
		raw, err := os.ReadFile(usage)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		if err != nil {
			continue
		}
		l := 0
		for l < len(ts) && v >= ts[l] {
			l++
		}
		if l != level {
			if level >= 0 {
				wake()
			}
			level = l
		}
	}
}

// registerThresholds returns a non-blocking eventfd that the kernel signals
// whenever the cgroup v1 charge in usage crosses one of ts.
func registerThresholds(usage string, ts []int64) (int, error) {
	if filepath.Base(usage) != "memory.usage_in_bytes" {
		return -1, errors.New("no memory thresholds on cgroup v2")
	}
	ufd, err := unix.Open(usage, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(ufd)
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return -1, err
	}
	ctl, err := os.OpenFile(filepath.Join(filepath.Dir(usage), "cgroup.event_control"), os.O_WRONLY, 0)
	if err != nil {
		unix.Close(efd)
		return -1, err
	}
	defer ctl.Close()
	for _, t := range ts {
		if _, err := fmt.Fprintf(ctl, "%d %d %d", efd, ufd, t); err != nil {
			unix.Close(efd)
			return -1, fmt.Errorf("register memory threshold: %w", err)
		}
	}
	return efd, nil
}

// hostMemoryLimit reads the host cgroup's memory limit next to usage (v1
// memory.limit_in_bytes, v2 memory.max), or 0.
func hostMemoryLimit(usage string) int64 {
	name := "memory.limit_in_bytes"
	if filepath.Base(usage) == "memory.current" {
		name = "memory.max"
	}
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(usage), name))
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	return v
}
