package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/warden-sandbox/warden/internal/agents"
	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
)

// Hosted agents (docs/agents.md): definitions (agents:write), their runs
// (agents:run starts and cancels, agents:read reads) and the signed
// webhook trigger (no key: the agent's webhook secret signs the body).
// internal/agents runs them. An agent is visible to its owner, to its own
// principal and to admins; to anyone else it does not exist.

const (
	nkAgentRun = "acts on a hosted agent's live run (cancel, reply): what the run does is governed as the agent's"
	nkWebhook  = "a signed webhook trigger: verified by the agent's secret, the run's actions are governed as the agent's"
)

// hostedAgentView is an agent as the API shows it.
type hostedAgentView struct {
	ID            string          `json:"id"`
	Name          string          `json:"name"`
	PrincipalID   string          `json:"principal_id"`
	OwnerID       string          `json:"owner_id"`
	Version       int             `json:"version"`
	Spec          json.RawMessage `json:"spec"`
	WebhookPath   string          `json:"webhook_path"`
	WebhookSecret string          `json:"webhook_secret,omitempty"` // on create only
	SandboxID     string          `json:"sandbox_id,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`
	UpdatedAt     time.Time       `json:"updated_at"`
}

func hostedAgentOf(a store.Agent) hostedAgentView {
	return hostedAgentView{ID: a.ID, Name: a.Name, PrincipalID: a.PrincipalID, OwnerID: a.OwnerID, Version: a.Version, Spec: a.Spec,
		WebhookPath: "/v1/agents/" + a.Name + "/webhook", SandboxID: a.SandboxID, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt}
}

type agentVersionView struct {
	Version   int             `json:"version"`
	Spec      json.RawMessage `json:"spec"`
	CreatedAt time.Time       `json:"created_at"`
	CreatedBy string          `json:"created_by"`
}

// agentRunView is a run as the API shows it.
type agentRunView struct {
	ID         string          `json:"id"`
	Agent      string          `json:"agent"`
	Version    int             `json:"version"`
	Trigger    string          `json:"trigger"`
	Input      json.RawMessage `json:"input"`
	State      string          `json:"state"`
	Reason     string          `json:"reason,omitempty"`
	SandboxID  string          `json:"sandbox_id,omitempty"`
	ExitCode   *int            `json:"exit_code,omitempty"`
	CreatedBy  string          `json:"created_by"`
	CreatedAt  time.Time       `json:"created_at"`
	StartedAt  *time.Time      `json:"started_at,omitempty"`
	EndedAt    *time.Time      `json:"ended_at,omitempty"`
	DurationMS *int64          `json:"duration_ms,omitempty"`
	// What the run spent on the LLM gateway with its own key.
	LLMCalls   int64 `json:"llm_calls"`
	TokensIn   int64 `json:"tokens_in"`
	TokensOut  int64 `json:"tokens_out"`
	CostMicros int64 `json:"cost_micros"`
}

func agentRunOf(name string, r store.AgentRun) agentRunView {
	v := agentRunView{ID: r.ID, Agent: name, Version: r.Version, Trigger: r.Trigger, Input: r.Input, State: r.State, Reason: r.Reason,
		SandboxID: r.SandboxID, ExitCode: r.ExitCode, CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt,
		LLMCalls: r.LLMCalls, TokensIn: r.TokensIn, TokensOut: r.TokensOut, CostMicros: r.CostMicros}
	if !r.StartedAt.IsZero() {
		t := r.StartedAt
		v.StartedAt = &t
	}
	if !r.EndedAt.IsZero() {
		t := r.EndedAt
		v.EndedAt = &t
		if !r.StartedAt.IsZero() {
			d := r.EndedAt.Sub(r.StartedAt).Milliseconds()
			v.DurationMS = &d
		}
	}
	return v
}

func (s *Server) hostedAgents() (*agents.Service, agents.Store, error) {
	if s.cfg.Agents == nil {
		return nil, nil, apierr.Unavailable("hosted agents are not configured", nil)
	}
	as, ok := s.st.(agents.Store)
	if !ok {
		return nil, nil, apierr.Unavailable("the store does not keep hosted agents", nil)
	}
	return s.cfg.Agents, as, nil
}

// agentChange describes a definition for the agent.change action.
func agentChange(op string, spec agents.Spec) *govern.AgentChange {
	ch := &govern.AgentChange{Op: op, Name: spec.Name, Template: spec.Template, Sandbox: spec.Sandbox,
		Scopes: spec.Scopes, MCPServers: spec.MCPServers, Policies: spec.Policies}
	for _, g := range spec.Secrets {
		ch.Secrets = append(ch.Secrets, g.Secret)
	}
	if spec.Memory != nil {
		ch.Team = spec.Memory.Team
	}
	return ch
}

