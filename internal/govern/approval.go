package govern

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/store"
)

// ApprovalState is the state of an approval.
type ApprovalState string

// The approval states. Pending ones past ExpiresAt count as expired.
const (
	ApprovalPending  ApprovalState = "pending"
	ApprovalApproved ApprovalState = "approved"
	ApprovalRejected ApprovalState = "rejected"
	ApprovalExpired  ApprovalState = "expired"
)

// Approval is a request to let one exact action through once.
type Approval struct {
	ID string `json:"id"`
	// ActionDigest is the hex SHA-256 of the canonical action (ActionDigest).
	ActionDigest  string          `json:"action_digest"`
	Principal     string          `json:"principal"`       // the requester
	Owner         string          `json:"owner,omitempty"` // the requester's owner
	Kind          Kind            `json:"kind"`
	Target        string          `json:"target,omitempty"`
	RuleID        string          `json:"rule_id,omitempty"`
	PolicyID      string          `json:"policy_id,omitempty"`
	PolicyVersion int64           `json:"policy_version,omitempty"`
	Approvers     []string        `json:"approvers,omitempty"`
	Message       string          `json:"message,omitempty"`
	Action        json.RawMessage `json:"action"` // the canonical action
	State         ApprovalState   `json:"state"`
	CreatedAt     time.Time       `json:"created_at"`
	ExpiresAt     time.Time       `json:"expires_at"`
	DecidedBy     string          `json:"decided_by,omitempty"`
	DecidedAt     time.Time       `json:"decided_at,omitzero"`
	Reason        string          `json:"reason,omitempty"`
	// ConsumedAt is when the approved action ran; an approval lets one
	// identical action through.
	ConsumedAt time.Time `json:"consumed_at,omitzero"`
}

// Errors of Approve and Reject.
var (
	ErrApprovalNotPending = errkind.Sentinel(errkind.Conflict, "approval is not pending", errkind.WithDetail)
	ErrSelfApproval       = errkind.New(errkind.Forbidden, "the requester, and agents of its owner, cannot decide its approval")
	ErrNotApprover        = errkind.New(errkind.Forbidden, "not one of the approval's approvers")
	ErrNoApprovals        = errkind.New(errkind.Unavailable, "approvals are not available: the engine has no store")
)

// canonicalAction is what identifies an action for approvals: the kind,
// the actor, the sandbox and the kind's attributes; not when, through
// which door or in which request it was asked.
type canonicalAction struct {
	Kind      Kind   `json:"kind"`
	Principal string `json:"principal"`
	Agent     string `json:"agent,omitempty"`
	SandboxID string `json:"sandbox_id,omitempty"`
	Attrs     any    `json:"attrs"`
}

func canonical(a *Action) ([]byte, error) {
	c := canonicalAction{Kind: a.Kind, Principal: a.Principal.ID, SandboxID: a.SandboxID}
	if c.SandboxID == "" && a.Sandbox != nil {
		c.SandboxID = a.Sandbox.ID
	}
	if a.Agent != nil {
		c.Agent = a.Agent.ID
	}
	if spec := kinds[a.Kind]; spec != nil {
		c.Attrs = spec.attrs(a)
	}
	return json.Marshal(c) // struct fields in order, map keys sorted: canonical
}

