package warden

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Middleware is an administrator-written JavaScript hook on the governed
// path (docs/guardrails.md, "Middleware"). The /v1/middleware routes need
// the admin scope; an agent's key may not change middleware.
type Middleware struct {
	Name string `json:"name,omitempty"`
	// Kinds are the action kinds it runs for (mcp.call, exec, pty, code.run, ...).
	Kinds []string `json:"kinds"`
	// Script defines pre(action) and/or post(action, result); empty in lists.
	Script string `json:"script,omitempty"`
	// OnError is "closed" (default: a failure refuses the action) or "open".
	OnError        string   `json:"on_error,omitempty"`
	TimeoutMS      int64    `json:"timeout_ms,omitempty"`
	MaxMemoryMB    int64    `json:"max_memory_mb,omitempty"`
	AllowedDomains []string `json:"allowed_domains,omitempty"`
	Secrets        []string `json:"secrets,omitempty"`
	Disabled       bool     `json:"disabled,omitempty"`
	// Source is "config" (the daemon's config file; read-only) or "api".
	Source string `json:"source,omitempty"`
}

// MiddlewareTestRequest runs one middleware, installed (Name) or given in
// full (Middleware), on a sample action.
type MiddlewareTestRequest struct {
	Name       string      `json:"name,omitempty"`
	Middleware *Middleware `json:"middleware,omitempty"`
	// Phase is "pre" (default) or "post".
	Phase string `json:"phase,omitempty"`
	// Action is a governed action as rules see it: {"kind": "exec", "exec": {...}, ...}.
	Action json.RawMessage `json:"action"`
	// Result is the call's result, for post.
	Result json.RawMessage `json:"result,omitempty"`
}

// MiddlewareVerdict is what a middleware decided.
type MiddlewareVerdict struct {
	Middleware string `json:"middleware"`
	// Action is allow, block, modify or error.
	Action    string          `json:"action"`
	Message   string          `json:"message,omitempty"`
	Modified  json.RawMessage `json:"modified,omitempty"`
	Error     string          `json:"error,omitempty"`
	OnError   string          `json:"on_error,omitempty"`
	ElapsedNS int64           `json:"elapsed_ns"`
}

// ListMiddleware returns the installed middleware, without their scripts.
func (c *Client) ListMiddleware(ctx context.Context) ([]Middleware, error) {
	var out struct {
		Middleware []Middleware `json:"middleware"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/middleware", idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list middleware: %w", err)
	}
	return out.Middleware, nil
}

// GetMiddleware returns one middleware with its script.
func (c *Client) GetMiddleware(ctx context.Context, name string) (Middleware, error) {
	var out Middleware
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/middleware/%s", name), idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("get middleware %s: %w", name, err)
	}
	return out, nil
}

// PutMiddleware adds m, or replaces the API-added middleware of its name.
func (c *Client) PutMiddleware(ctx context.Context, m Middleware) (Middleware, error) {
	var out Middleware
	m.Source = ""
	if err := c.do(ctx, &request{method: http.MethodPut, path: pathf("/v1/middleware/%s", m.Name), json: m, idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("put middleware %s: %w", m.Name, err)
	}
	return out, nil
}

// DeleteMiddleware removes an API-added middleware.
func (c *Client) DeleteMiddleware(ctx context.Context, name string) error {
	if err := c.do(ctx, &request{method: http.MethodDelete, path: pathf("/v1/middleware/%s", name), idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete middleware %s: %w", name, err)
	}
	return nil
}

// TestMiddleware runs a middleware on a sample action, applying nothing.
func (c *Client) TestMiddleware(ctx context.Context, q MiddlewareTestRequest) (MiddlewareVerdict, error) {
	var out MiddlewareVerdict
	if err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/middleware/test", json: q, idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("test middleware: %w", err)
	}
	return out, nil
}

// GuardEvalGroup is one label and detector's figures.
type GuardEvalGroup struct {
	Label     string  `json:"label"`
	Detector  string  `json:"detector"`
	TP        int     `json:"tp"`
	FP        int     `json:"fp"`
	FN        int     `json:"fn"`
	TN        int     `json:"tn"`
	Precision float64 `json:"precision"`
	Recall    float64 `json:"recall"`
	F1        float64 `json:"f1"`
}

// GuardEvalReport is what EvalGuard measured.
type GuardEvalReport struct {
	Rows   int              `json:"rows"`
	Split  string           `json:"split,omitempty"`
	Groups []GuardEvalGroup `json:"groups"`
	// Confusion: true label -> predicted ("secret", "pii+secret", "none", ...) -> rows.
	Confusion   map[string]map[string]int `json:"confusion"`
	P50PerKiBUS float64                   `json:"p50_us_per_kib"`
	P99PerKiBUS float64                   `json:"p99_us_per_kib"`
}

// EvalGuard runs the guard's detectors over labelled JSONL (one
// {"text","label","split"} object a line), keeping the rows of split when
// not empty, with the named detectors (all when none). The key needs
// policies:read.
func (c *Client) EvalGuard(ctx context.Context, jsonl []byte, split string, detectors []string) (GuardEvalReport, error) {
	var out GuardEvalReport
	q := url.Values{}
	if split != "" {
		q.Set("split", split)
	}
	if len(detectors) > 0 {
		q.Set("detectors", strings.Join(detectors, ","))
	}
	req := &request{method: http.MethodPost, path: "/v1/guard/eval", query: q, body: bytes.NewReader(jsonl),
		contentType: "application/x-ndjson", idempotent: true}
	if err := c.do(ctx, req, &out); err != nil {
		return out, fmt.Errorf("eval guard: %w", err)
	}
	return out, nil
}
