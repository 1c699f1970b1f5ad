package api

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/snapshot"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/template"
)

// Filesystem snapshots (internal/snapshot, docs/persistence.md): the
// caller's own, by name or id. Making one takes sandboxes:create on a
// sandbox the caller may act on; listing and inspecting sandboxes:read (or
// sandboxes:create); deleting sandboxes:create; promoting one to a
// template templates:write. A sandbox starts from one with "snapshot" in
// POST /v1/sandboxes.

// snapshotJSON is a snapshot as the API shows it.
type snapshotJSON struct {
	ID         string    `json:"id"`
	Name       string    `json:"name"`
	Owner      string    `json:"owner"`
	SandboxID  string    `json:"sandbox_id"`
	Template   string    `json:"template"`
	TemplateID string    `json:"template_id"`
	SizeBytes  int64     `json:"size_bytes"`
	CreatedAt  time.Time `json:"created_at"`
	// Memory: the snapshot also keeps the sandbox's memory (snapshot_memory.go).
	Memory        bool   `json:"memory"`
	MemoryBackend string `json:"memory_backend,omitempty"`
}

func toSnapshotJSON(s store.Snapshot) snapshotJSON {
	return snapshotJSON{ID: s.ID, Name: s.Name, Owner: s.Owner, SandboxID: s.SandboxID, Template: s.Template,
		TemplateID: s.TemplateID, SizeBytes: s.SizeBytes, CreatedAt: s.CreatedAt,
		Memory: s.MemoryRef != "", MemoryBackend: s.MemoryBackend}
}

func (s *Server) snapshots() (*snapshot.Service, error) {
	if s.cfg.Snapshots == nil {
		return nil, apierr.New(apierr.CodeUnavailable, "this daemon keeps no snapshots")
	}
	return s.cfg.Snapshots, nil
}

// snapshotOf returns the caller's snapshot named by the path.
func (s *Server) snapshotOf(r *http.Request) (*snapshot.Service, store.Snapshot, error) {
	ss, err := s.snapshots()
	if err != nil {
		return nil, store.Snapshot{}, err
	}
	st := stateOf(r)
	ref := r.PathValue("name")
	st.target = ref
	sn, err := ss.Get(r.Context(), st.principal, ref)
	if err != nil {
		return nil, sn, err
	}
	st.target = sn.ID
	st.detail["name"] = sn.Name
	return ss, sn, nil
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		Name   string `json:"name"`
		Memory bool   `json:"memory"`
	}
	if err := decodeJSON(r, &q, false); err != nil {
		return err
	}
	sb, err := s.sandboxFor(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	st := stateOf(r)
	if q.Name != "" {
		st.detail["name"] = q.Name
		if err := snapshot.CheckName(q.Name); err != nil {
			return err
		}
	}
	if err := s.decide(r, &govern.Action{Snapshot: &govern.Snapshot{Op: "create", Name: q.Name}}); err != nil {
		return err
	}
	ss, err := s.snapshots()
	if err != nil {
		return err
	}
	create := ss.Create
	if q.Memory {
		st.detail["memory"] = true
		create = ss.CreateWithMemory
	}
	sn, err := create(r.Context(), st.principal, sb.ID, q.Name)
	if err != nil {
		return err
	}
	st.target = sn.ID
	st.detail["sandbox"] = sb.ID
	st.detail["name"] = sn.Name
	st.detail["size_bytes"] = sn.SizeBytes
	return writeJSON(w, http.StatusCreated, toSnapshotJSON(sn))
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	ss, err := s.snapshots()
	if err != nil {
		return err
	}
	list, err := ss.List(r.Context(), stateOf(r).principal, r.URL.Query().Get("sandbox"))
	if err != nil {
		return err
	}
	out := make([]snapshotJSON, 0, len(list))
	for _, sn := range list {
		out = append(out, toSnapshotJSON(sn))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"snapshots": out})
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) error {
	_, sn, err := s.snapshotOf(r)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, toSnapshotJSON(sn))
}

// deleteSnapshot and promoteSnapshot decide before they look the
// snapshot up: a refusal says nothing of what exists.
func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	if err := s.decide(r, &govern.Action{Snapshot: &govern.Snapshot{Op: "delete", Name: r.PathValue("name")}}); err != nil {
		return err
	}
	ss, sn, err := s.snapshotOf(r)
	if err != nil {
		return err
	}
	if err := ss.Delete(r.Context(), sn); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) promoteSnapshot(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		Template string `json:"template"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.Template == "" {
		return apierr.Validation("template: the name of the template to make (name[:tag]) is required")
	}
	st := stateOf(r)
	st.detail["template"] = q.Template
	if _, _, err := template.ParseName(q.Template); err != nil {
		return err
	}
	if err := s.decide(r, &govern.Action{Snapshot: &govern.Snapshot{Op: "promote", Name: r.PathValue("name"), Template: q.Template}}); err != nil {
		return err
	}
	ss, sn, err := s.snapshotOf(r)
	if err != nil {
		return err
	}
	info, err := ss.Promote(r.Context(), sn, q.Template, templateActor(r))
	if err != nil {
		return tagDenied(err)
	}
	st.detail["template_id"] = sn.TemplateID
	return writeJSON(w, http.StatusCreated, info)
}

// snapshotTemplate resolves a create request's snapshot (the caller's, by
// name or id) to the template version it is, and refuses a template id that
// is someone else's snapshot: a snapshot is its owner's alone.
func (s *Server) snapshotTemplate(r *http.Request, q *createSandboxRequest) error {
	st := stateOf(r)
	if q.Snapshot == "" {
		if tmpl := deref(q.Template); strings.HasPrefix(tmpl, "sha256:") && s.cfg.Snapshots != nil {
			owner, ok, err := s.cfg.Snapshots.OwnerOfTemplate(r.Context(), tmpl)
			if err != nil {
				return err
			}
			if ok && owner != st.principal {
				return deny(fmt.Errorf("template %s is principal %s's snapshot: %w", tmpl, owner,
					fmt.Errorf("%w: %q", sandbox.ErrUnknownTemplate, tmpl)))
			}
		}
		return nil
	}
	if q.Template != nil && *q.Template != "" {
		return apierr.Validation("give template or snapshot, not both")
	}
	ss, err := s.snapshots()
	if err != nil {
		return err
	}
	sn, err := ss.Get(r.Context(), st.principal, q.Snapshot)
	if err != nil {
		return err
	}
	st.detail["snapshot"] = sn.ID
	if sn.MemoryRef != "" {
		q.memSnap = &sn
	}
	tmpl := sn.TemplateID
	q.Template = &tmpl
	return nil
}