// ActionDigest is the hex SHA-256 of the canonical form of the action
// (kind, actor, agent, sandbox and the kind's attributes): identical
// actions have identical digests whatever door they come through.
func ActionDigest(a *Action) (string, error) {
	b, err := canonical(a)
	if err != nil {
		return "", fmt.Errorf("action digest: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// hold resolves a require_approval decision: an approved, unused
// approval of the identical action lets it through (once); a pending one
// keeps it held; a rejected one refuses it until it expires; otherwise a
// new pending approval is created and announced.
func (e *Engine) hold(ctx context.Context, a *Action, d Decision) (Decision, error) {
	st := e.cfg.Store
	if st == nil {
		d.Outcome = Deny
		return d, fmt.Errorf("hold %s: %w", a.Kind, ErrNoApprovals)
	}
	body, err := canonical(a)
	if err != nil {
		d.Outcome = Deny
		return d, fmt.Errorf("hold %s: %w", a.Kind, err)
	}
	sum := sha256.Sum256(body)
	digest := hex.EncodeToString(sum[:])
	recs, err := st.ListApprovals(ctx, store.ApprovalFilter{Digest: digest, PrincipalID: a.Principal.ID,
		States: []string{string(ApprovalPending), string(ApprovalApproved), string(ApprovalRejected)}, Limit: 20})
	if err != nil {
		d.Outcome = Deny
		return d, fmt.Errorf("hold %s: %w", a.Kind, err)
	}
	now := e.now()
	for _, rec := range recs {
		if !now.Before(rec.ExpiresAt) {
			continue
		}
		switch ApprovalState(rec.State) {
		case ApprovalApproved:
			if !rec.ConsumedAt.IsZero() {
				continue
			}
			used, err := st.UpdateApproval(ctx, rec.ID, func(r *store.Approval) error {
				if r.State != string(ApprovalApproved) || !r.ConsumedAt.IsZero() {
					return fmt.Errorf("approval %s already used: %w", r.ID, store.ErrConflict)
				}
				r.ConsumedAt = now
				return nil
			})
			if errors.Is(err, store.ErrConflict) {
				continue // a concurrent identical action used it
			}
			if err != nil {
				d.Outcome = Deny
				return d, fmt.Errorf("hold %s: use approval: %w", a.Kind, err)
			}
			d.Outcome, d.ApprovalID, d.ApprovalState = Allow, used.ID, ApprovalApproved
			d.Message = "approved by " + used.DecidedBy
			return d, nil
		case ApprovalPending:
			d.ApprovalID, d.ApprovalState = rec.ID, ApprovalPending
			return d, nil
		case ApprovalRejected:
			return refusedBy(d, approvalFrom(rec)), nil
		}
	}
	ap := store.Approval{ID: newID("apr_"), Digest: digest, PrincipalID: a.Principal.ID, OwnerID: a.Principal.Owner,
		Kind: string(a.Kind), Target: a.target(), RuleID: d.RuleID, PolicyID: d.PolicyID,
		PolicyVersion: d.PolicyVersion, Approvers: d.approvers, Message: d.Message, Action: body,
		State: string(ApprovalPending), CreatedAt: now, ExpiresAt: now.Add(e.cfg.ApprovalTTL)}
	if err := st.CreateApproval(ctx, ap); err != nil {
		d.Outcome = Deny
		return d, fmt.Errorf("hold %s: %w", a.Kind, err)
	}
	d.ApprovalID, d.ApprovalState = ap.ID, ApprovalPending
	out := approvalFrom(ap)
	e.auditApproval(ctx, "approval.request", a.RequestID, a.Principal.ID, out)
	if e.cfg.Announcer != nil {
		e.bg.Add(1)
		go func() {
			defer e.bg.Done()
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := e.cfg.Announcer.Announce(actx, out); err != nil {
				e.log.Warn("announce pending approval", "approval", out.ID, "err", err)
			}
		}()
	}
	return d, nil
}

// refusedBy turns a decision into the denial a rejected or expired
// approval gives.
func refusedBy(d Decision, ap Approval) Decision {
	d.Outcome, d.ApprovalID, d.ApprovalState = Deny, ap.ID, ap.State
	switch ap.State {
	case ApprovalRejected:
		d.Message = fmt.Sprintf("approval %s was rejected by %s", ap.ID, ap.DecidedBy)
		if ap.Reason != "" {
			d.Message += ": " + ap.Reason
		}
	default:
		d.Message = fmt.Sprintf("approval %s expired at %s without a decision", ap.ID, ap.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return d
}

// Approve grants a pending approval: the identical action passes once
// before the approval expires. The approver must not be the requester or
// an agent of the requester's owner, and must be one of the approval's
// approvers when it names any. (Whether it may decide approvals at all,
// the approvals:decide scope, is the door's access check.)
func (e *Engine) Approve(ctx context.Context, id string, approver Principal, reason string) (Approval, error) {
	return e.decideApproval(ctx, id, approver, reason, ApprovalApproved)
}

// Reject refuses a pending approval: the identical action is denied until
// the approval expires.
func (e *Engine) Reject(ctx context.Context, id string, approver Principal, reason string) (Approval, error) {
	return e.decideApproval(ctx, id, approver, reason, ApprovalRejected)
}

func (e *Engine) decideApproval(ctx context.Context, id string, by Principal, reason string, to ApprovalState) (Approval, error) {
	if e.cfg.Store == nil {
		return Approval{}, ErrNoApprovals
	}
	now := e.now()
	expired := false
	rec, err := e.cfg.Store.UpdateApproval(ctx, id, func(r *store.Approval) error {
		if r.State != string(ApprovalPending) {
			return fmt.Errorf("%w: approval %s is %s", ErrApprovalNotPending, r.ID, r.State)
		}
		if by.ID == r.PrincipalID || (by.Kind == "agent" && by.Owner != "" &&
			(by.Owner == r.PrincipalID || (r.OwnerID != "" && by.Owner == r.OwnerID))) {
			return ErrSelfApproval
		}
		if !mayApprove(r.Approvers, by) {
			return ErrNotApprover
		}
		if !now.Before(r.ExpiresAt) {
			r.State, expired = string(ApprovalExpired), true
			return nil
		}
		r.State, r.DecidedBy, r.DecidedAt, r.Reason = string(to), by.ID, now, reason
		return nil
	})
	if err != nil {
		return Approval{}, fmt.Errorf("decide approval %s: %w", id, err)
	}
	ap := approvalFrom(rec)
	e.wake(id)
	if expired {
		return ap, fmt.Errorf("%w: approval %s is expired", ErrApprovalNotPending, id)
	}
	e.auditApproval(ctx, "approval.decide", "", by.ID, ap)
	return ap, nil
}

// mayApprove reports whether p is among the approvers ("principal:ID",
// "group:NAME" or a bare principal ID); no approvers means anyone.
func mayApprove(approvers []string, p Principal) bool {
	if len(approvers) == 0 {
		return true
	}
	for _, a := range approvers {
		kind, id, ok := strings.Cut(a, ":")
		if !ok {
			kind, id = "principal", a
		}
		if (kind == "principal" && id == p.ID) || (kind == "group" && slices.Contains(p.Groups, id)) {
			return true
		}
	}
	return false
}

// GetApproval returns an approval; a pending one past its expiry is
// reported (and stored) as expired.
func (e *Engine) GetApproval(ctx context.Context, id string) (Approval, error) {
	if e.cfg.Store == nil {
		return Approval{}, ErrNoApprovals
	}
	rec, err := e.cfg.Store.GetApproval(ctx, id)
	if err != nil {
		return Approval{}, err
	}
	if rec.State == string(ApprovalPending) && !e.now().Before(rec.ExpiresAt) {
		rec, err = e.expire(ctx, id)
		if err != nil {
			return Approval{}, err
		}
	}
	return approvalFrom(rec), nil
}

func (e *Engine) expire(ctx context.Context, id string) (store.Approval, error) {
	rec, err := e.cfg.Store.UpdateApproval(ctx, id, func(r *store.Approval) error {
		if r.State == string(ApprovalPending) && !e.now().Before(r.ExpiresAt) {
			r.State = string(ApprovalExpired)
		}
		return nil
	})
	if err != nil {
		return store.Approval{}, fmt.Errorf("expire approval %s: %w", id, err)
	}
	e.wake(id)
	return rec, nil
}

// ListApprovals lists approvals, newest first; pending ones past their
// expiry are reported as expired.
func (e *Engine) ListApprovals(ctx context.Context, f store.ApprovalFilter) ([]Approval, error) {
	if e.cfg.Store == nil {
		return nil, ErrNoApprovals
	}
	recs, err := e.cfg.Store.ListApprovals(ctx, f)
	if err != nil {
		return nil, err
	}
	now := e.now()
	out := make([]Approval, 0, len(recs))
	for _, r := range recs {
		ap := approvalFrom(r)
		if ap.State == ApprovalPending && !now.Before(ap.ExpiresAt) {
			ap.State = ApprovalExpired
		}
		out = append(out, ap)
	}
	return out, nil
}

// Wait blocks until the approval is decided or expires and returns it, or
// until ctx is done: then it returns the still-pending approval and the
// context's error.
func (e *Engine) Wait(ctx context.Context, id string) (Approval, error) {
	for {
		ch := make(chan struct{})
		e.waitMu.Lock()
		e.waiters[id] = append(e.waiters[id], ch)
		e.waitMu.Unlock()

		ap, err := e.GetApproval(ctx, id)
		if err != nil || ap.State != ApprovalPending {
			e.unwait(id, ch)
			return ap, err
		}
		left := ap.ExpiresAt.Sub(e.now())
		// Poll as well, for decisions made by another process on the
		// same store, and because tests move Now.
		t := time.NewTimer(min(left, time.Second))
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			e.unwait(id, ch)
			return ap, ctx.Err()
		}
		t.Stop()
		e.unwait(id, ch)
	}
}

func (e *Engine) unwait(id string, ch chan struct{}) {
	e.waitMu.Lock()
	defer e.waitMu.Unlock()
	ws := e.waiters[id]
	if i := slices.Index(ws, ch); i >= 0 {
		ws = slices.Delete(ws, i, i+1)
	}
	if len(ws) == 0 {
		delete(e.waiters, id)
	} else {
		e.waiters[id] = ws
	}
}

func (e *Engine) wake(id string) {
	e.waitMu.Lock()
	ws := e.waiters[id]
	delete(e.waiters, id)
	e.waitMu.Unlock()
	for _, ch := range ws {
		close(ch)
	}
}

func (e *Engine) auditApproval(ctx context.Context, action, reqID, principal string, ap Approval) {
	if e.cfg.Audit == nil {
		return
	}
	detail, err := json.Marshal(map[string]any{"approval_id": ap.ID, "kind": ap.Kind, "state": ap.State,
		"rule_id": ap.RuleID, "policy_id": ap.PolicyID, "policy_version": ap.PolicyVersion,
		"action_digest": ap.ActionDigest, "requester": ap.Principal, "reason": ap.Reason})
	if err != nil {
		return
	}
	if _, err := e.cfg.Audit.Append(context.WithoutCancel(ctx), audit.Event{RequestID: reqID, PrincipalID: principal,
		Action: action, Target: ap.ID, Outcome: audit.OutcomeSuccess, Detail: detail}); err != nil {
		e.log.Error("append audit event", "action", action, "approval", ap.ID, "err", err)
	}
}

func approvalFrom(r store.Approval) Approval {
	return Approval{ID: r.ID, ActionDigest: r.Digest, Principal: r.PrincipalID, Owner: r.OwnerID, Kind: Kind(r.Kind),
		Target: r.Target, RuleID: r.RuleID, PolicyID: r.PolicyID, PolicyVersion: r.PolicyVersion,
		Approvers: r.Approvers, Message: r.Message, Action: r.Action, State: ApprovalState(r.State),
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, DecidedBy: r.DecidedBy, DecidedAt: r.DecidedAt,
		Reason: r.Reason, ConsumedAt: r.ConsumedAt}
}

// Announcer tells approvers about a new pending approval.
type Announcer interface {
	Announce(ctx context.Context, ap Approval) error
}

// Webhook announces pending approvals by POSTing
// {"type":"approval.pending","approval":{...}} to URL, signed with
// X-Warden-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(Secret,
// "<t>.<body>")> (the receiver checks the signature in constant time and
// refuses timestamps more than a few minutes off).
type Webhook struct {
	URL    string
	Secret []byte
	Client *http.Client // http.DefaultClient when nil
	Now    func() time.Time
}

// Announce implements Announcer.
func (w *Webhook) Announce(ctx context.Context, ap Approval) error {
	body, err := json.Marshal(map[string]any{"type": "approval.pending", "approval": ap})
	if err != nil {
		return fmt.Errorf("approval webhook: %w", err)
	}
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("approval webhook: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Warden-Signature", WebhookSignature(w.Secret, now(), body))
	c := w.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("approval webhook: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("approval webhook: %s answered %s", w.URL, resp.Status)
	}
	return nil
}

// WebhookSignature is the X-Warden-Signature value for body sent at t.
func WebhookSignature(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}
