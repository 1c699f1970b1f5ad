package api

import (
	"cmp"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/volume"
	"github.com/warden-sandbox/warden/spec"
)

func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	return writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": s.cfg.Version, "backends": s.cfg.Manager.Backends()})
}

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/yaml")
	w.WriteHeader(http.StatusOK)
	w.Write(spec.OpenAPI)
	return nil
}

// sandboxJSON is the Sandbox schema.
type sandboxJSON struct {
	ID string `json:"id"`
	// Name is the owner's name for the sandbox, "" when it has none.
	Name      string            `json:"name"`
	Template  string            `json:"template"`
	State     string            `json:"state"`
	Owner     string            `json:"owner"`
	Backend   string            `json:"backend"`
	CPUMillis int64             `json:"cpu_millis"`
	MemoryMB  int64             `json:"memory_mb"`
	DiskMB    int64             `json:"disk_mb"`
	Metadata  map[string]string `json:"metadata"`
	EnvKeys   []string          `json:"env_keys"`
	User      string            `json:"user"`
	Workdir   string            `json:"workdir"`
	CreatedAt time.Time         `json:"created_at"`
	StartedAt time.Time         `json:"started_at"`
	// ExpiresAt is null while the sandbox is paused: its countdown stops,
	// and ResumeTimeoutSeconds is what a resume gives it.
	ExpiresAt            *time.Time `json:"expires_at"`
	ResumeTimeoutSeconds *int64     `json:"resume_timeout_seconds"`
	EndedAt              *time.Time `json:"ended_at"`
	EndReason            *string    `json:"end_reason"`
	// Lifecycle: pause instead of kill at the timeout, resume on a call.
	AutoPause  bool `json:"auto_pause"`
	AutoResume bool `json:"auto_resume"`
	// Sudo: the sandbox's processes may use sudo (CreateSandboxRequest.sudo).
	Sudo bool `json:"sudo"`
	// Network is the sandbox's network policy (mode none: loopback only).
	Network network.Policy `json:"network"`
	// Lifetimes (internal/sandbox/lifetime.go); absent: none.
	IdleTimeoutSeconds     int64  `json:"idle_timeout_seconds,omitempty"`
	OnIdle                 string `json:"on_idle,omitempty"`
	MaxLifetimeSeconds     int64  `json:"max_lifetime_seconds,omitempty"`
	PausedRetentionSeconds int64  `json:"paused_retention_seconds,omitempty"`
}

func toSandbox(sb store.Sandbox) sandboxJSON {
	out := sandboxJSON{
		ID: sb.ID, Name: sb.Name, Template: sb.Template, State: sb.State, Owner: sb.Owner, Backend: sb.Backend,
		CPUMillis: sb.CPUMillis, MemoryMB: sb.MemoryMB, DiskMB: sb.DiskMB,
		Metadata: sb.Metadata, EnvKeys: slices.Sorted(maps.Keys(sb.Env)),
		User: sb.User, Workdir: sb.Workdir,
		CreatedAt: sb.CreatedAt.UTC(), StartedAt: sb.StartedAt.UTC(),
		AutoPause: sb.Lifecycle.AutoPause, AutoResume: sb.Lifecycle.AutoResume, Sudo: !sb.Lifecycle.NoSudo,
		Network: networkPolicy(sb),
	}
	if sb.State == "paused" {
		left := int64(sb.Lifecycle.ResumeTimeout / time.Second)
		if left <= 0 { // paused before the frozen countdown was recorded
			left = int64(sb.Lifecycle.Timeout / time.Second)
		}
		if left > 0 { // none: no countdown (an idle timeout alone)
			out.ResumeTimeoutSeconds = &left
		}
	} else if !sb.ExpiresAt.IsZero() { // zero: no countdown (an idle timeout alone)
		t := sb.ExpiresAt.UTC()
		out.ExpiresAt = &t
	}
	if lc := sb.Lifecycle; lc.IdleTimeout > 0 || lc.MaxLifetime > 0 || lc.PausedRetention > 0 {
		out.IdleTimeoutSeconds, out.MaxLifetimeSeconds = int64(lc.IdleTimeout/time.Second), int64(lc.MaxLifetime/time.Second)
		out.PausedRetentionSeconds = int64(lc.PausedRetention / time.Second)
		if lc.IdleTimeout > 0 {
			out.OnIdle = map[bool]string{false: "pause", true: "kill"}[lc.IdleKill]
		}
	}
	if out.Metadata == nil {
		out.Metadata = map[string]string{}
	}
	if out.EnvKeys == nil {
		out.EnvKeys = []string{}
	}
	if !sb.EndedAt.IsZero() {
		t := sb.EndedAt.UTC()
		out.EndedAt = &t
		reason := sb.EndReason
		out.EndReason = &reason
	}
	return out
}

