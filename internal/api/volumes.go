package api

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/volume"
)

// Persistent volumes (internal/volume, docs/persistence.md): a principal's
// named directories with a size quota, addressed by name among the
// caller's own. Managing them takes sandboxes:create (list and inspect
// also sandboxes:read); copying files in and out, files:write and
// files:read.

const nkVolume = "volume administration and copies without a sandbox: no action kind yet (scopes and ownership only)"

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
	vm, err := s.volumes()
	if err != nil {
		return err
	}
	var q struct {
		Name   string `json:"name"`
		SizeMB int64  `json:"size_mb"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.SizeMB < 0 || q.SizeMB > volume.MaxSize>>20 {
		return apierr.Validation("size_mb must be between %d and %d", volume.MinSize>>20, volume.MaxSize>>20)
	}
	st := stateOf(r)
	st.detail["name"] = q.Name
	v, err := vm.Create(r.Context(), st.principal, q.Name, q.SizeMB<<20)
	if err != nil {
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
	vm, v, err := s.volumeOf(r)
	if err != nil {
		return err
	}
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
	v, err = vm.Resize(r.Context(), v, q.SizeMB<<20)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, toVolumeJSON(v))
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) error {
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
	vm, v, err := s.volumeOf(r)
	if err != nil {
		return err
	}
	p, err := volumePath(r)
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
	vm, v, err := s.volumeOf(r)
	if err != nil {
		return err
	}
	p, err := volumePath(r)
	if err != nil {
		return err
	}
	mode, err := queryMode(r)
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
