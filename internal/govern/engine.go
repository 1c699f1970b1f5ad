package govern

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/store"
)

// Decision is what the engine decided about one action.
type Decision struct {
	Outcome Outcome `json:"outcome"`
	// Message is what a refused caller sees.
	Message string `json:"message,omitempty"`
	// Stage is the stage that decided ("rules", "access", ...).
	Stage string `json:"stage,omitempty"`
	// RuleID, PolicyID and PolicyVersion name the rule that decided;
	// RuleID is "" when a default did (then PolicyID names the policy
	// whose default it was, or is "" for the engine's default).
	RuleID        string `json:"rule_id,omitempty"`
	PolicyID      string `json:"policy_id,omitempty"`
	PolicyVersion int64  `json:"policy_version,omitempty"`
	// ApprovalID is the approval that holds the action (require_approval),
	// that let it through (allow) or that refused it (deny).
	ApprovalID string `json:"approval_id,omitempty"`
	// ApprovalState is that approval's state as this decision saw it.
	ApprovalState ApprovalState `json:"approval_state,omitempty"`
	// Skipped lists allow and log_only rules whose condition failed to
	// evaluate and that were skipped ("policy/rule: error").
	Skipped []string `json:"skipped,omitempty"`
	// Findings are the guard stage's findings (detector, kind, where;
	// never the value), also when it let the action through.
	Findings []GuardFinding `json:"findings,omitempty"`
	// Masked, when set, is the action's payload with the guard's
	// findings masked, which the door uses instead of the original: a
	// file write's body, or an mcp.call's arguments (a JSON object).
	Masked []byte `json:"-"`

	approvers []string // of the require_approval rule
}

// Errors a door returns for refused actions. All are errkind.Forbidden;
// their public text is the sentinel's followed by the decision's message.
var (
	ErrDenied           = errkind.Sentinel(errkind.Forbidden, "denied by policy", errkind.WithDetail)
	ErrApprovalRequired = errkind.Sentinel(errkind.Forbidden, "approval required", errkind.WithDetail)
	ErrApprovalRejected = errkind.Sentinel(errkind.Forbidden, "approval rejected", errkind.WithDetail)
	ErrApprovalExpired  = errkind.Sentinel(errkind.Forbidden, "approval expired", errkind.WithDetail)
	// ErrUnknownKind is an action of a kind the registry lacks: a door bug,
	// refused (fail closed).
	ErrUnknownKind = errkind.New(errkind.Internal, "unknown action kind")
)

// Err returns nil when the action may proceed (allow, log_only) and
// otherwise an error the door returns as is: ErrDenied,
// ErrApprovalRequired (naming the approval to wait for), ErrApprovalRejected
// or ErrApprovalExpired, wrapped with the message.
func (d Decision) Err() error {
	switch d.Outcome {
	case Allow, LogOnly:
		return nil
	case RequireApproval:
		return fmt.Errorf("%w: approval %s is pending; retry the identical request once it is approved: %s",
			ErrApprovalRequired, d.ApprovalID, d.Message)
	}
	switch d.ApprovalState {
	case ApprovalRejected:
		return fmt.Errorf("%w: %s", ErrApprovalRejected, d.Message)
	case ApprovalExpired:
		return fmt.Errorf("%w: %s", ErrApprovalExpired, d.Message)
	}
	return fmt.Errorf("%w: %s", ErrDenied, d.Message)
}

// Stage is one step of the governed path. Check returns the stage's
// decision: allow (or the zero Outcome) passes the action to the next
// stage, deny ends the path, require_approval and log_only are remembered
// while later stages still run (a later deny wins). An error ends the path
// with a denial; Decide returns that error unchanged, so a door's existing
// error (a 403, a 404 hiding a sandbox) reaches its caller as before.
type Stage interface {
	Name() string
	Check(ctx context.Context, a *Action) (Decision, error)
}

type stageFunc struct {
	name string
	fn   func(context.Context, *Action) (Decision, error)
}

