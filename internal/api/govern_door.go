package api

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
)

// The native API's door to the governed path (docs/governance.md): every
// route that is an action names its govern.Kind in the route table, and its
// handler describes the action once and calls decide, after the caller's
// access was checked (authentication and the route's scope in serve,
// ownership in sandboxFor) and before anything is done. decide runs the
// action through the engine (access, rules, later stages) and keeps the
// action and its decision for the call's one audit event, which the
// governed path's audit log (govern.AuditLog) writes with govern.Record. An access refusal of a kinded
// route (a missing scope, a sandbox that is not the caller's) is fed to the
// engine as its access stage (govern.Checked), so it is decided and
// recorded by the same path. Routes that are no action say why (nokind).

// requireDecision makes serve panic (a 500, through recoverPanics) when a
// kinded route's handler succeeded without calling decide; tests set it.
// Outside tests such a call is logged as an error.
var requireDecision = false

// decide runs a through the governed path and returns nil when the call may
// proceed. The door fills a's common fields (kind from the route unless the
// handler set one, surface, principal, request, sandbox from sandboxFor).
// A refusal by policy is a 403: forbidden with the rule's message, or
// approval_required naming the approval the identical retry waits for.
func (s *Server) decide(r *http.Request, a *govern.Action) error {
	st := stateOf(r)
	st.decided = true
	s.fillAction(st, a)
	a.Credential = &govern.Checked{Identity: st.ident}
	g := s.cfg.Govern
	if g == nil {
		return nil // no engine: no rules (scopes and ownership were checked)
	}
	d, err := g.Decide(r.Context(), a)
	st.governed = []govern.Decided{{Action: a, Decision: d}}
	if err != nil {
		return fmt.Errorf("govern %s: %w", a.Kind, err)
	}
	if d.Outcome == govern.LogOnly {
		st.audited = true // flagged: audited also on routes that audit only denials (preview traffic)
	}
	return policyError(d)
}

// policyError is the API's answer to a refusing decision (nil when it
// allows).
func policyError(d govern.Decision) error {
	err := d.Err()
	if err == nil {
		return nil
	}
	if d.Outcome == govern.RequireApproval {
		e := apierr.From(err)
		ae := apierr.Wrap(apierr.CodeApprovalRequired, e.Message, err)
		ae.ApprovalID = d.ApprovalID
		return deny(ae)
	}
	return deny(err)
}

// refuseAccess feeds an access refusal of a kinded route (a denial that
// decide did not make) to the engine as the access stage, which records it
// as the call's decision. The action has the kind, the actor and the
// sandbox, not the body's attributes: access is refused before the body is
// read.
func (s *Server) refuseAccess(r *http.Request, kind govern.Kind, cause error) {
	st := stateOf(r)
	g := s.cfg.Govern
	if g == nil || st.decided || st.ident == nil {
		return
	}
	st.decided = true
	a := &govern.Action{Kind: kind}
	s.fillAction(st, a)
	if a.SandboxID == "" && st.sb == nil && st.target != "" && kind != govern.KindSandboxCreate &&
		kind != govern.KindTemplateBuild && kind != govern.KindTemplateImport {
		a.SandboxID = st.target
	}
	a.Credential = &govern.Checked{Identity: st.ident, Err: cause}
	d, _ := g.Decide(r.Context(), a)
	st.governed = []govern.Decided{{Action: a, Decision: d}}
}

// fillAction fills the fields every action of this door has.
func (s *Server) fillAction(st *reqState, a *govern.Action) {
	if a.Kind == "" {
		a.Kind = st.kind
	}
	a.Surface = govern.SurfaceAPI
	a.RequestID = st.id
	if st.ident != nil {
		p := st.ident.Principal
		a.Principal = govern.Principal{ID: p.ID, Kind: p.Kind, Owner: p.CreatedBy}
	}
	if sb := st.sb; sb != nil && a.SandboxID == "" && a.Kind != govern.KindSandboxCreate {
		a.SandboxID = sb.ID
		a.Sandbox = sandboxInfo(*sb)
	}
}

func sandboxInfo(sb store.Sandbox) *govern.SandboxInfo {
	return &govern.SandboxInfo{ID: sb.ID, Name: sb.Name, Template: sb.Template, Owner: sb.Owner, Metadata: sb.Metadata}
}

// envKeys returns the sorted names of an environment.
func envKeys(env map[string]string) []string {
	if len(env) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(env))
}

// checkDecided is serve's check, after the handler, that a kinded route's
// call went through the path: a successful call must have been decided
// (a missing decide call is a door bug); an access refusal that was not is
// fed to the engine now.
func (s *Server) checkDecided(r *http.Request, rt route, err error) {
	st := stateOf(r)
	if rt.kind == "" || st.decided {
		return
	}
	var d *denial
	switch {
	case err == nil:
		s.log.Error("governed route finished without a decision", "route", rt.pattern, "request_id", st.id)
		if requireDecision {
			panic("route " + rt.pattern + " (kind " + string(rt.kind) + ") finished without calling decide")
		}
	case errors.As(err, &d):
		s.refuseAccess(r, rt.kind, err)
	}
}
