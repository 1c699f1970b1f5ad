package warden

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// Volume is a persistent volume: a named directory with a size quota, owned by a
// principal, that outlives sandboxes and daemon restarts.
type Volume struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Owner     string    `json:"owner"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
	// UsedBytes and Attachments are filled by [Client.GetVolume] only.
	UsedBytes   int64              `json:"used_bytes,omitempty"`
	Attachments []VolumeAttachment `json:"attachments,omitempty"`
}

// VolumeAttachment is a live sandbox that mounts a volume.
type VolumeAttachment struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path"`
	ReadOnly  bool   `json:"read_only"`
}

// VolumeMount asks for a volume to be mounted at Path in a new sandbox.
type VolumeMount struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// CreateVolume makes a volume of sizeMB MiB (0: the daemon's default, 1 GiB).
func (c *Client) CreateVolume(ctx context.Context, name string, sizeMB int64) (Volume, error) {
	var v Volume
	body := map[string]any{"name": name}
	if sizeMB > 0 {
		body["size_mb"] = sizeMB
	}
	if err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/volumes", json: body}, &v); err != nil {
		return v, fmt.Errorf("create volume %s: %w", name, err)
	}
	return v, nil
}

// ListVolumes lists the caller's volumes.
func (c *Client) ListVolumes(ctx context.Context) ([]Volume, error) {
	var out struct {
		Volumes []Volume `json:"volumes"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/volumes", idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	return out.Volumes, nil
}

// GetVolume returns a volume with its usage and attachments.
func (c *Client) GetVolume(ctx context.Context, name string) (Volume, error) {
	var v Volume
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/volumes/%s", name), idempotent: true}, &v); err != nil {
		return v, fmt.Errorf("get volume %s: %w", name, err)
	}
	return v, nil
}

// ResizeVolume grows a volume to sizeMB MiB.
func (c *Client) ResizeVolume(ctx context.Context, name string, sizeMB int64) (Volume, error) {
	var v Volume
	err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/volumes/%s/resize", name), json: map[string]int64{"size_mb": sizeMB}, idempotent: true}, &v)
	if err != nil {
		return v, fmt.Errorf("resize volume %s: %w", name, err)
	}
	return v, nil
}

// DeleteVolume deletes a volume and its data (409 while a sandbox mounts it).
func (c *Client) DeleteVolume(ctx context.Context, name string) error {
	if err := c.do(ctx, &request{method: http.MethodDelete, path: pathf("/v1/volumes/%s", name), idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete volume %s: %w", name, err)
	}
	return nil
}

// ReadVolumeFile opens a file of a volume without a sandbox; close it.
func (c *Client) ReadVolumeFile(ctx context.Context, name, path string) (io.ReadCloser, error) {
	resp, err := c.send(ctx, &request{method: http.MethodGet, path: pathf("/v1/volumes/%s/files", name),
		query: url.Values{"path": {path}}, accept: "application/octet-stream", idempotent: true})
	if err != nil {
		return nil, fmt.Errorf("read %s in volume %s: %w", path, name, err)
	}
	return resp.Body, nil
}

// WriteVolumeFile replaces a file of a volume with r's bytes, without a sandbox, and
// returns how many it wrote. mode 0 means 0644.
func (c *Client) WriteVolumeFile(ctx context.Context, name, path string, r io.Reader, mode uint32) (int64, error) {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", fmt.Sprintf("%04o", mode&0o7777))
	}
	var out struct {
		Size int64 `json:"size"`
	}
	err := c.do(ctx, &request{method: http.MethodPut, path: pathf("/v1/volumes/%s/files", name), query: q,
		body: r, contentType: "application/octet-stream", idempotent: true}, &out)
	if err != nil {
		return 0, fmt.Errorf("write %s in volume %s: %w", path, name, err)
	}
	return out.Size, nil
}
