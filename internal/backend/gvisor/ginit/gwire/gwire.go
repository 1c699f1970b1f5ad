// Package gwire is what wardend's gvisor backend and its in-sandbox init
// ("warden-agent gvisor-init", package ginit) share: the paths inside the
// sandbox, the files of the control directory and the init's configuration.
// It is apart from ginit so that the daemon links these and not the init
// (and through it the agent).
package gwire

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/warden-sandbox/warden/internal/agent/agentcfg"
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
	// VolumeDir holds the mount points of the sandbox's volumes as the
	// bundle binds them (VolumeDir/<i>); the init moves each to its target
	// once the layers' overlays and /tmp are mounted, so a volume under a
	// deeper target or /tmp is not covered by them.
	VolumeDir = Dir + "/vol"
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
	// RestartConfigName, in ControlDir, is the configuration for a boot on
	// a kept writable layer (the backend's cold restart), where the init's
	// earlier removal of ConfigPath is part of the layer. The init removes
	// it once read.
	RestartConfigName = "config.json"
)

// Config is what the backend tells the init.
type Config struct {
	Hostname    string          `json:"hostname"`
	MemoryBytes int64           `json:"memory_bytes"` // enforced by the OOM watchdog; 0: none
	Pids        int64           `json:"pids"`         // gVisor pids cgroup limit; 0: none
	TmpBytes    int64           `json:"tmp_bytes"`    // size of /tmp
	ShmBytes    int64           `json:"shm_bytes"`    // size of /dev/shm
	OpenFiles   int64           `json:"open_files"`   // RLIMIT_NOFILE
	RootCaps    []int           `json:"root_caps"`    // capabilities root processes keep
	Seccomp     []byte          `json:"seccomp"`      // assembled filter (sbinit.EncodeProgram form)
	Agent       agentcfg.Config `json:"agent"`
	// Mounts are the targets other than "/", parents first: an overlay of
	// Lower with its writable layer in a tmpfs of UpperBytes.
	Mounts     []Mount `json:"mounts"`
	UpperBytes int64   `json:"upper_bytes"`
	// ResolvConf, if set, becomes /etc/resolv.conf.
	ResolvConf string `json:"resolv_conf,omitempty"`
	// Volumes are the sandbox's volumes, bound by the bundle at Source (in
	// VolumeDir), to be moved to Target.
	Volumes []Volume `json:"volumes,omitempty"`
}

// Volume is a persistent volume the bundle binds at Source (nosuid, nodev,
// read-only if asked, served by the gofer) for the init to move to Target.
type Volume struct {
	Target   string `json:"target"`
	Source   string `json:"source"`
	ReadOnly bool   `json:"read_only,omitempty"`
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

// SuspendPath is the init's route (on ControlSocketName) that starts a
// suspension before a checkpoint (see ginit's suspend.go).
const SuspendPath = "/warden/suspend"

// SuspendedName is the file the init creates in the control directory once
// it holds no host socket.
const SuspendedName = "suspended"
