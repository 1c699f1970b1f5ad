package warden

import (
	"fmt"
	"io/fs"
	"strconv"
	"time"
)

// SandboxState is a sandbox's lifecycle state.
//
//	starting -> running -> (paused <-> running) -> stopping -> stopped
//	any -> failed (start failed); lost (a daemon restart could not re-attach)
type SandboxState string

// Sandbox states.
const (
	StateStarting SandboxState = "starting"
	StateRunning  SandboxState = "running"
	StatePaused   SandboxState = "paused"
	StateStopping SandboxState = "stopping"
	StateStopped  SandboxState = "stopped"
	StateFailed   SandboxState = "failed"
	StateLost     SandboxState = "lost"
)

// Terminal reports whether s is a state a sandbox never leaves: stopped, failed or lost.
func (s SandboxState) Terminal() bool {
	return s == StateStopped || s == StateFailed || s == StateLost
}

// Sandbox is the Sandbox schema.
type Sandbox struct {
	ID string `json:"id"`
	// Name is the name its owner gave the sandbox ("" for none): usable wherever its ID
	// is while the sandbox is live.
	Name      string            `json:"name"`
	Template  string            `json:"template"`
	State     SandboxState      `json:"state"`
	Owner     string            `json:"owner"`
	Backend   string            `json:"backend"`
	CPUMillis int               `json:"cpu_millis"`
	MemoryMB  int               `json:"memory_mb"`
	DiskMB    int               `json:"disk_mb"`
	Metadata  map[string]string `json:"metadata"`
	// EnvKeys names the environment variables set at creation; values are never returned.
	EnvKeys   []string  `json:"env_keys"`
	User      string    `json:"user"`
	Workdir   string    `json:"workdir"`
	CreatedAt time.Time `json:"created_at"`
	StartedAt time.Time `json:"started_at"`
	// ExpiresAt is when the sandbox times out; zero while it is paused (its
	// countdown does not run; see ResumeTimeoutSeconds).
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// ResumeTimeoutSeconds, while the sandbox is paused, is the timeout it
	// gets when resumed: the countdown the pause froze, at least its timeout.
	// Zero otherwise.
	ResumeTimeoutSeconds int `json:"resume_timeout_seconds,omitempty"`
	// EndedAt is nil until the sandbox reaches a terminal state.
	EndedAt *time.Time `json:"ended_at"`
	// EndReason is empty until the sandbox reaches a terminal state.
	EndReason string `json:"end_reason"`
	// AutoPause and AutoResume are the sandbox's lifecycle (see CreateSandboxRequest).
	AutoPause  bool `json:"auto_pause"`
	AutoResume bool `json:"auto_resume"`
	// Sudo reports whether the sandbox's processes may use sudo.
	Sudo bool `json:"sudo"`
	// Network is the sandbox's network policy.
	Network NetworkPolicy `json:"network"`
	// Lifetimes (zero: none; see CreateSandboxRequest).
	IdleTimeoutSeconds     int    `json:"idle_timeout_seconds,omitempty"`
	OnIdle                 string `json:"on_idle,omitempty"`
	MaxLifetimeSeconds     int    `json:"max_lifetime_seconds,omitempty"`
	PausedRetentionSeconds int    `json:"paused_retention_seconds,omitempty"`
}

