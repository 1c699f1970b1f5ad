package warden

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Policy outcomes (Rule.Outcome and PolicyTestEvent.Outcome).
const (
	OutcomeAllow           = "allow"
	OutcomeDeny            = "deny"
	OutcomeRequireApproval = "require_approval"
	OutcomeLogOnly         = "log_only"
)

// Approval states.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalRejected = "rejected"
	ApprovalExpired  = "expired"
)

// PolicyScope is whom a policy applies to: Kind principal, agent, group
// (with an ID) or installation (without one).
type PolicyScope struct {
	Kind string `json:"kind" yaml:"kind"`
	ID   string `json:"id,omitempty" yaml:"id,omitempty"`
}

// Rule is one CEL condition of a policy and its outcome.
type Rule struct {
	ID        string   `json:"id" yaml:"id"`
	Kinds     []string `json:"kinds,omitempty" yaml:"kinds,omitempty"`
	When      string   `json:"when,omitempty" yaml:"when,omitempty"`
	Outcome   string   `json:"outcome" yaml:"outcome"`
	Message   string   `json:"message,omitempty" yaml:"message,omitempty"`
	Priority  int      `json:"priority,omitempty" yaml:"priority,omitempty"`
	Approvers []string `json:"approvers,omitempty" yaml:"approvers,omitempty"`
}

// PolicyWrite is a policy as a client writes it (create, update, dry run).
type PolicyWrite struct {
	ID       string            `json:"id" yaml:"id"`
	Name     string            `json:"name,omitempty" yaml:"name,omitempty"`
	Scope    PolicyScope       `json:"scope" yaml:"scope"`
	Rules    []Rule            `json:"rules,omitempty" yaml:"rules,omitempty"`
	Defaults map[string]string `json:"defaults,omitempty" yaml:"defaults,omitempty"`
	Guard    *PolicyGuard      `json:"guard,omitempty" yaml:"guard,omitempty"`
}

// PolicyGuard is a policy's guardrails: the detectors (secrets, pii,
// injection) run over the content of the targeted actions (exec,
// file.write, code.run, mcp.call, mcp.result, memory.write, llm.prompt,
// llm.response; all when empty), and the
// action on a finding: block, mask, flag or require_approval.
type PolicyGuard struct {
	Detectors  []string           `json:"detectors" yaml:"detectors"`
	Targets    []string           `json:"targets,omitempty" yaml:"targets,omitempty"`
	Thresholds map[string]float64 `json:"thresholds,omitempty" yaml:"thresholds,omitempty"`
	Action     string             `json:"action" yaml:"action"`
	Message    string             `json:"message,omitempty" yaml:"message,omitempty"`
}

// GuardTestRequest asks what the detectors find in Text or in the JSON
// document JSON (give one); Detectors empty means all.
type GuardTestRequest struct {
	Text      *string         `json:"text,omitempty"`
	JSON      json.RawMessage `json:"json,omitempty"`
	Detectors []string        `json:"detectors,omitempty"`
}

// GuardFinding is one finding: never the matched value.
type GuardFinding struct {
	Detector   string  `json:"detector"`
	Kind       string  `json:"kind"`
	Target     string  `json:"target,omitempty"`
	Where      string  `json:"where,omitempty"`
	Start      int     `json:"start"`
	End        int     `json:"end"`
	Confidence float64 `json:"confidence"`
	PolicyID   string  `json:"policy_id,omitempty"`
	Action     string  `json:"action,omitempty"`
}

// GuardTestResult is the answer of TestGuard.
type GuardTestResult struct {
	Findings []GuardFinding `json:"findings"`
}

// TestGuard shows what the guard's detectors find (POST /v1/guard/test).
func (c *Client) TestGuard(ctx context.Context, q GuardTestRequest) (GuardTestResult, error) {
	var out GuardTestResult
	if err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/guard/test", json: q, idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("test guard: %w", err)
	}
	return out, nil
}

