package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
)

// Policies and approvals (docs/governance.md). The engine compiles a policy
// when it is written, so a condition that does not compile is a 422 naming
// the rule, line and column, never a failure at request time. Writing
// policies and deciding approvals are human-only scopes (auth.HumanOnly).

// Limits of policy dry runs (POST /v1/policies/test).
const (
	// defaultTestEvents is the events a dry run reads without limit or since.
	defaultTestEvents = 1000
	// maxTestEvents bounds the events one dry run reads.
	maxTestEvents = 10000
)

func (s *Server) engine() (*govern.Engine, error) {
	if s.cfg.Govern == nil {
		return nil, apierr.New(apierr.CodeUnavailable, "this daemon has no governance engine")
	}
	return s.cfg.Govern, nil
}

// policyBody is a policy as clients write it: what the server sets
// (version, created and updated) is not part of it.
type policyBody struct {
	ID       string                         `json:"id"`
	Name     string                         `json:"name"`
	Scope    govern.Scope                   `json:"scope"`
	Rules    []govern.Rule                  `json:"rules"`
	Defaults map[govern.Kind]govern.Outcome `json:"defaults"`
	Guard    *govern.Guard                  `json:"guard"`
}

func (b policyBody) policy() govern.Policy {
	return govern.Policy{ID: b.ID, Name: b.Name, Scope: b.Scope, Rules: b.Rules, Defaults: b.Defaults, Guard: b.Guard}
}

// policyErr gives engine and store errors of a policy their answer.
func policyErr(id string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFoundf("policy %s not found", truncate(id, 128))
	case errors.Is(err, store.ErrConflict):
		return apierr.Conflict("policy %s exists (ids of deleted policies are not reused)", truncate(id, 128))
	}
	return err // govern.ErrInvalidPolicy and *govern.CompileError are errkind.Invalid: 422
}

func (s *Server) createPolicy(w http.ResponseWriter, r *http.Request) error {
	e, err := s.engine()
	if err != nil {
		return err
	}
	var q policyBody
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	st := stateOf(r)
	st.target = q.ID
	p, err := e.CreatePolicy(r.Context(), q.policy(), st.principal)
	if err != nil {
		return policyErr(q.ID, err)
	}
	st.detail["version"] = p.Version
	st.detail["scope"] = p.Scope.String()
	st.detail["rules"] = len(p.Rules)
	return writeJSON(w, http.StatusCreated, p)
}

func (s *Server) listPolicies(w http.ResponseWriter, r *http.Request) error {
	e, err := s.engine()
	if err != nil {
		return err
	}
	ps := e.Policies()
	if ps == nil {
		ps = []govern.Policy{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"policies": ps})
}

func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request) error {
	e, err := s.engine()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if v := r.URL.Query().Get("version"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return apierr.BadRequest("query parameter version: want a positive integer, got %q", truncate(v, 32))
		}
		p, err := e.PolicyVersion(r.Context(), id, n)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return notFoundf("policy %s version %d not found", truncate(id, 128), n)
			}
			return err
		}
		return writeJSON(w, http.StatusOK, p)
	}
	for _, p := range e.Policies() {
		if p.ID == id {
			return writeJSON(w, http.StatusOK, p)
		}
	}
	return notFoundf("policy %s not found", truncate(id, 128))
}

func (s *Server) updatePolicy(w http.ResponseWriter, r *http.Request) error {
	e, err := s.engine()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	var q policyBody
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.ID == "" {
		q.ID = id
	} else if q.ID != id {
		return apierr.Validation("id %q in the body differs from the path's %q: a policy's id cannot change",
			truncate(q.ID, 128), truncate(id, 128))
	}
	st := stateOf(r)
	p, err := e.UpdatePolicy(r.Context(), q.policy(), st.principal)
	if err != nil {
		return policyErr(id, err)
	}
	st.detail["version"] = p.Version
	st.detail["scope"] = p.Scope.String()
	st.detail["rules"] = len(p.Rules)
	return writeJSON(w, http.StatusOK, p)
}

