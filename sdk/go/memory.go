package warden

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// MemoryEntry is one version of a key of an agent's memory.
type MemoryEntry struct {
	Namespace   string           `json:"namespace"`
	Key         string           `json:"key"`
	Version     int64            `json:"version"`
	Text        string           `json:"text"`
	Tags        []string         `json:"tags"`
	SHA256      string           `json:"sha256,omitempty"`
	Forgotten   bool             `json:"forgotten,omitempty"`
	PrincipalID string           `json:"principal_id"`
	Agent       string           `json:"agent,omitempty"`
	RunID       string           `json:"run_id,omitempty"`
	CreatedAt   time.Time        `json:"created_at"`
	Redacted    *MemoryRedaction `json:"redacted,omitempty"`
}

// MemoryRedaction says who removed a version's text, when and why.
type MemoryRedaction struct {
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"`
}

// MemoryQuery filters [Client.ListMemory]; Search searches the text
// (best match first) instead of listing by key.
type MemoryQuery struct {
	Prefix, Tag, Search string
	Limit               int
}

// MemoryKey is a key's latest version (nil when forgotten) and its
// history, oldest first.
type MemoryKey struct {
	Entry    *MemoryEntry  `json:"entry"`
	Versions []MemoryEntry `json:"versions"`
}

// MemoryDiff is a unified diff between two versions of a key.
type MemoryDiff struct {
	Key     string `json:"key"`
	From    int64  `json:"from"`
	To      int64  `json:"to"`
	Unified string `json:"unified"`
}

func memoryPath(agent, rest string) string {
	return pathf("/v1/agents/%s/memory", agent) + rest
}

// ListMemory lists an agent's memory (memory:read): the latest version
// of each key.
func (c *Client) ListMemory(ctx context.Context, agent string, q MemoryQuery) ([]MemoryEntry, error) {
	v := url.Values{}
	if q.Prefix != "" {
		v.Set("prefix", q.Prefix)
	}
	if q.Tag != "" {
		v.Set("tag", q.Tag)
	}
	if q.Search != "" {
		v.Set("q", q.Search)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out struct {
		Entries []MemoryEntry `json:"entries"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: memoryPath(agent, ""), query: v, idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list memory of %s: %w", agent, err)
	}
	return out.Entries, nil
}

// GetMemory returns a key of an agent's memory with its history
// (memory:read).
func (c *Client) GetMemory(ctx context.Context, agent, key string) (MemoryKey, error) {
	var out MemoryKey
	if err := c.do(ctx, &request{method: http.MethodGet, path: memoryPath(agent, "/entry"), query: url.Values{"key": {key}},
		idempotent: true}, &out); err != nil {
		return MemoryKey{}, fmt.Errorf("get memory %s of %s: %w", key, agent, err)
	}
	return out, nil
}

// DiffMemory compares two versions of a key (0, 0: the latest and the
// one before it) (memory:read).
func (c *Client) DiffMemory(ctx context.Context, agent, key string, from, to int64) (MemoryDiff, error) {
	v := url.Values{"key": {key}}
	if from > 0 {
		v.Set("from", strconv.FormatInt(from, 10))
	}
	if to > 0 {
		v.Set("to", strconv.FormatInt(to, 10))
	}
	var out MemoryDiff
	if err := c.do(ctx, &request{method: http.MethodGet, path: memoryPath(agent, "/diff"), query: v, idempotent: true}, &out); err != nil {
		return MemoryDiff{}, fmt.Errorf("diff memory %s of %s: %w", key, agent, err)
	}
	return out, nil
}

// RedactMemory removes the text of one version of a key (version > 0)
// or of all its versions (0) from the store and its history; the daemon
// audits it (memory:review). It returns how many versions it redacted.
func (c *Client) RedactMemory(ctx context.Context, agent, key string, version int64, reason string) (int, error) {
	var out struct {
		N int `json:"versions_redacted"`
	}
	err := c.do(ctx, &request{method: http.MethodPost, path: memoryPath(agent, "/redact"),
		json: map[string]any{"key": key, "version": version, "reason": reason}}, &out)
	if err != nil {
		return 0, fmt.Errorf("redact memory %s of %s: %w", key, agent, err)
	}
	return out.N, nil
}

// ExportMemory streams every version of every key of an agent's memory
// as JSON lines (one MemoryEntry each) (memory:read). Close the reader.
func (c *Client) ExportMemory(ctx context.Context, agent string) (io.ReadCloser, error) {
	resp, err := c.send(ctx, &request{method: http.MethodGet, path: memoryPath(agent, "/export"), accept: "application/x-ndjson",
		idempotent: true})
	if err != nil {
		return nil, fmt.Errorf("export memory of %s: %w", agent, err)
	}
	return resp.Body, nil
}
