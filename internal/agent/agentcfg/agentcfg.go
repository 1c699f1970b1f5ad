// Package agentcfg holds the configuration wardend's backends hand to
// warden-agent, the wire type shared by both sides. It is a package of its
// own, with no dependencies, so that the daemon links this struct and not
// the agent's services (package agent aliases it as agent.Config).
package agentcfg

// Headers of the process service's Connect requests and responses (Warden
// extensions; package process serves them, the daemon sends them).
const (
	// SnapshotHeader, set to "1" on a Connect request with replay, ends the
	// stream once the output retained at that moment has been sent:
	// without an end event if the process was still running.
	SnapshotHeader = "Warden-Snapshot"
	// DroppedHeader is set on the response to a Connect request with
	// replay: how many bytes of output the ring buffer had already dropped
	// (oldest first) before the replayed output.
	DroppedHeader = "Warden-Output-Dropped"
)

// Config is what the agent knows about its sandbox.
type Config struct {
	DefaultUser    string            `json:"default_user"`         // "user" when empty
	DefaultWorkdir string            `json:"default_workdir"`      // the user's home when empty
	Env            map[string]string `json:"env,omitempty"`        // sandbox-wide environment
	DiskBytes      int64             `json:"disk_bytes,omitempty"` // the disk limit, named when a write does not fit
	// Sudo lets the sandbox's own processes run commands as root through
	// the agent (package internal/agent/sudo): the agent installs the sudo
	// program and listens for it. Only backends that isolate the agent set
	// it (never a build step: the program would land in the template).
	Sudo bool `json:"sudo,omitempty"`
}
