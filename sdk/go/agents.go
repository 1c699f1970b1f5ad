package warden

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Scopes of hosted agents: agents:read reads definitions, runs and logs;
// agents:write defines agents (never held by an agent principal);
// agents:run starts and cancels runs.
const (
	ScopeAgentsRead  = "agents:read"
	ScopeAgentsWrite = "agents:write"
	ScopeAgentsRun   = "agents:run"
)

// Agent is a hosted agent's definition (docs/agents.md). Spec is its
// current version's agent.yaml as JSON.
type Agent struct {
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	PrincipalID string          `json:"principal_id"`
	OwnerID     string          `json:"owner_id"`
	Version     int             `json:"version"`
	Spec        json.RawMessage `json:"spec"`
	WebhookPath string          `json:"webhook_path"`
	// WebhookSecret signs webhook triggers; only CreateAgent returns it.
	WebhookSecret string    `json:"webhook_secret,omitempty"`
	SandboxID     string    `json:"sandbox_id,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// AgentVersion is one version of an agent's spec.
type AgentVersion struct {
	Version   int             `json:"version"`
	Spec      json.RawMessage `json:"spec"`
	CreatedAt time.Time       `json:"created_at"`
	CreatedBy string          `json:"created_by"`
}

// Agent run states.
const (
	AgentRunQueued    = "queued"
	AgentRunRunning   = "running"
	AgentRunSucceeded = "succeeded"
	AgentRunFailed    = "failed"
	AgentRunTimedOut  = "timed_out"
	AgentRunCancelled = "cancelled"
)

// AgentRun is one run of a hosted agent.
type AgentRun struct {
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
	// What the run spent on the LLM gateway with its own key: calls,
	// tokens and cost in micro-dollars.
	LLMCalls   int64 `json:"llm_calls"`
	TokensIn   int64 `json:"tokens_in"`
	TokensOut  int64 `json:"tokens_out"`
	CostMicros int64 `json:"cost_micros"`
}

// Ended reports whether the run is in a final state.
func (r AgentRun) Ended() bool {
	switch r.State {
	case AgentRunSucceeded, AgentRunFailed, AgentRunTimedOut, AgentRunCancelled:
		return true
	}
	return false
}

// AgentLogLine is one line of a run's log.
type AgentLogLine struct {
	Time   time.Time `json:"time"`
	Stream string    `json:"stream"` // stdout, stderr or system
	Data   string    `json:"data"`
	// Code and Message are set on an error event (Stream "error").
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// CreateAgent defines an agent from its spec (agent.yaml as JSON). The
// result carries the webhook secret, shown only this once.
func (c *Client) CreateAgent(ctx context.Context, spec json.RawMessage) (Agent, error) {
	var out Agent
	if err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/agents", json: spec}, &out); err != nil {
		return out, fmt.Errorf("create agent: %w", err)
	}
	return out, nil
}

// UpdateAgent stores spec as the agent's next version.
func (c *Client) UpdateAgent(ctx context.Context, name string, spec json.RawMessage) (Agent, error) {
	var out Agent
	if err := c.do(ctx, &request{method: http.MethodPut, path: pathf("/v1/agents/%s", name), json: spec}, &out); err != nil {
		return out, fmt.Errorf("update agent %s: %w", name, err)
	}
	return out, nil
}

// ListAgents lists the agents the caller owns or is (all for an admin).
func (c *Client) ListAgents(ctx context.Context) ([]Agent, error) {
	var out struct {
		Agents []Agent `json:"agents"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/agents", idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	return out.Agents, nil
}

// GetAgent returns an agent.
func (c *Client) GetAgent(ctx context.Context, name string) (Agent, error) {
	var out Agent
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/agents/%s", name), idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("get agent %s: %w", name, err)
	}
	return out, nil
}