func (s stageFunc) Name() string { return s.name }
func (s stageFunc) Check(ctx context.Context, a *Action) (Decision, error) {
	return s.fn(ctx, a)
}

// StageFunc makes a Stage of a function.
func StageFunc(name string, fn func(context.Context, *Action) (Decision, error)) Stage {
	return stageFunc{name, fn}
}

// KindedStage is a Stage that acts on some kinds only: Governs reports
// whether it may do anything but allow an action of kind k now. Engine's
// Governs asks it, so that a door on a hot path (egress) keeps skipping
// actions no stage acts on. A Stage without the method acts on every kind.
type KindedStage interface {
	Stage
	Governs(k Kind) bool
}

type kindedStageFunc struct {
	stageFunc
	governs func(Kind) bool
}

func (s kindedStageFunc) Governs(k Kind) bool { return s.governs(k) }

// KindedStageFunc makes a KindedStage of a function and its Governs.
func KindedStageFunc(name string, fn func(context.Context, *Action) (Decision, error), governs func(Kind) bool) Stage {
	return kindedStageFunc{stageFunc{name, fn}, governs}
}

// AccessStage is the first stage: authentication, scopes and ownership,
// which the doors check today. check is the door's existing check (it may
// read a.Credential); its error ends the path and is returned as is.
func AccessStage(check func(ctx context.Context, a *Action) error) Stage {
	return stageFunc{"access", func(ctx context.Context, a *Action) (Decision, error) {
		if err := check(ctx, a); err != nil {
			return Decision{Outcome: Deny, Message: "access denied"}, err
		}
		return Decision{Outcome: Allow}, nil
	}}
}

// Auditor appends audit events (*audit.Logger).
type Auditor interface {
	Append(ctx context.Context, e audit.Event) (audit.Event, error)
}

// Config configures an Engine.
type Config struct {
	// Store keeps policies and approvals. Without one, policies live in
	// memory only and require_approval outcomes are refused (fail closed).
	Store store.GovernStore
	// Default is the outcome when no rule and no policy default decides;
	// "" means Allow, so installations without policies keep working.
	Default Outcome
	// Access, if set, is the first stage (see AccessStage).
	Access Stage
	// After are stages after the rules (guardrails, middleware).
	After []Stage
	// CostLimit bounds each condition's runtime cost; 0 means
	// DefaultCostLimit.
	CostLimit uint64
	// EvalTimeout bounds the rules of one action; 0 means
	// DefaultEvalTimeout.
	EvalTimeout time.Duration
	// ApprovalTTL is how long an approval request stays open, and how long
	// an approval may be used once granted; 0 means DefaultApprovalTTL.
	ApprovalTTL time.Duration
	// Announcer, if set, is told of each new pending approval.
	Announcer Announcer
	// Audit, if set, receives approval.request and approval.decide events.
	Audit Auditor
	Log   *slog.Logger
	Now   func() time.Time
}

// DefaultApprovalTTL is the default Config.ApprovalTTL.
const DefaultApprovalTTL = 15 * time.Minute

// Engine decides actions: it runs the stages (access, rules, later
// guardrails and middleware) in order and keeps the approvals. Safe for
// concurrent use.
type Engine struct {
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
	stages []Stage

	writeMu sync.Mutex              // serialises policy writes
	rules   atomic.Pointer[ruleSet] // what Decide evaluates
	// attach: policy IDs attached to principals (attach.go).
	attach atomic.Pointer[map[string]map[string]bool]

	waitMu  sync.Mutex
	waiters map[string][]chan struct{} // approval id -> woken on decision

	bg sync.WaitGroup // announcements in flight
}