// CreateSandboxRequest is the body of [Client.CreateSandbox]. Zero fields take the daemon's
// defaults.
type CreateSandboxRequest struct {
	// Name is an optional name, usable wherever the sandbox's ID is while it is live: 1 to
	// 63 lowercase letters, digits and '-', starting and ending with a letter or digit, not
	// starting with "sb-". Unique among the owner's live sandboxes (409 conflict when in use).
	Name     string `json:"name,omitempty"`
	Template string `json:"template,omitempty"`
	// Snapshot starts the sandbox from the caller's snapshot (name or ID) instead of a
	// template; not with Template.
	Snapshot string `json:"snapshot,omitempty"`
	// Isolation is the backend: "native" or "gvisor" (gVisor's user-space kernel, which
	// pauses to disk and can fork). Empty: the daemon's default.
	Isolation string `json:"isolation,omitempty"`
	CPUMillis int    `json:"cpu_millis,omitempty"`
	MemoryMB  int    `json:"memory_mb,omitempty"`
	DiskMB    int    `json:"disk_mb,omitempty"`
	// Env is set for every process in the sandbox. Values are never returned.
	Env      map[string]string `json:"env,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// TimeoutSeconds until the sandbox is killed; the daemon's default is 300.
	TimeoutSeconds int    `json:"timeout_seconds,omitempty"`
	User           string `json:"user,omitempty"`
	Workdir        string `json:"workdir,omitempty"`
	// AutoPause pauses the sandbox at its timeout instead of killing it; a paused
	// sandbox does not time out, and a resume gives back what was left of its
	// countdown, at least the timeout (Sandbox.ResumeTimeoutSeconds).
	AutoPause bool `json:"auto_pause,omitempty"`
	// AutoResume resumes a paused sandbox when a call (exec, files, code) reaches it.
	AutoResume bool `json:"auto_resume,omitempty"`
	// Sudo, when set to false, leaves sudo out of the sandbox; nil or true lets its
	// processes run commands as root with sudo (through the agent; sandbox root has no
	// capabilities).
	Sudo *bool `json:"sudo,omitempty"`
	// Network is the sandbox's network policy; nil means none (loopback only).
	Network *NetworkPolicy `json:"network,omitempty"`
	// Volumes are the caller's persistent volumes to mount (see [Client.CreateVolume]):
	// read-write by this sandbox alone, or read-only by any number.
	Volumes []VolumeMount `json:"volumes,omitempty"`
	// IdleTimeoutSeconds pauses the sandbox (or kills it, OnIdle "kill") after that long
	// without activity; a call wakes a sandbox paused so. Without TimeoutSeconds the sandbox
	// then has no countdown.
	IdleTimeoutSeconds int    `json:"idle_timeout_seconds,omitempty"`
	OnIdle             string `json:"on_idle,omitempty"`
	// MaxLifetimeSeconds kills the sandbox that long after its creation (0: unlimited).
	MaxLifetimeSeconds int `json:"max_lifetime_seconds,omitempty"`
	// PausedRetentionSeconds deletes the sandbox once paused that long (0: the daemon's).
	PausedRetentionSeconds int `json:"paused_retention_seconds,omitempty"`
}

// ForkRequest is the body of [Client.ForkSandbox]. Zero fields take defaults.
type ForkRequest struct {
	// Count is how many sandboxes to make, 1..16 (default 1).
	Count int `json:"count,omitempty"`
	// TimeoutSeconds until each fork is killed (default: the source's timeout).
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// Metadata is added to the source's (which gains forked_from=<source id>).
	Metadata map[string]string `json:"metadata,omitempty"`
	// Name is the fork's name (as [CreateSandboxRequest.Name]); only with Count 1. A fork
	// without one has none.
	Name string `json:"name,omitempty"`
}

// ListOptions filters and pages [Client.ListSandboxes].
type ListOptions struct {
	// State keeps only sandboxes in this state.
	State SandboxState
	// States keeps only sandboxes in one of these states (with State, in any of them).
	States []SandboxState
	// Metadata keeps only sandboxes whose metadata holds every pair.
	Metadata map[string]string
	// Limit is the page size, 1..1000; the daemon's default is 50.
	Limit int
	// PageToken is the NextPageToken of the previous page.
	PageToken string
}

// SandboxPage is one page of [Client.ListSandboxes].
type SandboxPage struct {
	Sandboxes []Sandbox `json:"sandboxes"`
	// NextPageToken is empty on the last page.
	NextPageToken string `json:"next_page_token"`
}

// Usage is a sandbox's resource usage.
type Usage struct {
	CPUNanos    int64 `json:"cpu_nanos"`
	MemoryBytes int64 `json:"memory_bytes"`
	MemoryPeak  int64 `json:"memory_peak"`
	PIDs        int64 `json:"pids"`
	DiskBytes   int64 `json:"disk_bytes"`
	OOMEvents   int64 `json:"oom_events"`
}

// ExecRequest describes a process to start. Set exactly one of Cmd and Command.
type ExecRequest struct {
	// Cmd is the program and its arguments, run directly.
	Cmd []string `json:"cmd,omitempty"`
	// Command is a shell line, run by /bin/bash -lc.
	Command string            `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Cwd defaults to the sandbox's workdir.
	Cwd string `json:"cwd,omitempty"`
	// User defaults to the sandbox's user.
	User string `json:"user,omitempty"`
	// Stdin keeps the process's stdin open for [Client.SendStdin]. [Client.Exec] sets it
	// from [ExecIO].Stdin.
	Stdin bool `json:"stdin,omitempty"`
	// Tag labels the process in [Client.Processes].
	Tag string `json:"tag,omitempty"`
	// TimeoutSeconds kills the process after that long; 0 means no deadline.
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
}

