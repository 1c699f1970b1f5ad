package api

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/volume"
)

// Persistent volumes (internal/volume, docs/persistence.md): a principal's
// named directories with a size quota, addressed by name among the
// caller's own. Managing them takes sandboxes:create (list and inspect
// also sandboxes:read); copying files in and out, files:write and
// files:read. Changes are governed volume.change actions; copies are
// file.read and file.write actions whose file.volume names the volume
// (file.path is the path in it), so a rule on file paths catches them too.
// Each decides before it looks the volume up: a refusal says nothing of
// what exists.

// volumeJSON is a volume as the API shows it.
type volumeJSON struct {
	ID          string                 `json:"id"`
	Name        string                 `json:"name"`
	Owner       string                 `json:"owner"`
	SizeBytes   int64                  `json:"size_bytes"`
	CreatedAt   time.Time              `json:"created_at"`
	UsedBytes   *int64                 `json:"used_bytes,omitempty"`
	Attachments []volumeAttachmentJSON `json:"attachments,omitempty"`
}

type volumeAttachmentJSON struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path"`
	ReadOnly  bool   `json:"read_only"`
}

func toVolumeJSON(v store.Volume) volumeJSON {
	return volumeJSON{ID: v.ID, Name: v.Name, Owner: v.Owner, SizeBytes: v.SizeBytes, CreatedAt: v.CreatedAt}
}

func (s *Server) volumes() (*volume.Manager, error) {
	if s.cfg.Volumes == nil {
		return nil, apierr.New(apierr.CodeUnavailable, "this daemon has no volumes (it needs loop devices, ext4 and e2fsprogs)")
	}
	return s.cfg.Volumes, nil
}

