package e2b

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/snapshot"
	"github.com/warden-sandbox/warden/internal/store"
)

// E2B's snapshot routes over Warden's filesystem snapshots
// (internal/snapshot): POST /sandboxes/{id}/snapshots, GET /snapshots and
// DELETE /templates/{snapshotID}; a snapshot's id is usable as templateID
// in a create. Warden's snapshots hold the sandbox's files, not its memory:
// a sandbox created from one boots fresh on them.

// snapshotInfoJSON is E2B's SnapshotInfo.
type snapshotInfoJSON struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func toSnapshotInfo(sn store.Snapshot) snapshotInfoJSON {
	names := []string{}
	if sn.Name != sn.ID {
		names = append(names, sn.Name)
	}
	return snapshotInfoJSON{SnapshotID: sn.ID, Names: names}
}

func (s *Server) snapshotService() (*snapshot.Service, error) {
	if s.cfg.Snapshots == nil {
		return nil, errf(http.StatusServiceUnavailable, "this Warden daemon keeps no snapshots")
	}
	return s.cfg.Snapshots, nil
}

// createSnapshot is POST /sandboxes/{id}/snapshots ({name?}): 201
// {snapshotID, names}.
func (s *Server) createSnapshot(w http.ResponseWriter, c *call) error {
	ss, err := s.snapshotService()
	if err != nil {
		return err
	}
	var q struct {
		Name string `json:"name"`
	}
	if err := decode(c.r, &q); err != nil {
		return err
	}
	sb, err := s.sandboxFor(c, c.r.PathValue("id"))
	if err != nil {
		return err
	}
	if q.Name != "" {
		c.detail["name"] = q.Name
		if err := snapshot.CheckName(q.Name); err != nil {
			return err
		}
	}
	if err := s.governCall(c, &govern.Action{Kind: govern.KindSnapshot, SandboxID: sb.ID, Sandbox: sandboxInfo(sb),
		Snapshot: &govern.Snapshot{Op: "create", Name: q.Name}}); err != nil {
		return err
	}
	sn, err := ss.Create(c.r.Context(), c.ident.Principal.ID, sb.ID, q.Name)
	if err != nil {
		return err
	}
	c.detail["snapshot"] = sn.ID
	c.detail["size_bytes"] = sn.SizeBytes
	writeJSON(w, http.StatusCreated, toSnapshotInfo(sn))
	return nil
}

// listSnapshots is GET /snapshots (sandboxID, name, limit, nextToken): the
// caller's snapshots, oldest first, and X-Next-Token when more follow.
func (s *Server) listSnapshots(w http.ResponseWriter, c *call) error {
	ss, err := s.snapshotService()
	if err != nil {
		return err
	}
	qv := c.r.URL.Query()
	limit := 100
	if v := qv.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return errf(http.StatusBadRequest, "limit must be between 1 and 100")
		}
		limit = n
	}
	start := 0
	if v := qv.Get("nextToken"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errf(http.StatusBadRequest, "invalid nextToken")
		}
		start = n
	}
	list, err := ss.List(c.r.Context(), c.ident.Principal.ID, qv.Get("sandboxID"))
	if err != nil {
		return err
	}
	if name := qv.Get("name"); name != "" {
		kept := list[:0]
		for _, sn := range list {
			if sn.Name == name || sn.ID == name {
				kept = append(kept, sn)
			}
		}
		list = kept
	}
	out := []snapshotInfoJSON{}
	for i := start; i < len(list) && len(out) < limit; i++ {
		out = append(out, toSnapshotInfo(list[i]))
	}
	if next := start + len(out); next < len(list) {
		w.Header().Set("X-Next-Token", strconv.Itoa(next))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteTemplate is DELETE /templates/{id}: it deletes the caller's
// snapshot with that id (E2B's deleteSnapshot); 404 for anything else.
// Templates themselves are managed through Warden's own API.
func (s *Server) deleteTemplate(w http.ResponseWriter, c *call) error {
	id := c.r.PathValue("id")
	c.target = id
	ss, err := s.snapshotService()
	if err != nil {
		return err
	}
	if !strings.HasPrefix(id, "snap-") {
		return errf(http.StatusNotFound, "snapshot %q not found (templates are deleted through Warden's own API)", id)
	}
	sn, err := ss.Get(c.r.Context(), c.ident.Principal.ID, id)
	if errors.Is(err, snapshot.ErrNotFound) {
		return errf(http.StatusNotFound, "snapshot %q not found", id)
	}
	if err != nil {
		return err
	}
	if err := s.governCall(c, &govern.Action{Kind: govern.KindSnapshot, Snapshot: &govern.Snapshot{Op: "delete", Name: sn.Name}}); err != nil {
		return err
	}
	if err := ss.Delete(c.r.Context(), sn); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// snapshotTemplate maps a create's templateID: the caller's snapshot id to
// the template version it is; a template id that is another principal's
// snapshot to a 404 as for an unknown template; anything else through
// templateFor.
func (s *Server) snapshotTemplate(c *call, templateID string) (string, error) {
	ss := s.cfg.Snapshots
	if ss == nil {
		return templateFor(templateID), nil
	}
	if strings.HasPrefix(templateID, "snap-") {
		sn, err := ss.GetAny(c.r.Context(), c.ident.Principal.ID, templateID)
		if err == nil && sn.ID == templateID {
			c.detail["snapshot"] = sn.ID
			return sn.TemplateID, nil
		}
		if err != nil && !errors.Is(err, snapshot.ErrNotFound) {
			return "", err
		}
	}
	if strings.HasPrefix(templateID, "sha256:") {
		owner, ok, err := ss.OwnerOfTemplate(c.r.Context(), templateID)
		if err != nil {
			return "", err
		}
		if ok && owner != c.ident.Principal.ID {
			c.detail["owner"] = owner
			return "", &apiError{status: http.StatusBadRequest, message: "unknown template \"" + templateID + "\"", denied: true}
		}
	}
	return templateFor(templateID), nil
}