// Process event types.
const (
	EventStart  = "start"
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventPTY    = "pty"
	EventEnd    = "end"
	EventError  = "error"
)

// ProcessEvent is one event of a process stream. Type says which fields are set: start
// (PID), stdout, stderr and pty (Data), end (ExitCode, Signal, Status, Error). An error
// event is returned by [ProcessStream.Next] as an *Error, not as an event.
type ProcessEvent struct {
	Type string `json:"type"`
	PID  int    `json:"pid,omitempty"`
	// Data is the output, already base64-decoded.
	Data     []byte `json:"data,omitempty"`
	ExitCode int    `json:"exit_code,omitempty"`
	Signal   int    `json:"signal,omitempty"`
	Status   string `json:"status,omitempty"`
	Error    string `json:"error,omitempty"`
	// Code and Message are set on error events.
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// ExitResult is how a process ended.
type ExitResult struct {
	// ExitCode is the exit status; -1 when the process was killed by a signal.
	ExitCode int
	// Signal is the number of the signal that killed the process, or 0.
	Signal int
	// Status is a human-readable exit status, such as "exit status 1".
	Status string
	// Error says why the process could not run or was killed (such as a timeout).
	Error string
}

// Success reports whether the process exited with status 0.
func (r ExitResult) Success() bool { return r.ExitCode == 0 && r.Signal == 0 && r.Error == "" }

// ProcessInfo is one entry of [Client.Processes].
type ProcessInfo struct {
	PID    int      `json:"pid"`
	Tag    string   `json:"tag"`
	Cmd    []string `json:"cmd"`
	User   string   `json:"user"`
	Exited bool     `json:"exited"`
}

// Signal names a signal [Client.Signal] can send.
type Signal string

// Signals the API accepts.
const (
	SIGHUP  Signal = "SIGHUP"
	SIGINT  Signal = "SIGINT"
	SIGQUIT Signal = "SIGQUIT"
	SIGKILL Signal = "SIGKILL"
	SIGUSR1 Signal = "SIGUSR1"
	SIGUSR2 Signal = "SIGUSR2"
	SIGTERM Signal = "SIGTERM"
	SIGCONT Signal = "SIGCONT"
	SIGSTOP Signal = "SIGSTOP"
)

// Entry types.
const (
	EntryFile    = "file"
	EntryDir     = "dir"
	EntrySymlink = "symlink"
)

// Entry is a file, directory or symbolic link in a sandbox.
type Entry struct {
	Name string `json:"name"`
	Path string `json:"path"`
	// Type is EntryFile, EntryDir or EntrySymlink.
	Type string `json:"type"`
	Size int64  `json:"size"`
	// Mode holds the permission bits in octal, such as "0644"; see [Entry.FileMode].
	Mode          string    `json:"mode"`
	Owner         string    `json:"owner"`
	Group         string    `json:"group"`
	ModifiedAt    time.Time `json:"modified_at"`
	SymlinkTarget string    `json:"symlink_target"`
}

// IsDir reports whether the entry is a directory.
func (e Entry) IsDir() bool { return e.Type == EntryDir }

// FileMode returns the entry's permission bits and type as an fs.FileMode.
func (e Entry) FileMode() (fs.FileMode, error) {
	bits, err := strconv.ParseUint(e.Mode, 8, 32)
	if err != nil {
		return 0, fmt.Errorf("parse mode %q: %w", e.Mode, err)
	}
	// Octal setuid/setgid/sticky bits map onto fs.FileMode's own flags.
	m := fs.FileMode(bits) & fs.ModePerm
	if bits&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if bits&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if bits&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	switch e.Type {
	case EntryDir:
		m |= fs.ModeDir
	case EntrySymlink:
		m |= fs.ModeSymlink
	}
	return m, nil
}

// Watch event kinds.
const (
	WatchCreate = "create"
	WatchWrite  = "write"
	WatchRemove = "remove"
	WatchRename = "rename"
	WatchChmod  = "chmod"
)

// WatchEvent is one change seen by [Client.Watch].
type WatchEvent struct {
	// Type is "event" for changes; the stream's start event is consumed by Watch.
	Type string `json:"type"`
	// Event is WatchCreate, WatchWrite, WatchRemove, WatchRename or WatchChmod.
	Event string `json:"event"`
	// Name is the changed path, relative to the watched directory.
	Name    string `json:"name"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// Presign operations.
const (
	PresignRead  = "read"
	PresignWrite = "write"
)

// PresignRequest is the body of [Client.Presign].
type PresignRequest struct {
	Path string `json:"path"`
	// Op is PresignRead (a GET URL) or PresignWrite (a PUT URL).
	Op string `json:"op"`
	// ExpiresSeconds is the URL's lifetime; the daemon's default is 300.
	ExpiresSeconds int    `json:"expires_seconds,omitempty"`
	User           string `json:"user,omitempty"`
}

// PresignedURL is a URL that reads or writes one file without an API key.
type PresignedURL struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Preview is a signed URL to a sandbox port, from [Client.PreviewURL].
type Preview struct {
	// URL reaches the port by path on the daemon's own address:
	// .../v1/sandboxes/{id}/ports/{port}/proxy/?warden_token=...
	URL string `json:"url"`
	// HostURL reaches it by host, {port}-{id}.{preview domain}, when the daemon has a
	// preview domain; empty otherwise. Each port is then its own browser origin.
	HostURL   string    `json:"host_url,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
	// Public reports whether the port is published (needs no token at all).
	Public bool `json:"public"`
}

// Port is whether a sandbox port is public, from [Client.PublishPort], with its URLs
// (which need an API key or a token unless the port is public).
type Port struct {
	SandboxID string `json:"sandbox_id"`
	Port      int    `json:"port"`
	Public    bool   `json:"public"`
	URL       string `json:"url"`
	HostURL   string `json:"host_url,omitempty"`
}

// Principal kinds.
const (
	KindUser  = "user"
	KindAgent = "agent"
)

// Principal is a user or agent identity.
type Principal struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	Name string `json:"name"`
	// CreatedBy is empty for the first admin.
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
}

