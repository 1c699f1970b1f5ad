package warden

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Health reports whether the daemon is up. It needs no API key.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.do(ctx, &request{method: http.MethodGet, path: "/healthz", idempotent: true}, &h)
	if err != nil {
		return Health{}, fmt.Errorf("health: %w", err)
	}
	return h, nil
}

// CreateSandbox creates and starts a sandbox owned by the caller.
func (c *Client) CreateSandbox(ctx context.Context, req CreateSandboxRequest) (Sandbox, error) {
	var sb Sandbox
	err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/sandboxes", json: req}, &sb)
	if err != nil {
		return Sandbox{}, fmt.Errorf("create sandbox: %w", err)
	}
	return sb, nil
}

// GetSandbox returns the sandbox with the given ID.
func (c *Client) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/sandboxes/%s", id), idempotent: true}, &sb)
	if err != nil {
		return Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return sb, nil
}

// ListSandboxes returns one page of sandboxes, newest first. See [Client.AllSandboxes]
// to iterate over every page.
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) (SandboxPage, error) {
	q := url.Values{}
	var states []string
	if opts.State != "" {
		states = append(states, string(opts.State))
	}
	for _, s := range opts.States {
		states = append(states, string(s))
	}
	if len(states) > 0 {
		q.Set("state", strings.Join(states, ","))
	}
	if len(opts.Metadata) > 0 {
		q.Set("metadata", encodeMetadata(opts.Metadata))
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.PageToken != "" {
		q.Set("page_token", opts.PageToken)
	}
	var page SandboxPage
	err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/sandboxes", query: q, idempotent: true}, &page)
	if err != nil {
		return SandboxPage{}, fmt.Errorf("list sandboxes: %w", err)
	}
	return page, nil
}

// AllSandboxes iterates over every sandbox matching opts, fetching pages as needed
// (opts.PageToken is the starting page). It stops after yielding an error.
func (c *Client) AllSandboxes(ctx context.Context, opts ListOptions) iter.Seq2[Sandbox, error] {
	return func(yield func(Sandbox, error) bool) {
		for {
			page, err := c.ListSandboxes(ctx, opts)
			if err != nil {
				yield(Sandbox{}, err)
				return
			}
			for _, sb := range page.Sandboxes {
				if !yield(sb, nil) {
					return
				}
			}
			if page.NextPageToken == "" || page.NextPageToken == opts.PageToken {
				return
			}
			opts.PageToken = page.NextPageToken
		}
	}
}

// encodeMetadata writes a metadata filter as k1:v1,k2:v2, sorted by key.
func encodeMetadata(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = k + ":" + m[k]
	}
	return strings.Join(pairs, ",")
}

// SetTimeout makes the sandbox expire timeoutSeconds from now (1..86400) and returns it
// with its new ExpiresAt.
func (c *Client) SetTimeout(ctx context.Context, id string, timeoutSeconds int) (Sandbox, error) {
	var sb Sandbox
	err := c.do(ctx, &request{
		method:     http.MethodPost,
		path:       pathf("/v1/sandboxes/%s/timeout", id),
		json:       map[string]int{"timeout_seconds": timeoutSeconds},
		idempotent: true,
	}, &sb)
	if err != nil {
		return Sandbox{}, fmt.Errorf("set timeout of sandbox %s: %w", id, err)
	}
	return sb, nil
}

// PauseSandbox pauses a running sandbox until [Client.ResumeSandbox]: on the
// native backend its processes and memory stay resident and use no CPU; on
// gvisor it is checkpointed to disk and its memory released, and connections
// to it end (streams must be reattached after the resume). Exec and file calls
// get a conflict error while it is paused, unless it was created with AutoResume.
func (c *Client) PauseSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/sandboxes/%s/pause", id), idempotent: true}, &sb)
	if err != nil {
		return Sandbox{}, fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	return sb, nil
}

// ResumeSandbox resumes a paused sandbox under the same id; its processes
// continue where they stopped.
func (c *Client) ResumeSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/sandboxes/%s/resume", id), idempotent: true}, &sb)
	if err != nil {
		return Sandbox{}, fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	return sb, nil
}

// KillSandbox stops the sandbox and frees its resources. Killing a stopped sandbox
// succeeds.
func (c *Client) KillSandbox(ctx context.Context, id string) error {
	err := c.do(ctx, &request{method: http.MethodDelete, path: pathf("/v1/sandboxes/%s", id), idempotent: true}, nil)
	if err != nil {
		return fmt.Errorf("kill sandbox %s: %w", id, err)
	}
	return nil
}

// Usage returns the sandbox's current resource usage.
func (c *Client) Usage(ctx context.Context, id string) (Usage, error) {
	var u Usage
	err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/sandboxes/%s/usage", id), idempotent: true}, &u)
	if err != nil {
		return Usage{}, fmt.Errorf("usage of sandbox %s: %w", id, err)
	}
	return u, nil
}

// ForkSandbox makes new sandboxes from a running sandbox's memory and files
// (gvisor backend): each runs what the source ran at that moment, with its own
// id, writable layers and random numbers. The source keeps running.
func (c *Client) ForkSandbox(ctx context.Context, id string, req ForkRequest) ([]Sandbox, error) {
	var out struct {
		Sandboxes []Sandbox `json:"sandboxes"`
	}
	err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/sandboxes/%s/fork", id), json: req}, &out)
	if err != nil {
		return nil, fmt.Errorf("fork sandbox %s: %w", id, err)
	}
	return out.Sandboxes, nil
}
