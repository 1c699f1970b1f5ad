package govern

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/warden-sandbox/warden/internal/errkind"
)

// Outcome is what a rule, a default or a stage decides.
type Outcome string

// The outcomes.
const (
	// Allow lets the action through.
	Allow Outcome = "allow"
	// Deny refuses it; the caller sees the rule's message.
	Deny Outcome = "deny"
	// RequireApproval holds it until another principal approves the
	// identical action (see Engine.Approve).
	RequireApproval Outcome = "require_approval"
	// LogOnly lets it through and marks its audit event.
	LogOnly Outcome = "log_only"
)

// Valid reports whether o is one of the outcomes.
func (o Outcome) Valid() bool {
	switch o {
	case Allow, Deny, RequireApproval, LogOnly:
		return true
	}
	return false
}

// strictness orders outcomes from the least to the most restrictive.
func (o Outcome) strictness() int {
	switch o {
	case Allow:
		return 0
	case LogOnly:
		return 1
	case RequireApproval:
		return 2
	default:
		return 3
	}
}

// ScopeKind says whom a policy applies to.
type ScopeKind string

// The scope kinds, from the most specific to the least.
const (
	// ScopePrincipal applies to actions whose actor is the principal ID.
	ScopePrincipal ScopeKind = "principal"
	// ScopeAgent applies to actions of the hosted agent ID (Action.Agent).
	ScopeAgent ScopeKind = "agent"
	// ScopeGroup applies to actors in the group ID (Principal.Groups).
	ScopeGroup ScopeKind = "group"
	// ScopeInstallation applies to every action.
	ScopeInstallation ScopeKind = "installation"
)

// specificity ranks scopes: higher is more specific.
func (k ScopeKind) specificity() int {
	switch k {
	case ScopePrincipal:
		return 3
	case ScopeAgent:
		return 2
	case ScopeGroup:
		return 1
	}
	return 0
}

// Scope is whom a policy applies to. ID is empty for the installation.
type Scope struct {
	Kind ScopeKind `json:"kind" yaml:"kind"`
	ID   string    `json:"id,omitempty" yaml:"id,omitempty"`
}

func (s Scope) String() string {
	if s.Kind == ScopeInstallation {
		return string(s.Kind)
	}
	return string(s.Kind) + ":" + s.ID
}

// applies reports whether the scope covers the action's actor.
func (s Scope) applies(a *Action) bool {
	switch s.Kind {
	case ScopePrincipal:
		return a.Principal.ID == s.ID
	case ScopeAgent:
		return a.Agent != nil && a.Agent.ID == s.ID
	case ScopeGroup:
		return slices.Contains(a.Principal.Groups, s.ID)
	case ScopeInstallation:
		return true
	}
	return false
}

// Policy is a set of rules and per-kind defaults attached to a scope.
// Version counts its updates, from 1; the engine's store sets it.
type Policy struct {
	ID      string `json:"id" yaml:"id"`
	Name    string `json:"name,omitempty" yaml:"name,omitempty"`
	Version int64  `json:"version,omitempty" yaml:"version,omitempty"`
	Scope   Scope  `json:"scope" yaml:"scope"`
	Rules   []Rule `json:"rules,omitempty" yaml:"rules,omitempty"`
	// Defaults decide a kind when no rule matches; the key "*" stands for
	// every kind without its own entry.
	Defaults map[Kind]Outcome `json:"defaults,omitempty" yaml:"defaults,omitempty"`
	// Guard screens the content of the actions it targets (guard.go,
	// docs/guardrails.md); nil: none.
	Guard *Guard `json:"guard,omitempty" yaml:"guard,omitempty"`

	CreatedAt time.Time `json:"created_at,omitzero" yaml:"-"`
	CreatedBy string    `json:"created_by,omitempty" yaml:"-"`
	UpdatedAt time.Time `json:"updated_at,omitzero" yaml:"-"`
	UpdatedBy string    `json:"updated_by,omitempty" yaml:"-"`
}

// Rule is one condition and its outcome.
type Rule struct {
	ID string `json:"id" yaml:"id"`
	// Kinds the rule applies to; empty means every kind, and then the
	// condition may only use the variables every kind has.
	Kinds []Kind `json:"kinds,omitempty" yaml:"kinds,omitempty"`
	// When is a CEL expression of type bool; empty always matches.
	When    string  `json:"when,omitempty" yaml:"when,omitempty"`
	Outcome Outcome `json:"outcome" yaml:"outcome"`
	// Message is what a denied caller sees (and what approvers see).
	Message string `json:"message,omitempty" yaml:"message,omitempty"`
	// Priority orders rules of the same outcome class: higher first.
	Priority int `json:"priority,omitempty" yaml:"priority,omitempty"`
	// Approvers of a require_approval rule: "principal:ID" or
	// "group:NAME" (a bare ID is a principal); empty means anyone who may
	// decide approvals.
	Approvers []string `json:"approvers,omitempty" yaml:"approvers,omitempty"`
}

