package api

import (
	"net/http"
	"strconv"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/memory"
	"github.com/warden-sandbox/warden/internal/store"
)

// Agents' memory (docs/memory.md), reviewed by humans: memory:read lists,
// reads with history, diffs and exports; memory:review redacts. Memory
// belongs to the installation, so reviewers see every agent's (and an
// agent deleted leaves its memory). {name} is the agent's name, its
// memory's namespace. Agents write their memory through the MCP
// gateway's memory tools, never here.

// nkMemoryRedact is why redaction is no governed action.
const nkMemoryRedact = "removes stored text (memory:review, human-only); the memory service audits each redaction"

func (s *Server) memory() (*memory.Service, error) {
	if s.cfg.Memory == nil {
		return nil, apierr.Unavailable("agent memory is not configured", nil)
	}
	return s.cfg.Memory, nil
}

// memoryNamespace reads the namespace: the {name} of the path.
func memoryNamespace(r *http.Request) (string, error) {
	ns := r.PathValue("name")
	if !memory.ValidNamespace(ns) {
		return "", apierr.Validation("%q is not an agent name", truncate(ns, 80))
	}
	st := stateOf(r)
	st.target = "memory:" + ns
	return ns, nil
}

func memoryQueryInt(r *http.Request, k string) (int64, error) {
	v := r.URL.Query().Get(k)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, apierr.Validation("%s must be a non-negative integer", k)
	}
	return n, nil
}

func (s *Server) listMemory(w http.ResponseWriter, r *http.Request) error {
	m, err := s.memory()
	if err != nil {
		return err
	}
	ns, err := memoryNamespace(r)
	if err != nil {
		return err
	}
	limit, err := memoryQueryInt(r, "limit")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	f := store.MemoryFilter{Prefix: q.Get("prefix"), Tag: q.Get("tag"), Limit: int(limit)}
	var es []memory.Entry
	if search := q.Get("q"); search != "" {
		es, err = m.Recall(r.Context(), ns, search, f)
	} else {
		es, err = m.List(r.Context(), ns, f)
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"agent": ns, "entries": es})
}

func (s *Server) getMemory(w http.ResponseWriter, r *http.Request) error {
	m, err := s.memory()
	if err != nil {
		return err
	}
	ns, err := memoryNamespace(r)
	if err != nil {
		return err
	}
	key := r.URL.Query().Get("key")
	if key == "" {
		return apierr.Validation("key is required")
	}
	h, err := m.History(r.Context(), ns, key)
	if err != nil {
		return err
	}
	out := map[string]any{"agent": ns, "key": key, "versions": h, "entry": nil}
	if last := h[len(h)-1]; !last.Forgotten {
		out["entry"] = last
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) diffMemory(w http.ResponseWriter, r *http.Request) error {
	m, err := s.memory()
	if err != nil {
		return err
	}
	ns, err := memoryNamespace(r)
	if err != nil {
		return err
	}
	key := r.URL.Query().Get("key")
	if key == "" {
		return apierr.Validation("key is required")
	}
	from, err := memoryQueryInt(r, "from")
	if err != nil {
		return err
	}
	to, err := memoryQueryInt(r, "to")
	if err != nil {
		return err
	}
	d, err := m.Diff(r.Context(), ns, key, from, to)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, d)
}

func (s *Server) exportMemory(w http.ResponseWriter, r *http.Request) error {
	m, err := s.memory()
	if err != nil {
		return err
	}
	ns, err := memoryNamespace(r)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Content-Disposition", `attachment; filename="`+ns+`-memory.jsonl"`)
	w.WriteHeader(http.StatusOK)
	if err := m.Export(r.Context(), ns, w); err != nil {
		// The status is sent: the export ends short, and the log says why.
		stateOf(r).detail["error"] = err.Error()
		s.log.Warn("memory export ended early", "agent", ns, "err", err)
	}
	return nil
}

type redactMemoryRequest struct {
	Key string `json:"key"`
	// Version is the version to redact; 0 or absent: every version.
	Version int64  `json:"version"`
	Reason  string `json:"reason"`
}

func (s *Server) redactMemory(w http.ResponseWriter, r *http.Request) error {
	m, err := s.memory()
	if err != nil {
		return err
	}
	ns, err := memoryNamespace(r)
	if err != nil {
		return err
	}
	var req redactMemoryRequest
	if err := decodeJSON(r, &req, true); err != nil {
		return err
	}
	if req.Key == "" || req.Version < 0 {
		return apierr.Validation("key is required and version must be 0 (all) or a version")
	}
	st := stateOf(r)
	p := govern.Principal{}
	if st.ident != nil {
		p = govern.Principal{ID: st.ident.Principal.ID, Kind: st.ident.Principal.Kind, Owner: st.ident.Principal.CreatedBy}
	}
	n, err := m.Redact(r.Context(), ns, req.Key, req.Version, p, req.Reason)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"agent": ns, "key": req.Key, "versions_redacted": n})
}
