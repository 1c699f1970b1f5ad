package govern

import (
	"context"
	"slices"
	"testing"
)

// TestShellArgvNormalized: a shell's combined short options before its
// script are taken apart, so bash -lc X (the native API's command) and
// bash -l -c X (the E2B SDKs') are one action: the same attributes and the
// same approval digest.
func TestShellArgvNormalized(t *testing.T) {
	cases := []struct{ in, want []string }{
		{[]string{"/bin/bash", "-lc", "git push -f"}, []string{"/bin/bash", "-l", "-c", "git push -f"}},
		{[]string{"/bin/bash", "-l", "-c", "git push -f"}, []string{"/bin/bash", "-l", "-c", "git push -f"}},
		{[]string{"sh", "-ec", "x", "-lc"}, []string{"sh", "-e", "-c", "x", "-lc"}},
		{[]string{"bash", "-li", "-c", "x"}, []string{"bash", "-l", "-i", "-c", "x"}},
		{[]string{"bash", "-o", "pipefail", "-lc", "x"}, []string{"bash", "-o", "pipefail", "-lc", "x"}},
		{[]string{"bash", "-lo", "pipefail", "-c", "x"}, []string{"bash", "-lo", "pipefail", "-c", "x"}},
		{[]string{"bash", "script.sh", "-lc"}, []string{"bash", "script.sh", "-lc"}},
		{[]string{"bash", "--login", "-xc", "x"}, []string{"bash", "--login", "-xc", "x"}},
		{[]string{"python3", "-Bc", "print(1)"}, []string{"python3", "-Bc", "print(1)"}},
		{[]string{"bash", "-lc"}, []string{"bash", "-lc"}},
	}
	for _, tc := range cases {
		if got := shellArgv(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("shellArgv(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}

	native := NewExec([]string{"/bin/bash", "-lc", "deploy prod"}, "", "user", nil)
	e2b := NewExec([]string{"/bin/bash", "-l", "-c", "deploy prod"}, "", "user", nil)
	if native.Argv != e2b.Argv || native.Shell != "deploy prod" || e2b.Shell != "deploy prod" ||
		native.Cmd != e2b.Cmd || !slices.Equal(native.Args, e2b.Args) {
		t.Fatalf("the native API's %+v and E2B's %+v differ", native, e2b)
	}
	a := &Action{Kind: KindExec, Surface: SurfaceAPI, Principal: Principal{ID: "p"}, SandboxID: "sb", Exec: native}
	b := &Action{Kind: KindExec, Surface: SurfaceE2B, Principal: Principal{ID: "p"}, SandboxID: "sb", Exec: e2b}
	da, err1 := ActionDigest(a)
	db, err2 := ActionDigest(b)
	if err1 != nil || err2 != nil || da != db {
		t.Fatalf("digests %s %s (%v %v): an approval would not cross doors", da, db, err1, err2)
	}
}

// TestLifecycleNetworkPreviewKinds: rules over the new attributes compile,
// a typo does not, and they decide.
func TestLifecycleNetworkPreviewKinds(t *testing.T) {
	ctx := context.Background()
	e := New(Config{})
	p := Policy{ID: "lnp", Scope: Scope{Kind: ScopeInstallation}, Rules: []Rule{
		{ID: "no-cold-pause", Kinds: []Kind{KindLifecycle}, When: `lifecycle.op == "pause" && lifecycle.cold`, Outcome: Deny, Message: "no"},
		{ID: "few-forks", Kinds: []Kind{KindLifecycle}, When: `lifecycle.op == "fork" && lifecycle.count > 2`, Outcome: Deny, Message: "no"},
		{ID: "long-timeouts", Kinds: []Kind{KindLifecycle}, When: `lifecycle.timeout_seconds > 3600`, Outcome: Deny, Message: "no"},
		{ID: "no-open-net", Kinds: []Kind{KindNetworkChange}, When: `network.mode == "open" || "evil.example" in network.allow`, Outcome: Deny, Message: "no"},
		{ID: "no-admin-path", Kinds: []Kind{KindPortPreview}, When: `port.path.startsWith("/admin") && port.method != "GET" && port.via != "key"`, Outcome: Deny, Message: "no"},
	}}
	if _, err := e.CreatePolicy(ctx, p, "t"); err != nil {
		t.Fatal(err)
	}
	bad := Policy{ID: "bad", Scope: Scope{Kind: ScopeInstallation}, Rules: []Rule{
		{ID: "r", Kinds: []Kind{KindLifecycle}, When: `lifecycle.opp == "kill"`, Outcome: Deny}}}
	if err := Compile(bad); err == nil {
		t.Fatal("a rule naming lifecycle.opp compiled")
	}
	cases := []struct {
		a    *Action
		rule string
	}{
		{&Action{Kind: KindLifecycle, Lifecycle: &Lifecycle{Op: OpPause, Cold: true}}, "no-cold-pause"},
		{&Action{Kind: KindLifecycle, Lifecycle: &Lifecycle{Op: OpPause}}, ""},
		{&Action{Kind: KindLifecycle, Lifecycle: &Lifecycle{Op: OpFork, Count: 3}}, "few-forks"},
		{&Action{Kind: KindLifecycle, Lifecycle: &Lifecycle{Op: OpTimeout, TimeoutSeconds: 7200}}, "long-timeouts"},
		{&Action{Kind: KindLifecycle}, ""},
		{&Action{Kind: KindNetworkChange, Network: &Network{Mode: "open"}}, "no-open-net"},
		{&Action{Kind: KindNetworkChange, Network: &Network{Mode: "allowlist", Allow: []string{"evil.example"}}}, "no-open-net"},
		{&Action{Kind: KindNetworkChange, Network: &Network{Mode: "allowlist", Allow: []string{"ok.example"}}}, ""},
		{&Action{Kind: KindPortPreview, Port: &Port{Port: 80, Method: "POST", Path: "/admin/x", Via: "token"}}, "no-admin-path"},
		{&Action{Kind: KindPortPreview, Port: &Port{Port: 80, Method: "POST", Path: "/admin/x", Via: "key"}}, ""},
		{&Action{Kind: KindPortPreview, Port: &Port{Port: 80}}, ""},
	}
	for _, tc := range cases {
		d, err := e.Decide(ctx, tc.a)
		if err != nil {
			t.Fatal(err)
		}
		if d.RuleID != tc.rule || (tc.rule != "") != (d.Outcome == Deny) {
			t.Errorf("%s %+v %+v %+v: decision %+v, want rule %q", tc.a.Kind, tc.a.Lifecycle, tc.a.Network, tc.a.Port, d, tc.rule)
		}
	}
}
