package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
)

// principalJSON is the Principal schema.
type principalJSON struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	Name      string    `json:"name"`
	CreatedBy *string   `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
}

func toPrincipal(p store.Principal) principalJSON {
	out := principalJSON{ID: p.ID, Kind: p.Kind, Name: p.Name, CreatedAt: p.CreatedAt.UTC()}
	if p.CreatedBy != "" {
		by := p.CreatedBy
		out.CreatedBy = &by
	}
	return out
}

// keyJSON is the APIKey schema; it never holds the secret or its hash.
type keyJSON struct {
	ID          string     `json:"id"`
	Prefix      string     `json:"prefix"`
	PrincipalID string     `json:"principal_id"`
	Name        string     `json:"name"`
	Scopes      []string   `json:"scopes"`
	CreatedAt   time.Time  `json:"created_at"`
	RevokedAt   *time.Time `json:"revoked_at"`
}

func toKey(k store.APIKey) keyJSON {
	out := keyJSON{ID: k.ID, Prefix: k.Prefix, PrincipalID: k.PrincipalID, Name: k.Name,
		Scopes: k.Scopes, CreatedAt: k.CreatedAt.UTC()}
	if out.Scopes == nil {
		out.Scopes = []string{}
	}
	if !k.RevokedAt.IsZero() {
		t := k.RevokedAt.UTC()
		out.RevokedAt = &t
	}
	return out
}

func (s *Server) whoami(w http.ResponseWriter, r *http.Request) error {
	id := stateOf(r).ident
	return writeJSON(w, http.StatusOK, map[string]any{"principal": toPrincipal(id.Principal), "key": toKey(id.Key)})
}

// checkName validates a principal or key name.
func checkName(what, name string, required bool) error {
	switch {
	case name == "" && required:
		return apierr.BadRequest("request body: %s is required", what)
	case len(name) > 128:
		return apierr.Validation("%s: at most 128 bytes", what)
	case !utf8.ValidString(name) || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return apierr.Validation("%s: must be printable text", what)
	}
	return nil
}

func (s *Server) createPrincipal(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		Kind *string `json:"kind"`
		Name *string `json:"name"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.Kind == nil {
		return apierr.BadRequest("request body: kind is required")
	}
	if *q.Kind != store.PrincipalUser && *q.Kind != store.PrincipalAgent {
		return apierr.Validation("kind: %q is not user or agent", truncate(*q.Kind, 32))
	}
	if err := checkName("name", deref(q.Name), true); err != nil {
		return err
	}
	st := stateOf(r)
	st.detail["kind"] = *q.Kind
	st.detail["name"] = *q.Name
	if err := s.decide(r, &govern.Action{Subject: &govern.PrincipalChange{Op: "create", Kind: *q.Kind, Name: *q.Name}}); err != nil {
		return err
	}
	p, err := s.auth.CreatePrincipal(r.Context(), *q.Kind, *q.Name, st.principal)
	if err != nil {
		return err
	}
	st.target = p.ID
	return writeJSON(w, http.StatusCreated, toPrincipal(p))
}

