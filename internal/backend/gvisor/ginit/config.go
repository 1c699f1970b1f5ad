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
	"fmt"
	"os"

	"github.com/warden-sandbox/warden/internal/agent"
)

// Paths inside the sandbox.
const (
	// Dir holds what the backend puts into the sandbox's root: the agent
	// binary, this configuration and the control directory's mount point.
	Dir = "/.warden"
	// AgentPath is the agent binary inside the sandbox.
	AgentPath = Dir + "/warden-agent"
	// ConfigPath is the configuration file; the init removes it once read.
	ConfigPath = Dir + "/config.json"
	// ControlDir is the mount point of the host directory that receives the
	// agent's socket and the OOM counter. The init unmounts it once both are
	// open, so nothing else in the sandbox can reach them.
	ControlDir = Dir + "/run"
	// LowerDir holds the mount points of the read-only layers of every
	// target but "/"; the init overlays each at its target, then unmounts
	// them.
	LowerDir = Dir + "/lower"
	// UpperDir is where the init mounts the tmpfs that holds those
	// overlays' writable layers (unmounted again once they are mounted).
	UpperDir = Dir + "/upper"
	// SocketName, ControlSocketName, WatchdogSocketName and OOMFileName
	// are the files in ControlDir: the agent's socket, the init's own
	// host-only socket (SuspendPath; nothing else ever dials it, so no
	// request relayed to the agent can reach it), the memory watchdog's (a
	// connection tells it to look at the sandbox's memory now) and its OOM
	// counter.
	SocketName         = "agent.sock"
	ControlSocketName  = "control.sock"
	WatchdogSocketName = "watchdog.sock"
	OOMFileName        = "oom_events"
)

// Config is what the backend tells the init.
type Config struct {
	Hostname    string       `json:"hostname"`
	MemoryBytes int64        `json:"memory_bytes"` // enforced by the OOM watchdog; 0: none
	Pids        int64        `json:"pids"`         // gVisor pids cgroup limit; 0: none
	TmpBytes    int64        `json:"tmp_bytes"`    // size of /tmp
	ShmBytes    int64        `json:"shm_bytes"`    // size of /dev/shm
	OpenFiles   int64        `json:"open_files"`   // RLIMIT_NOFILE
	RootCaps    []int        `json:"root_caps"`    // capabilities root processes keep
	Seccomp     []byte       `json:"seccomp"`      // assembled filter (nsinit.EncodeProgram form)
	Agent       agent.Config `json:"agent"`
	// Mounts are the targets other than "/", parents first: an overlay of
	// Lower with its writable layer in a tmpfs of UpperBytes.
	Mounts     []Mount `json:"mounts"`
	UpperBytes int64   `json:"upper_bytes"`
	// ResolvConf, if set, becomes /etc/resolv.conf.
	ResolvConf string `json:"resolv_conf,omitempty"`
}

// Mount is a target whose read-only layers the bundle binds at Lower.
type Mount struct {
	Target string `json:"target"`
	Lower  string `json:"lower"`
}

// WriteConfig writes cfg for the init at path (a host path), readable by
// root only: it holds the sandbox's environment.
func WriteConfig(path string, cfg Config) error {
	b, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encode init config: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write init config: %w", err)
	}
	return nil
}

func readConfig() (Config, error) {
	var cfg Config
	b, err := os.ReadFile(ConfigPath)
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