// createSandboxRequest is the CreateSandboxRequest schema. Pointers tell
// absent fields from zero ones.
type createSandboxRequest struct {
	Template       *string           `json:"template"`
	CPUMillis      *int64            `json:"cpu_millis"`
	MemoryMB       *int64            `json:"memory_mb"`
	DiskMB         *int64            `json:"disk_mb"`
	Env            map[string]string `json:"env"`
	Metadata       map[string]string `json:"metadata"`
	TimeoutSeconds *int64            `json:"timeout_seconds"`
	User           *string           `json:"user"`
	Workdir        *string           `json:"workdir"`
	AutoPause      *bool             `json:"auto_pause"`
	AutoResume     *bool             `json:"auto_resume"`
	Sudo           *bool             `json:"sudo"`
	Network        *network.Policy   `json:"network"`
	Isolation      *string           `json:"isolation"`
	Name           string            `json:"name"`
	Volumes        []volume.Request  `json:"volumes"`
	// Snapshot starts the sandbox from the caller's snapshot (by name or
	// id; snapshots.go) instead of a template.
	Snapshot string          `json:"snapshot"`
	memSnap  *store.Snapshot // Snapshot's, when it keeps memory (snapshot_memory.go)
	// Lifetimes (internal/sandbox/lifetime.go).
	IdleTimeoutSeconds     *int64 `json:"idle_timeout_seconds"`
	MaxLifetimeSeconds     *int64 `json:"max_lifetime_seconds"`
	OnIdle                 string `json:"on_idle"`
	PausedRetentionSeconds *int64 `json:"paused_retention_seconds"`
}

// wire returns an optional number of a request for the manager, which
// reads 0 as "the default": an explicit 0 on the wire is out of range
// (the default is asked for by leaving the field out), so it goes to the
// manager as -1, which the manager refuses with its own bounds. Every
// bound is checked there, once for every door.
func wire[T int | int64](p *T) T {
	if p != nil && *p == 0 {
		return -1
	}
	return deref(p)
}

// checkEnv validates one environment variable of an exec request by the
// manager's rules for a sandbox's environment.
func checkEnv(k, v string) error {
	return sandbox.CheckEnv(map[string]string{k: v})
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) error {
	var q createSandboxRequest
	if err := decodeJSON(r, &q, false); err != nil {
		return err
	}
	if err := s.snapshotTemplate(r, &q); err != nil {
		return err
	}
	st := stateOf(r)
	tmpl := deref(q.Template)
	st.detail["template"] = tmpl
	if len(q.Env) > 0 {
		st.detail["env_keys"] = slices.Sorted(maps.Keys(q.Env))
	}
	if q.Name != "" {
		st.detail["name"] = q.Name
	}
	if len(q.Volumes) > 0 {
		st.detail["volumes"] = q.Volumes
	}
	if err := s.decide(r, &govern.Action{Create: createAction(q)}); err != nil {
		return err
	}
	if q.memSnap != nil {
		if sb, ok, err := s.restoreSnapshot(r, q); ok || err != nil {
			if err != nil {
				return nameErr(err)
			}
			st.target = sb.ID
			return writeJSON(w, http.StatusCreated, toSandbox(sb))
		}
	}
	start := time.Now()
	sb, err := s.mgr.Create(r.Context(), sandbox.CreateRequest{
		Owner:      st.principal,
		Template:   tmpl,
		CPUMillis:  wire(q.CPUMillis),
		MemoryMB:   wire(q.MemoryMB),
		DiskMB:     wire(q.DiskMB),
		Env:        q.Env,
		Metadata:   q.Metadata,
		Timeout:    time.Duration(wire(q.TimeoutSeconds)) * time.Second,
		User:       deref(q.User),
		Workdir:    deref(q.Workdir),
		AutoPause:  deref(q.AutoPause),
		AutoResume: deref(q.AutoResume),
		NoSudo:     q.Sudo != nil && !*q.Sudo,
		Network:    q.Network,
		Isolation:  deref(q.Isolation),
		Name:       q.Name,
		Volumes:    q.Volumes,
		// An explicit 0 is out of range (wire): leave a field out for none.
		IdleTimeout:     time.Duration(wire(q.IdleTimeoutSeconds)) * time.Second,
		MaxLifetime:     time.Duration(wire(q.MaxLifetimeSeconds)) * time.Second,
		OnIdle:          q.OnIdle,
		PausedRetention: time.Duration(wire(q.PausedRetentionSeconds)) * time.Second,
	})
	oc := "success"
	if err != nil {
		oc = "error"
	}
	s.metrics.created.WithLabelValues(oc).Inc()
	s.metrics.create.WithLabelValues(oc).Observe(time.Since(start).Seconds())
	if err != nil {
		return nameErr(err)
	}
	st.target = sb.ID
	st.detail["template"] = sb.Template
	return writeJSON(w, http.StatusCreated, toSandbox(sb))
}

