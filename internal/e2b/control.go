package e2b

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/template"
)

// call is one control-plane request as the route adapter sees it.
type call struct {
	r      *http.Request
	reqID  string
	ident  auth.Identity
	target string
	detail map[string]any
	// governed is the decided action the call's audit event records.
	governed []govern.Decided
}

type handlerFunc func(w http.ResponseWriter, c *call) error

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	type rt struct {
		pattern, action string
		scope           auth.Scope
		h               handlerFunc
	}
	for _, r := range []rt{
		{"POST /sandboxes", "e2b.sandbox.create", auth.ScopeSandboxesCreate, s.create},
		{"POST /v2/sandboxes", "e2b.sandbox.create", auth.ScopeSandboxesCreate, s.create},
		{"GET /sandboxes", "e2b.sandbox.list", auth.ScopeSandboxesRead, s.list},
		{"GET /v2/sandboxes", "e2b.sandbox.list", auth.ScopeSandboxesRead, s.list},
		{"GET /sandboxes/{id}", "e2b.sandbox.get", auth.ScopeSandboxesRead, s.get},
		{"DELETE /sandboxes/{id}", "e2b.sandbox.kill", auth.ScopeSandboxesDelete, s.kill},
		{"POST /sandboxes/{id}/timeout", "e2b.sandbox.timeout", auth.ScopeSandboxesCreate, s.setTimeout},
		{"POST /sandboxes/{id}/pause", "e2b.sandbox.pause", auth.ScopeSandboxesCreate, s.pause},
		{"POST /sandboxes/{id}/resume", "e2b.sandbox.resume", auth.ScopeSandboxesCreate, s.resume},
		{"POST /sandboxes/{id}/connect", "e2b.sandbox.connect", auth.ScopeSandboxesCreate, s.connect},
		{"POST /v2/sandboxes/{id}/connect", "e2b.sandbox.connect", auth.ScopeSandboxesCreate, s.connect},
		{"GET /sandboxes/{id}/metrics", "e2b.sandbox.metrics", auth.ScopeSandboxesRead, s.metrics},
		{"POST /sandboxes/{id}/fork", "e2b.sandbox.fork", auth.ScopeSandboxesCreate, s.fork},
		{"PUT /sandboxes/{id}/network", "e2b.network.update", auth.ScopeSandboxesCreate, s.setNetwork},
		{"POST /sandboxes/{id}/snapshots", "e2b.snapshot.create", auth.ScopeSandboxesCreate, s.createSnapshot},
		{"GET /snapshots", "e2b.snapshot.list", auth.ScopeSandboxesRead, s.listSnapshots},
		{"DELETE /templates/{id}", "e2b.snapshot.delete", auth.ScopeSandboxesCreate, s.deleteTemplate},
	} {
		mux.Handle(r.pattern, traceRoute(r.pattern, s.serve(r.action, r.scope, r.h))) // telemetry.go
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errf(http.StatusNotFound, "%s %s is not supported by Warden's E2B API", r.Method, r.URL.Path))
	})
	return mux
}

// serve authenticates X-API-Key (a Warden key), checks the scope, runs h,
// writes E2B's error body on failure and audits the call. Unauthenticated
// attempts are logged, not audited, like on the main API.
func (s *Server) serve(action string, scope auth.Scope, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &call{r: r, reqID: w.Header().Get("X-Request-Id"), target: r.PathValue("id"), detail: map[string]any{}}
		key := strings.TrimSpace(r.Header.Get("X-API-Key"))
		header := ""
		if key != "" {
			header = "Bearer " + key
		} else {
			header = r.Header.Get("Authorization") // Bearer wdn_... also works
		}
		ident, err := s.cfg.Auth.Authenticate(r.Context(), header)
		if errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("%w: %w", auth.ErrInvalidKey, err)
		}
		if err != nil {
			if errors.Is(err, auth.ErrUnauthenticated) {
				s.log.Warn("e2b: authentication failed", "request_id", c.reqID, "method", r.Method, "path", r.URL.Path,
					"remote", r.RemoteAddr, "reason", err.Error())
			}
			writeError(w, toAPIError(err))
			return
		}
		c.ident = ident
		if !ident.Has(scope) {
			c.detail["missing_scope"] = string(scope)
			err = &apiError{status: http.StatusForbidden, message: "missing scope " + string(scope), denied: true}
		} else {
			err = h(w, c)
		}
		outcome := govern.AuditSuccess
		if err != nil {
			ae := toAPIError(err)
			if ae.status >= 500 {
				s.log.Error("e2b request failed", "request_id", c.reqID, "path", r.URL.Path, "err", err)
			}
			writeError(w, ae)
			outcome = govern.AuditError
			if ae.denied {
				outcome = govern.AuditDenied
			}
			c.detail["status"] = ae.status
		}
		s.appendAudit(r.Context(), c.reqID, ident.Principal.ID, action, c.target, outcome, c.detail, c.governed)
	})
}

