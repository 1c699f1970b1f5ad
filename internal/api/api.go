// Package api is wardend's HTTP API: the router, the middleware and one
// handler per operation of spec/openapi.yaml, the source of truth for paths,
// bodies, status codes and error codes.
//
// Handlers have the signature func(w, r) error. They return errors instead
// of writing them; one adapter (serve) writes every error response through
// apierr.Write and appends the audit event of the call. Streams (NDJSON
// process output and watches) decide their status before the first line;
// a failure after that is sent as an "error" event.
//
// Middleware, outermost first:
//
//  1. request ID: X-Request-Id taken from the client when sane, else made
//     up; set on the response and carried in the context for logs and error
//     bodies;
//  2. access log and metrics: one slog line per request (method, path,
//     route, status, duration, principal, request ID) and the request
//     counter and latency histogram by route pattern;
//  3. panic recovery: a panicking handler is logged with its stack and
//     answered 500 internal when nothing was written yet;
//  4. preview hosts: with Config.PreviewDomain set, a request for
//     {port}-{id}.{domain} goes to the sandbox port proxy (preview.go),
//     never to the router;
//  5. path hygiene: a URL path with empty, "." or ".." segments is a 400
//     (ServeMux would redirect it in plain text);
//  6. the router (net/http ServeMux patterns); unknown routes and methods
//     get a JSON 404;
//  7. per route, in serve: authentication (Bearer API key, 401), the
//     route's scope (403 naming the scope), the handler (which reads JSON
//     bodies through a 1 MiB limit, 413, and checks sandbox ownership: a
//     sandbox the caller may not see is 404, not 403), then the error
//     response and the audit event.
//
// Every call that changes something or reads a sandbox's contents appends
// one audit event (see the action names in routes); other calls are
// audited only when they are denied.
package api

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/warden-sandbox/warden/internal/agents"
	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/build"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/image"
	"github.com/warden-sandbox/warden/internal/memory"
	"github.com/warden-sandbox/warden/internal/monitor"
	"github.com/warden-sandbox/warden/internal/mw"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/secrets"
	"github.com/warden-sandbox/warden/internal/snapshot"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/template"
	"github.com/warden-sandbox/warden/internal/volume"
	"github.com/warden-sandbox/warden/internal/webhook"
)

// Limits of request bodies and parameters.
const (
	// MaxJSONBody bounds every JSON request body (413 beyond it).
	MaxJSONBody = 1 << 20
	// MaxStdinBody bounds one POST .../stdin body (413 beyond it).
	MaxStdinBody = 1 << 20
	// maxPath bounds a sandbox path, in bytes.
	maxPath = 4096
	// maxExecTimeout bounds ExecRequest.timeout_seconds.
	maxExecTimeout = 365 * 24 * 3600
	// maxPresignLifetime bounds PresignRequest.expires_seconds.
	maxPresignLifetime = 7 * 24 * 3600
	// defaultPresignLifetime is the default PresignRequest.expires_seconds.
	defaultPresignLifetime = 300
)

// Config configures a Server. Manager, Store, Auth and Audit are required.
type Config struct {
	Manager *sandbox.Manager
	Store   store.Store
	Auth    *auth.Authenticator
	// Audit writes each call's audit event and reads the log back (the
	// governed path's last step; govern.NewAuditLog over the audit logger).
	Audit *govern.AuditLog
	// Logger receives the access log and error causes; slog.Default()
	// when nil.
	Logger *slog.Logger
	// PresignKey is the HMAC-SHA256 key of presigned URLs. When empty a
	// random key is made, so presigned URLs do not survive a restart.
	PresignKey []byte
	// PublicURL is the base of presigned URLs (scheme://host[:port]);
	// when empty it is taken from each presign request's Host.
	PublicURL string
	// Version is reported by /healthz.
	Version string
	// RateLimit is each principal's sustained request rate per second and
	// RateBurst its burst; zero means DefaultRateLimit and DefaultRateBurst,
	// a negative RateLimit turns limiting off. Over the limit a call gets
	// 429 rate_limited with Retry-After.
	RateLimit float64
	RateBurst int
	// Metrics is the registry the API's metrics are registered in and
	// /metrics serves. When nil the Server makes its own, with the Go
	// runtime and process collectors.
	Metrics *prometheus.Registry
	// Templates is the template store (list, inspect, import, remove,
	// GC); Builder builds Dockerfiles into it. Either may be nil, and the
	// routes that need it answer 503.
	Templates *template.Store
	Builder   *build.Builder
	// Images is the policy of image imports (registry imports, archives,
	// Dockerfile FROM): the registries they may reach and their limits.
	// Nil: internal/image's defaults.
	Images *image.Policy
	// Secrets is the secret store behind brokered credentials; SecretHooks
	// hands new grants to running sandboxes. Nil Secrets: the routes 503.
	Secrets     *secrets.Vault
	SecretHooks SecretHooks
	// PreviewDomain, when set, serves sandbox ports by host as well as by
	// path: requests for {port}-{sandbox id}.{PreviewDomain} are proxied
	// to that port (see preview.go).
	PreviewDomain string
	// PerSandboxLabels keeps the sandbox id label of the series of
	// collectors added with RegisterCollector; by default /metrics sums
	// them over sandboxes.
	PerSandboxLabels bool
	// PreviewWebSocketsPerPort and PreviewWebSocketsPerClient cap the
	// upgraded connections held through the preview proxy to one sandbox
	// port and from one client address (0: no cap).
	PreviewWebSocketsPerPort   int
	PreviewWebSocketsPerClient int
	// Govern is the governance engine behind /v1/policies and
	// /v1/approvals (governance.go); nil: those routes answer 503.
	Govern *govern.Engine
	// MCP is told of every change through /v1/mcp (mcp.go) so the MCP
	// gateway serves it at once; nil: nobody is told.
	MCP MCPHooks
	// Volumes keeps persistent volumes (volumes.go); nil: the routes 503.
	Volumes *volume.Manager
	// Snapshots keeps filesystem snapshots (snapshots.go); nil: the
	// routes 503.
	Snapshots *snapshot.Service
	// Agents runs hosted agents behind /v1/agents and /v1/agent-runs
	// (agents.go); nil: those routes answer 503.
	Agents *agents.Service
	// Monitor is the Agent Monitor behind /v1/monitor (monitor.go); nil:
	// those routes answer 503.
	Monitor *monitor.Monitor
	// Middleware is the installed middleware behind /v1/middleware
	// (mwadmin.go); nil: those routes answer 503.
	Middleware *mw.Registry
	// Memory is agents' memory behind /v1/agents/{name}/memory
	// (memory.go); nil: those routes answer 503.
	Memory *memory.Service
	// LLM is the LLM gateway's prices, budgets and usage behind
	// /v1/llm and /v1/usage (usage.go); nil: those routes answer 503.
	LLM LLMAdmin
	// Webhooks manages the outgoing webhooks behind /v1/webhooks
	// (webhooks.go); nil: those routes answer 503.
	Webhooks *webhook.Admin
}

