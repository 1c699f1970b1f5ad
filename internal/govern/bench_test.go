package govern

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// benchPolicy returns a policy of n exec rules, none of which matches the
// benchmark's command, so every one is evaluated (the worst case): a
// quarter each of regex denies, argument-list denies, require_approval
// rules and allow rules.
func benchPolicy(n int) Policy {
	p := Policy{ID: "bench", Scope: Scope{Kind: ScopeInstallation}}
	for i := range n {
		r := Rule{ID: fmt.Sprintf("r%d", i), Kinds: []Kind{KindExec}}
		switch i % 4 {
		case 0:
			r.Outcome = Deny
			r.When = fmt.Sprintf(`exec.argv.matches("\\bgit\\s+push\\b.*\\s(-f|--force%d)\\b")`, i)
		case 1:
			r.Outcome = Deny
			r.When = fmt.Sprintf(`exec.cmd == "rm%d" && exec.args.exists(a, a == "-rf")`, i)
		case 2:
			r.Outcome = RequireApproval
			r.When = fmt.Sprintf(`principal.kind == "agent" && exec.shell.contains("deploy-%d")`, i)
		default:
			r.Outcome = Allow
			r.When = fmt.Sprintf(`exec.user == "user%d" && sandbox.template.startsWith("t%d")`, i, i)
		}
		p.Rules = append(p.Rules, r)
	}
	return p
}

func benchDecide(b *testing.B, rules int) {
	e := New(Config{})
	if rules > 0 {
		if _, err := e.CreatePolicy(context.Background(), benchPolicy(rules), "bench"); err != nil {
			b.Fatal(err)
		}
	}
	benchLoop(b, e)
}

func benchLoop(b *testing.B, e *Engine) {
	a := &Action{Kind: KindExec, Surface: SurfaceAPI,
		Principal: Principal{ID: "prn_agent", Kind: "agent", Owner: "prn_owner", Groups: []string{"dev"}},
		SandboxID: "sb-1", Sandbox: &SandboxInfo{ID: "sb-1", Template: "base"},
		Exec: NewExec([]string{"/bin/bash", "-l", "-c", "npm test -- --coverage"}, "/home/user", "user", []string{"CI"})}
	ctx := context.Background()
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	n := 0
	for b.Loop() {
		d, err := e.Decide(ctx, a)
		if err != nil || d.Outcome != Allow {
			b.Fatalf("decision %+v, %v", d, err)
		}
		n++
	}
	// CPU time of the process per decision: on a shared machine it is a
	// steadier figure than ns/op (wall time), which waits for the CPU.
	b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(n), "cpu-ns/op")
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecideNoRules is the governed path of an exec with no policy.
func BenchmarkDecideNoRules(b *testing.B) { benchDecide(b, 0) }

// BenchmarkDecide100Rules is the same exec with 100 exec rules loaded, all
// evaluated; the difference to BenchmarkDecideNoRules is what rules add
// (issue 19's target: at most 50 µs at p50).
func BenchmarkDecide100Rules(b *testing.B) { benchDecide(b, 100) }

// BenchmarkDecide100RulesMixedKinds loads the same 100 rules spread over
// every kind in turn, as an installation's rules would be: an exec
// evaluates only the exec rules among them.
func BenchmarkDecide100RulesMixedKinds(b *testing.B) {
	e := New(Config{})
	p := benchPolicy(100)
	ks := Kinds()
	for i := range p.Rules {
		k := ks[i%len(ks)]
		p.Rules[i].Kinds = []Kind{k}
		if k != KindExec && k != KindPTY {
			p.Rules[i].When = `principal.id == "nobody" && action.surface == "mcp"`
		}
	}
	if _, err := e.CreatePolicy(context.Background(), p, "bench"); err != nil {
		b.Fatal(err)
	}
	benchLoop(b, e)
}
