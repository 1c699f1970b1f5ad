package api

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/mw"
	"github.com/warden-sandbox/warden/internal/store"
)

// /v1/middleware (docs/guardrails.md, "Middleware"): the installed
// middleware, those of the config file (read-only here) and those added
// through the API (kept by mw.Registry in the state directory). Every
// route needs the admin scope; an agent's key may not change middleware,
// as it may not write policies: hooks govern the agents themselves.

// nkMiddleware says why these routes are no governed action.
const nkMiddleware = "middleware administration: admin scope, never an agent's key; changes are audited"

func (s *Server) mwRegistry() (*mw.Registry, error) {
	if s.cfg.Middleware == nil {
		return nil, apierr.New(apierr.CodeUnavailable, "this daemon has no middleware registry")
	}
	return s.cfg.Middleware, nil
}

// mwError maps a registry error to the API's.
func mwError(err error) error {
	switch {
	case errors.Is(err, mw.ErrNotFound):
		return apierr.NotFound("%s", err.Error())
	case errors.Is(err, mw.ErrReadOnly):
		return apierr.Conflict("%s", err.Error())
	case errors.Is(err, mw.ErrInvalid):
		return apierr.Validation("%s", err.Error())
	}
	return err
}

// notAgent refuses a change by an agent's key.
func notAgent(r *http.Request) error {
	if st := stateOf(r); st.ident != nil && st.ident.Principal.Kind == store.PrincipalAgent {
		return deny(apierr.Forbidden("an agent's key may not change middleware"))
	}
	return nil
}

// mwSummary is a middleware in a list: everything but the script.
type mwSummary struct {
	mw.Entry
	Script string `json:"script,omitempty"`
}

func (s *Server) listMiddleware(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.mwRegistry()
	if err != nil {
		return err
	}
	out := struct {
		Middleware []mwSummary `json:"middleware"`
	}{Middleware: []mwSummary{}}
	for _, e := range reg.List() {
		out.Middleware = append(out.Middleware, mwSummary{Entry: e})
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) getMiddleware(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.mwRegistry()
	if err != nil {
		return err
	}
	e, err := reg.Get(r.PathValue("name"))
	if err != nil {
		return mwError(err)
	}
	return writeJSON(w, http.StatusOK, e)
}

func (s *Server) putMiddleware(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.mwRegistry()
	if err != nil {
		return err
	}
	if err := notAgent(r); err != nil {
		return err
	}
	var m mw.Middleware
	if err := decodeJSON(r, &m, true); err != nil {
		return err
	}
	name := r.PathValue("name")
	if m.Name == "" {
		m.Name = name
	}
	if m.Name != name {
		return apierr.Validation("name %q in the body differs from %q in the path", truncate(m.Name, 64), truncate(name, 64))
	}
	st := stateOf(r)
	st.target = truncate(name, 128)
	st.detail["kinds"] = m.Kinds
	st.detail["on_error"] = m.OnError
	created, err := reg.Put(m)
	if err != nil {
		return mwError(err)
	}
	e, err := reg.Get(m.Name)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return writeJSON(w, status, e)
}

func (s *Server) deleteMiddleware(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.mwRegistry()
	if err != nil {
		return err
	}
	if err := notAgent(r); err != nil {
		return err
	}
	name := r.PathValue("name")
	stateOf(r).target = truncate(name, 128)
	if err := reg.Delete(name); err != nil {
		return mwError(err)
	}
	s.purgeMiddlewareGrants(name)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// testMiddleware runs one middleware, installed (name) or given in full
// (middleware), on a sample action (and result, for post), applying
// nothing: the verdict it would give.
func (s *Server) testMiddleware(w http.ResponseWriter, r *http.Request) error {
	reg, err := s.mwRegistry()
	if err != nil {
		return err
	}
	var q struct {
		Name       string          `json:"name"`
		Middleware *mw.Middleware  `json:"middleware"`
		Phase      string          `json:"phase"`
		Action     *govern.Action  `json:"action"`
		Result     json.RawMessage `json:"result"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	var m mw.Middleware
	switch {
	case q.Name != "" && q.Middleware != nil:
		return apierr.Validation("give name or middleware, not both")
	case q.Name != "":
		e, err := reg.Get(q.Name)
		if err != nil {
			return mwError(err)
		}
		m = e.Middleware
		m.Disabled = false
	case q.Middleware != nil:
		m = *q.Middleware
		if m.Name == "" {
			m.Name = "test"
		}
	default:
		return apierr.Validation("name or middleware is required")
	}
	if q.Phase == "" {
		q.Phase = "pre"
	}
	if q.Action == nil {
		return apierr.Validation("action is required")
	}
	if !q.Action.Kind.Known() {
		return apierr.Validation("action.kind %q is not a known kind", truncate(string(q.Action.Kind), 64))
	}
	var result any
	if len(q.Result) > 0 {
		if err := json.Unmarshal(q.Result, &result); err != nil {
			return apierr.Validation("result: %v", err)
		}
	}
	stateOf(r).target = truncate(m.Name, 128)
	v, err := reg.Set().Test(r.Context(), m, q.Phase, q.Action, result)
	if err != nil {
		return mwError(err)
	}
	return writeJSON(w, http.StatusOK, v)
}
