// Package ginit is the in-sandbox half of the gvisor backend: the code that
// warden-agent runs as PID 1 of a gVisor sandbox ("warden-agent gvisor-init").
//
// runsc starts it as root with a full set of capabilities inside gVisor's own
// kernel (the sentry), never on the host. It reads its configuration from
// ConfigPath, shapes the sandbox's view (an empty /sys, a minimal /dev, a
// size-limited /tmp and /dev/shm, a read-only /proc/sys), puts itself in a
// gVisor pids cgroup with the sandbox's task limit, starts listening on the
// agent socket, hides the socket's directory from the sandbox, locks itself
// down (an empty capability bounding set and no_new_privs for every process
// it starts, Warden's seccomp filter on all of its own threads, so on
// everything it forks) and serves the agent protocol. A watchdog goroutine
// enforces the memory limit inside the sandbox (see oom.go): gVisor has no
// OOM killer of its own, and the host's would kill the whole sandbox.
//
// The listening socket lives on the host: runsc's --host-uds=create lets a
// bind(2) inside the sandbox create a host unix socket in the bind-mounted
// directory ControlDir, and wardend connects to it from the host.
package ginit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/warden-sandbox/warden/internal/backend/gvisor/ginit/gwire"
)

// The paths and configuration shared with the backend (package gwire),
// under the names the init uses.
const (
	Dir                = gwire.Dir
	AgentPath          = gwire.AgentPath
	ConfigPath         = gwire.ConfigPath
	ControlDir         = gwire.ControlDir
	LowerDir           = gwire.LowerDir
	UpperDir           = gwire.UpperDir
	SocketName         = gwire.SocketName
	ControlSocketName  = gwire.ControlSocketName
	WatchdogSocketName = gwire.WatchdogSocketName
	OOMFileName        = gwire.OOMFileName
	RestartConfigName  = gwire.RestartConfigName
)

type (
	Config = gwire.Config
	Mount  = gwire.Mount
	Volume = gwire.Volume
)

func readConfig() (Config, error) {
	var cfg Config
	b, err := os.ReadFile(ConfigPath)
	if errors.Is(err, os.ErrNotExist) {
		// A boot on a kept writable layer (a cold restart): the removal
		// below is in that layer, and the backend put the configuration
		// in the control directory instead.
		p := ControlDir + "/" + RestartConfigName
		b, err = os.ReadFile(p)
		os.Remove(p)
	}
	if err != nil {
		return cfg, fmt.Errorf("read init config: %w", err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg, fmt.Errorf("decode init config: %w", err)
	}
	// The file is in a read-only layer; removing it leaves a whiteout in
	// the sandbox's writable layer, so the sandbox's root cannot read it.
	os.Remove(ConfigPath)
	return cfg, nil
}