// volumeOf returns the caller's volume named by the path.
func (s *Server) volumeOf(r *http.Request) (*volume.Manager, store.Volume, error) {
	vm, err := s.volumes()
	if err != nil {
		return nil, store.Volume{}, err
	}
	st := stateOf(r)
	name := r.PathValue("name")
	st.target = name
	v, err := vm.Get(r.Context(), st.principal, name)
	if err != nil {
		return nil, v, err
	}
	st.target = v.ID
	st.detail["name"] = v.Name
	return vm, v, nil
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		Name         string `json:"name"`
		SizeMB       int64  `json:"size_mb"`
		FromSnapshot *struct {
			Volume   string `json:"volume"`
			Snapshot string `json:"snapshot"`
		} `json:"from_snapshot"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.SizeMB < 0 || q.SizeMB > volume.MaxSize>>20 {
		return apierr.Validation("size_mb must be between %d and %d", volume.MinSize>>20, volume.MaxSize>>20)
	}
	st := stateOf(r)
	st.detail["name"] = q.Name
	act := &govern.VolumeChange{Op: "create", Name: q.Name, SizeBytes: q.SizeMB << 20}
	if f := q.FromSnapshot; f != nil {
		if f.Volume == "" || f.Snapshot == "" {
			return apierr.Validation("from_snapshot: volume and snapshot are required")
		}
		if q.SizeMB != 0 {
			return apierr.Validation("give size_mb or from_snapshot, not both: a volume made from a snapshot has its size")
		}
		act.FromVolume, act.Snapshot = f.Volume, f.Snapshot
		st.detail["from_volume"], st.detail["snapshot"] = f.Volume, f.Snapshot
	}
	if err := s.decide(r, &govern.Action{Volume: act}); err != nil {
		return err
	}
	vm, err := s.volumes()
	if err != nil {
		return err
	}
	var v store.Volume
	if f := q.FromSnapshot; f != nil {
		src, err := vm.Get(r.Context(), st.principal, f.Volume)
		if err != nil {
			return err
		}
		sn, err := vm.GetSnapshot(r.Context(), src, f.Snapshot)
		if err != nil {
			return err
		}
		v, err = vm.CreateFrom(r.Context(), st.principal, q.Name, sn)
		if err != nil {
			return err
		}
	} else if v, err = vm.Create(r.Context(), st.principal, q.Name, q.SizeMB<<20); err != nil {
		return err
	}
	st.target = v.ID
	st.detail["size_bytes"] = v.SizeBytes
	return writeJSON(w, http.StatusCreated, toVolumeJSON(v))
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) error {
	vm, err := s.volumes()
	if err != nil {
		return err
	}
	list, err := vm.List(r.Context(), stateOf(r).principal)
	if err != nil {
		return err
	}
	out := make([]volumeJSON, 0, len(list))
	for _, v := range list {
		out = append(out, toVolumeJSON(v))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"volumes": out})
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) error {
	vm, v, err := s.volumeOf(r)
	if err != nil {
		return err
	}
	info, err := vm.Inspect(r.Context(), v)
	if err != nil {
		return err
	}
	out := toVolumeJSON(info.Volume)
	out.UsedBytes = &info.UsedBytes
	out.Attachments = []volumeAttachmentJSON{}
	for _, a := range info.Attachments {
		out.Attachments = append(out.Attachments, volumeAttachmentJSON{SandboxID: a.SandboxID, Path: a.Path, ReadOnly: a.ReadOnly})
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) resizeVolume(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		SizeMB int64 `json:"size_mb"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.SizeMB <= 0 || q.SizeMB > volume.MaxSize>>20 {
		return apierr.Validation("size_mb must be between %d and %d", volume.MinSize>>20, volume.MaxSize>>20)
	}
	stateOf(r).detail["size_bytes"] = q.SizeMB << 20
	if err := s.decide(r, &govern.Action{Volume: &govern.VolumeChange{Op: "resize", Name: r.PathValue("name"), SizeBytes: q.SizeMB << 20}}); err != nil {
		return err
	}
	vm, v, err := s.volumeOf(r)
	if err != nil {
		return err
	}
	v, err = vm.Resize(r.Context(), v, q.SizeMB<<20)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, toVolumeJSON(v))
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) error {
	if err := s.decide(r, &govern.Action{Volume: &govern.VolumeChange{Op: "delete", Name: r.PathValue("name")}}); err != nil {
		return err
	}
	vm, v, err := s.volumeOf(r)
	if err != nil {
		return err
	}
	if err := vm.Delete(r.Context(), v); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func volumePath(r *http.Request) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		return "", apierr.BadRequest("query parameter path is required")
	}
	stateOf(r).detail["path"] = truncate(p, 256)
	if _, err := volume.CleanPath(p); err != nil {
		return "", err
	}
	return p, nil
}

func (s *Server) readVolumeFile(w http.ResponseWriter, r *http.Request) error {
	p, err := volumePath(r)
	if err != nil {
		return err
	}
	if err := s.decideVolumeFile(r, "read", p); err != nil {
		return err
	}
	vm, v, err := s.volumeOf(r)
	if err != nil {
		return err
	}
	err = vm.Download(r.Context(), v, p, func(f *os.File, size int64) error {
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		h.Set("Content-Length", strconv.FormatInt(size, 10))
		w.WriteHeader(http.StatusOK)
		n, err := io.Copy(w, f)
		stateOf(r).detail["bytes"] = n
		if err != nil {
			return errResponseStarted{err}
		}
		return nil
	})
	var started errResponseStarted
	if errors.As(err, &started) {
		s.log.Warn("volume download cut short", "volume", v.ID, "err", started.err)
		return nil
	}
	return err
}

// errResponseStarted is a failure after the status line went out: too late
// for an error body.
type errResponseStarted struct{ err error }

func (e errResponseStarted) Error() string { return e.err.Error() }

func (s *Server) writeVolumeFile(w http.ResponseWriter, r *http.Request) error {
	p, err := volumePath(r)
	if err != nil {
		return err
	}
	mode, err := queryMode(r)
	if err != nil {
		return err
	}
	if err := s.decideVolumeFile(r, "write", p); err != nil {
		return err
	}
	vm, v, err := s.volumeOf(r)
	if err != nil {
		return err
	}
	n, err := vm.Upload(r.Context(), v, p, r.Body, os.FileMode(mode))
	stateOf(r).detail["bytes"] = n
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"path": p, "size": n})
}
