package govern

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"
)

// The variables every kind has.
const (
	varPrincipal = "principal"
	varAgent     = "agent"
	varTrigger   = "trigger"
	varAction    = "action"
	varSandbox   = "sandbox"
)

// actionVar is the CEL variable action.
type actionVar struct {
	Kind    string    `json:"kind"`
	Surface string    `json:"surface"`
	Time    time.Time `json:"time"`
}

// commonVars are declared for every rule, with their Go types.
var commonVars = []struct {
	name string
	typ  reflect.Type
}{
	{varPrincipal, reflect.TypeFor[Principal]()},
	{varAgent, reflect.TypeFor[Agent]()},
	{varTrigger, reflect.TypeFor[Trigger]()},
	{varAction, reflect.TypeFor[actionVar]()},
	{varSandbox, reflect.TypeFor[SandboxInfo]()},
}

// kindVars maps each kind variable to the kinds that have it.
var kindVars = func() map[string][]Kind {
	m := map[string][]Kind{}
	for _, k := range kindTable {
		m[k.cel] = append(m[k.cel], k.kind)
	}
	return m
}()

// celEnv is the one CEL environment: every variable declared with its
// type (Go structs through ext.NativeTypes, fields named by their json
// tags), so a condition naming an attribute that does not exist fails to
// compile.
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	var types []any
	var opts []cel.EnvOption
	seen := map[string]bool{}
	add := func(name string, t reflect.Type) {
		if seen[name] {
			return
		}
		seen[name] = true
		types = append(types, t)
		opts = append(opts, cel.Variable(name, cel.ObjectType(celTypeName(t))))
	}
	for _, v := range commonVars {
		add(v.name, v.typ)
	}
	for _, k := range kindTable {
		add(k.cel, k.typ)
	}
	types = append(types, reflect.TypeFor[Limits](), reflect.TypeFor[Network](), ext.ParseStructTag("json"))
	opts = append([]cel.EnvOption{ext.NativeTypes(types...), ext.Strings()}, opts...)
	return cel.NewEnv(opts...)
})

// celTypeName is the CEL name NativeTypes gives a Go struct type.
func celTypeName(t reflect.Type) string {
	pkg := t.PkgPath()
	return pkg[strings.LastIndex(pkg, "/")+1:] + "." + t.Name()
}

// Limits of a rule's evaluation.
const (
	// DefaultCostLimit bounds one condition's runtime cost (CEL cost
	// units, roughly one per operation and per list element visited).
	DefaultCostLimit = 100_000
	// DefaultEvalTimeout bounds the evaluation of all rules of one
	// action, in wall time. It is a backstop (the cost limit bounds the
	// work): a busy host can stall a goroutine for tens of milliseconds,
	// and a deny rule that runs out of time denies.
	DefaultEvalTimeout = time.Second
)

// interruptCheckFrequency is how many comprehension iterations a rule
// with loops runs between checks of the evaluation's deadline.
const interruptCheckFrequency = 64

// compiledRule is a rule ready to evaluate.
type compiledRule struct {
	Rule
	policy *compiledPolicy
	index  int         // position in its policy
	prg    cel.Program // nil when When is empty (always matches)
	// loops is true when the condition has a comprehension (exists, all,
	// map, filter...): only those can run long, so only those are
	// evaluated with ContextEval under the deadline (which costs a
	// context per evaluation); the deadline is also checked between rules.
	loops bool
	// pre are native checks of parts of the condition (index.go): when
	// one fails the rule does not match and the program is not run.
	pre []*precheck
}

type compiledPolicy struct {
	Policy
	rules []*compiledRule
	guard *compiledGuard // nil without a guard section
}

// compile checks and compiles a policy's rules. Errors name the rule and
// the line and column in its condition (*CompileError).
func compile(p Policy, costLimit uint64) (*compiledPolicy, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	env, err := celEnv()
	if err != nil {
		return nil, fmt.Errorf("cel environment: %w", err)
	}
	if costLimit == 0 {
		costLimit = DefaultCostLimit
	}
	cp := &compiledPolicy{Policy: p}
	for i, r := range p.Rules {
		cr := &compiledRule{Rule: r, policy: cp, index: i}
		if strings.TrimSpace(r.When) != "" {
			prg, loops, pre, err := compileWhen(env, p.ID, r, costLimit)
			if err != nil {
				return nil, err
			}
			cr.prg, cr.loops, cr.pre = prg, loops, pre
		}
		cp.rules = append(cp.rules, cr)
	}
	if p.Guard != nil {
		g, err := compileGuard(p.Guard, cp)
		if err != nil {
			return nil, err
		}
		cp.guard = g
	}
	return cp, nil
}

