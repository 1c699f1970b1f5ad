package govern

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/errkind"
)

func inst(id string, rules ...Rule) Policy {
	return Policy{ID: id, Scope: Scope{Kind: ScopeInstallation}, Rules: rules}
}

func scoped(id string, kind ScopeKind, sid string, rules ...Rule) Policy {
	return Policy{ID: id, Scope: Scope{Kind: kind, ID: sid}, Rules: rules}
}

func execAction(principal string, argv ...string) *Action {
	return &Action{Kind: KindExec, Surface: SurfaceAPI, Principal: Principal{ID: principal, Kind: "agent", Owner: "alice"},
		SandboxID: "sb-1", Exec: NewExec(argv, "/home/user", "user", nil)}
}

func newTestEngine(t *testing.T, cfg Config, ps ...Policy) *Engine {
	t.Helper()
	e := New(cfg)
	for _, p := range ps {
		if _, err := e.CreatePolicy(context.Background(), p, "admin"); err != nil {
			t.Fatalf("create policy %s: %v", p.ID, err)
		}
	}
	return e
}

// TestPrecedence drives the documented evaluation order: deny anywhere,
// then require_approval, then the first allow/log_only rule by priority
// and scope specificity, then the most specific default, then the
// engine's default.
func TestPrecedence(t *testing.T) {
	always := func(id string, o Outcome, prio int) Rule {
		return Rule{ID: id, Kinds: []Kind{KindExec}, When: `exec.cmd == "git"`, Outcome: o, Priority: prio}
	}
	cases := []struct {
		name     string
		cfg      Config
		policies []Policy
		action   *Action
		want     Outcome
		rule     string
		policy   string
	}{
		{name: "no policies: allow", want: Allow},
		{name: "engine default deny", cfg: Config{Default: Deny}, want: Deny},
		{name: "a deny anywhere beats a more specific, higher priority allow",
			policies: []Policy{inst("p-inst", always("d", Deny, 0)), scoped("p-me", ScopePrincipal, "bot", always("a", Allow, 100))},
			want:     Deny, rule: "d", policy: "p-inst"},
		{name: "log_only at high priority does not beat a deny",
			policies: []Policy{inst("p", always("l", LogOnly, 100), always("d", Deny, -5))},
			want:     Deny, rule: "d"},
		{name: "higher priority first among allow and log_only",
			policies: []Policy{inst("p", always("a", Allow, 1), always("l", LogOnly, 2))},
			want:     LogOnly, rule: "l"},
		{name: "same priority: principal scope before installation",
			policies: []Policy{inst("a-inst", always("inst", LogOnly, 0)), scoped("z-me", ScopePrincipal, "bot", always("mine", Allow, 0))},
			want:     Allow, rule: "mine", policy: "z-me"},
		{name: "same priority: agent scope before group scope",
			policies: []Policy{scoped("a", ScopeGroup, "dev", always("grp", LogOnly, 0)), scoped("b", ScopeAgent, "ag-1", always("agent", Allow, 0))},
			action:   func() *Action { a := execAction("bot", "git", "status"); a.Agent = &Agent{ID: "ag-1"}; return a }(),
			want:     Allow, rule: "agent"},
		{name: "same priority and scope: policy id, then rule order",
			policies: []Policy{inst("b", always("b1", Allow, 0)), inst("a", always("a1", LogOnly, 0), always("a2", Allow, 0))},
			want:     LogOnly, rule: "a1", policy: "a"},
		{name: "a policy scoped to someone else does not apply",
			policies: []Policy{scoped("p", ScopePrincipal, "someone-else", always("d", Deny, 0))},
			want:     Allow},
		{name: "group scope applies through the principal's groups",
			policies: []Policy{scoped("p", ScopeGroup, "dev", always("d", Deny, 0))},
			want:     Deny, rule: "d"},
		{name: "agent scope needs the hosted agent",
			policies: []Policy{scoped("p", ScopeAgent, "ag-1", always("d", Deny, 0))},
			want:     Allow},
		{name: "require_approval beats allow; without a store it is refused",
			policies: []Policy{inst("p", always("a", Allow, 100), always("h", RequireApproval, 0))},
			want:     Deny, rule: "h"},
		{name: "non-matching rules fall to the policy default",
			policies: []Policy{{ID: "p", Scope: Scope{Kind: ScopeInstallation}, Defaults: map[Kind]Outcome{KindExec: Deny},
				Rules: []Rule{{ID: "never", Kinds: []Kind{KindExec}, When: `exec.cmd == "x"`, Outcome: Allow}}}},
			want: Deny, policy: "p"},
		{name: "the most specific default wins",
			policies: []Policy{
				{ID: "inst", Scope: Scope{Kind: ScopeInstallation}, Defaults: map[Kind]Outcome{"*": Deny}},
				{ID: "mine", Scope: Scope{Kind: ScopePrincipal, ID: "bot"}, Defaults: map[Kind]Outcome{KindExec: LogOnly}}},
			want: LogOnly, policy: "mine"},
		{name: "equally specific defaults: the strictest",
			policies: []Policy{
				{ID: "a", Scope: Scope{Kind: ScopeInstallation}, Defaults: map[Kind]Outcome{KindExec: Allow}},
				{ID: "b", Scope: Scope{Kind: ScopeInstallation}, Defaults: map[Kind]Outcome{KindExec: Deny}}},
			want: Deny, policy: "b"},
		{name: "a rule of another kind does not apply",
			policies: []Policy{inst("p", Rule{ID: "f", Kinds: []Kind{KindFileRead}, Outcome: Deny})},
			want:     Allow},
		{name: "a rule without kinds applies to every kind",
			policies: []Policy{inst("p", Rule{ID: "agents", When: `principal.kind == "agent" && action.surface == "api"`, Outcome: Deny})},
			want:     Deny, rule: "agents"},
		{name: "a rule without a condition always matches",
			policies: []Policy{inst("p", Rule{ID: "all-exec", Kinds: []Kind{KindExec}, Outcome: LogOnly})},
			want:     LogOnly, rule: "all-exec"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, tc.cfg, tc.policies...)
			a := tc.action
			if a == nil {
				a = execAction("bot", "git", "push")
				a.Principal.Groups = []string{"dev"}
			}
			d, _ := e.Decide(context.Background(), a)
			if d.Outcome != tc.want || d.RuleID != tc.rule || (tc.policy != "" && d.PolicyID != tc.policy) {
				t.Fatalf("decision %+v, want outcome %s rule %q policy %q", d, tc.want, tc.rule, tc.policy)
			}
			if d.PolicyID != "" && d.PolicyVersion != 1 {
				t.Fatalf("decision names policy %s version %d, want 1", d.PolicyID, d.PolicyVersion)
			}
			if err := d.Err(); (err == nil) != (d.Outcome == Allow || d.Outcome == LogOnly) {
				t.Fatalf("Err() = %v for outcome %s", err, d.Outcome)
			}
		})
	}
}