// DeleteAgent cancels an agent's runs and removes it with its runs.
func (c *Client) DeleteAgent(ctx context.Context, name string) error {
	if err := c.do(ctx, &request{method: http.MethodDelete, path: pathf("/v1/agents/%s", name), idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete agent %s: %w", name, err)
	}
	return nil
}

// AgentVersions lists an agent's versions, oldest first.
func (c *Client) AgentVersions(ctx context.Context, name string) ([]AgentVersion, error) {
	var out struct {
		Versions []AgentVersion `json:"versions"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/agents/%s/versions", name), idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("agent %s versions: %w", name, err)
	}
	return out.Versions, nil
}

// RunAgent queues a manual run with input (JSON; nil for none).
func (c *Client) RunAgent(ctx context.Context, name string, input json.RawMessage) (AgentRun, error) {
	var out AgentRun
	body := map[string]any{}
	if len(input) > 0 {
		body["input"] = input
	}
	if err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/agents/%s/runs", name), json: body}, &out); err != nil {
		return out, fmt.Errorf("run agent %s: %w", name, err)
	}
	return out, nil
}

// AgentRuns lists an agent's runs, newest first (state "" for all).
func (c *Client) AgentRuns(ctx context.Context, name, state string, limit int) ([]AgentRun, error) {
	q := url.Values{}
	if state != "" {
		q.Set("state", state)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Runs []AgentRun `json:"runs"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/agents/%s/runs", name), query: q, idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("runs of agent %s: %w", name, err)
	}
	return out.Runs, nil
}

// GetAgentRun returns a run.
func (c *Client) GetAgentRun(ctx context.Context, id string) (AgentRun, error) {
	var out AgentRun
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/agent-runs/%s", id), idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("get agent run %s: %w", id, err)
	}
	return out, nil
}

// CancelAgentRun cancels a queued or running run and returns it ended.
func (c *Client) CancelAgentRun(ctx context.Context, id string) (AgentRun, error) {
	var out AgentRun
	if err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/agent-runs/%s/cancel", id)}, &out); err != nil {
		return out, fmt.Errorf("cancel agent run %s: %w", id, err)
	}
	return out, nil
}

// AgentRunLogs streams a run's log; with follow, until the run ends.
// Close the stream when done.
func (c *Client) AgentRunLogs(ctx context.Context, id string, follow bool) (*AgentLogStream, error) {
	q := url.Values{}
	if follow {
		q.Set("follow", "true")
	}
	resp, err := c.send(ctx, &request{method: http.MethodGet, path: pathf("/v1/agent-runs/%s/logs", id), query: q,
		accept: "application/x-ndjson", idempotent: true})
	if err != nil {
		return nil, fmt.Errorf("logs of agent run %s: %w", id, err)
	}
	return &AgentLogStream{ctx: ctx, dec: newLineDecoder(resp.Body, c.maxEvent)}, nil
}

// AgentLogStream reads [Client.AgentRunLogs].
type AgentLogStream struct {
	ctx       context.Context
	dec       *lineDecoder
	err       error
	closeOnce sync.Once
}

// Next returns the next line, io.EOF at the end, or an *Error for an
// error event.
func (s *AgentLogStream) Next() (AgentLogLine, error) {
	if s.err != nil {
		return AgentLogLine{}, s.err
	}
	var l AgentLogLine
	if err := s.dec.next(&l); err != nil {
		if s.ctx.Err() != nil && err != io.EOF {
			err = s.ctx.Err()
		}
		s.err = err
		return AgentLogLine{}, err
	}
	if l.Stream == "error" {
		s.err = &Error{Code: l.Code, Message: l.Message}
		s.dec.close()
		return AgentLogLine{}, s.err
	}
	return l, nil
}

// Close stops reading the stream.
func (s *AgentLogStream) Close() error {
	s.closeOnce.Do(func() { s.dec.close() })
	return nil
}

// SignAgentWebhook returns the X-Warden-Signature header value that signs
// body at t with an agent's webhook secret: "t=<unix>,v1=<hex
// HMAC-SHA256(secret, t + "." + body)>".
func SignAgentWebhook(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "."))
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// ReplyAgentRun posts text in the Slack thread that started a running run
// (with the bot token that stays in wardend); it returns the reply's
// Slack timestamp. A run calls it with its own key ($WARDEN_API_KEY).
func (c *Client) ReplyAgentRun(ctx context.Context, id, text string) (string, error) {
	var out struct {
		TS string `json:"ts"`
	}
	if err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/agent-runs/%s/reply", id), json: map[string]string{"text": text}}, &out); err != nil {
		return "", fmt.Errorf("reply in agent run %s: %w", id, err)
	}
	return out.TS, nil
}