// MCPHooks is what the API tells the MCP gateway (internal/mcpgw's
// *Gateway) after a change to its configuration: Invalidate after any,
// ForgetConnector (closing its upstream sessions) after a connector's
// spec or credentials changed or it was removed.
type MCPHooks interface {
	Invalidate()
	ForgetConnector(id string)
}

// Server serves the Warden HTTP API.
type Server struct {
	cfg        Config
	mgr        *sandbox.Manager
	st         store.Store
	auth       *auth.Authenticator
	audit      *govern.AuditLog
	log        *slog.Logger
	presignKey []byte
	metrics    *metrics
	limits     *limiters
	handler    http.Handler
	now        func() time.Time

	// Ports and preview URLs (preview.go).
	previewDomain string
	ports         publicPorts
	previewTr     *http.Transport
	upgrades      upgradeSlots
	anonAudit     anonAudit // bounds audit events of callers without a key (anonaudit.go)

	// volMeter measures volumes for /v1/usage and /metrics (usage_volumes.go).
	volMeter *volumeMeter
}

// New builds a Server. Set the manager's OnEnd hook to SandboxEnded so that
// the ended-sandbox metrics count every end, timeouts included.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Manager == nil:
		return nil, errors.New("new api server: no sandbox manager")
	case cfg.Store == nil:
		return nil, errors.New("new api server: no store")
	case cfg.Auth == nil:
		return nil, errors.New("new api server: no authenticator")
	case cfg.Audit == nil:
		return nil, errors.New("new api server: no audit logger")
	}
	s := &Server{
		cfg: cfg, mgr: cfg.Manager, st: cfg.Store, auth: cfg.Auth, audit: cfg.Audit,
		log: cfg.Logger, presignKey: cfg.PresignKey, now: time.Now,
		limits: newLimiters(cfg.RateLimit, cfg.RateBurst),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if len(s.presignKey) == 0 {
		s.presignKey = make([]byte, 32)
		rand.Read(s.presignKey)
		s.log.Warn("no presign key configured; presigned URLs will not survive a restart")
	}
	s.cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	s.previewDomain = strings.Trim(strings.ToLower(cfg.PreviewDomain), ".")
	s.previewTr = cfg.Manager.PortTransport()
	reg := cfg.Metrics
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m, err := newMetrics(reg, cfg.Manager, cfg.PerSandboxLabels)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	if err := s.registerVolumeUsage(); err != nil { // usage_volumes.go
		return nil, err
	}
	s.upgrades = upgradeSlots{perPort: cfg.PreviewWebSocketsPerPort, perClient: cfg.PreviewWebSocketsPerClient}
	s.handler = s.routes()
	return s, nil
}

// Handler returns the API's HTTP handler, middleware included.
func (s *Server) Handler() http.Handler { return s.handler }

// RegisterCollector adds a collector to what /metrics serves. A label
// "sandbox" of its series is summed away unless Config.PerSandboxLabels.
func (s *Server) RegisterCollector(c prometheus.Collector) error {
	return s.metrics.labelled.Register(c)
}

// MetricsHandler serves the metrics without authentication, for a
// separate listener (metrics.listen) that the operator keeps private.
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metrics.handler)
	return mux
}

// SandboxEnded records that a sandbox reached a terminal state. It is meant
// for sandbox.Config.OnEnd and does not block.
func (s *Server) SandboxEnded(sb store.Sandbox) {
	s.metrics.ended.WithLabelValues(sb.State).Inc()
	s.ports.forget(sb.ID)
	// A sandbox can end without an API call (timeout, exit, lost after a
	// restart): the daemon itself records that in the audit log.
	s.audit.Write(context.Background(), govern.AuditEvent{
		Principal: "system", Name: "sandbox.end", Target: sb.ID, Outcome: govern.AuditSuccess,
		Detail: map[string]any{"state": sb.State, "reason": sb.EndReason},
	})
}

// SandboxEvent records a sandbox's resource event (an OOM kill) in the
// audit log. Set it as the manager's OnEvent.
func (s *Server) SandboxEvent(id string, ev backend.Event) {
	s.audit.Write(context.Background(), govern.AuditEvent{
		Principal: "system", Name: "sandbox." + ev.Kind, Target: id, Outcome: govern.AuditSuccess,
		Detail: map[string]any{"kind": ev.Kind, "detail": ev.Detail},
	})
}

// route is one operation of the API.
type route struct {
	pattern string     // ServeMux pattern, "METHOD /path"
	action  string     // audit action, "<object>.<verb>"
	scope   auth.Scope // required scope; "" for none
	// ownScope, when set, also admits a caller holding it instead of
	// scope, but only for sandboxes its principal owns (sandboxFor and
	// the list filter enforce that): a key that creates sandboxes can
	// list, inspect and kill its own.
	ownScope auth.Scope
	public   bool // no authentication (system routes, presigned URLs)
	audited  bool // audit every call, not only denials
	stream   bool // streams an upload: the slower body allowance once authenticated
	// kind is the governed action the route is (docs/governance.md): its
	// handler describes the action and calls decide before doing it, and
	// serve feeds an access refusal to the engine. A route that is no
	// action says why in nokind instead (reads of metadata, administration
	// without a kind yet); TestRouteKinds requires one of
	// the two on every route.
	kind   govern.Kind
	nokind string
	h      func(http.ResponseWriter, *http.Request) error
}