// ErrInvalidPolicy marks a policy that does not parse or compile. Its
// kind maps to 422-class "invalid" errors at the doors.
var ErrInvalidPolicy = errkind.Sentinel(errkind.Invalid, "invalid policy", errkind.WithDetail)

// CompileError is a CEL condition that does not compile: the rule, and
// the line and column (1-based) within its When.
type CompileError struct {
	PolicyID string
	RuleID   string
	Line     int
	Column   int
	Message  string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("invalid policy: policy %s rule %s: when: line %d, column %d: %s",
		e.PolicyID, e.RuleID, e.Line, e.Column, e.Message)
}

// Kind makes CompileError an errkind.Kinded error (invalid).
func (e *CompileError) Kind() errkind.Kind { return errkind.Invalid }

// Public is the message a caller sees: all of it.
func (e *CompileError) Public() string { return e.Error() }

// Is makes errors.Is(err, ErrInvalidPolicy) true.
func (e *CompileError) Is(target error) bool { return target == ErrInvalidPolicy }

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)

// ParsePolicy reads a policy document in YAML or JSON (unknown fields are
// errors) and checks its shape (Validate); it does not compile the rules.
func ParsePolicy(b []byte) (Policy, error) {
	var p Policy
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		return Policy{}, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// Validate checks a policy's shape: ids, scope, kinds, outcomes and
// approvers. Compile also checks the conditions.
func (p *Policy) Validate() error {
	var errs []string
	if !idPattern.MatchString(p.ID) {
		errs = append(errs, fmt.Sprintf("id %q: want 1 to 128 of [A-Za-z0-9_.:-], starting with a letter or digit", p.ID))
	}
	switch p.Scope.Kind {
	case ScopePrincipal, ScopeAgent, ScopeGroup:
		if p.Scope.ID == "" {
			errs = append(errs, fmt.Sprintf("scope %s needs an id", p.Scope.Kind))
		}
	case ScopeInstallation:
		if p.Scope.ID != "" {
			errs = append(errs, "scope installation takes no id")
		}
	default:
		errs = append(errs, fmt.Sprintf("scope kind %q: want principal, agent, group or installation", p.Scope.Kind))
	}
	for k, o := range p.Defaults {
		if k != "*" && !k.Known() {
			errs = append(errs, fmt.Sprintf("defaults: unknown kind %q", k))
		}
		if !o.Valid() {
			errs = append(errs, fmt.Sprintf("defaults[%s]: unknown outcome %q", k, o))
		}
	}
	seen := map[string]bool{}
	for i, r := range p.Rules {
		name := fmt.Sprintf("rule %d", i+1)
		if r.ID != "" {
			name = "rule " + r.ID
		}
		if !idPattern.MatchString(r.ID) {
			errs = append(errs, fmt.Sprintf("%s: id %q: want 1 to 128 of [A-Za-z0-9_.:-]", name, r.ID))
		} else if seen[r.ID] {
			errs = append(errs, fmt.Sprintf("%s: duplicate id", name))
		}
		seen[r.ID] = true
		if !r.Outcome.Valid() {
			errs = append(errs, fmt.Sprintf("%s: outcome %q: want allow, deny, require_approval or log_only", name, r.Outcome))
		}
		for _, k := range r.Kinds {
			if !k.Known() {
				errs = append(errs, fmt.Sprintf("%s: unknown kind %q", name, k))
			}
		}
		if len(r.Approvers) > 0 && r.Outcome != RequireApproval {
			errs = append(errs, fmt.Sprintf("%s: approvers only apply to require_approval rules", name))
		}
		for _, a := range r.Approvers {
			if kind, id, ok := strings.Cut(a, ":"); id == "" || (ok && kind != "principal" && kind != "group") {
				errs = append(errs, fmt.Sprintf("%s: approver %q: want principal:ID, group:NAME or an ID", name, a))
			}
		}
	}
	if p.Guard != nil {
		errs = p.Guard.validate(errs)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: policy %s: %s", ErrInvalidPolicy, p.ID, strings.Join(errs, "; "))
	}
	return nil
}

// document is the stored body of a policy (store.Policy.Document).
type document struct {
	Rules    []Rule           `json:"rules"`
	Defaults map[Kind]Outcome `json:"defaults,omitempty"`
	Guard    *Guard           `json:"guard,omitempty"`
}

func (p *Policy) document() (json.RawMessage, error) {
	rules := p.Rules
	if rules == nil {
		rules = []Rule{}
	}
	return json.Marshal(document{Rules: rules, Defaults: p.Defaults, Guard: p.Guard})
}

func (p *Policy) setDocument(b json.RawMessage) error {
	var d document
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("policy %s: decode document: %w", p.ID, err)
	}
	p.Rules, p.Defaults, p.Guard = d.Rules, d.Defaults, d.Guard
	return nil
}
