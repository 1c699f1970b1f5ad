package warden

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Snapshot is a filesystem snapshot: a named capture of a sandbox's files, owned by a
// principal, that new sandboxes start from ([CreateSandboxRequest].Snapshot) and that
// can be promoted to a template.
type Snapshot struct {
	ID         string    `json:"id"` // also E2B's snapshotID
	Name       string    `json:"name"`
	Owner      string    `json:"owner"`
	SandboxID  string    `json:"sandbox_id"`  // the sandbox captured
	Template   string    `json:"template"`    // the template it booted from
	TemplateID string    `json:"template_id"` // the template version the snapshot is
	SizeBytes  int64     `json:"size_bytes"`
	CreatedAt  time.Time `json:"created_at"`
	// Memory: the snapshot also keeps a memory image (CreateSnapshotWithMemory) for
	// backend MemoryBackend; sandboxes created from it there run on from that moment.
	Memory        bool   `json:"memory"`
	MemoryBackend string `json:"memory_backend,omitempty"`
}

// CreateSnapshot captures the files of sandbox id (running or paused; it keeps
// running) as a snapshot called name ("": named by its id).
func (c *Client) CreateSnapshot(ctx context.Context, id, name string) (Snapshot, error) {
	return c.createSnapshot(ctx, id, name, false)
}

// CreateSnapshotWithMemory is CreateSnapshot that also keeps an image of the running
// sandbox's memory (backends that can fork: gvisor; others answer 422): sandboxes
// created from the snapshot on that backend run on from the captured moment.
func (c *Client) CreateSnapshotWithMemory(ctx context.Context, id, name string) (Snapshot, error) {
	return c.createSnapshot(ctx, id, name, true)
}

func (c *Client) createSnapshot(ctx context.Context, id, name string, memory bool) (Snapshot, error) {
	var s Snapshot
	body := map[string]any{}
	if name != "" {
		body["name"] = name
	}
	if memory {
		body["memory"] = true
	}
	if err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/sandboxes/%s/snapshots", id), json: body}, &s); err != nil {
		return s, fmt.Errorf("snapshot sandbox %s: %w", id, err)
	}
	return s, nil
}

// ListSnapshots lists the caller's snapshots, oldest first; only those of sandbox id
// sandboxID when it is not "".
func (c *Client) ListSnapshots(ctx context.Context, sandboxID string) ([]Snapshot, error) {
	var out struct {
		Snapshots []Snapshot `json:"snapshots"`
	}
	q := url.Values{}
	if sandboxID != "" {
		q.Set("sandbox", sandboxID)
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/snapshots", query: q, idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return out.Snapshots, nil
}

// GetSnapshot returns the caller's snapshot with name (or id) ref.
func (c *Client) GetSnapshot(ctx context.Context, ref string) (Snapshot, error) {
	var s Snapshot
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/snapshots/%s", ref), idempotent: true}, &s); err != nil {
		return s, fmt.Errorf("get snapshot %s: %w", ref, err)
	}
	return s, nil
}

// DeleteSnapshot deletes a snapshot; 409 while sandboxes run from it.
func (c *Client) DeleteSnapshot(ctx context.Context, ref string) error {
	if err := c.do(ctx, &request{method: http.MethodDelete, path: pathf("/v1/snapshots/%s", ref)}, nil); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", ref, err)
	}
	return nil
}

// PromoteSnapshot makes template name ("name[:tag]") of a snapshot's files; the
// template stays when the snapshot is deleted.
func (c *Client) PromoteSnapshot(ctx context.Context, ref, name string) (Template, error) {
	var t Template
	err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/snapshots/%s/promote", ref), json: map[string]string{"template": name}}, &t)
	if err != nil {
		return t, fmt.Errorf("promote snapshot %s: %w", ref, err)
	}
	return t, nil
}