// sandboxFor returns a live sandbox the caller may act on. Someone else's
// sandbox is reported exactly like a missing one (404), and so is an ended
// one, as E2B does.
func (s *Server) sandboxFor(c *call, id string) (store.Sandbox, error) {
	c.target = id
	sb, err := s.cfg.Manager.Get(c.r.Context(), id)
	if errors.Is(err, sandbox.ErrNotFound) {
		return sb, errf(http.StatusNotFound, "sandbox %q not found", id)
	}
	if err != nil {
		return sb, err
	}
	if !c.ident.CanAccessSandbox(sb.Owner) {
		c.detail["owner"] = sb.Owner
		return store.Sandbox{}, &apiError{status: http.StatusNotFound, message: fmt.Sprintf("sandbox %q not found", id), denied: true}
	}
	if st := sandbox.State(sb.State); st.Terminal() || st == sandbox.StateStopping {
		return sb, errf(http.StatusNotFound, "sandbox %q not found", id)
	}
	return sb, nil
}

// decode reads an optional JSON body (unknown fields are ignored: the SDKs
// send more than Warden uses).
func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return errf(http.StatusBadRequest, "read body: %v", err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errf(http.StatusBadRequest, "invalid request body: %v", err)
	}
	return nil
}

// templateFor maps E2B template names to Warden templates.
func templateFor(name string) string {
	switch name {
	case "", "base", "code-interpreter-v1", "code-interpreter", "code-interpreter-beta":
		return template.BaseName
	}
	return name
}

// sandboxJSON is E2B's Sandbox (create, connect).
type sandboxJSON struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// detailJSON is E2B's SandboxDetail and, without the token, ListedSandbox.
type detailJSON struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
	ClientID        string            `json:"clientID"`
	StartedAt       time.Time         `json:"startedAt"`
	EndAt           time.Time         `json:"endAt"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Domain          *string           `json:"domain,omitempty"`
	CPUCount        int64             `json:"cpuCount"`
	MemoryMB        int64             `json:"memoryMB"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"`
	Lifecycle       *lifecycleJSON    `json:"lifecycle,omitempty"`
}

type lifecycleJSON struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

const clientID = "warden"

func (s *Server) domain() *string {
	if s.cfg.Domain == "" {
		return nil
	}
	d := s.cfg.Domain
	return &d
}

// tokensFor returns the tokens a caller may receive: they grant exec and
// file access through the proxy, so only keys holding sandboxes:exec get
// them. The tokens are bound to an API key (see EnvdToken): a sandbox bound
// to none yet, or to a key that is no longer valid (revoked, or its
// principal gone), is bound to the caller's key first, which changes its
// tokens, so whoever held the old ones keeps nothing.
func (s *Server) tokensFor(c *call, sb store.Sandbox) (envd string, traffic *string, err error) {
	if !c.ident.Has(auth.ScopeSandboxesExec) {
		return "", nil, nil
	}
	if sb.EnvdKey != c.ident.Key.ID {
		rebind := sb.EnvdKey == ""
		if !rebind {
			err := s.cfg.Auth.CheckKey(c.r.Context(), sb.EnvdKey)
			if err != nil && !errors.Is(err, auth.ErrUnauthenticated) {
				return "", nil, err
			}
			rebind = err != nil
		}
		if rebind {
			nb, err := s.cfg.Manager.BindEnvdKey(c.r.Context(), sb.ID, sb.EnvdKey, c.ident.Key.ID)
			if errors.Is(err, sandbox.ErrKeyChanged) {
				nb, err = s.cfg.Manager.Get(c.r.Context(), sb.ID) // bound meanwhile
			}
			if err != nil {
				return "", nil, err
			}
			c.detail["envd_key_bound"] = nb.EnvdKey
			sb = nb
		}
	}
	t := s.TrafficToken(sb)
	return s.EnvdToken(sb), &t, nil
}