func TestDenyErrorIsForbiddenWithMessage(t *testing.T) {
	e := newTestEngine(t, Config{}, inst("p", Rule{ID: "no-force-push", Kinds: []Kind{KindExec},
		When: `exec.argv.matches("\\bgit\\s+push\\b.*\\s(-f|--force)\\b")`, Outcome: Deny, Message: "force pushes are not allowed"}))
	d, err := e.Decide(context.Background(), execAction("bot", "git", "push", "--force", "origin"))
	if err != nil || d.Outcome != Deny {
		t.Fatalf("decide: %+v %v", d, err)
	}
	derr := d.Err()
	if !errors.Is(derr, ErrDenied) {
		t.Fatalf("Err() = %v, want ErrDenied", derr)
	}
	k, msg := errkind.Of(derr)
	if k != errkind.Forbidden || msg != "denied by policy: force pushes are not allowed" {
		t.Fatalf("kind %s message %q", k, msg)
	}
	if d, _ := e.Decide(context.Background(), execAction("bot", "git", "push", "origin")); d.Outcome != Allow {
		t.Fatalf("plain push: %+v", d)
	}
}

// TestCompileErrors: bad CEL and unknown attributes are refused when the
// policy is written, naming the rule, line and column.
func TestCompileErrors(t *testing.T) {
	cases := []struct {
		name      string
		rule      Rule
		line, col int
		want      string
	}{
		{name: "syntax", rule: Rule{ID: "r", Kinds: []Kind{KindExec}, When: `exec.cmd == `, Outcome: Deny},
			line: 1, col: 13, want: "Syntax error"},
		{name: "unknown attribute on line 2",
			rule: Rule{ID: "r", Kinds: []Kind{KindExec}, When: "exec.cmd == \"rm\" &&\n   exec.nosuch == \"x\"", Outcome: Deny},
			line: 2, col: 8, want: "undefined field 'nosuch'"},
		{name: "unknown variable", rule: Rule{ID: "r", Kinds: []Kind{KindExec}, When: `tool.name == "x"`, Outcome: Deny},
			line: 1, col: 1, want: "undeclared reference to 'tool'"},
		{name: "unknown principal attribute", rule: Rule{ID: "r", When: `principal.email == "x"`, Outcome: Deny},
			line: 1, col: 10, want: "undefined field 'email'"},
		{name: "attribute of another kind",
			rule: Rule{ID: "r", Kinds: []Kind{KindFileRead}, When: `file.path == "/" || exec.cmd == "x"`, Outcome: Deny},
			line: 1, col: 21, want: "kind file.read has no attribute exec"},
		{name: "kind attribute without kinds", rule: Rule{ID: "r", When: `exec.cmd == "x"`, Outcome: Deny},
			line: 1, col: 1, want: "exec is an attribute of kinds exec, pty only"},
		{name: "not a bool", rule: Rule{ID: "r", Kinds: []Kind{KindExec}, When: `exec.cmd`, Outcome: Deny},
			line: 1, col: 1, want: "want bool"},
		{name: "wrong type", rule: Rule{ID: "r", Kinds: []Kind{KindFileWrite}, When: `file.size == "big"`, Outcome: Deny},
			line: 1, col: 11, want: "no matching overload"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := New(Config{})
			_, err := e.CreatePolicy(context.Background(), inst("p", tc.rule), "admin")
			var ce *CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v, want a *CompileError", err)
			}
			if ce.RuleID != "r" || ce.Line != tc.line || ce.Column != tc.col || !strings.Contains(ce.Message, tc.want) {
				t.Fatalf("got %q (line %d, column %d), want line %d column %d containing %q",
					err, ce.Line, ce.Column, tc.line, tc.col, tc.want)
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Fatalf("error %v does not wrap ErrInvalidPolicy", err)
			}
			if k, msg := errkind.Of(err); k != errkind.Invalid || !strings.Contains(msg, "line ") {
				t.Fatalf("kind %s message %q, want invalid naming the line", k, msg)
			}
			if len(e.Policies()) != 0 {
				t.Fatal("a policy that does not compile was put in force")
			}
		})
	}
}