// CreatePrincipalRequest is the body of [Client.CreatePrincipal].
type CreatePrincipalRequest struct {
	// Kind is KindUser or KindAgent.
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// API key scopes.
const (
	ScopeSandboxesCreate = "sandboxes:create"
	ScopeSandboxesRead   = "sandboxes:read"
	ScopeSandboxesExec   = "sandboxes:exec"
	ScopeSandboxesDelete = "sandboxes:delete"
	ScopeSandboxesAll    = "sandboxes:all"
	ScopeFilesRead       = "files:read"
	ScopeFilesWrite      = "files:write"
	ScopeKeysManage      = "keys:manage"
	ScopeAuditRead       = "audit:read"
	ScopeMetricsRead     = "metrics:read" // GET /metrics
	// Governance: policies:write and approvals:decide are never held by an
	// agent principal, not even through admin.
	ScopePoliciesRead    = "policies:read"
	ScopePoliciesWrite   = "policies:write"
	ScopeApprovalsDecide = "approvals:decide"
	// The MCP gateway: mcp:admin (never held by an agent principal)
	// manages connectors, virtual servers, grants and tool approvals;
	// mcp:use calls the virtual servers granted to the key's principal.
	ScopeMCPAdmin = "mcp:admin"
	ScopeMCPUse   = "mcp:use"
	// llm:use calls models through the LLM gateway (/llm/...).
	ScopeLLMUse = "llm:use"
	// monitor:read reads the Agent Monitor's timelines; monitor:write
	// reports the key's own events (ingest, Claude Code hooks).
	ScopeMonitorRead  = "monitor:read"
	ScopeMonitorWrite = "monitor:write"
	ScopeAdmin        = "admin"
)

// APIKey is an API key's public record; the secret is never returned after creation.
type APIKey struct {
	ID          string    `json:"id"`
	Prefix      string    `json:"prefix"`
	PrincipalID string    `json:"principal_id"`
	Name        string    `json:"name"`
	Scopes      []string  `json:"scopes"`
	CreatedAt   time.Time `json:"created_at"`
	// RevokedAt is nil while the key is valid.
	RevokedAt *time.Time `json:"revoked_at"`
}

// CreateKeyRequest is the body of [Client.CreateKey].
type CreateKeyRequest struct {
	// PrincipalID defaults to the caller.
	PrincipalID string   `json:"principal_id,omitempty"`
	Name        string   `json:"name,omitempty"`
	Scopes      []string `json:"scopes"`
}

// CreatedKey is a new API key with its secret, which is shown only once.
type CreatedKey struct {
	// Key is the full secret, wdn_<id>_<secret>.
	Key    string `json:"key"`
	APIKey APIKey `json:"api_key"`
}

// Identity is the caller as [Client.Whoami] reports it.
type Identity struct {
	Principal Principal `json:"principal"`
	Key       APIKey    `json:"key"`
}

// Audit outcomes.
const (
	OutcomeSuccess = "success"
	OutcomeDenied  = "denied"
	OutcomeError   = "error"
)

// AuditEvent is one entry of the hash-chained audit log.
type AuditEvent struct {
	Seq         int64          `json:"seq"`
	Time        time.Time      `json:"time"`
	RequestID   string         `json:"request_id"`
	PrincipalID string         `json:"principal_id"`
	Action      string         `json:"action"`
	Target      string         `json:"target"`
	Outcome     string         `json:"outcome"`
	Detail      map[string]any `json:"detail"`
	PrevHash    string         `json:"prev_hash"`
	Hash        string         `json:"hash"`
}

// AuditQuery filters and pages [Client.ListAudit].
type AuditQuery struct {
	// After keeps events with a greater Seq.
	After int64
	// Limit is the page size, 1..1000; the daemon's default is 100.
	Limit int
	// Target keeps events acting on this object ID.
	Target string
	// Principal keeps events caused by this principal ID.
	Principal string
}

// AuditPage is one page of [Client.ListAudit].
type AuditPage struct {
	Events []AuditEvent `json:"events"`
	// NextAfter is the After of the next page.
	NextAfter int64 `json:"next_after"`
}

// Audit problem kinds.
const (
	ProblemModified    = "modified"
	ProblemMissing     = "missing"
	ProblemReordered   = "reordered"
	ProblemBrokenChain = "broken_chain"
)

// VerifyProblem is one inconsistency found by [Client.VerifyAudit].
type VerifyProblem struct {
	Seq     int64  `json:"seq"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// VerifyReport is the result of [Client.VerifyAudit].
type VerifyReport struct {
	OK       bool            `json:"ok"`
	Checked  int64           `json:"checked"`
	Problems []VerifyProblem `json:"problems"`
	// Pruned is how many of the oldest events audit retention deleted
	// (events 1 to Pruned); the check starts after them.
	Pruned int64 `json:"pruned,omitempty"`
}

// AuditAnchor is where the retained audit log starts (see
// [Client.AuditAnchor]); Size is 0 when no event was ever deleted.
type AuditAnchor struct {
	// Size events (1 to Size) were deleted by retention.
	Size int64 `json:"size"`
	// Hash is event Size's hash, the first retained event's PrevHash.
	Hash string `json:"hash,omitempty"`
	// Checkpoint is the signed checkpoint of exactly Size events.
	Checkpoint *AuditAnchorCheckpoint `json:"checkpoint,omitempty"`
	// Nodes are Merkle subtree hashes of the deleted events' tree,
	// "level/index" to base64 (auditcheck.ParseAnchor reads them).
	Nodes    map[string]string `json:"nodes"`
	PrunedAt time.Time         `json:"pruned_at,omitzero"`
}

// AuditAnchorCheckpoint is a signed checkpoint: its number and note.
type AuditAnchorCheckpoint struct {
	N    int64  `json:"n"`
	Note string `json:"note"`
}

// Health is the daemon's health report.
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version"`
	// Backends lists the isolation backends ready for new sandboxes, the default first.
	Backends []string `json:"backends,omitempty"`
}