// New returns an engine with no policies; call Load to read the stored
// ones.
func New(cfg Config) *Engine {
	if cfg.Default == "" {
		cfg.Default = Allow
	}
	if cfg.EvalTimeout <= 0 {
		cfg.EvalTimeout = DefaultEvalTimeout
	}
	if cfg.ApprovalTTL <= 0 {
		cfg.ApprovalTTL = DefaultApprovalTTL
	}
	e := &Engine{cfg: cfg, log: cfg.Log, now: cfg.Now, waiters: map[string][]chan struct{}{}}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.now == nil {
		e.now = time.Now
	}
	if cfg.Access != nil {
		e.stages = append(e.stages, cfg.Access)
	}
	e.stages = append(e.stages, StageFunc("rules", e.evalRules))
	// The built-in guard stage, unless the config brings its own.
	if !slices.ContainsFunc(cfg.After, func(s Stage) bool { return s.Name() == "guard" }) {
		e.stages = append(e.stages, StageFunc("guard", e.guardStage))
	}
	e.stages = append(e.stages, cfg.After...)
	e.rules.Store(newRuleSet(nil))
	return e
}

// Stages returns the names of the stages in order.
func (e *Engine) Stages() []string {
	out := make([]string, len(e.stages))
	for i, s := range e.stages {
		out[i] = s.Name()
	}
	return out
}

// Close waits for approval announcements in flight.
func (e *Engine) Close() { e.bg.Wait() }

// decide runs the action through the stages and returns the decision. An
// error means the action must be refused: either a stage's error (returned
// as is) or a failure to keep an approval. A nil error with a decision
// whose Err is non-nil is a refusal by policy.
func (e *Engine) decide(ctx context.Context, a *Action) (Decision, error) {
	if a.Time.IsZero() {
		a.Time = e.now()
	}
	a.attached = e.attachedTo(a.Principal.ID)
	if !a.Kind.Known() {
		return Decision{Outcome: Deny, Message: "unknown action kind"},
			fmt.Errorf("decide %q: %w", a.Kind, ErrUnknownKind)
	}
	result := Decision{Outcome: Allow}
	var held, logged *Decision
	var findings []GuardFinding
	var masked []byte
	for _, st := range e.stages {
		d, err := st.Check(ctx, a)
		d.Stage = st.Name()
		if err != nil {
			d.Outcome = Deny
			return d, err
		}
		if d.Findings != nil {
			findings = append(findings, d.Findings...)
		}
		if d.Masked != nil {
			masked = d.Masked
		}
		switch d.Outcome {
		case Deny:
			d.Findings = findings
			return d, nil
		case RequireApproval:
			if held == nil {
				held = &d
			}
		case LogOnly:
			if logged == nil {
				logged = &d
			}
		default:
			if d.RuleID != "" || d.PolicyID != "" {
				result = d
			}
			result.Skipped = append(result.Skipped, d.Skipped...)
		}
	}
	switch {
	case held != nil:
		held.Findings, held.Masked = findings, nil
		return e.hold(ctx, a, *held)
	case logged != nil:
		logged.Findings, logged.Masked = findings, masked
		return *logged, nil
	}
	result.Outcome = Allow
	result.Findings, result.Masked = findings, masked
	if masked != nil && result.Message == "" {
		result.Message = "content masked by the guard"
	}
	return result, nil
}

// DecideWait is Decide for doors that hold the action while it awaits
// approval: on require_approval it waits up to hold for the approval to be
// decided. Approved, it decides again, which uses the approval (allow);
// rejected or expired, it returns a denial saying so; still pending when
// hold runs out, the require_approval decision.
func (e *Engine) DecideWait(ctx context.Context, a *Action, hold time.Duration) (Decision, error) {
	d, err := e.Decide(ctx, a)
	if err != nil || d.Outcome != RequireApproval || hold <= 0 {
		return d, err
	}
	wctx, cancel := context.WithTimeout(ctx, hold)
	ap, werr := e.Wait(wctx, d.ApprovalID)
	cancel()
	if werr != nil && ap.ID == "" {
		if ctx.Err() != nil {
			return d, ctx.Err()
		}
		return d, nil // still pending
	}
	switch ap.State {
	case ApprovalApproved:
		return e.Decide(ctx, a)
	case ApprovalRejected, ApprovalExpired:
		return refusedBy(d, ap), nil
	}
	if ctx.Err() != nil {
		return d, ctx.Err()
	}
	return d, nil
}

