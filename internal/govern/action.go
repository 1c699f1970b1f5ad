package govern

import (
	"path"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Kind is what an action does. Kinds are dotted lower-case names.
type Kind string

// The action kinds. Adding one is: a constant here, an attribute struct
// and a field on Action, and a row in kindTable (which declares its CEL
// variable).
const (
	KindSandboxCreate   Kind = "sandbox.create"
	KindLifecycle       Kind = "sandbox.lifecycle"
	KindNetworkChange   Kind = "network.change"
	KindExec            Kind = "exec"
	KindPTY             Kind = "pty"
	KindFileRead        Kind = "file.read"
	KindFileWrite       Kind = "file.write"
	KindFileRemove      Kind = "file.remove"
	KindCodeRun         Kind = "code.run"
	KindPortPreview     Kind = "port.preview"
	KindEgressConnect   Kind = "egress.connect"
	KindSecretUse       Kind = "secret.use"
	KindTemplateBuild   Kind = "template.build"
	KindTemplateImport  Kind = "template.import"
	KindKeyChange       Kind = "key.change"
	KindPrincipalChange Kind = "principal.change"
	KindMCPCall         Kind = "mcp.call"
	KindMCPAdmin        Kind = "mcp.admin"
	KindLLMCall         Kind = "llm.call"
	KindMemoryWrite     Kind = "memory.write"
	KindAgentTool       Kind = "agent.tool"
	KindSnapshot        Kind = "snapshot.change"
	KindAgentChange     Kind = "agent.change"
	KindVolume          Kind = "volume.change"
	KindWebhookChange   Kind = "webhook.change"
)

// Surfaces: the door an action came through.
const (
	SurfaceAPI    = "api"
	SurfaceE2B    = "e2b"
	SurfaceMCP    = "mcp"
	SurfaceLLM    = "llm"
	SurfaceEgress = "egress"
	SurfaceHook   = "hook"
)

// kindSpec is one row of the kind registry: the CEL variable that holds
// the kind's attributes, its Go type (declared to CEL, so a rule that
// names an attribute the type lacks does not compile), and how to get the
// attributes of an action (never nil: the zero value when the door left
// them out).
type kindSpec struct {
	kind  Kind
	cel   string
	typ   reflect.Type
	attrs func(*Action) any
}

// kindTable is the kind registry. Several kinds may share a variable (exec
// and pty both describe a command line).
var kindTable = []kindSpec{
	{KindSandboxCreate, "create", reflect.TypeFor[SandboxCreate](), func(a *Action) any { return orZero(a.Create) }},
	{KindLifecycle, "lifecycle", reflect.TypeFor[Lifecycle](), func(a *Action) any { return orZero(a.Lifecycle) }},
	{KindNetworkChange, "network", reflect.TypeFor[Network](), func(a *Action) any { return orZero(a.Network) }},
	{KindExec, "exec", reflect.TypeFor[Exec](), func(a *Action) any { return orZero(a.Exec) }},
	{KindPTY, "exec", reflect.TypeFor[Exec](), func(a *Action) any { return orZero(a.Exec) }},
	{KindFileRead, "file", reflect.TypeFor[File](), func(a *Action) any { return orZero(a.File) }},
	{KindFileWrite, "file", reflect.TypeFor[File](), func(a *Action) any { return orZero(a.File) }},
	{KindFileRemove, "file", reflect.TypeFor[File](), func(a *Action) any { return orZero(a.File) }},
	{KindCodeRun, "code", reflect.TypeFor[Code](), func(a *Action) any { return orZero(a.Code) }},
	{KindPortPreview, "port", reflect.TypeFor[Port](), func(a *Action) any { return orZero(a.Port) }},
	{KindEgressConnect, "egress", reflect.TypeFor[Egress](), func(a *Action) any { return orZero(a.Egress) }},
	{KindSecretUse, "secret", reflect.TypeFor[Secret](), func(a *Action) any { return orZero(a.Secret) }},
	{KindTemplateBuild, "template", reflect.TypeFor[Template](), func(a *Action) any { return orZero(a.Template) }},
	{KindTemplateImport, "template", reflect.TypeFor[Template](), func(a *Action) any { return orZero(a.Template) }},
	{KindKeyChange, "key", reflect.TypeFor[KeyChange](), func(a *Action) any { return orZero(a.Key) }},
	{KindPrincipalChange, "subject", reflect.TypeFor[PrincipalChange](), func(a *Action) any { return orZero(a.Subject) }},
	{KindMCPCall, "mcp", reflect.TypeFor[MCPCall](), func(a *Action) any { return orZero(a.MCP) }},
	{KindMCPAdmin, "mcp_admin", reflect.TypeFor[MCPAdmin](), func(a *Action) any { return orZero(a.MCPAdmin) }},
	{KindLLMCall, "llm", reflect.TypeFor[LLMCall](), func(a *Action) any { return orZero(a.LLM) }},
	{KindMemoryWrite, "memory", reflect.TypeFor[MemoryWrite](), func(a *Action) any { return orZero(a.Memory) }},
	{KindAgentTool, "agent_tool", reflect.TypeFor[AgentTool](), func(a *Action) any { return orZero(a.AgentTool) }},
	{KindSnapshot, "snapshot", reflect.TypeFor[Snapshot](), func(a *Action) any { return orZero(a.Snapshot) }},
	{KindAgentChange, "hosted_agent", reflect.TypeFor[AgentChange](), func(a *Action) any { return orZero(a.HostedAgent) }},
	{KindVolume, "volume", reflect.TypeFor[VolumeChange](), func(a *Action) any { return orZero(a.Volume) }},
	{KindWebhookChange, "webhook", reflect.TypeFor[WebhookChange](), func(a *Action) any { return orZero(a.Webhook) }},
}

// kinds indexes kindTable.
var kinds = func() map[Kind]*kindSpec {
	m := make(map[Kind]*kindSpec, len(kindTable))
	for i := range kindTable {
		m[kindTable[i].kind] = &kindTable[i]
	}
	return m
}()

func orZero[T any](p *T) *T {
	if p == nil {
		return new(T)
	}
	return p
}

// Kinds returns every known kind in registry order.
func Kinds() []Kind {
	out := make([]Kind, len(kindTable))
	for i, k := range kindTable {
		out[i] = k.kind
	}
	return out
}

// Known reports whether k is a registered kind.
func (k Kind) Known() bool { return kinds[k] != nil }

// Action is one thing an actor asks Warden to do, described once by the
// door it came through. Doors fill the common fields and the attribute
// struct of the kind; the rest stays nil.
type Action struct {
	Kind      Kind      `json:"kind"`
	Surface   string    `json:"surface"`
	Principal Principal `json:"principal"`
	// Agent is the hosted agent acting, nil for anyone else.
	Agent     *Agent   `json:"agent,omitempty"`
	Trigger   *Trigger `json:"trigger,omitempty"`
	RequestID string   `json:"request_id,omitempty"`
	RunID     string   `json:"run_id,omitempty"`
	// SandboxID is the sandbox acted on ("" for actions on none, such as
	// key changes); Sandbox adds what the door knows about it.
	SandboxID string       `json:"sandbox_id,omitempty"`
	Sandbox   *SandboxInfo `json:"sandbox,omitempty"`
	// Time is when the action was asked for; Decide sets it when zero.
	Time time.Time `json:"time"`

	Create    *SandboxCreate   `json:"create,omitempty"`
	Lifecycle *Lifecycle       `json:"lifecycle,omitempty"`
	Network   *Network         `json:"network,omitempty"`
	Exec      *Exec            `json:"exec,omitempty"`
	File      *File            `json:"file,omitempty"`
	Code      *Code            `json:"code,omitempty"`
	Port      *Port            `json:"port,omitempty"`
	Egress    *Egress          `json:"egress,omitempty"`
	Secret    *Secret          `json:"secret,omitempty"`
	Template  *Template        `json:"template,omitempty"`
	Key       *KeyChange       `json:"key,omitempty"`
	Subject   *PrincipalChange `json:"subject,omitempty"`
	MCP       *MCPCall         `json:"mcp,omitempty"`
	MCPAdmin  *MCPAdmin        `json:"mcp_admin,omitempty"`
	LLM       *LLMCall         `json:"llm,omitempty"`
	Memory    *MemoryWrite     `json:"memory,omitempty"`
	AgentTool *AgentTool       `json:"agent_tool,omitempty"`
	Snapshot  *Snapshot        `json:"snapshot,omitempty"`
	// HostedAgent: a hosted agent's definition changed or a run started by
	// hand (the CEL variable is hosted_agent: agent is the actor's).
	HostedAgent *AgentChange `json:"hosted_agent,omitempty"`
	// Volume: a persistent volume created, resized, deleted, snapshotted
	// or restored (CEL: volume).
	Volume *VolumeChange `json:"volume,omitempty"`
	// Webhook: an outgoing webhook endpoint changed or tested.
	Webhook *WebhookChange `json:"webhook,omitempty"`

	// Payload is content the guard stage screens that is no attribute (a
	// file write's body, an exec's environment values); never recorded.
	Payload *Payload `json:"-"`

	// Credential is the door's authenticated identity (for the native
	// API, its *auth.Identity), opaque to this package: the access stage
	// the daemon installs reads it. It is never recorded.
	Credential any `json:"-"`

	// attached are the policies attached to the principal (attach.go),
	// set by Decide.
	attached map[string]bool
}

// Principal is the actor: the agent when one acts.
type Principal struct {
	ID     string            `json:"id"`
	Kind   string            `json:"kind"`            // user or agent
	Owner  string            `json:"owner,omitempty"` // the principal that owns this one ("" for none)
	Groups []string          `json:"groups,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

// Agent is a hosted agent definition acting through its principal.
type Agent struct {
	ID    string `json:"id"`
	Name  string `json:"name,omitempty"`
	Owner string `json:"owner,omitempty"`
}

// Trigger is what started a hosted agent's run.
type Trigger struct {
	Kind string `json:"kind"` // slack, schedule, webhook, manual, api
	ID   string `json:"id,omitempty"`
	User string `json:"user,omitempty"` // the human principal behind it, if any
}

// SandboxInfo is what a door knows about the sandbox acted on.
type SandboxInfo struct {
	ID       string            `json:"id"`
	Name     string            `json:"name,omitempty"`
	Template string            `json:"template,omitempty"`
	Owner    string            `json:"owner,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// SandboxCreate are the attributes of sandbox.create (CEL: create).
type SandboxCreate struct {
	Name      string   `json:"name,omitempty"`
	Template  string   `json:"template"`
	Isolation string   `json:"isolation,omitempty"` // the backend: native, gvisor
	Limits    Limits   `json:"limits"`
	Network   Network  `json:"network"`
	EnvKeys   []string `json:"env_keys,omitempty"`
}

// Limits are a new sandbox's resource limits (zero: the default).
type Limits struct {
	CPUMillis      int64 `json:"cpu_millis,omitempty"`
	MemoryMB       int64 `json:"memory_mb,omitempty"`
	DiskMB         int64 `json:"disk_mb,omitempty"`
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
}

// Network is a sandbox's network policy as far as rules see it: a new
// sandbox's (create.network), or the new policy of a network.change (CEL:
// network). Allow holds each allow rule's host, or its CIDR.
type Network struct {
	Mode  string   `json:"mode,omitempty"` // none, allowlist, open...
	Allow []string `json:"allow,omitempty"`
}

// Lifecycle are the attributes of sandbox.lifecycle (CEL: lifecycle): a
// change of a sandbox's life. Op is kill, timeout (a new timeout), pause,
// resume, connect (the E2B API's connect to a running sandbox, which may
// extend its timeout; a connect that resumes a paused sandbox is resume)
// or fork.
type Lifecycle struct {
	Op string `json:"op"`
	// TimeoutSeconds is the timeout asked for (timeout, and resume,
	// connect and fork when they set one), else 0.
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
	// Count is the number of forks (fork), else 0.
	Count int64 `json:"count,omitempty"`
	// Cold is a pause that drops the sandbox's memory (E2B's
	// keepMemory: false): resumed, it boots again.
	Cold bool `json:"cold,omitempty"`
}

// Lifecycle operations (Lifecycle.Op).
const (
	OpKill    = "kill"
	OpTimeout = "timeout"
	OpPause   = "pause"
	OpResume  = "resume"
	OpConnect = "connect"
	OpFork    = "fork"
)

// Exec are the attributes of exec and pty (CEL: exec).
type Exec struct {
	// Cmd is the program (argv[0]); Args the rest of argv.
	Cmd  string   `json:"cmd"`
	Args []string `json:"args,omitempty"`
	// Argv is the whole command line as one string, argv joined with
	// spaces: the form regular expressions are written against.
	Argv string `json:"argv"`
	// Shell is the script when the command runs a shell with -c
	// (bash -lc "<script>", the E2B SDKs' form), "" otherwise.
	Shell   string   `json:"shell,omitempty"`
	Cwd     string   `json:"cwd,omitempty"`
	User    string   `json:"user,omitempty"`
	EnvKeys []string `json:"env_keys,omitempty"`
}

// File are the attributes of file.read, file.write and file.remove (CEL:
// file). Path is clean and absolute.
type File struct {
	Path string `json:"path"`
	Op   string `json:"op"`             // read, write, remove, list, stat, mkdir, move, watch
	Dest string `json:"dest,omitempty"` // the destination of a move
	Size int64  `json:"size,omitempty"` // bytes written, when known
	// Volume is the persistent volume copied into or out of, without a
	// sandbox (GET|PUT /v1/volumes/{name}/files; Path is then the path in
	// the volume), "" for a sandbox's files.
	Volume string `json:"volume,omitempty"`
}

// Code are the attributes of code.run (CEL: code).
type Code struct {
	Language string `json:"language"`
	Code     string `json:"code"`
}

// Port are the attributes of port.preview (CEL: port): publishing a port,
// making its preview URL, and each request proxied to it (Method and Path
// set: the HTTP method and the path the program sees, without the query;
// a WebSocket is decided once, by the request that opens it).
type Port struct {
	Port   int64  `json:"port"`
	Public bool   `json:"public,omitempty"` // reached without a key (a preview URL)
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	// Via is how a proxied request was let in: key (an API key, whose
	// principal is the action's), token (a preview URL's token, or E2B's
	// traffic or envd token), cookie, or public (no credential); "" for
	// publish and url.
	Via string `json:"via,omitempty"`
}

// Egress are the attributes of egress.connect (CEL: egress). Host is the
// name the flow is for (the TLS server name or HTTP Host the client sent,
// else a name Warden's DNS resolved to the address), else the address.
type Egress struct {
	Host   string `json:"host"`
	Port   int64  `json:"port"`
	Proto  string `json:"proto,omitempty"` // tcp or udp
	Mode   string `json:"mode,omitempty"`  // the sandbox's network mode
	SNI    string `json:"sni,omitempty"`
	Method string `json:"method,omitempty"` // when the broker sees the request
	Path   string `json:"path,omitempty"`
}

// Secret are the attributes of secret.use (CEL: secret).
type Secret struct {
	ID    string `json:"id"`
	Name  string `json:"name,omitempty"`
	Grant string `json:"grant,omitempty"`
	Host  string `json:"host,omitempty"`
}

// Template are the attributes of template.build and template.import (CEL:
// template).
type Template struct {
	Name   string `json:"name"`
	Op     string `json:"op"`               // build or import
	Source string `json:"source,omitempty"` // the image reference or context
}

// Snapshot are the attributes of snapshot.change (CEL: snapshot): a
// filesystem snapshot made of a sandbox (create; the sandbox is the
// action's), removed (delete) or promoted to a template (promote, with the
// template's name).
type Snapshot struct {
	Op       string `json:"op"` // create, delete or promote
	Name     string `json:"name"`
	Template string `json:"template,omitempty"` // promote: the template's name
}

// VolumeChange are the attributes of volume.change (CEL: volume): a
// persistent volume created (with from_volume and snapshot when made from
// a snapshot), resized, deleted, snapshotted (snapshot), a snapshot of it
// deleted (snapshot_delete), or restored from one (restore).
type VolumeChange struct {
	Op         string `json:"op"` // create, resize, delete, snapshot, snapshot_delete, restore
	Name       string `json:"name"`
	SizeBytes  int64  `json:"size_bytes,omitempty"` // create, resize: the size asked for
	Snapshot   string `json:"snapshot,omitempty"`
	FromVolume string `json:"from_volume,omitempty"` // create from a snapshot: its volume
}

// AgentChange are the attributes of agent.change (CEL: hosted_agent): a
// hosted agent created, updated or deleted, or a run of it started through
// the API (runs started by a schedule, a webhook or Slack are the agent's
// own; what a run does is governed as the agent's principal). For create
// and update they describe the new definition.
type AgentChange struct {
	Op         string   `json:"op"` // create, update, delete or run
	Name       string   `json:"name"`
	Template   string   `json:"template,omitempty"`
	Sandbox    string   `json:"sandbox,omitempty"` // fresh or persistent
	Scopes     []string `json:"scopes,omitempty"`  // of each run's key
	MCPServers []string `json:"mcp_servers,omitempty"`
	// Secrets are the names (or IDs) of the spec's secrets, Policies the
	// policies it attaches, Team its team memory ("" none).
	Secrets  []string `json:"secrets,omitempty"`
	Policies []string `json:"policies,omitempty"`
	Team     string   `json:"team,omitempty"`
}

// WebhookChange are the attributes of webhook.change (CEL: webhook): an
// outgoing webhook endpoint created, updated or deleted through the API,
// or a test ping sent to one. For create and update they describe the new
// definition.
type WebhookChange struct {
	Op       string   `json:"op"` // create, update, delete or test
	Name     string   `json:"name"`
	URL      string   `json:"url,omitempty"`
	Host     string   `json:"host,omitempty"` // the URL's host
	Events   []string `json:"events,omitempty"`
	Outcomes []string `json:"outcomes,omitempty"`
	Enabled  bool     `json:"enabled"`
}

// KeyChange are the attributes of key.change (CEL: key).
type KeyChange struct {
	Op          string   `json:"op"` // create or revoke
	KeyID       string   `json:"key_id,omitempty"`
	PrincipalID string   `json:"principal_id,omitempty"`
	Scopes      []string `json:"scopes,omitempty"`
}

// PrincipalChange are the attributes of principal.change (CEL: subject).
type PrincipalChange struct {
	Op   string `json:"op"` // create, update, suspend, delete
	ID   string `json:"id,omitempty"`
	Kind string `json:"kind,omitempty"`
	Name string `json:"name,omitempty"`
}

// MCPAdmin are the attributes of mcp.admin (CEL: mcp_admin): a change to
// the MCP gateway's configuration through /v1/mcp (internal/api).
type MCPAdmin struct {
	// Op is create, update or delete (connector, server), grant or
	// revoke (a server to a principal), approve or reject (a tool
	// definition), credential_put, credential_delete or oauth_start (a
	// connector's OAuth flow, mcpgw's oauth.go).
	Op string `json:"op"`
	// Object is connector, server, tool or credential.
	Object string `json:"object"`
	// ID is the connector's or server's ID, or for a tool
	// "<connector>/<tool>/<hash>".
	ID string `json:"id"`
	// PrincipalID is the principal granted or revoked, or whose
	// credential is bound ("" for a shared credential).
	PrincipalID string `json:"principal_id,omitempty"`
	// Connector is the connector concerned (of a tool or credential, or
	// the kind's connector itself).
	Connector string `json:"connector,omitempty"`
	// ConnectorKind is a created or updated connector's kind; URL a
	// remote connector's URL.
	ConnectorKind string `json:"connector_kind,omitempty"`
	URL           string `json:"url,omitempty"`
	// Connectors are a created or updated server's connectors.
	Connectors []string `json:"connectors,omitempty"`
	// Tool is the tool's upstream name (approve, reject).
	Tool string `json:"tool,omitempty"`
}

// MCPCall are the attributes of mcp.call (CEL: mcp): a tools/call
// through a virtual MCP server of the gateway (internal/mcpgw).
type MCPCall struct {
	Server    string `json:"server"`    // the virtual server
	Connector string `json:"connector"` // the upstream connector
	Tool      string `json:"tool"`      // the upstream tool's name
	// Name is the name the client called (prefixed or renamed).
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments,omitempty"`
	// ArgsDigest is the hex SHA-256 of the canonical arguments: what the
	// audit log keeps instead of the arguments.
	ArgsDigest string `json:"args_digest,omitempty"`
	// ReadOnly is the tool's readOnlyHint annotation (untrusted unless the
	// connector is).
	ReadOnly bool `json:"read_only"`
	// DefHash is the hash of the tool's approved definition.
	DefHash string `json:"def_hash,omitempty"`
}

// LLMCall are the attributes of llm.call (CEL: llm): a model call through
// the LLM gateway (internal/llmgw).
type LLMCall struct {
	Provider string `json:"provider"` // the configured provider's name
	API      string `json:"api"`      // "chat", "embeddings", "responses" or "messages"
	// Model is the model the client asked for; Upstream the provider's
	// model it maps to (an alias resolved, else the same).
	Model    string `json:"model"`
	Upstream string `json:"upstream"`
	Stream   bool   `json:"stream"`
	// Tools are the names of the tools the request offers the model.
	Tools     []string `json:"tools"`
	MaxTokens int64    `json:"max_tokens"`
}

// AgentTool are the attributes of agent.tool (CEL: agent_tool): a tool an
// agent running outside Warden is about to call, as its hook reports it
// (internal/monitor; surface hook). Command, FilePath and URL are lifted
// from the input of the tools that have them (Bash; Read, Write, Edit;
// WebFetch).
type AgentTool struct {
	Client string `json:"client"` // the reporting agent: claude-code
	// Name is the tool's name as the agent calls it (Bash, Read,
	// mcp__github__create_issue); Server and Tool split an MCP tool's.
	Name     string         `json:"name"`
	Server   string         `json:"server,omitempty"`
	Tool     string         `json:"tool,omitempty"`
	Command  string         `json:"command,omitempty"`
	FilePath string         `json:"file_path,omitempty"`
	URL      string         `json:"url,omitempty"`
	Input    map[string]any `json:"input,omitempty"`
	Session  string         `json:"session,omitempty"`
	Cwd      string         `json:"cwd,omitempty"`
}

// MemoryWrite are the attributes of memory.write (CEL: memory): a write
// to an agent's memory (internal/memory). The text written is the
// action's Payload.Body, which the guard screens (target memory.write).
type MemoryWrite struct {
	Namespace string   `json:"namespace"` // the agent's (or team's) memory
	Key       string   `json:"key"`
	Op        string   `json:"op"` // remember or forget
	Tags      []string `json:"tags,omitempty"`
	Size      int64    `json:"size"` // bytes of text
}

// NewExec describes a command line: Cmd and Args from argv, Argv joined,
// and Shell when argv runs a shell with -c (sh, bash, dash, zsh, with
// options such as -l before or combined with -c). Every door describes
// command lines with it, so the same command is the same action (the same
// attributes, the same approval) whichever door it came through: a shell's
// combined short options before its script are taken apart (bash -lc X is
// described as bash -l -c X, the E2B SDKs' form; the native API's command
// runs as bash -lc X), which is the same command to the shell.
func NewExec(argv []string, cwd, user string, envKeys []string) *Exec {
	argv = shellArgv(argv)
	e := &Exec{Argv: strings.Join(argv, " "), Cwd: cwd, User: user, EnvKeys: envKeys}
	if len(argv) > 0 {
		e.Cmd = argv[0]
		e.Args = argv[1:]
	}
	e.Shell = shellScript(argv)
	return e
}

// isShell reports whether a program is a POSIX shell.
func isShell(prog string) bool {
	switch path.Base(prog) {
	case "sh", "bash", "dash", "zsh", "ash":
		return true
	}
	return false
}

// shellArgv returns argv with a shell's combined short options (-lc, -ec)
// before its script split into one argument each (-l -c). Only clusters of
// letters are split, and none with an option that takes an argument (o,
// O); the script and what follows it are left alone. argv is returned as
// is when there is nothing to split.
func shellArgv(argv []string) []string {
	if len(argv) < 3 || !isShell(argv[0]) {
		return argv
	}
	// argv[1:stop] are the options before the script: up to the first
	// argument that is none, or the first that ends them (c, or o and O,
	// whose argument follows).
	stop := len(argv)
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if len(a) < 2 || a[0] != '-' || a[1] == '-' {
			stop = i
			break
		}
		if strings.ContainsAny(a[1:], "coO") {
			stop = i + 1
			break
		}
	}
	cluster := func(a string) bool { return len(a) > 2 && a[0] == '-' && splittable(a[1:]) }
	if !slices.ContainsFunc(argv[1:stop], cluster) {
		return argv
	}
	out := make([]string, 1, len(argv)+8)
	out[0] = argv[0]
	for _, a := range argv[1:stop] {
		if !cluster(a) {
			out = append(out, a)
			continue
		}
		for _, c := range a[1:] {
			out = append(out, "-"+string(c))
		}
	}
	return append(out, argv[stop:]...)
}

// splittable reports whether an option cluster is letters only, none of
// them an option that takes an argument.
func splittable(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') || c == 'o' || c == 'O' {
			return false
		}
	}
	return true
}