func TestValidate(t *testing.T) {
	bad := []Policy{
		{ID: "", Scope: Scope{Kind: ScopeInstallation}},
		{ID: "p", Scope: Scope{Kind: "team"}},
		{ID: "p", Scope: Scope{Kind: ScopePrincipal}},
		{ID: "p", Scope: Scope{Kind: ScopeInstallation}, Defaults: map[Kind]Outcome{"exec": "maybe"}},
		{ID: "p", Scope: Scope{Kind: ScopeInstallation}, Defaults: map[Kind]Outcome{"tool_call": Deny}},
		inst("p", Rule{ID: "r", Kinds: []Kind{"exce"}, Outcome: Deny}),
		inst("p", Rule{ID: "r", Outcome: "block"}),
		inst("p", Rule{ID: "r", Outcome: Deny}, Rule{ID: "r", Outcome: Allow}),
		inst("p", Rule{ID: "r", Outcome: Deny, Approvers: []string{"group:ops"}}),
		inst("p", Rule{ID: "r", Outcome: RequireApproval, Approvers: []string{"team:ops"}}),
	}
	for i, p := range bad {
		if err := Compile(p); !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("policy %d: Compile = %v, want ErrInvalidPolicy", i, err)
		}
	}
	p, err := ParsePolicy([]byte(`
id: no-force-push
scope: {kind: installation}
defaults: {exec: allow}
rules:
  - id: no-force-push
    kinds: [exec]
    when: 'exec.argv.matches("\\bgit\\s+push\\b.*\\s(-f|--force)\\b")'
    outcome: deny
    message: force pushes are not allowed
`))
	if err != nil || len(p.Rules) != 1 || p.Rules[0].Outcome != Deny || p.Defaults[KindExec] != Allow {
		t.Fatalf("ParsePolicy: %+v, %v", p, err)
	}
	if err := Compile(p); err != nil {
		t.Fatalf("compile parsed policy: %v", err)
	}
	if _, err := ParsePolicy([]byte("id: p\nscope: {kind: installation}\nrulez: []\n")); !errors.Is(err, ErrInvalidPolicy) {
		t.Fatalf("unknown field: %v", err)
	}
}

