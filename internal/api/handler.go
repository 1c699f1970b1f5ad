package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/connguard"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/telemetry"
)

// denial marks an error as an authorization refusal: the audit event of the
// call gets outcome "denied" instead of "error".
type denial struct{ err error }

func (d *denial) Error() string { return d.err.Error() }
func (d *denial) Unwrap() error { return d.err }

func deny(err error) error { return &denial{err: err} }

// aborted marks a failure after part of a response body was sent: the
// adapter cuts the connection (http.ErrAbortHandler) so the client sees a
// truncated body instead of a complete-looking one.
type aborted struct{ err error }

func (a *aborted) Error() string { return a.err.Error() }
func (a *aborted) Unwrap() error { return a.err }

func abort(err error) error { return &aborted{err: err} }

func notFoundf(format string, args ...any) error { return apierr.NotFound(format, args...) }

// serve adapts a route's handler: it authenticates, checks the route's
// scope, runs the handler, writes its error (or, when the response has
// begun, only logs it) and appends the audit event.
func (s *Server) serve(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := stateOf(r)
		st.route = rt.pattern
		st.action = rt.action
		st.audited = rt.audited
		st.kind = rt.kind
		if rt.pattern != "unmatched" {
			telemetry.Route(r.Context(), r.Method, rt.pattern) // the request's span (docs/tracing.md)
		}
		err := s.authorize(rt, r)
		if err == nil && st.ident != nil && rt.stream {
			connguard.Relax(r)
		}
		if err == nil && st.ident != nil {
			if ok, wait := s.limits.allow(st.principal); !ok {
				err = rateLimited(w, wait)
			}
		}
		if err == nil {
			err = rt.h(w, r)
		}
		if err != nil {
			if responseStarted(w) {
				apierr.Report(r, err)
			} else {
				apierr.Write(w, r, err)
			}
		}
		traceSandbox(r, rt, st)
		s.checkDecided(r, rt, err)
		s.finishAudit(r, err)
		var ab *aborted
		if errors.As(err, &ab) {
			panic(http.ErrAbortHandler)
		}
	})
}

// authorize authenticates the caller of a non-public route and checks the
// route's scope.
func (s *Server) authorize(rt route, r *http.Request) error {
	if rt.public {
		return nil
	}
	st := stateOf(r)
	id, err := s.auth.Authenticate(r.Context(), r.Header.Get("Authorization"))
	if errors.Is(err, store.ErrNotFound) {
		// The key's principal is gone: the key is as good as unknown.
		err = fmt.Errorf("%w: %w", auth.ErrInvalidKey, err)
	}
	if err != nil {
		if errors.Is(err, auth.ErrUnauthenticated) {
			s.log.Warn("authentication failed", "request_id", st.id, "method", r.Method, "path", r.URL.Path,
				"remote", r.RemoteAddr, "reason", err.Error())
		}
		return err
	}
	st.ident = &id
	st.principal = id.Principal.ID
	// The object the path names is the event's target, so a call refused
	// here (scope) is audited with what it was aimed at; handlers refine
	// it (a sandbox's ID for its name, a created object's ID).
	if v := r.PathValue("id"); v != "" {
		st.target = v
	} else if v := r.PathValue("name"); v != "" {
		st.target = v
	}
	if v := r.PathValue("port"); v != "" {
		if n, err := strconv.Atoi(v); err == nil {
			st.detail["port"] = n
		} else {
			st.detail["port"] = v
		}
	}
	if rt.scope != "" {
		if rt.ownScope != "" && !id.Has(rt.scope) && id.Has(rt.ownScope) {
			st.ownOnly = true
			return nil
		}
		return s.requireScope(r, rt.scope)
	}
	return nil
}

// requireScope refuses the call with 403 when the caller lacks scope.
func (s *Server) requireScope(r *http.Request, scope auth.Scope) error {
	st := stateOf(r)
	if st.ident == nil || !st.ident.Has(scope) {
		st.detail["missing_scope"] = string(scope)
		return deny(apierr.Forbidden("missing scope %s", scope))
	}
	return nil
}