func shellScript(argv []string) string {
	if len(argv) < 3 {
		return ""
	}
	if !isShell(argv[0]) {
		return ""
	}
	for i := 1; i < len(argv)-1; i++ {
		a := argv[i]
		if !strings.HasPrefix(a, "-") || strings.HasPrefix(a, "--") {
			return ""
		}
		if strings.Contains(a, "c") {
			return argv[i+1]
		}
	}
	return ""
}

// CleanPath makes a file path absolute (relative to dir, or / when dir is
// "") and clean, the form File.Path has.
func CleanPath(p, dir string) string {
	if !path.IsAbs(p) {
		if dir == "" {
			dir = "/"
		}
		p = path.Join(dir, p)
	}
	return path.Clean(p)
}

// target is what the action acts on, for approvals and audit: the
// sandbox, else the kind's object.
func (a *Action) target() string {
	switch {
	case a.Key != nil && a.Key.KeyID != "":
		return a.Key.KeyID
	case a.Subject != nil && a.Subject.ID != "":
		return a.Subject.ID
	case a.Template != nil && a.SandboxID == "":
		return a.Template.Name
	case a.Egress != nil && a.SandboxID == "":
		return a.Egress.Host
	case a.MCP != nil && a.SandboxID == "":
		return "mcp:" + a.MCP.Server + "/" + a.MCP.Name
	case a.MCPAdmin != nil && a.SandboxID == "":
		return "mcp:" + a.MCPAdmin.Object + "/" + a.MCPAdmin.ID
	case a.LLM != nil && a.SandboxID == "":
		return "llm:" + a.LLM.Provider + "/" + a.LLM.Model
	}
	if a.SandboxID == "" && a.Sandbox != nil {
		return a.Sandbox.ID
	}
	return a.SandboxID
}