func (s *Server) listPrincipals(w http.ResponseWriter, r *http.Request) error {
	ps, err := s.st.ListPrincipals(r.Context())
	if err != nil {
		return err
	}
	out := struct {
		Principals []principalJSON `json:"principals"`
	}{Principals: make([]principalJSON, 0, len(ps))}
	for _, p := range ps {
		out.Principals = append(out.Principals, toPrincipal(p))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		PrincipalID *string  `json:"principal_id"`
		Name        string   `json:"name"`
		Scopes      []string `json:"scopes"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.Scopes == nil {
		return apierr.BadRequest("request body: scopes is required")
	}
	if len(q.Scopes) == 0 {
		return apierr.Validation("scopes: at least one scope is required")
	}
	scopes, err := auth.ParseScopes(q.Scopes)
	if err != nil {
		return apierr.Validation("scopes: %s", err.Error())
	}
	if err := checkName("name", q.Name, false); err != nil {
		return err
	}
	st := stateOf(r)
	pid := st.principal
	if q.PrincipalID != nil {
		pid = *q.PrincipalID
	}
	st.detail["principal_id"] = pid
	st.detail["scopes"] = q.Scopes
	if q.Name != "" {
		st.detail["name"] = q.Name
	}
	// keys:manage without admin: keys of the caller's own principal, with
	// no scope the caller's key lacks (no way up to admin).
	if !st.ident.Has(auth.ScopeAdmin) {
		if pid != st.principal {
			return deny(apierr.Forbidden("keys:manage creates keys for your own principal only; other principals' keys need admin"))
		}
		for _, sc := range scopes {
			if !st.ident.Has(sc) {
				return deny(apierr.Forbidden("scope %s: a key can only grant scopes the key creating it holds", sc))
			}
		}
	}
	p, err := s.st.GetPrincipal(r.Context(), pid)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return notFoundf("principal %s not found", truncate(pid, 64))
		}
		return err
	}
	// Governance scopes are human-only (docs/governance.md): an agent
	// never writes the rules that govern it nor approves actions.
	if p.Kind == store.PrincipalAgent {
		for _, sc := range scopes {
			if sc.HumanOnly() {
				return deny(apierr.Forbidden("scope %s is never granted to an agent's key", sc))
			}
		}
	}
	if err := s.decide(r, &govern.Action{Key: &govern.KeyChange{Op: "create", PrincipalID: pid, Scopes: q.Scopes}}); err != nil {
		return err
	}
	secret, rec, err := s.auth.IssueKey(r.Context(), pid, q.Name, scopes)
	if err != nil {
		return err
	}
	st.target = rec.ID
	// The secret goes into this response only; it is never logged or audited.
	return writeJSON(w, http.StatusCreated, struct {
		Key    string  `json:"key"`
		APIKey keyJSON `json:"api_key"`
	}{Key: secret, APIKey: toKey(rec)})
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) error {
	owner := "" // every principal's, for admin
	if st := stateOf(r); !st.ident.Has(auth.ScopeAdmin) {
		owner = st.principal
	}
	ks, err := s.st.ListKeys(r.Context(), owner)
	if err != nil {
		return err
	}
	out := struct {
		Keys []keyJSON `json:"keys"`
	}{Keys: make([]keyJSON, 0, len(ks))}
	for _, k := range ks {
		out.Keys = append(out.Keys, toKey(k))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	st := stateOf(r)
	st.target = id
	if !st.ident.Has(auth.ScopeAdmin) {
		// keys:manage: only the caller's own principal's keys; another's
		// is reported like a key that does not exist.
		k, err := s.st.GetKeyByID(r.Context(), id)
		if errors.Is(err, store.ErrNotFound) {
			return notFoundf("key %s not found", truncate(id, 64))
		}
		if err != nil {
			return err
		}
		if k.PrincipalID != st.principal {
			return deny(fmt.Errorf("key %s belongs to another principal: %w", truncate(id, 64),
				apierr.NotFound("key %s not found", truncate(id, 64))))
		}
	}
	if err := s.decide(r, &govern.Action{Key: &govern.KeyChange{Op: "revoke", KeyID: id}}); err != nil {
		return err
	}
	if _, err := s.auth.RevokeKey(r.Context(), id); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return notFoundf("key %s not found", truncate(id, 64))
		}
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// auditEventJSON is the AuditEvent schema.
type auditEventJSON struct {
	Seq         int64           `json:"seq"`
	Time        string          `json:"time"`
	RequestID   string          `json:"request_id"`
	PrincipalID string          `json:"principal_id"`
	Action      string          `json:"action"`
	Target      string          `json:"target"`
	Outcome     string          `json:"outcome"`
	Detail      json.RawMessage `json:"detail"`
	PrevHash    string          `json:"prev_hash"`
	Hash        string          `json:"hash"`
}

func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) error {
	after, err := queryInt(r, "after", 0, 0, 1<<62)
	if err != nil {
		return err
	}
	limit, err := queryInt(r, "limit", 100, 1, store.MaxPageSize)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	evs, err := s.audit.List(r.Context(), store.AuditFilter{
		After: after, Limit: int(limit), Target: q.Get("target"), PrincipalID: q.Get("principal"),
	})
	if err != nil {
		return err
	}
	out := struct {
		Events    []auditEventJSON `json:"events"`
		NextAfter int64            `json:"next_after"`
	}{Events: make([]auditEventJSON, 0, len(evs)), NextAfter: after}
	for _, e := range evs {
		d := e.Detail
		if len(d) == 0 || !json.Valid(d) {
			d = json.RawMessage("{}")
		}
		out.Events = append(out.Events, auditEventJSON{
			Seq: e.Seq, Time: e.Time.UTC().Format(time.RFC3339Nano), RequestID: e.RequestID,
			PrincipalID: e.PrincipalID, Action: e.Action, Target: e.Target, Outcome: e.Outcome,
			Detail: d, PrevHash: e.PrevHash, Hash: e.Hash,
		})
		out.NextAfter = e.Seq
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) verifyAudit(w http.ResponseWriter, r *http.Request) error {
	rep, err := s.audit.Verify(r.Context())
	if err != nil {
		return err
	}
	type problem struct {
		Seq     int64  `json:"seq"`
		Kind    string `json:"kind"`
		Message string `json:"message"`
	}
	out := struct {
		OK       bool      `json:"ok"`
		Checked  int64     `json:"checked"`
		Problems []problem `json:"problems"`
		Pruned   int64     `json:"pruned,omitempty"` // audit retention (audit_anchor.go)
	}{OK: rep.OK, Checked: int64(rep.Checked), Problems: []problem{}, Pruned: rep.Pruned}
	for _, p := range rep.Problems {
		out.Problems = append(out.Problems, problem{Seq: p.Seq, Kind: string(p.Kind), Message: p.Message})
	}
	return writeJSON(w, http.StatusOK, out)
}