// ruleSet is the compiled policies, indexed by kind.
type ruleSet struct {
	policies []*compiledPolicy
	byKind   map[Kind]*kindRules
	guards   map[string][]*compiledGuard // by guard target
}

// kindRules are the rules of one kind in evaluation order: every deny rule
// first, then every require_approval rule, then the rest; within each, by
// priority (higher first), scope specificity (principal first), policy ID
// and position in the policy.
type kindRules struct {
	deny, approval, rest []*compiledRule
	// index holds the prechecks of deny, approval and rest, in that
	// order (index.go).
	index *preIndex
}

func newRuleSet(ps []*compiledPolicy) *ruleSet {
	rs := &ruleSet{policies: ps, byKind: map[Kind]*kindRules{}, guards: guardsByTarget(ps)}
	add := func(k Kind, r *compiledRule) {
		kr := rs.byKind[k]
		if kr == nil {
			kr = &kindRules{}
			rs.byKind[k] = kr
		}
		switch r.Outcome {
		case Deny:
			kr.deny = append(kr.deny, r)
		case RequireApproval:
			kr.approval = append(kr.approval, r)
		default:
			kr.rest = append(kr.rest, r)
		}
	}
	for _, p := range ps {
		for _, r := range p.rules {
			ks := r.Kinds
			if len(ks) == 0 {
				ks = Kinds()
			}
			for _, k := range ks {
				add(k, r)
			}
		}
	}
	less := func(rules []*compiledRule) {
		sort.SliceStable(rules, func(i, j int) bool {
			a, b := rules[i], rules[j]
			if a.Priority != b.Priority {
				return a.Priority > b.Priority
			}
			if sa, sb := a.policy.Scope.Kind.specificity(), b.policy.Scope.Kind.specificity(); sa != sb {
				return sa > sb
			}
			if a.policy.ID != b.policy.ID {
				return a.policy.ID < b.policy.ID
			}
			return a.index < b.index
		})
	}
	for _, kr := range rs.byKind {
		less(kr.deny)
		less(kr.approval)
		less(kr.rest)
		kr.index = newPreIndex(slices.Concat(kr.deny, kr.approval, kr.rest))
	}
	return rs
}

// evalRules is the rules stage.
func (e *Engine) evalRules(ctx context.Context, a *Action) (Decision, error) {
	return e.rules.Load().decide(ctx, a, e.cfg.Default, e.cfg.EvalTimeout, e.log)
}

func (rs *ruleSet) decide(ctx context.Context, a *Action, def Outcome, timeout time.Duration, log *slog.Logger) (Decision, error) {
	kr := rs.byKind[a.Kind]
	if kr != nil && len(kr.deny)+len(kr.approval)+len(kr.rest) > 0 {
		ev := &evaluation{ctx: ctx, deadline: time.Now().Add(timeout), act: newActivation(a)}
		defer ev.close()
		// Rules whose prechecks fail do not match (index.go): their
		// programs are not run.
		var buf [4]uint64
		live := kr.index.live(ev.act, buf[:])
		pos := -1
		next := func() bool {
			pos++
			return live[pos/64]&(1<<(pos%64)) != 0
		}
		// Deny and require_approval rules fail closed: a condition that
		// cannot be evaluated denies.
		for _, list := range [][]*compiledRule{kr.deny, kr.approval} {
			for _, r := range list {
				if !next() || !r.policy.covers(a) {
					continue
				}
				ok, err := ev.match(r)
				if err != nil {
					log.Warn("governance rule failed to evaluate; denying (fail closed)",
						"policy", r.policy.ID, "rule", r.ID, "kind", a.Kind, "err", err)
					d := r.decision()
					d.Outcome = Deny
					d.Message = fmt.Sprintf("rule %s of policy %s could not be evaluated, so the action is refused", r.ID, r.policy.ID)
					return d, nil
				}
				if ok {
					return r.decision(), nil
				}
			}
		}
		// Allow and log_only rules are skipped when they fail.
		var skipped []string
		for _, r := range kr.rest {
			if !next() || !r.policy.covers(a) {
				continue
			}
			ok, err := ev.match(r)
			if err != nil {
				log.Warn("governance rule failed to evaluate; skipping it", "policy", r.policy.ID, "rule", r.ID,
					"kind", a.Kind, "err", err)
				skipped = append(skipped, r.policy.ID+"/"+r.ID+": "+err.Error())
				continue
			}
			if ok {
				d := r.decision()
				d.Skipped = skipped
				return d, nil
			}
		}
		d := rs.defaultFor(a, def)
		d.Skipped = skipped
		return d, nil
	}
	return rs.defaultFor(a, def), nil
}