// TestEvaluationErrors: a deny or require_approval rule that cannot be
// evaluated denies (fail closed); an allow or log_only rule is skipped.
func TestEvaluationErrors(t *testing.T) {
	broken := `int(exec.args[0]) > 0` // "abc" is no integer: a runtime error
	many := make([]string, 5000)
	for i := range many {
		many[i] = "a"
	}
	cases := []struct {
		name    string
		cfg     Config
		rule    Rule
		args    []string
		want    Outcome
		skipped bool
	}{
		{name: "deny rule errs: deny", rule: Rule{ID: "r", Kinds: []Kind{KindExec}, When: broken, Outcome: Deny},
			args: []string{"abc"}, want: Deny},
		{name: "require_approval rule errs: deny",
			rule: Rule{ID: "r", Kinds: []Kind{KindExec}, When: broken, Outcome: RequireApproval},
			args: []string{"abc"}, want: Deny},
		{name: "allow rule errs: skipped", cfg: Config{Default: LogOnly},
			rule: Rule{ID: "r", Kinds: []Kind{KindExec}, When: broken, Outcome: Allow},
			args: []string{"abc"}, want: LogOnly, skipped: true},
		{name: "log_only rule errs: skipped", rule: Rule{ID: "r", Kinds: []Kind{KindExec}, When: broken, Outcome: LogOnly},
			args: []string{"abc"}, want: Allow, skipped: true},
		{name: "index out of range: deny", rule: Rule{ID: "r", Kinds: []Kind{KindExec}, When: `exec.args[3] == "x"`, Outcome: Deny},
			want: Deny},
		{name: "cost limit exceeded: deny", cfg: Config{CostLimit: 1000},
			rule: Rule{ID: "r", Kinds: []Kind{KindExec}, When: `exec.args.exists(a, exec.args.exists(b, a + b == "zz"))`, Outcome: Deny},
			args: many, want: Deny},
		{name: "deadline exceeded: deny", cfg: Config{EvalTimeout: 1},
			rule: Rule{ID: "r", Kinds: []Kind{KindExec}, When: `exec.args.exists(a, a == "zz")`, Outcome: Deny},
			args: many, want: Deny},
		{name: "the same rules evaluate fine", cfg: Config{CostLimit: 1_000_000},
			rule: Rule{ID: "r", Kinds: []Kind{KindExec}, When: `exec.args.exists(a, a == "zz")`, Outcome: Deny},
			args: []string{"a", "b"}, want: Allow},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, tc.cfg, inst("p", tc.rule))
			d, err := e.Decide(context.Background(), execAction("bot", append([]string{"prog"}, tc.args...)...))
			if err != nil {
				t.Fatal(err)
			}
			if d.Outcome != tc.want || (len(d.Skipped) > 0) != tc.skipped {
				t.Fatalf("decision %+v, want %s (skipped %v)", d, tc.want, tc.skipped)
			}
			if tc.want == Deny && (d.RuleID != "r" || !strings.Contains(d.Message, "could not be evaluated")) {
				t.Fatalf("fail-closed decision %+v does not name the rule", d)
			}
		})
	}
}

// TestKindRegistry: every kind has a CEL variable whose every attribute
// can be named in a rule of that kind.
func TestKindRegistry(t *testing.T) {
	seen := map[Kind]bool{}
	for _, k := range kindTable {
		if seen[k.kind] {
			t.Fatalf("kind %s registered twice", k.kind)
		}
		seen[k.kind] = true
		if k.attrs(&Action{}) == nil {
			t.Fatalf("kind %s: attrs of an empty action is nil", k.kind)
		}
		for i := range k.typ.NumField() {
			f := k.typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			when := k.cel + "." + name + " == " + k.cel + "." + name
			if err := Compile(inst("p", Rule{ID: "r", Kinds: []Kind{k.kind}, When: when, Outcome: Deny})); err != nil {
				t.Errorf("kind %s attribute %s: %v", k.kind, name, err)
			}
		}
	}
	if len(Kinds()) < 14 {
		t.Fatalf("%d kinds registered", len(Kinds()))
	}
	if err := Compile(inst("p", Rule{ID: "r", When: `has(action.time) && action.time > timestamp("2020-01-01T00:00:00Z") && sandbox.id != "" && agent.id == "" && trigger.kind == "" && "x" in principal.labels`, Outcome: Deny})); err != nil {
		t.Fatalf("common variables: %v", err)
	}
}