// Policy is a stored policy at one version.
type Policy struct {
	ID        string            `json:"id"`
	Name      string            `json:"name,omitempty"`
	Version   int64             `json:"version"`
	Scope     PolicyScope       `json:"scope"`
	Rules     []Rule            `json:"rules,omitempty"`
	Defaults  map[string]string `json:"defaults,omitempty"`
	Guard     *PolicyGuard      `json:"guard,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	CreatedBy string            `json:"created_by,omitempty"`
	UpdatedAt time.Time         `json:"updated_at"`
	UpdatedBy string            `json:"updated_by,omitempty"`
}

// PolicyTestRequest is a dry run: a draft and the audit events to replay,
// the last Limit (default 1000) or those from Since to Until.
type PolicyTestRequest struct {
	Policy PolicyWrite `json:"policy"`
	Limit  int         `json:"limit,omitempty"`
	Since  *time.Time  `json:"since,omitempty"`
	Until  *time.Time  `json:"until,omitempty"`
}

// PolicyTestEvent is one audit event the draft would not simply have
// allowed.
type PolicyTestEvent struct {
	Seq         int64     `json:"seq"`
	Time        time.Time `json:"time"`
	PrincipalID string    `json:"principal_id"`
	Kind        string    `json:"kind"`
	Target      string    `json:"target,omitempty"`
	Recorded    string    `json:"recorded"`
	Outcome     string    `json:"outcome"`
	RuleID      string    `json:"rule_id,omitempty"`
	Message     string    `json:"message,omitempty"`
	Partial     bool      `json:"partial,omitempty"`
	Skipped     []string  `json:"skipped,omitempty"`
}

// PolicyTestResult is what a draft would have done to recorded events.
type PolicyTestResult struct {
	PolicyID      string            `json:"policy_id"`
	PolicyVersion int64             `json:"policy_version"`
	Events        int               `json:"events"`
	Evaluated     int               `json:"evaluated"`
	OutOfScope    int               `json:"out_of_scope"`
	NotGovernable int               `json:"not_governable"`
	Counts        map[string]int    `json:"counts"`
	Results       []PolicyTestEvent `json:"results"`
	ByRule        map[string]int    `json:"by_rule"`
	Kinds         map[string]int    `json:"kinds"`
	Rebuilt       int               `json:"rebuilt"`
	FromSeq       int64             `json:"from_seq"`
	ToSeq         int64             `json:"to_seq"`
	Truncated     bool              `json:"truncated"`
}

// Approval is a request to let one exact action through once.
type Approval struct {
	ID            string          `json:"id"`
	ActionDigest  string          `json:"action_digest"`
	Principal     string          `json:"principal"`
	Owner         string          `json:"owner,omitempty"`
	Kind          string          `json:"kind"`
	Target        string          `json:"target,omitempty"`
	RuleID        string          `json:"rule_id,omitempty"`
	PolicyID      string          `json:"policy_id,omitempty"`
	PolicyVersion int64           `json:"policy_version,omitempty"`
	Approvers     []string        `json:"approvers,omitempty"`
	Message       string          `json:"message,omitempty"`
	Action        json.RawMessage `json:"action"`
	State         string          `json:"state"`
	CreatedAt     time.Time       `json:"created_at"`
	ExpiresAt     time.Time       `json:"expires_at"`
	DecidedBy     string          `json:"decided_by,omitempty"`
	DecidedAt     time.Time       `json:"decided_at,omitzero"`
	Reason        string          `json:"reason,omitempty"`
	ConsumedAt    time.Time       `json:"consumed_at,omitzero"`
}

// ApprovalQuery filters ListApprovals; zero fields match everything.
type ApprovalQuery struct {
	State     string // pending, approved, rejected or expired
	Principal string // the requester
	Limit     int
}

// CreatePolicy compiles and stores a policy (version 1). A condition that
// does not compile is an *APIError with code validation_failed naming the
// rule, line and column.
func (c *Client) CreatePolicy(ctx context.Context, p PolicyWrite) (Policy, error) {
	var out Policy
	if err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/policies", json: p}, &out); err != nil {
		return out, fmt.Errorf("create policy %s: %w", p.ID, err)
	}
	return out, nil
}

// ListPolicies lists the policies in force, ordered by id.
func (c *Client) ListPolicies(ctx context.Context) ([]Policy, error) {
	var out struct {
		Policies []Policy `json:"policies"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/policies", idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list policies: %w", err)
	}
	return out.Policies, nil
}

// GetPolicy returns a policy in force, or with version > 0 one of its
// recorded versions (also of a deleted policy).
func (c *Client) GetPolicy(ctx context.Context, id string, version int64) (Policy, error) {
	var out Policy
	var q url.Values
	if version > 0 {
		q = url.Values{"version": {strconv.FormatInt(version, 10)}}
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/policies/%s", id), query: q, idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("get policy %s: %w", id, err)
	}
	return out, nil
}

// UpdatePolicy replaces a policy, bumping its version.
func (c *Client) UpdatePolicy(ctx context.Context, id string, p PolicyWrite) (Policy, error) {
	var out Policy
	if err := c.do(ctx, &request{method: http.MethodPut, path: pathf("/v1/policies/%s", id), json: p, idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("update policy %s: %w", id, err)
	}
	return out, nil
}

// DeletePolicy takes a policy out of force; its versions stay readable.
func (c *Client) DeletePolicy(ctx context.Context, id string) error {
	if err := c.do(ctx, &request{method: http.MethodDelete, path: pathf("/v1/policies/%s", id), idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete policy %s: %w", id, err)
	}
	return nil
}

// TestPolicy dry-runs a draft policy against recorded audit events,
// changing nothing. The key needs policies:read and audit:read.
func (c *Client) TestPolicy(ctx context.Context, q PolicyTestRequest) (PolicyTestResult, error) {
	var out PolicyTestResult
	if err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/policies/test", json: q, idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("test policy %s: %w", q.Policy.ID, err)
	}
	return out, nil
}

// ListApprovals lists approvals, newest first.
func (c *Client) ListApprovals(ctx context.Context, q ApprovalQuery) ([]Approval, error) {
	v := url.Values{}
	if q.State != "" {
		v.Set("state", q.State)
	}
	if q.Principal != "" {
		v.Set("principal", q.Principal)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out struct {
		Approvals []Approval `json:"approvals"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/approvals", query: v, idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	return out.Approvals, nil
}

// GetApproval returns an approval.
func (c *Client) GetApproval(ctx context.Context, id string) (Approval, error) {
	var out Approval
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/approvals/%s", id), idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("get approval %s: %w", id, err)
	}
	return out, nil
}

// Approve grants a pending approval: the identical action passes once. The
// requester cannot approve its own request (a 403 *APIError).
func (c *Client) Approve(ctx context.Context, id, reason string) (Approval, error) {
	var out Approval
	if err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/approvals/%s/approve", id), json: map[string]string{"reason": reason}}, &out); err != nil {
		return out, fmt.Errorf("approve %s: %w", id, err)
	}
	return out, nil
}

// Reject refuses a pending approval: the identical action is denied until
// the approval expires.
func (c *Client) Reject(ctx context.Context, id, reason string) (Approval, error) {
	var out Approval
	if err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/approvals/%s/reject", id), json: map[string]string{"reason": reason}}, &out); err != nil {
		return out, fmt.Errorf("reject %s: %w", id, err)
	}
	return out, nil
}