// createAction describes a sandbox.create request for the governed path
// (limits as asked for; 0 is the default).
func createAction(q createSandboxRequest) *govern.SandboxCreate {
	c := &govern.SandboxCreate{Name: q.Name, Template: deref(q.Template), Isolation: deref(q.Isolation),
		Limits: govern.Limits{CPUMillis: deref(q.CPUMillis), MemoryMB: deref(q.MemoryMB), DiskMB: deref(q.DiskMB),
			TimeoutSeconds: deref(q.TimeoutSeconds)},
		EnvKeys: envKeys(q.Env)}
	if q.Network != nil {
		c.Network.Mode = string(q.Network.Mode)
		for _, rule := range q.Network.Allow {
			if rule.Host != "" {
				c.Network.Allow = append(c.Network.Allow, rule.Host)
			} else {
				c.Network.Allow = append(c.Network.Allow, rule.CIDR)
			}
		}
	}
	return c
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.sandboxFor(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, toSandbox(sb))
}

// parseMetadataFilter parses "k1:v1,k2:v2".
func parseMetadataFilter(v string) (map[string]string, error) {
	if v == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(pair, ":")
		if !ok || k == "" {
			return nil, apierr.BadRequest("query parameter metadata: %q is not key:value", truncate(pair, 64))
		}
		out[k] = val
	}
	if len(out) > 64 {
		return nil, apierr.Validation("query parameter metadata: at most 64 pairs")
	}
	return out, nil
}