func TestStages(t *testing.T) {
	refused := errors.New("sandbox sb-1 not found")
	var order []string
	access := AccessStage(func(_ context.Context, a *Action) error {
		order = append(order, "access")
		if a.Principal.ID == "stranger" {
			return refused
		}
		return nil
	})
	guard := StageFunc("guard", func(_ context.Context, a *Action) (Decision, error) {
		order = append(order, "guard")
		if strings.Contains(a.Exec.Argv, "secret") {
			return Decision{Outcome: Deny, Message: "looks like a secret"}, nil
		}
		return Decision{}, nil
	})
	e := newTestEngine(t, Config{Access: access, After: []Stage{guard}},
		inst("p", Rule{ID: "log", Kinds: []Kind{KindExec}, Outcome: LogOnly}))
	if got := strings.Join(e.Stages(), ","); got != "access,rules,guard" {
		t.Fatalf("stages %s", got)
	}
	d, err := e.Decide(context.Background(), execAction("stranger", "ls"))
	if !errors.Is(err, refused) || d.Outcome != Deny || d.Stage != "access" {
		t.Fatalf("stranger: %+v %v", d, err)
	}
	order = nil
	d, err = e.Decide(context.Background(), execAction("bot", "echo", "secret"))
	if err != nil || d.Outcome != Deny || d.Stage != "guard" || strings.Join(order, ",") != "access,guard" {
		t.Fatalf("guard: %+v %v (order %v)", d, err, order)
	}
	d, err = e.Decide(context.Background(), execAction("bot", "ls"))
	if err != nil || d.Outcome != LogOnly || d.RuleID != "log" {
		t.Fatalf("log only: %+v %v", d, err)
	}
	if _, err := e.Decide(context.Background(), &Action{Kind: "tool_call"}); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("unknown kind: %v", err)
	}
}

func TestPolicyVersions(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Config{}, inst("p", Rule{ID: "r1", Kinds: []Kind{KindExec}, When: `exec.cmd == "rm"`, Outcome: Deny}))
	p := inst("p", Rule{ID: "r2", Kinds: []Kind{KindExec}, When: `exec.cmd == "curl"`, Outcome: Deny})
	up, err := e.UpdatePolicy(ctx, p, "bob")
	if err != nil || up.Version != 2 {
		t.Fatalf("update: %+v %v", up, err)
	}
	d, _ := e.Decide(ctx, execAction("bot", "curl"))
	if d.Outcome != Deny || d.RuleID != "r2" || d.PolicyVersion != 2 {
		t.Fatalf("after update: %+v", d)
	}
	if d, _ := e.Decide(ctx, execAction("bot", "rm")); d.Outcome != Allow {
		t.Fatalf("old rule still in force: %+v", d)
	}
	bad := inst("p", Rule{ID: "r3", Kinds: []Kind{KindExec}, When: `exec.nope`, Outcome: Deny})
	if _, err := e.UpdatePolicy(ctx, bad, "bob"); err == nil {
		t.Fatal("an update that does not compile was accepted")
	}
	if d, _ := e.Decide(ctx, execAction("bot", "curl")); d.RuleID != "r2" || d.PolicyVersion != 2 {
		t.Fatalf("a failed update changed what is in force: %+v", d)
	}
	if err := e.DeletePolicy(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if d, _ := e.Decide(ctx, execAction("bot", "curl")); d.Outcome != Allow {
		t.Fatalf("after delete: %+v", d)
	}
}

func TestNewExec(t *testing.T) {
	cases := []struct {
		argv  []string
		shell string
	}{
		{[]string{"/bin/bash", "-l", "-c", "npm test"}, "npm test"},
		{[]string{"bash", "-lc", "ls -la"}, "ls -la"},
		{[]string{"sh", "-c", "echo hi"}, "echo hi"},
		{[]string{"python3", "-c", "print(1)"}, ""},
		{[]string{"bash", "script.sh", "-c", "x"}, ""},
		{[]string{"ls"}, ""},
	}
	for _, tc := range cases {
		e := NewExec(tc.argv, "", "", nil)
		if e.Shell != tc.shell || e.Cmd != tc.argv[0] || e.Argv != strings.Join(shellArgv(tc.argv), " ") {
			t.Errorf("NewExec(%q) = %+v, want shell %q", tc.argv, e, tc.shell)
		}
	}
	if got := CleanPath("../etc/./passwd", "/home/user"); got != "/home/etc/passwd" {
		t.Fatalf("CleanPath: %s", got)
	}
}