// defaultFor is the default of the most specific applicable policy that
// has one for the kind (the strictest among equally specific ones), else
// the engine's.
func (rs *ruleSet) defaultFor(a *Action, def Outcome) Decision {
	var best *compiledPolicy
	var bestOutcome Outcome
	for _, p := range rs.policies {
		o, ok := p.Defaults[a.Kind]
		if !ok {
			o, ok = p.Defaults["*"]
		}
		if !ok || !p.covers(a) {
			continue
		}
		if best == nil || p.Scope.Kind.specificity() > best.Scope.Kind.specificity() ||
			(p.Scope.Kind.specificity() == best.Scope.Kind.specificity() && o.strictness() > bestOutcome.strictness()) {
			best, bestOutcome = p, o
		}
	}
	if best == nil {
		d := Decision{Outcome: def}
		if def != Allow {
			d.Message = fmt.Sprintf("%s is not allowed by default", a.Kind)
		}
		return d
	}
	d := Decision{Outcome: bestOutcome, PolicyID: best.ID, PolicyVersion: best.Version}
	if bestOutcome != Allow {
		d.Message = fmt.Sprintf("%s is not allowed by default (policy %s)", a.Kind, best.ID)
	}
	return d
}

// evaluation is the rules of one action being evaluated.
type evaluation struct {
	ctx      context.Context
	deadline time.Time
	act      *activation
	dctx     context.Context // ctx with the deadline, made on first use
	cancel   context.CancelFunc
	// frame evaluates the rules with loops under dctx. One frame serves
	// all of them: cel's ContextEval would derive a context and a frame
	// per rule, which costs more than a simple rule's evaluation.
	frame *interpreter.ExecutionFrame
	n     int // conditions evaluated
}

func (ev *evaluation) close() {
	if ev.frame != nil {
		ev.frame.Close()
	}
	if ev.cancel != nil {
		ev.cancel()
	}
}

// errDeadline is the evaluation running past its deadline.
var errDeadline = errors.New("rule evaluation deadline exceeded")

// deadlineEvery is how many rules without loops run between checks of the
// deadline: their time is linear in the attributes they read, so a few
// of them cannot overrun it by much, and reading the clock before each
// is a measurable part of the cost of 100 rules.
const deadlineEvery = 8

// match evaluates one rule's condition: under the deadline (checked
// before the first rule, every deadlineEvery rules and before each rule
// with loops, and inside that rule) and the cost limit.
func (ev *evaluation) match(r *compiledRule) (bool, error) {
	if r.prg == nil {
		return true, nil
	}
	if err := ev.ctx.Err(); err != nil {
		return false, err
	}
	if (r.loops || ev.n%deadlineEvery == 0) && !time.Now().Before(ev.deadline) {
		return false, errDeadline
	}
	ev.n++
	var (
		out ref.Val
		err error
	)
	if r.loops {
		if ev.frame == nil {
			ev.dctx, ev.cancel = context.WithDeadline(ev.ctx, ev.deadline)
			f, ferr := interpreter.NewExecutionFrame(ev.act)
			if ferr != nil {
				return false, ferr
			}
			if ferr := f.SetContext(ev.dctx, interruptCheckFrequency); ferr != nil {
				f.Close()
				return false, ferr
			}
			ev.frame = f
		}
		// Each condition has its own cost limit: drop the tracker of the
		// previous rule so that the program makes a fresh one.
		ev.frame.SetCostTracker(nil)
		out, _, err = r.prg.Eval(ev.frame)
		if err != nil && errors.Is(err, interpreter.InterruptError{}) {
			err = fmt.Errorf("%w: %w", err, context.Cause(ev.dctx))
		}
	} else {
		out, _, err = r.prg.Eval(ev.act)
	}
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("condition returned %s, not bool", out.Type())
	}
	return b, nil
}

