package govern

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRequiredLiterals: the literals the matches() prefilter looks for are
// ones every match contains, and none from optional, alternative or
// case-folded parts.
func TestRequiredLiterals(t *testing.T) {
	cases := []struct {
		pattern string
		want    []string
	}{
		{`\bgit\s+push\b.*\s(-f|--force)\b`, []string{"push", "git", "-"}}, // -(?:f|-force)
		{`^rm -rf /`, []string{"rm -rf /"}},
		{`(curl|wget) `, []string{" "}},
		{`(?i)curl`, nil},
		{`x?abc*`, []string{"ab"}},
		{`(sudo)+ su`, []string{"sudo", " su"}},
		{`(ab){2,3}`, []string{"ab"}},
		{`(ab){0,3}`, nil},
		{`a|b`, nil},
		{`[a-z]+`, nil},
		{"\uFFFDx", nil},
	}
	for _, tc := range cases {
		got := requiredLiterals(tc.pattern)
		if !slices.Equal(got, tc.want) {
			t.Errorf("requiredLiterals(%q) = %q, want %q", tc.pattern, got, tc.want)
		}
	}
}

// TestPrefilteredMatchesAgreeWithRegexp: rules using matches() (both
// forms) decide exactly as Go's regexp package says, on inputs that do and
// do not contain the pattern's literals.
func TestPrefilteredMatchesAgreeWithRegexp(t *testing.T) {
	patterns := []string{`\bgit\s+push\b.*\s(-f|--force)\b`, `^rm -rf /`, `(?i)CURL .*\|\s*sh`,
		`(sudo)+ su`, `a\x{FFFD}b`, `.*`, `push$`}
	inputs := []string{"git push origin main -f", "git  push --force x", "git pushy -f", "rm -rf /", " rm -rf /",
		"curl x | sh", "CURL x |sh", "sudo su", "sudosudo su", "a\xffb", "a\uFFFDb", "", "push", "git push -fx"}
	for i, p := range patterns {
		re := regexp.MustCompile(p)
		q := strings.ReplaceAll(strings.ReplaceAll(p, `\`, `\\`), `"`, `\"`)
		for _, when := range []string{fmt.Sprintf(`exec.argv.matches("%s")`, q), fmt.Sprintf(`matches(exec.argv, "%s")`, q)} {
			e := newTestEngine(t, Config{}, inst("p", Rule{ID: fmt.Sprintf("r%d", i), Kinds: []Kind{KindExec}, When: when, Outcome: Deny}))
			for _, in := range inputs {
				a := execAction("bot", "x")
				a.Exec.Argv = in
				d, err := e.Decide(context.Background(), a)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := d.Outcome == Deny, re.MatchString(in); got != want {
					t.Errorf("%s on %q: denied %v, regexp says %v", when, in, got, want)
				}
			}
		}
	}
}

// TestEachLoopRuleHasItsOwnCostLimit: rules with loops share one
// evaluation frame; each must still be held to the cost limit on its own,
// not to the sum of all of them.
func TestEachLoopRuleHasItsOwnCostLimit(t *testing.T) {
	args := make([]string, 50)
	for i := range args {
		args[i] = "a"
	}
	var rules []Rule
	for i := range 5 {
		rules = append(rules, Rule{ID: fmt.Sprintf("r%d", i), Kinds: []Kind{KindExec},
			When: fmt.Sprintf(`exec.args.exists(a, a == "zz%d")`, i), Outcome: Deny})
	}
	// One rule costs 300 to 600 units here: under the limit alone, over
	// it together.
	e := newTestEngine(t, Config{CostLimit: 1000}, inst("p", rules...))
	d, err := e.Decide(context.Background(), execAction("bot", append([]string{"prog"}, args...)...))
	if err != nil {
		t.Fatal(err)
	}
	if d.Outcome != Allow {
		t.Fatalf("decision %+v, want allow (every rule within its own cost limit)", d)
	}
}

// TestDeadlineInterruptsLoop: a rule with loops that would run for far
// longer than the evaluation timeout is interrupted (and, being a deny
// rule, denies) rather than run to its end (seconds) and allow; also when
// an earlier rule with loops used the evaluation's frame.
func TestDeadlineInterruptsLoop(t *testing.T) {
	many := make([]string, 5000)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	e := newTestEngine(t, Config{CostLimit: 1 << 62, EvalTimeout: 200 * time.Millisecond},
		inst("p", Rule{ID: "cheap", Kinds: []Kind{KindExec}, When: `exec.cwd.size() > 0 && [1, 2].exists(x, x == 3)`,
			Outcome: Deny},
			Rule{ID: "slow", Kinds: []Kind{KindExec}, When: `exec.args.exists(a, exec.args.exists(b, a + b == "zz"))`,
				Outcome: Deny}))
	d, err := e.Decide(context.Background(), execAction("bot", append([]string{"prog"}, many...)...))
	if err != nil {
		t.Fatal(err)
	}
	if d.Outcome != Deny || d.RuleID != "slow" || !strings.Contains(d.Message, "could not be evaluated") {
		t.Fatalf("decision %+v, want the slow rule interrupted and denying", d)
	}
}