// Why routes are no governed action (route.nokind).
const (
	nkSystem      = "public system route"
	nkRead        = "a read of metadata, status or output: scopes and ownership only"
	nkProcess     = "acts on a process its exec or pty started (governed when opened, not per keystroke)"
	nkCodeContext = "a code context holds no code; code.run is governed"
	nkPresigned   = "decided when the URL was signed (presign, file.read or file.write)"
	nkUnpublish   = "closes a port: it takes access away"
	nkProxyRoot   = "redirects to the proxy's root (.../proxy/), where each request is decided (port.preview)"
	nkAdmin       = "secret and template store administration: no action kind yet"
	nkGovernance  = "policies and approvals: human-only scopes; approval decisions are audited by the engine"
)

// routeTable is every operation of the API: one per (method, path) of
// spec/openapi.yaml, which TestSpecRoutes keeps equal.
func (s *Server) routeTable() []route {
	return []route{
		{pattern: "GET /healthz", public: true, nokind: nkSystem, h: s.health},
		{pattern: "GET /metrics", action: "metrics.read", scope: auth.ScopeMetricsRead, nokind: nkRead, h: s.serveMetrics},
		{pattern: "GET /v1/openapi.yaml", public: true, nokind: nkSystem, h: s.openAPI},

		{pattern: "POST /v1/sandboxes", action: "sandbox.create", scope: auth.ScopeSandboxesCreate, audited: true, kind: govern.KindSandboxCreate, h: s.createSandbox},
		{pattern: "GET /v1/sandboxes", action: "sandbox.list", scope: auth.ScopeSandboxesRead, ownScope: auth.ScopeSandboxesCreate, nokind: nkRead, h: s.listSandboxes},
		{pattern: "GET /v1/sandboxes/{id}", action: "sandbox.get", scope: auth.ScopeSandboxesRead, ownScope: auth.ScopeSandboxesCreate, nokind: nkRead, h: s.getSandbox},
		{pattern: "DELETE /v1/sandboxes/{id}", action: "sandbox.kill", scope: auth.ScopeSandboxesDelete, ownScope: auth.ScopeSandboxesCreate, audited: true, kind: govern.KindLifecycle, h: s.killSandbox},
		{pattern: "POST /v1/sandboxes/{id}/timeout", action: "sandbox.timeout", scope: auth.ScopeSandboxesCreate, audited: true, kind: govern.KindLifecycle, h: s.setTimeout},
		{pattern: "POST /v1/sandboxes/{id}/pause", action: "sandbox.pause", scope: auth.ScopeSandboxesCreate, audited: true, kind: govern.KindLifecycle, h: s.pauseSandbox},
		{pattern: "POST /v1/sandboxes/{id}/resume", action: "sandbox.resume", scope: auth.ScopeSandboxesCreate, audited: true, kind: govern.KindLifecycle, h: s.resumeSandbox},
		{pattern: "POST /v1/sandboxes/{id}/fork", action: "sandbox.fork", scope: auth.ScopeSandboxesCreate, audited: true, kind: govern.KindLifecycle, h: s.forkSandbox},
		{pattern: "GET /v1/sandboxes/{id}/usage", action: "sandbox.usage", scope: auth.ScopeSandboxesRead, ownScope: auth.ScopeSandboxesCreate, nokind: nkRead, h: s.usage},
		{pattern: "GET /v1/sandboxes/{id}/network", action: "network.get", scope: auth.ScopeSandboxesRead, ownScope: auth.ScopeSandboxesCreate, nokind: nkRead, h: s.getNetwork},
		{pattern: "PUT /v1/sandboxes/{id}/network", action: "network.update", scope: auth.ScopeSandboxesCreate, audited: true, kind: govern.KindNetworkChange, h: s.setNetwork},

		{pattern: "POST /v1/sandboxes/{id}/exec", action: "process.exec", scope: auth.ScopeSandboxesExec, audited: true, kind: govern.KindExec, h: s.exec},
		// Git helpers (git.go): each is the exec of a git command line.
		{pattern: "POST /v1/sandboxes/{id}/git/clone", action: "git.clone", scope: auth.ScopeSandboxesExec, audited: true, kind: govern.KindExec, h: s.gitClone},
		{pattern: "POST /v1/sandboxes/{id}/git/pull", action: "git.pull", scope: auth.ScopeSandboxesExec, audited: true, kind: govern.KindExec, h: s.gitRemoteOp(false)},
		{pattern: "POST /v1/sandboxes/{id}/git/commit", action: "git.commit", scope: auth.ScopeSandboxesExec, audited: true, kind: govern.KindExec, h: s.gitCommit},
		{pattern: "POST /v1/sandboxes/{id}/git/push", action: "git.push", scope: auth.ScopeSandboxesExec, audited: true, kind: govern.KindExec, h: s.gitRemoteOp(true)},
		{pattern: "GET /v1/sandboxes/{id}/git/status", action: "git.status", scope: auth.ScopeSandboxesExec, audited: true, kind: govern.KindExec, h: s.gitStatus},
		{pattern: "GET /v1/sandboxes/{id}/logs", action: "sandbox.logs", scope: auth.ScopeSandboxesRead, ownScope: auth.ScopeSandboxesCreate, audited: true, nokind: nkRead, h: s.logs},
		{pattern: "GET /v1/sandboxes/{id}/processes", action: "process.list", scope: auth.ScopeSandboxesExec, nokind: nkRead, h: s.listProcesses},
		{pattern: "GET /v1/sandboxes/{id}/processes/{pid}/stream", action: "process.stream", scope: auth.ScopeSandboxesExec, audited: true, nokind: nkProcess, h: s.streamProcess},
		{pattern: "POST /v1/sandboxes/{id}/processes/{pid}/stdin", action: "process.stdin", scope: auth.ScopeSandboxesExec, audited: true, stream: true, nokind: nkProcess, h: s.sendStdin},
		{pattern: "POST /v1/sandboxes/{id}/processes/{pid}/close-stdin", action: "process.close_stdin", scope: auth.ScopeSandboxesExec, audited: true, nokind: nkProcess, h: s.closeStdin},
		{pattern: "POST /v1/sandboxes/{id}/processes/{pid}/signal", action: "process.signal", scope: auth.ScopeSandboxesExec, audited: true, nokind: nkProcess, h: s.signal},
		{pattern: "GET /v1/sandboxes/{id}/pty", action: "process.pty", scope: auth.ScopeSandboxesExec, audited: true, kind: govern.KindPTY, h: s.pty},

		{pattern: "POST /v1/sandboxes/{id}/code/run", action: "code.run", scope: auth.ScopeSandboxesExec, audited: true, kind: govern.KindCodeRun, h: s.runCode},
		{pattern: "GET /v1/sandboxes/{id}/code/contexts", action: "code.context_list", scope: auth.ScopeSandboxesExec, nokind: nkRead, h: s.listCodeContexts},
		{pattern: "POST /v1/sandboxes/{id}/code/contexts", action: "code.context_create", scope: auth.ScopeSandboxesExec, audited: true, nokind: nkCodeContext, h: s.createCodeContext},
		{pattern: "POST /v1/sandboxes/{id}/code/contexts/{ctx}/restart", action: "code.context_restart", scope: auth.ScopeSandboxesExec, audited: true, nokind: nkCodeContext, h: s.codeContextOp(http.MethodPost, "/restart")},
		{pattern: "POST /v1/sandboxes/{id}/code/contexts/{ctx}/interrupt", action: "code.context_interrupt", scope: auth.ScopeSandboxesExec, audited: true, nokind: nkCodeContext, h: s.codeContextOp(http.MethodPost, "/interrupt")},
		{pattern: "DELETE /v1/sandboxes/{id}/code/contexts/{ctx}", action: "code.context_delete", scope: auth.ScopeSandboxesExec, audited: true, nokind: nkCodeContext, h: s.codeContextOp(http.MethodDelete, "")},

		{pattern: "GET /v1/sandboxes/{id}/files", action: "file.read", scope: auth.ScopeFilesRead, audited: true, kind: govern.KindFileRead, h: s.readFile},
		{pattern: "PUT /v1/sandboxes/{id}/files", action: "file.write", scope: auth.ScopeFilesWrite, audited: true, stream: true, kind: govern.KindFileWrite, h: s.writeFile},
		{pattern: "DELETE /v1/sandboxes/{id}/files", action: "file.remove", scope: auth.ScopeFilesWrite, audited: true, kind: govern.KindFileRemove, h: s.removeFile},
		{pattern: "GET /v1/sandboxes/{id}/fs/stat", action: "file.stat", scope: auth.ScopeFilesRead, audited: true, kind: govern.KindFileRead, h: s.stat},
		{pattern: "GET /v1/sandboxes/{id}/fs/list", action: "file.list", scope: auth.ScopeFilesRead, audited: true, kind: govern.KindFileRead, h: s.listDir},
		{pattern: "POST /v1/sandboxes/{id}/fs/mkdir", action: "file.mkdir", scope: auth.ScopeFilesWrite, audited: true, kind: govern.KindFileWrite, h: s.mkdir},
		{pattern: "POST /v1/sandboxes/{id}/fs/move", action: "file.move", scope: auth.ScopeFilesWrite, audited: true, kind: govern.KindFileWrite, h: s.move},
		{pattern: "GET /v1/sandboxes/{id}/fs/watch", action: "file.watch", scope: auth.ScopeFilesRead, audited: true, kind: govern.KindFileRead, h: s.watch},
		{pattern: "GET /v1/sandboxes/{id}/archive", action: "archive.download", scope: auth.ScopeFilesRead, audited: true, kind: govern.KindFileRead, h: s.downloadArchive},
		{pattern: "PUT /v1/sandboxes/{id}/archive", action: "archive.upload", scope: auth.ScopeFilesWrite, audited: true, stream: true, kind: govern.KindFileWrite, h: s.uploadArchive},
		// The scope (files:read or files:write) depends on the body's op.
		{pattern: "POST /v1/sandboxes/{id}/files/presign", action: "file.presign", audited: true, kind: govern.KindFileRead, h: s.presign},
		{pattern: "GET /v1/presigned/files", action: "file.presigned_read", public: true, audited: true, nokind: nkPresigned, h: s.presignedRead},
		{pattern: "PUT /v1/presigned/files", action: "file.presigned_write", public: true, audited: true, nokind: nkPresigned, h: s.presignedWrite},

		{pattern: "POST /v1/sandboxes/{id}/ports/{port}", action: "port.publish", scope: auth.ScopeSandboxesExec, audited: true, kind: govern.KindPortPreview, h: s.publishPort},
		{pattern: "DELETE /v1/sandboxes/{id}/ports/{port}", action: "port.unpublish", scope: auth.ScopeSandboxesExec, audited: true, nokind: nkUnpublish, h: s.unpublishPort},
		{pattern: "POST /v1/sandboxes/{id}/ports/{port}/url", action: "port.url", scope: auth.ScopeSandboxesExec, audited: true, kind: govern.KindPortPreview, h: s.previewURL},
		// Any method; authorised inside (API key, preview token or public port).
		{pattern: "/v1/sandboxes/{id}/ports/{port}/proxy/{path...}", action: "port.proxy", public: true, kind: govern.KindPortPreview, h: s.proxyByPath},
		{pattern: "/v1/sandboxes/{id}/ports/{port}/proxy", action: "port.proxy", public: true, nokind: nkProxyRoot, h: s.proxyRoot},

		{pattern: "GET /v1/whoami", action: "identity.whoami", nokind: nkRead, h: s.whoami},
		{pattern: "POST /v1/principals", action: "principal.create", scope: auth.ScopeAdmin, audited: true, kind: govern.KindPrincipalChange, h: s.createPrincipal},
		{pattern: "GET /v1/principals", action: "principal.list", scope: auth.ScopeAdmin, nokind: nkRead, h: s.listPrincipals},
		{pattern: "POST /v1/keys", action: "key.create", scope: auth.ScopeKeysManage, audited: true, kind: govern.KindKeyChange, h: s.createKey},
		{pattern: "GET /v1/keys", action: "key.list", scope: auth.ScopeKeysManage, nokind: nkRead, h: s.listKeys},
		{pattern: "DELETE /v1/keys/{id}", action: "key.revoke", scope: auth.ScopeKeysManage, audited: true, kind: govern.KindKeyChange, h: s.revokeKey},

		{pattern: "GET /v1/templates", action: "template.list", scope: auth.ScopeTemplatesRead, nokind: nkRead, h: s.listTemplates},
		{pattern: "GET /v1/templates/{name...}", action: "template.get", scope: auth.ScopeTemplatesRead, nokind: nkRead, h: s.getTemplate},
		{pattern: "DELETE /v1/templates/{name...}", action: "template.delete", scope: auth.ScopeTemplatesWrite, audited: true, nokind: nkAdmin, h: s.deleteTemplate},
		{pattern: "POST /v1/templates/build", action: "template.build", scope: auth.ScopeTemplatesWrite, audited: true, stream: true, kind: govern.KindTemplateBuild, h: s.buildTemplate},
		{pattern: "POST /v1/templates/import", action: "template.import", scope: auth.ScopeTemplatesWrite, audited: true, stream: true, kind: govern.KindTemplateImport, h: s.importTemplate},
		{pattern: "GET /v1/template-store/usage", action: "template.usage", scope: auth.ScopeTemplatesRead, nokind: nkRead, h: s.templateUsage},
		{pattern: "POST /v1/template-store/gc", action: "template.gc", scope: auth.ScopeTemplatesWrite, audited: true, nokind: nkAdmin, h: s.templateGC},

		{pattern: "POST /v1/secrets", action: "secret.put", scope: auth.ScopeSecretsWrite, audited: true, nokind: nkAdmin, h: s.putSecret},
		{pattern: "GET /v1/secrets", action: "secret.list", scope: auth.ScopeSecretsRead, nokind: nkRead, h: s.listSecrets},
		{pattern: "POST /v1/secrets/{id}/revoke", action: "secret.revoke", scope: auth.ScopeSecretsWrite, audited: true, nokind: nkAdmin, h: s.revokeSecret},
		{pattern: "DELETE /v1/secrets/{id}", action: "secret.delete", scope: auth.ScopeSecretsWrite, audited: true, nokind: nkAdmin, h: s.deleteSecret},
		{pattern: "POST /v1/secrets/{id}/grants", action: "secret.grant", scope: auth.ScopeSecretsWrite, audited: true, kind: govern.KindSecretUse, h: s.createGrant},
		{pattern: "GET /v1/secrets/{id}/grants", action: "secret.grant_list", scope: auth.ScopeSecretsRead, nokind: nkRead, h: s.listGrants},
		{pattern: "DELETE /v1/grants/{id}", action: "secret.grant_revoke", scope: auth.ScopeSecretsWrite, audited: true, nokind: nkAdmin, h: s.revokeGrant},

		{pattern: "POST /v1/policies", action: "policy.create", scope: auth.ScopePoliciesWrite, audited: true, nokind: nkGovernance, h: s.createPolicy},
		{pattern: "GET /v1/policies", action: "policy.list", scope: auth.ScopePoliciesRead, nokind: nkGovernance, h: s.listPolicies},
		// A dry run also needs audit:read (checked inside): it shows audit events.
		{pattern: "POST /v1/guard/test", action: "guard.test", scope: auth.ScopePoliciesRead, nokind: nkGovernance, h: s.guardTest},
		{pattern: "POST /v1/guard/eval", action: "guard.eval", scope: auth.ScopePoliciesRead, nokind: nkGovernance, h: s.guardEval},
		// Middleware (mwadmin.go): admin scope, never an agent's key.
		{pattern: "GET /v1/middleware", action: "middleware.list", scope: auth.ScopeAdmin, nokind: nkMiddleware, h: s.listMiddleware},
		{pattern: "POST /v1/middleware/test", action: "middleware.test", scope: auth.ScopeAdmin, nokind: nkMiddleware, h: s.testMiddleware},
		{pattern: "GET /v1/middleware/{name}", action: "middleware.get", scope: auth.ScopeAdmin, nokind: nkMiddleware, h: s.getMiddleware},
		{pattern: "PUT /v1/middleware/{name}", action: "middleware.put", scope: auth.ScopeAdmin, audited: true, nokind: nkMiddleware, h: s.putMiddleware},
		{pattern: "DELETE /v1/middleware/{name}", action: "middleware.delete", scope: auth.ScopeAdmin, audited: true, nokind: nkMiddleware, h: s.deleteMiddleware},
		{pattern: "POST /v1/policies/test", action: "policy.test", scope: auth.ScopePoliciesRead, audited: true, nokind: nkGovernance, h: s.testPolicy},
		{pattern: "GET /v1/policies/{id}", action: "policy.get", scope: auth.ScopePoliciesRead, nokind: nkGovernance, h: s.getPolicy},
		{pattern: "PUT /v1/policies/{id}", action: "policy.update", scope: auth.ScopePoliciesWrite, audited: true, nokind: nkGovernance, h: s.updatePolicy},
		{pattern: "DELETE /v1/policies/{id}", action: "policy.delete", scope: auth.ScopePoliciesWrite, audited: true, nokind: nkGovernance, h: s.deletePolicy},
		{pattern: "GET /v1/approvals", action: "approval.list", scope: auth.ScopeApprovalsDecide, nokind: nkGovernance, h: s.listApprovals},
		{pattern: "GET /v1/approvals/{id}", action: "approval.get", scope: auth.ScopeApprovalsDecide, nokind: nkGovernance, h: s.getApproval},
		// The engine audits each decision it records (approval.decide); the
		// route audits refusals (self-approval, not an approver, no scope).
		{pattern: "POST /v1/approvals/{id}/approve", action: "approval.decide", scope: auth.ScopeApprovalsDecide, nokind: nkGovernance, h: s.approve},
		{pattern: "POST /v1/approvals/{id}/reject", action: "approval.decide", scope: auth.ScopeApprovalsDecide, nokind: nkGovernance, h: s.reject},

		// The MCP gateway's configuration (mcp.go): mcp:admin; mcp:use sees
		// the servers granted to its principal and binds its own credentials.
		{pattern: "POST /v1/mcp/connectors", action: "mcp.connector_create", scope: auth.ScopeMCPAdmin, audited: true, kind: govern.KindMCPAdmin, h: s.createConnector},
		{pattern: "GET /v1/mcp/connectors", action: "mcp.connector_list", scope: auth.ScopeMCPAdmin, nokind: nkRead, h: s.listConnectors},
		{pattern: "GET /v1/mcp/connectors/{id}", action: "mcp.connector_get", scope: auth.ScopeMCPAdmin, nokind: nkRead, h: s.getConnector},
		{pattern: "PUT /v1/mcp/connectors/{id}", action: "mcp.connector_update", scope: auth.ScopeMCPAdmin, audited: true, kind: govern.KindMCPAdmin, h: s.updateConnector},
		{pattern: "DELETE /v1/mcp/connectors/{id}", action: "mcp.connector_delete", scope: auth.ScopeMCPAdmin, audited: true, kind: govern.KindMCPAdmin, h: s.deleteConnector},
		{pattern: "PUT /v1/mcp/connectors/{id}/credentials", action: "mcp.credential_put", scope: auth.ScopeMCPAdmin, ownScope: auth.ScopeMCPUse, audited: true, kind: govern.KindMCPAdmin, h: s.putMCPCredential},
		{pattern: "POST /v1/mcp/connectors/{id}/oauth", action: "mcp.oauth_start", scope: auth.ScopeMCPAdmin, ownScope: auth.ScopeMCPUse, audited: true, kind: govern.KindMCPAdmin, h: s.startMCPOAuth},
		{pattern: "DELETE /v1/mcp/connectors/{id}/credentials", action: "mcp.credential_delete", scope: auth.ScopeMCPAdmin, ownScope: auth.ScopeMCPUse, audited: true, kind: govern.KindMCPAdmin, h: s.deleteMCPCredential},
		{pattern: "POST /v1/mcp/servers", action: "mcp.server_create", scope: auth.ScopeMCPAdmin, audited: true, kind: govern.KindMCPAdmin, h: s.createMCPServer},
		{pattern: "GET /v1/mcp/servers", action: "mcp.server_list", scope: auth.ScopeMCPAdmin, ownScope: auth.ScopeMCPUse, nokind: nkRead, h: s.listMCPServers},
		{pattern: "GET /v1/mcp/servers/{id}", action: "mcp.server_get", scope: auth.ScopeMCPAdmin, ownScope: auth.ScopeMCPUse, nokind: nkRead, h: s.getMCPServer},
		{pattern: "PUT /v1/mcp/servers/{id}", action: "mcp.server_update", scope: auth.ScopeMCPAdmin, audited: true, kind: govern.KindMCPAdmin, h: s.updateMCPServer},
		{pattern: "DELETE /v1/mcp/servers/{id}", action: "mcp.server_delete", scope: auth.ScopeMCPAdmin, audited: true, kind: govern.KindMCPAdmin, h: s.deleteMCPServer},
		{pattern: "GET /v1/mcp/servers/{id}/grants", action: "mcp.grant_list", scope: auth.ScopeMCPAdmin, nokind: nkRead, h: s.listMCPGrants},
		{pattern: "PUT /v1/mcp/servers/{id}/grants/{principal}", action: "mcp.grant", scope: auth.ScopeMCPAdmin, audited: true, kind: govern.KindMCPAdmin, h: s.putMCPGrant},
		{pattern: "DELETE /v1/mcp/servers/{id}/grants/{principal}", action: "mcp.revoke", scope: auth.ScopeMCPAdmin, audited: true, kind: govern.KindMCPAdmin, h: s.deleteMCPGrant},
		{pattern: "GET /v1/mcp/tools", action: "mcp.tool_list", scope: auth.ScopeMCPAdmin, nokind: nkRead, h: s.listMCPTools},
		{pattern: "POST /v1/mcp/tools/{connector}/{tool}/{hash}/approve", action: "mcp.tool_approve", scope: auth.ScopeMCPAdmin, audited: true, kind: govern.KindMCPAdmin, h: s.approveMCPTool},
		{pattern: "POST /v1/mcp/tools/{connector}/{tool}/{hash}/reject", action: "mcp.tool_reject", scope: auth.ScopeMCPAdmin, audited: true, kind: govern.KindMCPAdmin, h: s.rejectMCPTool},

		// The Agent Monitor (monitor.go).
		{pattern: "POST /v1/monitor/events", action: "monitor.ingest", scope: auth.ScopeMonitorWrite, nokind: nkMonitorReport, h: s.ingestMonitorEvents},
		{pattern: "POST /v1/monitor/hooks/claude-code", action: monitor.HookAuditAction, scope: auth.ScopeMonitorWrite, nokind: nkMonitorReport, h: s.claudeCodeHook},
		{pattern: "GET /v1/monitor/events", action: "monitor.list", scope: auth.ScopeMonitorRead, nokind: nkRead, h: s.listMonitorEvents},
		{pattern: "GET /v1/monitor/events/{id}", action: "monitor.get", scope: auth.ScopeMonitorRead, nokind: nkRead, h: s.getMonitorEvent},
		{pattern: "POST /v1/monitor/events/{id}/redact", action: "monitor.redact", scope: auth.ScopeAdmin, audited: true, nokind: nkMonitorRedact, h: s.redactMonitorEvent},

		// Hosted agents (agents.go).
		{pattern: "POST /v1/agents", action: "agent.create", scope: auth.ScopeAgentsWrite, audited: true, kind: govern.KindAgentChange, h: s.createHostedAgent},
		{pattern: "GET /v1/agents", action: "agent.list", scope: auth.ScopeAgentsRead, nokind: nkRead, h: s.listHostedAgents},
		{pattern: "GET /v1/agents/{name}", action: "agent.get", scope: auth.ScopeAgentsRead, nokind: nkRead, h: s.getHostedAgent},
		{pattern: "PUT /v1/agents/{name}", action: "agent.update", scope: auth.ScopeAgentsWrite, audited: true, kind: govern.KindAgentChange, h: s.updateHostedAgent},
		{pattern: "DELETE /v1/agents/{name}", action: "agent.delete", scope: auth.ScopeAgentsWrite, audited: true, kind: govern.KindAgentChange, h: s.deleteHostedAgent},
		{pattern: "GET /v1/agents/{name}/versions", action: "agent.versions", scope: auth.ScopeAgentsRead, nokind: nkRead, h: s.listAgentVersions},
		{pattern: "POST /v1/agents/{name}/runs", action: "agent.run", scope: auth.ScopeAgentsRun, audited: true, kind: govern.KindAgentChange, h: s.startAgentRun},
		{pattern: "GET /v1/agents/{name}/runs", action: "agent.run_list", scope: auth.ScopeAgentsRead, nokind: nkRead, h: s.listAgentRuns},
		{pattern: "POST /v1/agents/{name}/webhook", action: "agent.webhook", public: true, audited: true, nokind: nkWebhook, h: s.agentWebhook},
		{pattern: "GET /v1/agent-runs/{id}", action: "agent.run_get", scope: auth.ScopeAgentsRead, nokind: nkRead, h: s.getAgentRun},
		{pattern: "GET /v1/agent-runs/{id}/logs", action: "agent.run_logs", scope: auth.ScopeAgentsRead, nokind: nkRead, h: s.agentRunLogs},
		{pattern: "POST /v1/agent-runs/{id}/cancel", action: "agent.run_cancel", scope: auth.ScopeAgentsRun, audited: true, nokind: nkAgentRun, h: s.cancelAgentRun},
		{pattern: "POST /v1/agents/{name}/slack/events", action: "agent.slack_event", public: true, nokind: nkWebhook, h: s.agentSlackEvents},
		// Any key; the handler admits the run's own key, or the owner with agents:run.
		{pattern: "POST /v1/agent-runs/{id}/reply", action: "agent.run_reply", audited: true, nokind: nkAgentRun, h: s.agentRunReply},

		// Persistent volumes (volumes.go): the caller's own, by name.
		{pattern: "POST /v1/volumes", action: "volume.create", scope: auth.ScopeSandboxesCreate, audited: true, kind: govern.KindVolume, h: s.createVolume},
		{pattern: "GET /v1/volumes", action: "volume.list", scope: auth.ScopeSandboxesRead, ownScope: auth.ScopeSandboxesCreate, nokind: nkRead, h: s.listVolumes},
		{pattern: "GET /v1/volumes/{name}", action: "volume.get", scope: auth.ScopeSandboxesRead, ownScope: auth.ScopeSandboxesCreate, nokind: nkRead, h: s.getVolume},
		{pattern: "DELETE /v1/volumes/{name}", action: "volume.delete", scope: auth.ScopeSandboxesCreate, audited: true, kind: govern.KindVolume, h: s.deleteVolume},
		{pattern: "POST /v1/volumes/{name}/resize", action: "volume.resize", scope: auth.ScopeSandboxesCreate, audited: true, kind: govern.KindVolume, h: s.resizeVolume},
		{pattern: "GET /v1/volumes/{name}/files", action: "volume.file_read", scope: auth.ScopeFilesRead, audited: true, kind: govern.KindFileRead, h: s.readVolumeFile},
		{pattern: "PUT /v1/volumes/{name}/files", action: "volume.file_write", scope: auth.ScopeFilesWrite, audited: true, stream: true, kind: govern.KindFileWrite, h: s.writeVolumeFile},
		{pattern: "POST /v1/volumes/{name}/snapshots", action: "volume.snapshot", scope: auth.ScopeSandboxesCreate, audited: true, kind: govern.KindVolume, h: s.createVolumeSnapshot},
		{pattern: "GET /v1/volumes/{name}/snapshots", action: "volume.snapshot_list", scope: auth.ScopeSandboxesRead, ownScope: auth.ScopeSandboxesCreate, nokind: nkRead, h: s.listVolumeSnapshots},
		{pattern: "DELETE /v1/volumes/{name}/snapshots/{snapshot}", action: "volume.snapshot_delete", scope: auth.ScopeSandboxesCreate, audited: true, kind: govern.KindVolume, h: s.deleteVolumeSnapshot},
		{pattern: "POST /v1/volumes/{name}/restore", action: "volume.restore", scope: auth.ScopeSandboxesCreate, audited: true, kind: govern.KindVolume, h: s.restoreVolume},
		// Filesystem snapshots (snapshots.go): the caller's own, by name or id.
		{pattern: "POST /v1/sandboxes/{id}/snapshots", action: "snapshot.create", scope: auth.ScopeSandboxesCreate, audited: true, kind: govern.KindSnapshot, h: s.createSnapshot},
		{pattern: "GET /v1/snapshots", action: "snapshot.list", scope: auth.ScopeSandboxesRead, ownScope: auth.ScopeSandboxesCreate, nokind: nkRead, h: s.listSnapshots},
		{pattern: "GET /v1/snapshots/{name}", action: "snapshot.get", scope: auth.ScopeSandboxesRead, ownScope: auth.ScopeSandboxesCreate, nokind: nkRead, h: s.getSnapshot},
		{pattern: "DELETE /v1/snapshots/{name}", action: "snapshot.delete", scope: auth.ScopeSandboxesCreate, audited: true, kind: govern.KindSnapshot, h: s.deleteSnapshot},
		{pattern: "POST /v1/snapshots/{name}/promote", action: "snapshot.promote", scope: auth.ScopeTemplatesWrite, audited: true, kind: govern.KindSnapshot, h: s.promoteSnapshot},

		// Agents' memory (memory.go): reviewed by humans.
		{pattern: "GET /v1/agents/{name}/memory", action: "memory.list", scope: auth.ScopeMemoryRead, nokind: nkRead, h: s.listMemory},
		{pattern: "GET /v1/agents/{name}/memory/entry", action: "memory.get", scope: auth.ScopeMemoryRead, nokind: nkRead, h: s.getMemory},
		{pattern: "GET /v1/agents/{name}/memory/diff", action: "memory.diff", scope: auth.ScopeMemoryRead, nokind: nkRead, h: s.diffMemory},
		{pattern: "GET /v1/agents/{name}/memory/export", action: "memory.export", scope: auth.ScopeMemoryRead, audited: true, nokind: nkRead, h: s.exportMemory},
		{pattern: "POST /v1/agents/{name}/memory/redact", action: "memory.redact", scope: auth.ScopeMemoryReview, nokind: nkMemoryRedact, h: s.redactMemory},

		{pattern: "GET /v1/audit", action: "audit.list", scope: auth.ScopeAuditRead, nokind: nkRead, h: s.listAudit},
		{pattern: "GET /v1/audit/verify", action: "audit.verify", scope: auth.ScopeAuditRead, nokind: nkRead, h: s.verifyAudit},
		{pattern: "GET /v1/audit/anchor", action: "audit.anchor", scope: auth.ScopeAuditRead, nokind: nkRead, h: s.getAuditAnchor},

		// LLM prices, budgets and usage (usage.go).
		{pattern: "GET /v1/llm/prices", action: "llm.prices_get", scope: auth.ScopeAdmin, nokind: nkUsage, h: s.getLLMPrices},
		{pattern: "PUT /v1/llm/prices", action: "llm.prices_set", scope: auth.ScopeAdmin, audited: true, nokind: nkUsage, h: s.putLLMPrices},
		{pattern: "DELETE /v1/llm/prices", action: "llm.prices_reset", scope: auth.ScopeAdmin, audited: true, nokind: nkUsage, h: s.deleteLLMPrices},
		{pattern: "GET /v1/llm/budgets", action: "llm.budgets_get", scope: auth.ScopeAdmin, nokind: nkUsage, h: s.getLLMBudgets},
		{pattern: "PUT /v1/llm/budgets", action: "llm.budgets_set", scope: auth.ScopeAdmin, audited: true, nokind: nkUsage, h: s.putLLMBudgets},
		{pattern: "DELETE /v1/llm/budgets", action: "llm.budgets_reset", scope: auth.ScopeAdmin, audited: true, nokind: nkUsage, h: s.deleteLLMBudgets},
		{pattern: "GET /v1/usage", action: "usage.get", scope: auth.ScopeAdmin, nokind: nkUsage, h: s.getUsage},

		// Outgoing webhooks (webhooks.go).
		{pattern: "GET /v1/webhooks", action: "webhook.list", scope: auth.ScopeWebhooksAdmin, nokind: nkRead, h: s.listWebhooks},
		{pattern: "POST /v1/webhooks", action: "webhook.create", scope: auth.ScopeWebhooksAdmin, audited: true, kind: govern.KindWebhookChange, h: s.createWebhook},
		{pattern: "GET /v1/webhooks/{name}", action: "webhook.get", scope: auth.ScopeWebhooksAdmin, nokind: nkRead, h: s.getWebhook},
		{pattern: "PUT /v1/webhooks/{name}", action: "webhook.update", scope: auth.ScopeWebhooksAdmin, audited: true, kind: govern.KindWebhookChange, h: s.updateWebhook},
		{pattern: "DELETE /v1/webhooks/{name}", action: "webhook.delete", scope: auth.ScopeWebhooksAdmin, audited: true, kind: govern.KindWebhookChange, h: s.deleteWebhook},
		{pattern: "POST /v1/webhooks/{name}/test", action: "webhook.test", scope: auth.ScopeWebhooksAdmin, audited: true, kind: govern.KindWebhookChange, h: s.testWebhook},
	}
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.routeTable() {
		mux.Handle(rt.pattern, s.serve(rt))
	}
	mux.Handle("/", s.serve(route{pattern: "unmatched", public: true, h: noRoute}))
	return s.requestID(s.accessLog(s.recoverPanics(limitHeaders(s.routePreviewHosts(cleanPaths(mux))))))
}