func (r *compiledRule) decision() Decision {
	d := Decision{Outcome: r.Outcome, Message: r.Message, RuleID: r.ID, PolicyID: r.policy.ID,
		PolicyVersion: r.policy.Version, approvers: r.Approvers}
	if d.Message == "" && r.Outcome != Allow {
		d.Message = fmt.Sprintf("rule %s of policy %s", r.ID, r.policy.ID)
	}
	return d
}

// Policies returns the loaded policies, ordered by ID.
func (e *Engine) Policies() []Policy {
	rs := e.rules.Load()
	out := make([]Policy, len(rs.policies))
	for i, p := range rs.policies {
		out[i] = p.Policy
	}
	return out
}

// Load reads and compiles every stored policy and makes them the ones
// Decide uses. A stored policy that no longer compiles is an error: the
// engine will not run without a policy it was told to enforce.
func (e *Engine) Load(ctx context.Context) error {
	if e.cfg.Store == nil {
		return nil
	}
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	recs, err := e.cfg.Store.ListPolicies(ctx)
	if err != nil {
		return fmt.Errorf("load policies: %w", err)
	}
	var ps []*compiledPolicy
	var errs []error
	for _, rec := range recs {
		p, err := fromRecord(rec)
		if err == nil {
			var cp *compiledPolicy
			if cp, err = compile(p, e.cfg.CostLimit); err == nil {
				ps = append(ps, cp)
				continue
			}
		}
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("load policies: %w", err)
	}
	e.rules.Store(newRuleSet(ps))
	return nil
}

// Compile checks a policy (its shape and every condition) without storing
// it. Errors wrap ErrInvalidPolicy; a condition that does not compile is a
// *CompileError with its line and column.
func Compile(p Policy) error {
	_, err := compile(p, 0)
	return err
}

// CreatePolicy compiles and stores a new policy (version 1) and puts it in
// force.
func (e *Engine) CreatePolicy(ctx context.Context, p Policy, by string) (Policy, error) {
	if _, err := compile(p, e.cfg.CostLimit); err != nil {
		return Policy{}, err
	}
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	now := e.now().UTC()
	p.Version, p.CreatedAt, p.UpdatedAt, p.CreatedBy, p.UpdatedBy = 1, now, now, by, by
	if e.cfg.Store != nil {
		doc, err := p.document()
		if err != nil {
			return Policy{}, fmt.Errorf("create policy %s: %w", p.ID, err)
		}
		rec, err := e.cfg.Store.CreatePolicy(ctx, store.Policy{ID: p.ID, Name: p.Name, ScopeKind: string(p.Scope.Kind),
			ScopeID: p.Scope.ID, Document: doc, CreatedAt: now, CreatedBy: by, UpdatedAt: now, UpdatedBy: by})
		if err != nil {
			return Policy{}, err
		}
		p.Version = rec.Version
	} else if e.find(p.ID) != nil {
		return Policy{}, fmt.Errorf("create policy %s: id in use: %w", p.ID, store.ErrConflict)
	}
	return p, e.swap(p)
}