var allStates = []sandbox.State{sandbox.StateStarting, sandbox.StateRunning, sandbox.StatePaused,
	sandbox.StateStopping, sandbox.StateStopped, sandbox.StateFailed, sandbox.StateLost}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := store.SandboxFilter{PageToken: q.Get("page_token")}
	if v := q.Get("state"); v != "" {
		// One state, or several comma-separated (running,paused).
		for _, one := range strings.Split(v, ",") {
			if !slices.Contains(allStates, sandbox.State(one)) {
				return apierr.Validation("query parameter state: %q is not a sandbox state", truncate(one, 64))
			}
			if !slices.Contains(f.States, one) {
				f.States = append(f.States, one)
			}
		}
	}
	md, err := parseMetadataFilter(q.Get("metadata"))
	if err != nil {
		return err
	}
	f.Metadata = md
	limit, err := queryInt(r, "limit", store.DefaultPageSize, 1, store.MaxPageSize)
	if err != nil {
		return err
	}
	f.Limit = int(limit)
	if len(f.PageToken) > 1024 {
		return apierr.BadRequest("query parameter page_token: not a token this daemon issued")
	}
	st := stateOf(r)
	if st.ownOnly || !st.ident.Has(auth.ScopeSandboxesAll) {
		f.Owner = st.principal
	}
	sbs, next, err := s.mgr.List(r.Context(), f)
	if err != nil {
		return err
	}
	out := struct {
		Sandboxes     []sandboxJSON `json:"sandboxes"`
		NextPageToken string        `json:"next_page_token"`
	}{Sandboxes: make([]sandboxJSON, 0, len(sbs)), NextPageToken: next}
	for _, sb := range sbs {
		out.Sandboxes = append(out.Sandboxes, toSandbox(sb))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) killSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.sandboxFor(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := s.decide(r, &govern.Action{Lifecycle: govern.NewLifecycle(govern.OpKill, 0, 0, false)}); err != nil {
		return err
	}
	if err := s.mgr.Kill(r.Context(), sb.ID, "killed"); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		TimeoutSeconds *int64 `json:"timeout_seconds"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.TimeoutSeconds == nil {
		return apierr.BadRequest("request body: timeout_seconds is required")
	}
	sb, err := s.sandboxFor(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	stateOf(r).detail["timeout_seconds"] = *q.TimeoutSeconds
	if err := s.decide(r, &govern.Action{Lifecycle: govern.NewLifecycle(govern.OpTimeout, *q.TimeoutSeconds, 0, false)}); err != nil {
		return err
	}
	sb, err = s.mgr.SetTimeout(r.Context(), sb.ID, time.Duration(*q.TimeoutSeconds)*time.Second)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, toSandbox(sb))
}

func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.sandboxFor(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := s.decide(r, &govern.Action{Lifecycle: govern.NewLifecycle(govern.OpPause, 0, 0, false)}); err != nil {
		return err
	}
	sb, err = s.mgr.Pause(r.Context(), sb.ID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, toSandbox(sb))
}

// forkRequest is the ForkSandboxRequest schema.
type forkRequest struct {
	Count          *int              `json:"count"`
	TimeoutSeconds *int64            `json:"timeout_seconds"`
	Metadata       map[string]string `json:"metadata"`
	Name           string            `json:"name"`
}

func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request) error {
	var q forkRequest
	if err := decodeJSON(r, &q, false); err != nil {
		return err
	}
	n := 1
	if q.Count != nil {
		n = *q.Count
	}
	src, err := s.sandboxFor(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	st := stateOf(r)
	st.detail["count"] = n
	if q.Name != "" {
		st.detail["name"] = q.Name
	}
	if err := s.decide(r, &govern.Action{Lifecycle: govern.NewLifecycle(govern.OpFork, wire(q.TimeoutSeconds), int64(n), false)}); err != nil {
		return err
	}
	forks, err := s.mgr.Fork(r.Context(), src.ID, sandbox.ForkRequest{Owner: st.principal, N: n,
		Timeout: time.Duration(wire(q.TimeoutSeconds)) * time.Second, Metadata: q.Metadata, Name: q.Name})
	if err != nil {
		return nameErr(err)
	}
	out := make([]sandboxJSON, 0, len(forks))
	ids := make([]string, 0, len(forks))
	for _, f := range forks {
		out = append(out, toSandbox(f))
		ids = append(ids, f.ID)
	}
	st.detail["forks"] = ids
	return writeJSON(w, http.StatusCreated, map[string]any{"sandboxes": out})
}

func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.sandboxFor(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := s.decide(r, &govern.Action{Lifecycle: govern.NewLifecycle(govern.OpResume, 0, 0, false)}); err != nil {
		return err
	}
	sb, err = s.mgr.Resume(r.Context(), sb.ID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, toSandbox(sb))
}

func (s *Server) usage(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.sandboxFor(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	u, err := s.mgr.Usage(r.Context(), sb.ID)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]int64{
		"cpu_nanos": u.CPUNanos, "memory_bytes": u.MemoryBytes, "memory_peak": u.MemoryPeak,
		"pids": u.Pids, "disk_bytes": u.DiskBytes, "oom_events": u.OOMEvents,
	})
}

// networkPolicy decodes a record's stored policy (none when empty).
func networkPolicy(sb store.Sandbox) network.Policy {
	p := network.Policy{Mode: network.ModeNone}
	if len(sb.Network) > 0 {
		json.Unmarshal(sb.Network, &p)
	}
	return p
}

// networkAttrs describes a network policy for the governed path
// (network.change): the normalised policy's mode and allow rules' hosts or
// CIDRs, as the E2B door describes its network changes.
func networkAttrs(p network.Policy) *govern.Network {
	if n, err := p.Normalized(); err == nil {
		p = n // an invalid policy is described as sent; the manager refuses it
	}
	allow := make([]string, 0, len(p.Allow))
	for _, rule := range p.Allow {
		allow = append(allow, cmp.Or(rule.Host, rule.CIDR))
	}
	return govern.NewNetwork(string(p.Mode), allow)
}

// getNetwork answers a sandbox's network policy and traffic counters.
func (s *Server) getNetwork(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.sandboxFor(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, s.mgr.Network(sb))
}

// setNetwork replaces a running sandbox's network policy.
func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request) error {
	var p network.Policy
	if err := decodeJSON(r, &p, true); err != nil {
		return err
	}
	sb, err := s.sandboxFor(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	st := stateOf(r)
	st.detail["mode"] = string(p.Mode)
	st.detail["rules"] = len(p.Allow)
	if err := s.decide(r, &govern.Action{Network: networkAttrs(p)}); err != nil {
		return err
	}
	if sb, err = s.mgr.SetNetwork(r.Context(), sb.ID, p); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, s.mgr.Network(sb))
}
