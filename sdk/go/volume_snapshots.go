package warden

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// VolumeSnapshot is a point-in-time copy of a volume, named per volume.
type VolumeSnapshot struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Volume   string `json:"volume"`
	VolumeID string `json:"volume_id"`
	// SizeBytes is the volume's size when the snapshot was taken; StoredBytes what
	// its copy occupies on the host.
	SizeBytes   int64     `json:"size_bytes"`
	StoredBytes int64     `json:"stored_bytes"`
	CreatedAt   time.Time `json:"created_at"`
}

// SnapshotVolume takes a point-in-time copy of a volume, mounted by a sandbox or
// not (a mounted one is frozen for the copy). name "" lets the daemon name it.
func (c *Client) SnapshotVolume(ctx context.Context, volume, name string) (VolumeSnapshot, error) {
	var sn VolumeSnapshot
	body := map[string]string{}
	if name != "" {
		body["name"] = name
	}
	if err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/volumes/%s/snapshots", volume), json: body}, &sn); err != nil {
		return sn, fmt.Errorf("snapshot volume %s: %w", volume, err)
	}
	return sn, nil
}

// ListVolumeSnapshots lists a volume's snapshots, oldest first.
func (c *Client) ListVolumeSnapshots(ctx context.Context, volume string) ([]VolumeSnapshot, error) {
	var out struct {
		Snapshots []VolumeSnapshot `json:"snapshots"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/volumes/%s/snapshots", volume), idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list snapshots of volume %s: %w", volume, err)
	}
	return out.Snapshots, nil
}

// DeleteVolumeSnapshot deletes one of a volume's snapshots.
func (c *Client) DeleteVolumeSnapshot(ctx context.Context, volume, snapshot string) error {
	err := c.do(ctx, &request{method: http.MethodDelete, path: pathf("/v1/volumes/%s/snapshots/%s", volume, snapshot), idempotent: true}, nil)
	if err != nil {
		return fmt.Errorf("delete snapshot %s of volume %s: %w", snapshot, volume, err)
	}
	return nil
}

// RestoreVolume replaces a volume's files with one of its snapshots', atomically;
// refused (409) while a live sandbox mounts the volume.
func (c *Client) RestoreVolume(ctx context.Context, volume, snapshot string) (Volume, error) {
	var v Volume
	err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/volumes/%s/restore", volume),
		json: map[string]string{"snapshot": snapshot}, idempotent: true}, &v)
	if err != nil {
		return v, fmt.Errorf("restore volume %s from %s: %w", volume, snapshot, err)
	}
	return v, nil
}

// CreateVolumeFromSnapshot makes volume name holding the files of snapshot of
// volume from (both the caller's), of the snapshot's size.
func (c *Client) CreateVolumeFromSnapshot(ctx context.Context, name, from, snapshot string) (Volume, error) {
	var v Volume
	body := map[string]any{"name": name, "from_snapshot": map[string]string{"volume": from, "snapshot": snapshot}}
	if err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/volumes", json: body}, &v); err != nil {
		return v, fmt.Errorf("create volume %s from %s/%s: %w", name, from, snapshot, err)
	}
	return v, nil
}