// agentErr maps the service's errors to API errors.
func agentErr(what string, err error) error {
	var inv *agents.InvalidError
	var forb *agents.ForbiddenError
	switch {
	case errors.As(err, &inv):
		return apierr.Validation("%s", inv.Msg)
	case errors.As(err, &forb):
		return apierr.Forbidden("%s", forb.Msg)
	case errors.Is(err, store.ErrNotFound):
		return notFoundf("%s not found", truncate(what, 80))
	case errors.Is(err, agents.ErrNotCancellable):
		return apierr.Conflict("%s already ended", truncate(what, 80))
	case errors.Is(err, store.ErrConflict):
		return apierr.Conflict("%s: %s", truncate(what, 80), conflictReason(err))
	}
	return err
}

// mayManageAgent reports whether the caller sees the agent: its owner, its
// own principal, or an admin.
func mayManageAgent(id *auth.Identity, a store.Agent) bool {
	return id != nil && (id.Principal.ID == a.OwnerID || id.Principal.ID == a.PrincipalID || id.Has(auth.ScopeAdmin))
}

// hostedAgentFor returns the agent named by the path if the caller may see it.
func (s *Server) hostedAgentFor(r *http.Request) (store.Agent, error) {
	_, as, err := s.hostedAgents()
	if err != nil {
		return store.Agent{}, err
	}
	name := r.PathValue("name")
	st := stateOf(r)
	st.target = name
	a, err := as.GetAgentByName(r.Context(), name)
	if err != nil || !mayManageAgent(st.ident, a) {
		if err == nil || errors.Is(err, store.ErrNotFound) {
			return store.Agent{}, notFoundf("agent %s not found", truncate(name, 80))
		}
		return store.Agent{}, err
	}
	return a, nil
}

// agentRunFor returns the run of the path with its agent, if the caller may see it.
func (s *Server) agentRunFor(r *http.Request) (store.AgentRun, store.Agent, error) {
	_, as, err := s.hostedAgents()
	if err != nil {
		return store.AgentRun{}, store.Agent{}, err
	}
	id := r.PathValue("id")
	st := stateOf(r)
	st.target = id
	run, err := as.GetAgentRun(r.Context(), id)
	if err != nil {
		return store.AgentRun{}, store.Agent{}, agentErr("run "+id, err)
	}
	a, err := as.GetAgent(r.Context(), run.AgentID)
	if err != nil || !mayManageAgent(st.ident, a) {
		return store.AgentRun{}, store.Agent{}, notFoundf("run %s not found", truncate(id, 80))
	}
	return run, a, nil
}

func (s *Server) decodeAgentSpec(r *http.Request) (agents.Spec, error) {
	var spec agents.Spec
	if err := decodeJSON(r, &spec, true); err != nil {
		return agents.Spec{}, err
	}
	if err := spec.Validate(); err != nil {
		return agents.Spec{}, apierr.Validation("agent spec: %v", err)
	}
	// Granting virtual MCP servers is the MCP admin's (human-only) power.
	if id := stateOf(r).ident; len(spec.MCPServers) > 0 && !id.Has(auth.ScopeMCPAdmin) {
		return agents.Spec{}, apierr.Forbidden("mcp_servers: granting virtual MCP servers needs scope %s", auth.ScopeMCPAdmin)
	}
	return spec, nil
}

func (s *Server) createHostedAgent(w http.ResponseWriter, r *http.Request) error {
	svc, _, err := s.hostedAgents()
	if err != nil {
		return err
	}
	spec, err := s.decodeAgentSpec(r)
	if err != nil {
		return err
	}
	st := stateOf(r)
	st.target = spec.Name
	if err := s.decide(r, &govern.Action{HostedAgent: agentChange("create", spec)}); err != nil {
		return err
	}
	a, err := svc.Create(r.Context(), *st.ident, spec)
	if err != nil {
		return agentErr("agent "+spec.Name, err)
	}
	st.detail["principal"] = a.PrincipalID
	v := hostedAgentOf(a)
	v.WebhookSecret = a.WebhookSecret
	return writeJSON(w, http.StatusCreated, v)
}

func (s *Server) listHostedAgents(w http.ResponseWriter, r *http.Request) error {
	_, as, err := s.hostedAgents()
	if err != nil {
		return err
	}
	all, err := as.ListAgents(r.Context())
	if err != nil {
		return err
	}
	id := stateOf(r).ident
	out := []hostedAgentView{}
	for _, a := range all {
		if mayManageAgent(id, a) {
			out = append(out, hostedAgentOf(a))
		}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"agents": out})
}