func (s *Server) deletePolicy(w http.ResponseWriter, r *http.Request) error {
	e, err := s.engine()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := e.DeletePolicy(r.Context(), id); err != nil {
		return policyErr(id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// policyTestResult is the answer of a dry run: the replay report and the
// audit events it read.
type policyTestResult struct {
	govern.ReplayReport
	// FromSeq and ToSeq are the first and last audit event read (0 when none).
	FromSeq int64 `json:"from_seq"`
	ToSeq   int64 `json:"to_seq"`
	// Truncated: more events matched the range than one dry run reads
	// (maxTestEvents); the earliest ones were read.
	Truncated bool `json:"truncated"`
}

// testPolicy evaluates a draft policy against recorded audit events and
// reports what it would have denied, held or logged. It stores nothing.
// The result shows audit events, so it needs audit:read as well.
func (s *Server) testPolicy(w http.ResponseWriter, r *http.Request) error {
	st := stateOf(r)
	if !st.ident.Has(auth.ScopeAuditRead) {
		st.detail["missing_scope"] = string(auth.ScopeAuditRead)
		return deny(apierr.Forbidden("a policy dry run reads the audit log: it needs scope %s as well", auth.ScopeAuditRead))
	}
	var q struct {
		Policy *policyBody `json:"policy"`
		Limit  int         `json:"limit"`
		Since  *time.Time  `json:"since"`
		Until  *time.Time  `json:"until"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.Policy == nil {
		return apierr.Validation("policy is required")
	}
	if q.Limit < 0 || q.Limit > maxTestEvents {
		return apierr.Validation("limit: want 1 to %d events", maxTestEvents)
	}
	if q.Limit > 0 && q.Since != nil {
		return apierr.Validation("give limit (the last N events) or since (a time range), not both")
	}
	if q.Until != nil && q.Since == nil {
		return apierr.Validation("until needs since")
	}
	if q.Since != nil && q.Until != nil && q.Until.Before(*q.Since) {
		return apierr.Validation("until is before since")
	}
	draft := q.Policy.policy()
	if err := govern.Compile(draft); err != nil {
		return err
	}
	evs, truncated, err := s.auditRange(r.Context(), q.Limit, q.Since, q.Until)
	if err != nil {
		return err
	}
	rep, err := govern.Replay(draft, evs)
	if err != nil {
		return err
	}
	if rep.Results == nil {
		rep.Results = []govern.ReplayResult{}
	}
	out := policyTestResult{ReplayReport: rep, Truncated: truncated}
	if len(evs) > 0 {
		out.FromSeq, out.ToSeq = evs[0].Seq, evs[len(evs)-1].Seq
	}
	st.detail["events"] = rep.Events
	return writeJSON(w, http.StatusOK, out)
}

// auditRange reads the last limit audit events, or those from since to
// until (now when nil), at most maxTestEvents, in order.
func (s *Server) auditRange(ctx context.Context, limit int, since, until *time.Time) ([]store.AuditEvent, bool, error) {
	last, err := s.audit.Last(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var after int64
	if since == nil {
		if limit == 0 {
			limit = defaultTestEvents
		}
		after = max(0, last.Seq-int64(limit))
	} else {
		// Events are appended in time order: find the first at or after
		// since by bisecting on sequence numbers.
		lo, hi := int64(0), last.Seq // the answer's seq is in (lo, hi]
		if last.Time.Before(*since) {
			return nil, false, nil
		}
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			evs, err := s.audit.List(ctx, store.AuditFilter{After: mid - 1, Limit: 1})
			if err != nil {
				return nil, false, err
			}
			if len(evs) == 0 || !evs[0].Time.Before(*since) {
				hi = mid
			} else {
				lo = evs[0].Seq
				if lo >= hi {
					break
				}
			}
		}
		after = lo
		limit = maxTestEvents
	}
	var out []store.AuditEvent
	for len(out) < limit {
		page, err := s.audit.List(ctx, store.AuditFilter{After: after, Limit: min(store.MaxPageSize, limit-len(out))})
		if err != nil {
			return nil, false, err
		}
		if len(page) == 0 {
			return out, false, nil
		}
		for _, ev := range page {
			if until != nil && ev.Time.After(*until) {
				return out, false, nil
			}
			if since != nil && ev.Time.Before(*since) {
				continue
			}
			out = append(out, ev)
		}
		after = page[len(page)-1].Seq
		if after >= last.Seq {
			return out, false, nil
		}
	}
	// Full: truncated if a time range had more.
	if since == nil {
		return out, false, nil
	}
	more, err := s.audit.List(ctx, store.AuditFilter{After: after, Limit: 1})
	if err != nil {
		return nil, false, err
	}
	return out, len(more) > 0 && (until == nil || !more[0].Time.After(*until)), nil
}

// approvalFilter reads GET /v1/approvals' query.
func approvalFilter(r *http.Request) (store.ApprovalFilter, error) {
	limit, err := queryInt(r, "limit", store.DefaultPageSize, 1, store.MaxPageSize)
	if err != nil {
		return store.ApprovalFilter{}, err
	}
	f := store.ApprovalFilter{Limit: int(limit), PrincipalID: r.URL.Query().Get("principal")}
	switch state := govern.ApprovalState(r.URL.Query().Get("state")); state {
	case "":
	case govern.ApprovalPending, govern.ApprovalApproved, govern.ApprovalRejected, govern.ApprovalExpired:
		f.States = []string{string(state)}
	default:
		return store.ApprovalFilter{}, apierr.BadRequest("query parameter state: want pending, approved, rejected or expired")
	}
	return f, nil
}

func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request) error {
	e, err := s.engine()
	if err != nil {
		return err
	}
	f, err := approvalFilter(r)
	if err != nil {
		return err
	}
	want := f.States
	if len(want) == 1 && (want[0] == string(govern.ApprovalPending) || want[0] == string(govern.ApprovalExpired)) {
		// A stored pending approval past its expiry is expired: read both
		// and keep what the engine reports in the state asked for.
		f.States = []string{string(govern.ApprovalPending), string(govern.ApprovalExpired)}
	}
	aps, err := e.ListApprovals(r.Context(), f)
	if err != nil {
		return err
	}
	out := make([]govern.Approval, 0, len(aps))
	for _, ap := range aps {
		if len(want) == 0 || string(ap.State) == want[0] {
			out = append(out, ap)
		}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"approvals": out})
}

func (s *Server) getApproval(w http.ResponseWriter, r *http.Request) error {
	e, err := s.engine()
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	ap, err := e.GetApproval(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return notFoundf("approval %s not found", truncate(id, 128))
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, ap)
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request) error {
	return s.decideApproval(w, r, govern.ApprovalApproved)
}

func (s *Server) reject(w http.ResponseWriter, r *http.Request) error {
	return s.decideApproval(w, r, govern.ApprovalRejected)
}

// decideApproval approves or rejects an approval as the caller. The
// requester (and agents of its owner) and principals the rule does not
// name as approvers are refused with 403.
func (s *Server) decideApproval(w http.ResponseWriter, r *http.Request, to govern.ApprovalState) error {
	e, err := s.engine()
	if err != nil {
		return err
	}
	var q struct {
		Reason string `json:"reason"`
	}
	if err := decodeJSON(r, &q, false); err != nil {
		return err
	}
	if len(q.Reason) > 1024 {
		return apierr.Validation("reason: at most 1024 bytes")
	}
	st := stateOf(r)
	id := r.PathValue("id")
	st.detail["decision"] = string(to)
	if q.Reason != "" {
		st.detail["reason"] = q.Reason
	}
	p := st.ident.Principal
	by := govern.Principal{ID: p.ID, Kind: p.Kind, Owner: p.CreatedBy}
	decide := e.Approve
	if to == govern.ApprovalRejected {
		decide = e.Reject
	}
	ap, err := decide(r.Context(), id, by, q.Reason)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFoundf("approval %s not found", truncate(id, 128))
	case errors.Is(err, govern.ErrSelfApproval), errors.Is(err, govern.ErrNotApprover):
		return deny(err)
	case err != nil:
		return err
	}
	return writeJSON(w, http.StatusOK, ap)
}