func compileWhen(env *cel.Env, policyID string, r Rule, costLimit uint64) (cel.Program, bool, []*precheck, error) {
	ast, iss := env.Compile(r.When)
	if iss != nil && iss.Err() != nil {
		e := iss.Errors()[0]
		return nil, false, nil, &CompileError{PolicyID: policyID, RuleID: r.ID, Line: e.Location.Line(),
			Column: e.Location.Column() + 1, Message: e.Message}
	}
	if !ast.OutputType().IsExactType(cel.BoolType) {
		return nil, false, nil, &CompileError{PolicyID: policyID, RuleID: r.ID, Line: 1, Column: 1,
			Message: fmt.Sprintf("the condition is of type %s, want bool", ast.OutputType())}
	}
	// Kind variables must exist for every kind the rule applies to.
	used := map[string]int64{}
	for id, ref := range ast.NativeRep().ReferenceMap() {
		if ref.Name != "" && ref.Value == nil {
			if _, ok := kindVars[ref.Name]; ok {
				used[ref.Name] = id
			}
		}
	}
	names := make([]string, 0, len(used))
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		have := kindVars[n]
		if len(r.Kinds) == 0 {
			return nil, false, nil, posError(ast, used[n], policyID, r.ID, fmt.Sprintf(
				"%s is an attribute of kinds %s only; list them in the rule's kinds", n, kindList(have)))
		}
		for _, k := range r.Kinds {
			if !slices.Contains(have, k) {
				return nil, false, nil, posError(ast, used[n], policyID, r.ID, fmt.Sprintf(
					"kind %s has no attribute %s (it belongs to %s)", k, n, kindList(have)))
			}
		}
	}
	// Only comprehensions (exists, all, map, filter...) can make the work
	// grow faster than the input: without them a condition costs time
	// linear in the size of the attributes it reads (RE2 regular
	// expressions included). So those alone are evaluated with runtime
	// cost tracking and the deadline, which cost about a third of a
	// simple rule's evaluation.
	loops := len(celast.MatchDescendants(celast.NavigateAST(ast.NativeRep()),
		celast.KindMatcher(celast.ComprehensionKind))) > 0
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize), cel.OptimizeRegex(prefilterMatches...)}
	if loops {
		opts = append(opts, cel.CostLimit(costLimit), cel.InterruptCheckFrequency(interruptCheckFrequency))
	}
	prg, err := env.Program(ast, opts...)
	if err != nil {
		return nil, false, nil, &CompileError{PolicyID: policyID, RuleID: r.ID, Line: 1, Column: 1, Message: err.Error()}
	}
	return prg, loops, prechecksOf(ast), nil
}

func posError(ast *cel.Ast, id int64, policyID, ruleID, msg string) error {
	loc := ast.NativeRep().SourceInfo().GetStartLocation(id)
	line, col := loc.Line(), loc.Column()+1
	if line <= 0 {
		line, col = 1, 1
	}
	return &CompileError{PolicyID: policyID, RuleID: ruleID, Line: line, Column: col, Message: msg}
}

func kindList(ks []Kind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// activation binds the CEL variables of one action without building a
// map: rules of one action share it.
type activation struct {
	a      *Action
	action actionVar
	spec   *kindSpec
	agent  *Agent
	trig   *Trigger
	sb     *SandboxInfo
}

func newActivation(a *Action) *activation {
	v := &activation{a: a, action: actionVar{Kind: string(a.Kind), Surface: a.Surface, Time: a.Time},
		spec: kinds[a.Kind], agent: orZero(a.Agent), trig: orZero(a.Trigger), sb: a.Sandbox}
	if v.sb == nil {
		v.sb = &SandboxInfo{ID: a.SandboxID}
	}
	return v
}

// ResolveName implements interpreter.Activation.
func (v *activation) ResolveName(name string) (any, bool) {
	switch name {
	case varPrincipal:
		return &v.a.Principal, true
	case varAction:
		return &v.action, true
	case varSandbox:
		return v.sb, true
	case varAgent:
		return v.agent, true
	case varTrigger:
		return v.trig, true
	}
	if v.spec != nil && v.spec.cel == name {
		return v.spec.attrs(v.a), true
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (v *activation) Parent() interpreter.Activation { return nil }