func (s *Server) toSandbox(c *call, sb store.Sandbox) (sandboxJSON, error) {
	envd, traffic, err := s.tokensFor(c, sb)
	if err != nil {
		return sandboxJSON{}, err
	}
	return sandboxJSON{SandboxID: sb.ID, TemplateID: sb.Template, Alias: sb.Template, ClientID: clientID,
		EnvdVersion: EnvdVersion, EnvdAccessToken: envd, TrafficAccessToken: traffic, Domain: s.domain()}, nil
}

func e2bState(st string) string {
	if sandbox.State(st) == sandbox.StatePaused {
		return "paused"
	}
	return "running"
}

func toDetail(sb store.Sandbox) detailJSON {
	cpu := (sb.CPUMillis + 999) / 1000
	if cpu < 1 {
		cpu = 1
	}
	md := sb.Metadata
	if md == nil {
		md = map[string]string{}
	}
	started := sb.StartedAt
	if started.IsZero() {
		started = sb.CreatedAt
	}
	return detailJSON{SandboxID: sb.ID, TemplateID: sb.Template, Alias: sb.Template, ClientID: clientID,
		StartedAt: started.UTC(), EndAt: endAt(sb), EnvdVersion: EnvdVersion,
		CPUCount: cpu, MemoryMB: sb.MemoryMB, DiskSizeMB: sb.DiskMB, Metadata: md, State: e2bState(sb.State)}
}

// endAt is a sandbox's endAt: when its timeout will end it while it runs,
// and, as E2B's API reports a paused sandbox (the time of its snapshot),
// when it was paused: a paused sandbox's countdown is stopped, so it must
// not show a time that keeps coming nearer.
func endAt(sb store.Sandbox) time.Time {
	if sandbox.State(sb.State) != sandbox.StatePaused {
		return sb.ExpiresAt.UTC()
	}
	if at := sb.Lifecycle.PausedAt; !at.IsZero() {
		return at.UTC()
	}
	// Paused before the pause time was recorded: the expiry less the
	// frozen countdown, a fixed time no later than the pause.
	if at := sb.ExpiresAt.Add(-sb.Lifecycle.ResumeTimeout); at.Before(time.Now()) {
		return at.UTC()
	}
	return sb.StartedAt.UTC()
}

// newSandboxRequest is NewSandbox (2.45) and NewSandboxV2 (2.51); fields
// Warden does not implement are accepted and ignored (see docs/e2b.md).
type newSandboxRequest struct {
	TemplateID *string           `json:"templateID"`
	Timeout    *int64            `json:"timeout"`
	Metadata   map[string]string `json:"metadata"`
	EnvVars    map[string]string `json:"envVars"`
	AutoPause  *bool             `json:"autoPause"`
	// AutoPauseMemory false makes the pause at the timeout keep only the
	// files (sandbox.Manager.PauseCold): resumed, the sandbox boots again.
	// E2B's default (true) keeps the memory.
	AutoPauseMemory *bool `json:"autoPauseMemory"`
	AutoResume      *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	Network *struct {
		AllowPublicTraffic *bool    `json:"allowPublicTraffic"`
		AllowOut           []string `json:"allowOut"`
		DenyOut            []string `json:"denyOut"`
	} `json:"network"`
	AllowInternetAccess *bool `json:"allow_internet_access"`
}