func (s *Server) getHostedAgent(w http.ResponseWriter, r *http.Request) error {
	a, err := s.hostedAgentFor(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, hostedAgentOf(a))
}

func (s *Server) updateHostedAgent(w http.ResponseWriter, r *http.Request) error {
	a, err := s.hostedAgentFor(r)
	if err != nil {
		return err
	}
	svc, _, _ := s.hostedAgents()
	spec, err := s.decodeAgentSpec(r)
	if err != nil {
		return err
	}
	ch := agentChange("update", spec)
	ch.Name = a.Name
	if err := s.decide(r, &govern.Action{HostedAgent: ch}); err != nil {
		return err
	}
	up, err := svc.Update(r.Context(), *stateOf(r).ident, a, spec)
	if err != nil {
		return agentErr("agent "+a.Name, err)
	}
	stateOf(r).detail["version"] = up.Version
	return writeJSON(w, http.StatusOK, hostedAgentOf(up))
}

func (s *Server) deleteHostedAgent(w http.ResponseWriter, r *http.Request) error {
	a, err := s.hostedAgentFor(r)
	if err != nil {
		return err
	}
	svc, _, _ := s.hostedAgents()
	if err := s.decide(r, &govern.Action{HostedAgent: &govern.AgentChange{Op: "delete", Name: a.Name}}); err != nil {
		return err
	}
	if err := svc.Delete(r.Context(), *stateOf(r).ident, a); err != nil {
		return agentErr("agent "+a.Name, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listAgentVersions(w http.ResponseWriter, r *http.Request) error {
	a, err := s.hostedAgentFor(r)
	if err != nil {
		return err
	}
	_, as, _ := s.hostedAgents()
	vs, err := as.ListAgentVersions(r.Context(), a.ID)
	if err != nil {
		return err
	}
	out := []agentVersionView{}
	for _, v := range vs {
		out = append(out, agentVersionView{Version: v.Version, Spec: v.Spec, CreatedAt: v.CreatedAt, CreatedBy: v.CreatedBy})
	}
	return writeJSON(w, http.StatusOK, map[string]any{"versions": out})
}

// agentRunBody starts a manual run.
type agentRunBody struct {
	Input json.RawMessage `json:"input"`
}

func (s *Server) startAgentRun(w http.ResponseWriter, r *http.Request) error {
	a, err := s.hostedAgentFor(r)
	if err != nil {
		return err
	}
	svc, _, _ := s.hostedAgents()
	var q agentRunBody
	if err := decodeJSON(r, &q, false); err != nil {
		return err
	}
	st := stateOf(r)
	if err := s.decide(r, &govern.Action{HostedAgent: &govern.AgentChange{Op: "run", Name: a.Name}}); err != nil {
		return err
	}
	run, err := svc.Trigger(r.Context(), a, agents.TriggerManual, st.principal, q.Input)
	if err != nil {
		return agentErr("agent "+a.Name, err)
	}
	st.detail["run"] = run.ID
	return writeJSON(w, http.StatusAccepted, agentRunOf(a.Name, run))
}

func (s *Server) listAgentRuns(w http.ResponseWriter, r *http.Request) error {
	a, err := s.hostedAgentFor(r)
	if err != nil {
		return err
	}
	_, as, _ := s.hostedAgents()
	limit, err := queryInt(r, "limit", store.DefaultPageSize, 1, store.MaxPageSize)
	if err != nil {
		return err
	}
	f := store.AgentRunFilter{AgentID: a.ID, Limit: int(limit)}
	if v := r.URL.Query().Get("state"); v != "" {
		f.States = []string{v}
	}
	runs, err := as.ListAgentRuns(r.Context(), f)
	if err != nil {
		return err
	}
	out := []agentRunView{}
	for _, x := range runs {
		out = append(out, agentRunOf(a.Name, x))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"runs": out})
}

func (s *Server) getAgentRun(w http.ResponseWriter, r *http.Request) error {
	run, a, err := s.agentRunFor(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, agentRunOf(a.Name, run))
}

func (s *Server) cancelAgentRun(w http.ResponseWriter, r *http.Request) error {
	run, a, err := s.agentRunFor(r)
	if err != nil {
		return err
	}
	svc, _, _ := s.hostedAgents()
	out, err := svc.Cancel(r.Context(), run.ID)
	if err != nil {
		return agentErr("run "+run.ID, err)
	}
	return writeJSON(w, http.StatusOK, agentRunOf(a.Name, out))
}

// agentRunLogs streams a run's log as NDJSON (agents.LogLine); with
// follow=true until the run ends.
func (s *Server) agentRunLogs(w http.ResponseWriter, r *http.Request) error {
	run, _, err := s.agentRunFor(r)
	if err != nil {
		return err
	}
	follow, err := queryBool(r, "follow")
	if err != nil {
		return err
	}
	svc, _, _ := s.hostedAgents()
	out := startNDJSON(w)
	err = svc.Logs(r.Context(), run.ID, follow, func(l agents.LogLine) error { return out.send(l) })
	if err != nil && !errors.Is(err, errClientGone) && r.Context().Err() == nil {
		e := apierr.From(err)
		out.send(map[string]string{"stream": "error", "code": e.Code, "message": e.Message})
		return err
	}
	return nil
}

// agentWebhook starts a run from a signed webhook (no API key).
func (s *Server) agentWebhook(w http.ResponseWriter, r *http.Request) error {
	svc, as, err := s.hostedAgents()
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	st := stateOf(r)
	st.target = name
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, agents.MaxInputBytes))
	if err != nil {
		return apierr.PayloadTooLarge(fmt.Sprintf("webhook body: at most %d bytes", agents.MaxInputBytes))
	}
	// An unknown agent and one without a webhook trigger answer like a
	// bad signature: nothing is learnt without the secret.
	a, err := as.GetAgentByName(r.Context(), name)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	run, err := svc.Webhook(r.Context(), a, r.Header.Get(agents.SignatureHeader), r.Header.Get("Idempotency-Key"), body)
	if err != nil {
		st.detail["refused"] = err.Error()
		return agentWebhookErr(err)
	}
	st.detail["run"] = run.ID
	return writeJSON(w, http.StatusAccepted, map[string]any{"run_id": run.ID, "state": run.State})
}

