package api

import (
	"bytes"
	"io"
	"net/http"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
)

// Volume snapshots (internal/volume, docs/persistence.md): point-in-time
// copies of one of the caller's volumes, named per volume. Taking,
// deleting and restoring one take sandboxes:create and are governed
// volume.change actions (ops snapshot, snapshot_delete, restore); listing
// takes sandboxes:read.

// volumeSnapshotJSON is a volume snapshot as the API shows it.
type volumeSnapshotJSON struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Volume      string    `json:"volume"`
	VolumeID    string    `json:"volume_id"`
	SizeBytes   int64     `json:"size_bytes"`
	StoredBytes int64     `json:"stored_bytes"`
	CreatedAt   time.Time `json:"created_at"`
}

func toVolumeSnapshotJSON(v store.Volume, sn store.VolumeSnapshot) volumeSnapshotJSON {
	return volumeSnapshotJSON{ID: sn.ID, Name: sn.Name, Volume: v.Name, VolumeID: v.ID, SizeBytes: sn.SizeBytes,
		StoredBytes: sn.StoredBytes, CreatedAt: sn.CreatedAt}
}

// decideVolumeFile decides a copy into or out of the volume the path
// names: a file action (file.read or file.write, the route's kind) whose
// file.volume is the volume and file.path the path in it. A guard that
// screens written files sees the upload's first bytes, as for a sandbox's
// files.
func (s *Server) decideVolumeFile(r *http.Request, op, p string) error {
	var size int64
	if op == "write" && r.ContentLength > 0 {
		size = r.ContentLength
	}
	f := govern.NewFile(op, "/"+p, "", size)
	f.Volume = r.PathValue("name")
	a := &govern.Action{File: f}
	var head []byte
	screened := op == "write" && s.cfg.Govern != nil && s.cfg.Govern.Guards(govern.KindFileWrite)
	if screened {
		var err error
		if head, err = io.ReadAll(io.LimitReader(r.Body, govern.MaxGuardBody+1)); err != nil {
			return apierr.BadRequest("read body: %v", err)
		}
		pl := &govern.Payload{Body: head}
		if len(head) > govern.MaxGuardBody {
			pl.Body, pl.Truncated = head[:govern.MaxGuardBody], true
		}
		a.Payload = pl
	}
	if err := s.decide(r, a); err != nil {
		return err
	}
	if screened {
		st := stateOf(r)
		rest := r.Body
		if g := st.governed; len(g) > 0 && g[0].Decision.Masked != nil {
			st.detail["guard_masked"] = true
			r.Body = io.NopCloser(bytes.NewReader(g[0].Decision.Masked))
		} else {
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(head), rest), rest}
		}
	}
	return nil
}

func (s *Server) createVolumeSnapshot(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		Name string `json:"name"`
	}
	if err := decodeJSON(r, &q, false); err != nil {
		return err
	}
	st := stateOf(r)
	if q.Name != "" {
		st.detail["snapshot"] = q.Name
	}
	if err := s.decide(r, &govern.Action{Volume: &govern.VolumeChange{Op: "snapshot", Name: r.PathValue("name"), Snapshot: q.Name}}); err != nil {
		return err
	}
	vm, v, err := s.volumeOf(r)
	if err != nil {
		return err
	}
	sn, err := vm.Snapshot(r.Context(), v, q.Name)
	if err != nil {
		return err
	}
	st.detail["snapshot"] = sn.Name
	st.detail["snapshot_id"] = sn.ID
	return writeJSON(w, http.StatusCreated, toVolumeSnapshotJSON(v, sn))
}

func (s *Server) listVolumeSnapshots(w http.ResponseWriter, r *http.Request) error {
	vm, v, err := s.volumeOf(r)
	if err != nil {
		return err
	}
	list, err := vm.Snapshots(r.Context(), v)
	if err != nil {
		return err
	}
	out := make([]volumeSnapshotJSON, 0, len(list))
	for _, sn := range list {
		out = append(out, toVolumeSnapshotJSON(v, sn))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"snapshots": out})
}

func (s *Server) deleteVolumeSnapshot(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("snapshot")
	stateOf(r).detail["snapshot"] = name
	if err := s.decide(r, &govern.Action{Volume: &govern.VolumeChange{Op: "snapshot_delete", Name: r.PathValue("name"), Snapshot: name}}); err != nil {
		return err
	}
	vm, v, err := s.volumeOf(r)
	if err != nil {
		return err
	}
	sn, err := vm.GetSnapshot(r.Context(), v, name)
	if err != nil {
		return err
	}
	if err := vm.DeleteSnapshot(r.Context(), sn); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) restoreVolume(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		Snapshot string `json:"snapshot"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.Snapshot == "" {
		return apierr.Validation("snapshot: the name of the snapshot to restore is required")
	}
	st := stateOf(r)
	st.detail["snapshot"] = q.Snapshot
	if err := s.decide(r, &govern.Action{Volume: &govern.VolumeChange{Op: "restore", Name: r.PathValue("name"), Snapshot: q.Snapshot}}); err != nil {
		return err
	}
	vm, v, err := s.volumeOf(r)
	if err != nil {
		return err
	}
	sn, err := vm.GetSnapshot(r.Context(), v, q.Snapshot)
	if err != nil {
		return err
	}
	if err := vm.Restore(r.Context(), v, sn); err != nil {
		return err
	}
	st.detail["snapshot_id"] = sn.ID
	return writeJSON(w, http.StatusOK, toVolumeJSON(v))
}