// MaxHeaderBytes bounds a request's header lines. Larger headers (up to the
// HTTP server's own MaxHeaderBytes, beyond which it answers by itself) get a
// JSON 413 payload_too_large.
const MaxHeaderBytes = 32 << 10

// limitHeaders refuses requests whose headers exceed MaxHeaderBytes.
func limitHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := len(r.RequestURI)
		for k, vs := range r.Header {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
		if n > MaxHeaderBytes {
			apierr.Write(w, r, apierr.PayloadTooLarge(fmt.Sprintf("request headers too large: %d bytes, the limit is %d", n, MaxHeaderBytes)))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// cleanPaths refuses request paths with empty, "." or ".." segments, which
// ServeMux would answer with a plain-text redirect to the cleaned path.
func cleanPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if p != "/" && (strings.Contains(p, "//") || strings.Contains(p, "/./") || strings.Contains(p, "/../") ||
			strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/..")) {
			apierr.Write(w, r, apierr.BadRequest("request path %q is not clean", truncate(p, 256)))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// noRoute answers requests no route matches. The spec has no
// method_not_allowed code, so a known path with another method is a 404 too.
func noRoute(w http.ResponseWriter, r *http.Request) error {
	return notFoundf("no route for %s %s", r.Method, r.URL.Path)
}