// networkPolicy maps E2B's network options onto a Warden policy:
// allow_internet_access false is none and true is open; network.allowOut
// (domains, IPs, CIDRs) is an allowlist on ports 80 and 443, with
// network.denyOut accepted only as the catch-all (0.0.0.0/0, ::/0) that an
// allowlist implies. Left out, the sandbox gets none: Warden denies by
// default where E2B allows.
func (q *newSandboxRequest) networkPolicy() (*network.Policy, error) {
	if q.Network != nil && len(q.Network.AllowOut) > 0 {
		p := &network.Policy{Mode: network.ModeAllowlist}
		for _, a := range q.Network.AllowOut {
			r := network.Rule{}
			if pfx, err := netip.ParsePrefix(a); err == nil {
				r.CIDR = pfx.String()
			} else if ip, err := netip.ParseAddr(a); err == nil {
				r.CIDR = netip.PrefixFrom(ip, ip.BitLen()).String()
			} else {
				r.Host = a
			}
			p.Allow = append(p.Allow, r)
		}
		for _, d := range q.Network.DenyOut {
			if d != "0.0.0.0/0" && d != "::/0" {
				return nil, errf(http.StatusBadRequest, "network.denyOut %q: Warden supports denyOut only as 0.0.0.0/0 with allowOut (everything else is denied by the allowlist)", d)
			}
		}
		return p, nil
	}
	if q.Network != nil && len(q.Network.DenyOut) > 0 {
		return nil, errf(http.StatusBadRequest, "network.denyOut without allowOut is not supported by Warden; use allow_internet_access: false")
	}
	if q.AllowInternetAccess != nil && *q.AllowInternetAccess {
		return &network.Policy{Mode: network.ModeOpen}, nil
	}
	return nil, nil
}