// sandboxFor returns the sandbox ref names if the caller may act on it:
// ref is a sandbox id or a sandbox name (resolveName, names.go); it is the
// one place that resolves either, and handlers act on the returned
// sandbox's ID, never on ref. A sandbox owned by someone else is reported
// exactly like one that does not exist, so sandbox IDs and names do not
// leak. The call's audit target is the sandbox's ID.
func (s *Server) sandboxFor(r *http.Request, ref string) (store.Sandbox, error) {
	st := stateOf(r)
	st.target = ref
	id := ref
	if !sandbox.IsID(ref) && sandbox.ValidName(ref) == nil {
		named, err := s.resolveName(r, ref)
		if err != nil {
			return store.Sandbox{}, err
		}
		id = named.ID
		st.target = id
		st.detail["sandbox_name"] = ref
	}
	sb, err := s.mgr.Get(r.Context(), id)
	if errors.Is(err, sandbox.ErrNotFound) {
		return store.Sandbox{}, notFoundf("sandbox %s not found", ref)
	}
	if err != nil {
		return store.Sandbox{}, err
	}
	if st.ident == nil || !st.ident.CanAccessSandbox(sb.Owner) || (st.ownOnly && sb.Owner != st.principal) {
		return store.Sandbox{}, deny(fmt.Errorf("sandbox %s is owned by %s: %w", id, sb.Owner,
			apierr.NotFound("sandbox %s not found", id)))
	}
	st.sb = &sb
	return sb, nil
}

// outcome of a finished call for the audit log.
func outcome(err error) string {
	var d *denial
	switch {
	case err == nil:
		return govern.AuditSuccess
	case errors.As(err, &d):
		return govern.AuditDenied
	default:
		return govern.AuditError
	}
}

// finishAudit appends the call's audit event unless it was appended already
// (commitAudit), the route audits only denials and this was none, or the
// caller never authenticated (such attempts are logged, not audited, so
// anonymous clients cannot grow the audit log).
func (s *Server) finishAudit(r *http.Request, err error) {
	st := stateOf(r)
	if st.done || st.action == "" {
		return
	}
	oc := outcome(err)
	if !st.audited && oc != govern.AuditDenied {
		return
	}
	// A governed decision is audited whoever asked (preview traffic let in
	// by a preview token or a public port, refused or flagged by a rule):
	// the engine decided it, and the event names the rule.
	if governed := len(st.governed) > 0; st.ident == nil && !governed && !strings.HasPrefix(st.action, "file.presigned_") {
		return
	}
	// Refusals of callers without a key (preview traffic, presigned links)
	// and preview traffic a rule flagged (log_only) are audited at most
	// once a second per action and target; the next event counts the ones
	// left out. Other actions that took effect (a presigned upload) and
	// decisions with guardrail findings are always audited.
	if st.ident == nil && (oc == govern.AuditDenied || flaggedPreview(st.governed)) && !hasFindings(st.governed) {
		n, ok := s.anonAudit.allow(st.action+" "+st.target, s.now())
		if !ok {
			return
		}
		if n > 0 {
			st.detail["suppressed"] = n
		}
	}
	if err != nil {
		if e := apierr.From(err); e != nil {
			st.detail["error"] = e.Code
		}
	}
	s.appendAudit(r.Context(), st, oc)
}

// flaggedPreview reports whether a rule flagged (log_only) a request to a
// sandbox's port.
func flaggedPreview(ds []govern.Decided) bool {
	for _, d := range ds {
		if d.Decision.Outcome == govern.LogOnly && d.Action != nil && d.Action.Kind == govern.KindPortPreview {
			return true
		}
	}
	return false
}

// hasFindings reports whether a decision found something in the content.
func hasFindings(ds []govern.Decided) bool {
	for _, d := range ds {
		if len(d.Decision.Findings) > 0 {
			return true
		}
	}
	return false
}

// commitAudit appends the call's audit event now, with the given outcome,
// for calls whose handler runs long after the action took effect (a stream
// that has started).
func (s *Server) commitAudit(r *http.Request, outcome string) {
	st := stateOf(r)
	if st.done || st.action == "" {
		return
	}
	s.appendAudit(r.Context(), st, outcome)
}

// appendAudit hands the call's event, with its decided action, to the
// governed path's audit log, which writes it (failures are logged there).
func (s *Server) appendAudit(ctx context.Context, st *reqState, oc string) {
	st.done = true
	s.audit.Write(ctx, govern.AuditEvent{
		RequestID: st.id, Principal: st.principal, Name: st.action,
		Target: st.target, Outcome: oc, Detail: st.detail, Governed: st.governed,
	})
}

// writeJSON writes v as a JSON response with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n')) // a failure means the client went away
	return nil
}