func agentWebhookErr(err error) error {
	var inv *agents.InvalidError
	switch {
	case errors.Is(err, agents.ErrReplayed):
		return apierr.Conflict("webhook already received")
	case errors.Is(err, agents.ErrStale), errors.Is(err, agents.ErrBadSignature):
		return apierr.Wrap(apierr.CodeUnauthenticated, "webhook signature refused: "+err.Error(), err)
	case errors.As(err, &inv):
		return apierr.Validation("%s", inv.Msg)
	}
	return err
}

// agentSlackEvents is the Events API request URL of an agent with a Slack
// trigger (no key: Slack's signature, checked with the app's signing
// secret). An unknown agent, or one without a Slack trigger, answers 404.
func (s *Server) agentSlackEvents(w http.ResponseWriter, r *http.Request) error {
	svc, as, err := s.hostedAgents()
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	stateOf(r).target = name
	a, err := as.GetAgentByName(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		return notFoundf("agent %s not found", truncate(name, 80))
	}
	if err != nil {
		return err
	}
	if err := svc.SlackEvents(w, r, a); errors.Is(err, agents.ErrNoSlack) {
		return notFoundf("agent %s not found", truncate(name, 80))
	} else if err != nil {
		return apierr.Unavailable("the agent's slack app is not usable", err)
	}
	return nil
}

// agentRunReplyBody is a reply in the thread that started a run.
type agentRunReplyBody struct {
	Text string `json:"text"`
}

// agentRunReply posts in the Slack thread of a running run, with the bot
// token that stays in wardend. The run's own key (the agent's principal)
// may call it without another scope; so may the agent's owner and admins
// with agents:run.
func (s *Server) agentRunReply(w http.ResponseWriter, r *http.Request) error {
	svc, as, err := s.hostedAgents()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	st := stateOf(r)
	st.target = id
	run, err := as.GetAgentRun(r.Context(), id)
	if err != nil {
		return agentErr("run "+id, err)
	}
	a, err := as.GetAgent(r.Context(), run.AgentID)
	if err != nil {
		return agentErr("run "+id, err)
	}
	ident := st.ident
	ownKey := ident != nil && ident.Principal.ID == a.PrincipalID && ident.Key.ID == run.KeyID
	if !ownKey && !(mayManageAgent(ident, a) && ident.Principal.ID != a.PrincipalID && ident.Has(auth.ScopeAgentsRun)) {
		return notFoundf("run %s not found", truncate(id, 80))
	}
	var q agentRunReplyBody
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	ts, err := svc.SlackReply(r.Context(), a, run, q.Text)
	if errors.Is(err, agents.ErrNoSlack) {
		return apierr.Conflict("agent %s has no slack trigger", a.Name)
	}
	if err != nil {
		var inv *agents.InvalidError
		if errors.As(err, &inv) {
			return apierr.Validation("%s", inv.Msg)
		}
		return apierr.Wrap(apierr.CodeBadGateway, "slack refused the reply", err)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"ts": ts})
}