func (s *Server) create(w http.ResponseWriter, c *call) error {
	var q newSandboxRequest
	if err := decode(c.r, &q); err != nil {
		return err
	}
	if q.TemplateID == nil {
		return errf(http.StatusBadRequest, "templateID is required")
	}
	// The manager bounds the timeout (max_timeout) and reads 0 as its
	// default: an explicit 0 goes to it as -1 s, which it refuses.
	var timeout time.Duration
	if q.Timeout != nil {
		timeout = time.Duration(*q.Timeout) * time.Second
		if *q.Timeout == 0 {
			timeout = -time.Second
		}
	}
	autoPause := q.AutoPause != nil && *q.AutoPause
	autoResume := q.AutoResume != nil && q.AutoResume.Enabled
	if autoResume && !autoPause {
		return errf(http.StatusBadRequest, "autoResume needs autoPause")
	}
	autoPauseCold := autoPause && q.AutoPauseMemory != nil && !*q.AutoPauseMemory
	if autoPauseCold && autoResume {
		// As E2B: a filesystem-only pause is resumed only when asked.
		return errf(http.StatusBadRequest, "autoResume cannot go with autoPauseMemory false: a sandbox paused without its memory is resumed only by connect or resume")
	}
	if autoPause {
		c.detail["auto_pause"] = true
		c.detail["auto_resume"] = autoResume
		if autoPauseCold {
			c.detail["auto_pause_memory"] = false
		}
	}
	tmpl, err := s.snapshotTemplate(c, *q.TemplateID) // snapshots.go
	if err != nil {
		return err
	}
	c.detail["template"] = tmpl
	if *q.TemplateID != tmpl {
		c.detail["e2b_template"] = *q.TemplateID
	}
	if len(q.EnvVars) > 0 {
		c.detail["env_keys"] = slices.Sorted(func(yield func(string) bool) {
			for k := range q.EnvVars {
				if !yield(k) {
					return
				}
			}
		})
	}
	netp, err := q.networkPolicy()
	if err != nil {
		return err
	}
	if netp != nil {
		c.detail["network"] = string(netp.Mode)
	}
	if err := s.governCall(c, &govern.Action{Kind: govern.KindSandboxCreate, Create: createAttrs(tmpl, q, netp)}); err != nil {
		return err
	}
	sb, err := s.cfg.Manager.Create(c.r.Context(), sandbox.CreateRequest{
		Owner: c.ident.Principal.ID, Template: tmpl, Env: q.EnvVars, Metadata: q.Metadata, Timeout: timeout,
		AutoPause: autoPause, AutoResume: autoResume, AutoPauseCold: autoPauseCold, Network: netp, EnvdKey: c.ident.Key.ID,
	})
	if err != nil {
		return err
	}
	c.target = sb.ID
	if q.Network != nil && q.Network.AllowPublicTraffic != nil && *q.Network.AllowPublicTraffic {
		s.public.set(sb.ID, true)
		c.detail["public_traffic"] = true
	}
	out, err := s.toSandbox(c, sb)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (s *Server) get(w http.ResponseWriter, c *call) error {
	sb, err := s.sandboxFor(c, c.r.PathValue("id"))
	if err != nil {
		return err
	}
	d := toDetail(sb)
	if d.EnvdAccessToken, _, err = s.tokensFor(c, sb); err != nil {
		return err
	}
	d.Domain = s.domain()
	d.Lifecycle = &lifecycleJSON{OnTimeout: "kill", AutoResume: sb.Lifecycle.AutoResume}
	if sb.Lifecycle.AutoPause {
		d.Lifecycle.OnTimeout = "pause"
	}
	writeJSON(w, http.StatusOK, d)
	return nil
}

func (s *Server) kill(w http.ResponseWriter, c *call) error {
	id := c.r.PathValue("id")
	sb, err := s.sandboxFor(c, id)
	if err != nil {
		return err
	}
	if err := s.governLifecycle(c, sb, govern.NewLifecycle(govern.OpKill, 0, 0, false)); err != nil {
		return err
	}
	if err := s.cfg.Manager.Kill(c.r.Context(), id, "killed (e2b api)"); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) setTimeout(w http.ResponseWriter, c *call) error {
	var q struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decode(c.r, &q); err != nil {
		return err
	}
	if q.Timeout == nil {
		return errf(http.StatusBadRequest, "timeout is required")
	}
	id := c.r.PathValue("id")
	sb, err := s.sandboxFor(c, id)
	if err != nil {
		return err
	}
	c.detail["timeout_seconds"] = *q.Timeout
	if err := s.governLifecycle(c, sb, govern.NewLifecycle(govern.OpTimeout, *q.Timeout, 0, false)); err != nil {
		return err
	}
	if _, err := s.cfg.Manager.SetTimeout(c.r.Context(), id, time.Duration(*q.Timeout)*time.Second); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) pause(w http.ResponseWriter, c *call) error {
	id := c.r.PathValue("id")
	sb, err := s.sandboxFor(c, id)
	if err != nil {
		return err
	}
	// {"memory": false} (the SDK's pause({keepMemory: false})) keeps only
	// the files: resumed, the sandbox boots again (PauseCold).
	var q struct {
		Memory *bool `json:"memory"`
	}
	if err := decode(c.r, &q); err != nil {
		return err
	}
	if sandbox.State(sb.State) == sandbox.StatePaused {
		return errf(http.StatusConflict, "sandbox %q is already paused", id)
	}
	pause, what := s.cfg.Manager.Pause, "pause sandboxes"
	if q.Memory != nil && !*q.Memory {
		pause, what = s.cfg.Manager.PauseCold, "pause sandboxes without their memory"
	}
	if err := s.governLifecycle(c, sb, govern.NewLifecycle(govern.OpPause, 0, 0, q.Memory != nil && !*q.Memory)); err != nil {
		return err
	}
	if _, err := pause(c.r.Context(), id); err != nil {
		if errors.Is(err, backend.ErrUnsupported) {
			return &apiError{status: http.StatusNotImplemented, message: "this Warden backend cannot " + what, cause: err}
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// resume is the deprecated POST /sandboxes/{id}/resume: 201 from paused,
// 409 when already running.
func (s *Server) resume(w http.ResponseWriter, c *call) error {
	return s.wake(w, c, false)
}

// connect resumes a paused sandbox (201) or returns a running one (200);
// its timeout only extends the sandbox's life.
func (s *Server) connect(w http.ResponseWriter, c *call) error {
	return s.wake(w, c, true)
}

func (s *Server) wake(w http.ResponseWriter, c *call, isConnect bool) error {
	// {"memory": false} (the SDK's connect with onResume 'reboot') boots a
	// paused sandbox again on its files, whatever its pause kept
	// (ResumeCold); a no-op for a running one.
	var q struct {
		Timeout *int64 `json:"timeout"`
		Memory  *bool  `json:"memory"`
	}
	if err := decode(c.r, &q); err != nil {
		return err
	}
	// Refuse a bad timeout before resuming (the manager's bounds).
	if q.Timeout != nil {
		if err := s.cfg.Manager.CheckTimeout(time.Duration(*q.Timeout) * time.Second); err != nil {
			return err
		}
	}
	id := c.r.PathValue("id")
	sb, err := s.sandboxFor(c, id)
	if err != nil {
		return err
	}
	// Resuming a paused sandbox is resume; connecting to a running one
	// (its tokens, maybe a longer timeout) is connect.
	op := govern.OpResume
	if isConnect && sandbox.State(sb.State) == sandbox.StateRunning {
		op = govern.OpConnect
	}
	var timeoutSeconds int64
	if q.Timeout != nil {
		timeoutSeconds = *q.Timeout
	}
	cold := q.Memory != nil && !*q.Memory
	if err := s.governLifecycle(c, sb, govern.NewLifecycle(op, timeoutSeconds, 0, cold)); err != nil {
		return err
	}
	status := http.StatusOK
	switch sandbox.State(sb.State) {
	case sandbox.StatePaused:
		resume, what := s.cfg.Manager.Resume, "resume sandboxes"
		if cold {
			resume, what = s.cfg.Manager.ResumeCold, "resume sandboxes without their memory (a cold boot)"
			c.detail["memory"] = false
		}
		if sb, err = resume(c.r.Context(), id); err != nil {
			if errors.Is(err, backend.ErrUnsupported) {
				return &apiError{status: http.StatusNotImplemented, message: "this Warden backend cannot " + what, cause: err}
			}
			return err
		}
		status = http.StatusCreated
	case sandbox.StateRunning:
		if !isConnect {
			return errf(http.StatusConflict, "sandbox %q is already running", id)
		}
	default:
		return errf(http.StatusConflict, "sandbox %q is %s; try again in a moment", id, sb.State)
	}
	if q.Timeout != nil {
		d := time.Duration(*q.Timeout) * time.Second
		if isConnect && time.Until(sb.ExpiresAt) >= d {
			// connect only extends
		} else if sb, err = s.cfg.Manager.SetTimeout(c.r.Context(), id, d); err != nil {
			return err
		}
	}
	out, err := s.toSandbox(c, sb)
	if err != nil {
		return err
	}
	writeJSON(w, status, out)
	return nil
}

// list implements GET /v2/sandboxes (and the older GET /sandboxes) with
// state, metadata, template, startedAfter, order, limit and nextToken.
func (s *Server) list(w http.ResponseWriter, c *call) error {
	q := c.r.URL.Query()
	f := store.SandboxFilter{Limit: store.MaxPageSize}
	states := q.Get("state")
	if states == "" {
		states = "running,paused"
	}
	for _, st := range strings.Split(states, ",") {
		switch strings.TrimSpace(st) {
		case "running":
			f.States = append(f.States, string(sandbox.StateRunning), string(sandbox.StateStarting))
		case "paused":
			f.States = append(f.States, string(sandbox.StatePaused))
		default:
			return errf(http.StatusBadRequest, "state %q is not running or paused", st)
		}
	}
	md, err := parseMetadataQuery(q.Get("metadata"))
	if err != nil {
		return err
	}
	f.Metadata = md
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return errf(http.StatusBadRequest, "limit must be between 1 and 100")
		}
		limit = n
	}
	order := cmp.Or(q.Get("order"), "desc")
	if order != "asc" && order != "desc" {
		return errf(http.StatusBadRequest, "order must be asc or desc")
	}
	var after time.Time
	if v := q.Get("startedAfter"); v != "" {
		if after, err = time.Parse(time.RFC3339, v); err != nil {
			return errf(http.StatusBadRequest, "startedAfter is not RFC 3339: %v", err)
		}
	}
	tmpl := q.Get("template")
	var cur *cursor
	if v := q.Get("nextToken"); v != "" {
		if cur, err = parseCursor(v); err != nil {
			return err
		}
	}
	if !c.ident.Has(auth.ScopeSandboxesAll) {
		f.Owner = c.ident.Principal.ID
	}
	// Collect every match (bounded by the number of live sandboxes), then
	// sort and cut a page with a keyset cursor (startedAt, sandboxID).
	var all []detailJSON
	for {
		page, next, err := s.cfg.Manager.List(c.r.Context(), f)
		if err != nil {
			return err
		}
		for _, sb := range page {
			d := toDetail(sb)
			if tmpl != "" && sb.Template != tmpl && sb.Template != templateFor(tmpl) {
				continue
			}
			if !after.IsZero() && d.StartedAt.Before(after) {
				continue
			}
			all = append(all, d)
		}
		if next == "" {
			break
		}
		f.PageToken = next
	}
	less := func(a, b detailJSON) int {
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), strings.Compare(a.SandboxID, b.SandboxID))
	}
	if order == "asc" {
		slices.SortFunc(all, less)
	} else {
		slices.SortFunc(all, func(a, b detailJSON) int { return less(b, a) })
	}
	if cur != nil {
		i := 0
		for i < len(all) {
			k := less(all[i], detailJSON{StartedAt: cur.t, SandboxID: cur.id})
			if (order == "asc" && k > 0) || (order == "desc" && k < 0) {
				break
			}
			i++
		}
		all = all[i:]
	}
	c.detail["count"] = min(len(all), limit)
	if len(all) > limit {
		last := all[limit-1]
		w.Header().Set("X-Next-Token", cursor{t: last.StartedAt, id: last.SandboxID}.String())
		all = all[:limit]
	}
	if all == nil {
		all = []detailJSON{}
	}
	writeJSON(w, http.StatusOK, all)
	return nil
}

