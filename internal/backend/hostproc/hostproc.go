// Package hostproc holds what the backends that run sandboxes as host
// processes (native, gvisor) share: finding the warden-agent binary, a
// process's identity across pid reuse (its start time), the handle file
// each sandbox's run directory keeps for recovery, and the table of live
// sandboxes with the run-directory orphan scan (table.go); the cleanup of
// one sandbox stays in each backend.
package hostproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/warden-sandbox/warden/internal/backend"
)

// FindAgent returns the absolute path of the agent binary: p if set, else
// warden-agent next to this program, else on PATH.
func FindAgent(p string) (string, error) {
	if p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("agent binary: %w", err)
		}
		return filepath.Abs(p)
	}
	if exe, err := os.Executable(); err == nil {
		c := filepath.Join(filepath.Dir(exe), "warden-agent")
		if _, err := os.Stat(c); err == nil {
			return c, nil
		}
	}
	if c, err := exec.LookPath("warden-agent"); err == nil {
		return filepath.Abs(c)
	}
	return "", errors.New("agent binary warden-agent not found next to this program or on PATH (build it with: CGO_ENABLED=0 go build -o bin/warden-agent ./cmd/warden-agent)")
}

// StartTime reads field 22 of /proc/<pid>/stat, the process's start time,
// which tells a process from a later one with the same pid; an exited
// (zombie) process is an error.
func StartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read process start time: %w", err)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, errors.New("malformed /proc stat")
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, fmt.Errorf("process %d has exited", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// HandleFile is the handle's file in a sandbox's run directory.
const HandleFile = "handle.json"

// WriteHandle records h in dir, replacing the file whole (a reader sees the
// old handle or the new one). Best effort, and not flushed: the run
// directory lives no longer than the host's uptime, and the store holds the
// handle that counts.
func WriteHandle(dir string, h backend.Handle) {
	raw, _ := json.Marshal(h)
	tmp := filepath.Join(dir, HandleFile+".tmp")
	if os.WriteFile(tmp, raw, 0o600) == nil {
		os.Rename(tmp, filepath.Join(dir, HandleFile))
	}
}

// ReadHandle reads the handle WriteHandle recorded in dir.
func ReadHandle(dir string) (backend.Handle, error) {
	var h backend.Handle
	raw, err := os.ReadFile(filepath.Join(dir, HandleFile))
	if err != nil {
		return h, fmt.Errorf("read handle: %w", err)
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return h, fmt.Errorf("decode handle: %w", err)
	}
	return h, nil
}