// UpdatePolicy replaces a policy's name, scope, rules and defaults with
// p's, bumping its version, and puts the new version in force.
func (e *Engine) UpdatePolicy(ctx context.Context, p Policy, by string) (Policy, error) {
	if _, err := compile(p, e.cfg.CostLimit); err != nil {
		return Policy{}, err
	}
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	now := e.now().UTC()
	if e.cfg.Store != nil {
		doc, err := p.document()
		if err != nil {
			return Policy{}, fmt.Errorf("update policy %s: %w", p.ID, err)
		}
		rec, err := e.cfg.Store.UpdatePolicy(ctx, p.ID, func(r *store.Policy) error {
			r.Name, r.ScopeKind, r.ScopeID, r.Document = p.Name, string(p.Scope.Kind), p.Scope.ID, doc
			r.UpdatedAt, r.UpdatedBy = now, by
			return nil
		})
		if err != nil {
			return Policy{}, err
		}
		p.Version, p.CreatedAt, p.CreatedBy = rec.Version, rec.CreatedAt, rec.CreatedBy
	} else {
		old := e.find(p.ID)
		if old == nil {
			return Policy{}, fmt.Errorf("update policy %s: %w", p.ID, store.ErrNotFound)
		}
		p.Version, p.CreatedAt, p.CreatedBy = old.Version+1, old.CreatedAt, old.CreatedBy
	}
	p.UpdatedAt, p.UpdatedBy = now, by
	return p, e.swap(p)
}

// DeletePolicy removes a policy; its versions stay in the store's history.
func (e *Engine) DeletePolicy(ctx context.Context, id string) error {
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	if e.cfg.Store != nil {
		if err := e.cfg.Store.DeletePolicy(ctx, id, e.now()); err != nil {
			return err
		}
	} else if e.find(id) == nil {
		return fmt.Errorf("delete policy %s: %w", id, store.ErrNotFound)
	}
	old := e.rules.Load()
	var ps []*compiledPolicy
	for _, cp := range old.policies {
		if cp.ID != id {
			ps = append(ps, cp)
		}
	}
	e.rules.Store(newRuleSet(ps))
	return nil
}

// PolicyVersion returns a recorded version of a policy (also of a deleted
// one), for audit references and dry runs.
func (e *Engine) PolicyVersion(ctx context.Context, id string, version int64) (Policy, error) {
	if e.cfg.Store == nil {
		return Policy{}, fmt.Errorf("policy %s version %d: no store: %w", id, version, store.ErrNotFound)
	}
	rec, err := e.cfg.Store.GetPolicyVersion(ctx, id, version)
	if err != nil {
		return Policy{}, err
	}
	return fromRecord(rec)
}

// find returns the loaded policy with the ID; under writeMu.
func (e *Engine) find(id string) *Policy {
	for _, cp := range e.rules.Load().policies {
		if cp.ID == id {
			return &cp.Policy
		}
	}
	return nil
}

// swap puts p (already stored) in force; under writeMu.
func (e *Engine) swap(p Policy) error {
	cp, err := compile(p, e.cfg.CostLimit)
	if err != nil {
		return err
	}
	old := e.rules.Load()
	ps := make([]*compiledPolicy, 0, len(old.policies)+1)
	for _, o := range old.policies {
		if o.ID != p.ID {
			ps = append(ps, o)
		}
	}
	ps = append(ps, cp)
	sort.Slice(ps, func(i, j int) bool { return ps[i].ID < ps[j].ID })
	e.rules.Store(newRuleSet(ps))
	return nil
}

func fromRecord(rec store.Policy) (Policy, error) {
	p := Policy{ID: rec.ID, Name: rec.Name, Version: rec.Version,
		Scope:     Scope{Kind: ScopeKind(rec.ScopeKind), ID: rec.ScopeID},
		CreatedAt: rec.CreatedAt, CreatedBy: rec.CreatedBy, UpdatedAt: rec.UpdatedAt, UpdatedBy: rec.UpdatedBy}
	if err := p.setDocument(rec.Document); err != nil {
		return Policy{}, err
	}
	return p, nil
}

func newID(prefix string) string {
	b := make([]byte, 10)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}