// parseMetadataQuery decodes the list metadata filter as E2B's reference
// server does: the router already decoded the query once; unescape again,
// split on & and =, then unescape key and value.
func parseMetadataQuery(v string) (map[string]string, error) {
	if v == "" {
		return nil, nil
	}
	dec, err := url.QueryUnescape(v)
	if err != nil {
		return nil, errf(http.StatusBadRequest, "invalid metadata filter: %v", err)
	}
	out := map[string]string{}
	for _, pair := range strings.Split(dec, "&") {
		kv := strings.Split(pair, "=")
		if len(kv) != 2 {
			return nil, errf(http.StatusBadRequest, "invalid metadata filter %q: want key=value", pair)
		}
		k, err1 := url.QueryUnescape(kv[0])
		val, err2 := url.QueryUnescape(kv[1])
		if err := cmp.Or(err1, err2); err != nil {
			return nil, errf(http.StatusBadRequest, "invalid metadata filter: %v", err)
		}
		out[k] = val
	}
	return out, nil
}

// cursor is the opaque X-Next-Token: the last item of the page.
type cursor struct {
	t  time.Time
	id string
}

func (c cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.t.UnixNano(), 10) + "|" + c.id))
}

func parseCursor(v string) (*cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err == nil {
		ts, id, ok := strings.Cut(string(b), "|")
		if n, perr := strconv.ParseInt(ts, 10, 64); ok && perr == nil && id != "" {
			return &cursor{t: time.Unix(0, n).UTC(), id: id}, nil
		}
	}
	return nil, errf(http.StatusBadRequest, "nextToken is not a token this server issued")
}
