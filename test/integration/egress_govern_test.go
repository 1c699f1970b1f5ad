package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestEgressGovernedPath drives the egress path through the governed path
// with a real wardend and a real native sandbox on the fake upstream of
// TestSecretSwapEndToEnd: a rule on egress.host makes curl in the sandbox
// fail to reach that host (a TLS access_denied alert) while another host
// the same network policy allows works; a secret.use rule stops the broker
// from sending a secret to a host the grant covers (a 403 from the broker,
// nothing upstream) until the rule is removed. Each refusal is one audit
// event naming the rule.
func TestEgressGovernedPath(t *testing.T) {
	up := newFakeUpstream(t)
	state, run := newDirs(t)
	cfg := filepath.Join(t.TempDir(), "wardend.yaml")
	os.WriteFile(cfg, []byte("version: 1\nnetwork:\n  dns_upstream: \"192.175.48.53\"\n"), 0o644)
	d := startDaemonEnv(t, state, run, []string{"SSL_CERT_FILE=" + up.caFile}, "--config", cfg)
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)

	secretName := "egress-gov"
	policy := warden.PolicyWrite{ID: "egress-rules", Scope: warden.PolicyScope{Kind: "installation"}, Rules: []warden.Rule{
		{ID: "no-other", Kinds: []string{"egress.connect"}, When: `egress.host == "other.example.test"`, Outcome: "deny",
			Message: "other.example.test is blocked"},
		{ID: "keep-key-home", Kinds: []string{"secret.use"}, When: `action.surface == "egress" && secret.name == "` + secretName + `" && secret.host == "api.example.test"`,
			Outcome: "deny", Message: "this key may not be used here"},
	}}
	if _, err := c.CreatePolicy(ctx, policy); err != nil {
		t.Fatal(err)
	}
	sb := create(t, c, warden.CreateSandboxRequest{Isolation: "native", Network: &warden.NetworkPolicy{Mode: "allowlist",
		Allow: []warden.NetworkRule{{Host: "api.example.test"}, {Host: "other.example.test"}}}})
	caPEM, _ := os.ReadFile(up.caFile)
	if _, err := c.WriteFile(ctx, sb.ID, "/tmp/upstream-ca.pem", bytes.NewReader(caPEM), warden.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	curl := func(host, ca string) (int, string) {
		t.Helper()
		var o, e bytes.Buffer
		script := `curl -sS -i --max-time 10 ` + ca + ` -H "Authorization: Bearer $API_KEY" https://` + host + `/echo`
		res, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"/bin/sh", "-c", script}}, warden.ExecIO{Stdout: &o, Stderr: &e})
		if err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		return res.ExitCode, o.String() + e.String()
	}

	// Egress: api.example.test is reached, other.example.test (allowed by
	// the network policy) is refused by the rule with a TLS alert.
	if code, out := curl("api.example.test", "--cacert /tmp/upstream-ca.pem"); code != 0 || !strings.Contains(out, "you sent:") {
		t.Fatalf("api.example.test: exit %d: %s\n%s", code, out, d.log)
	}
	code, out := curl("other.example.test", "--cacert /tmp/upstream-ca.pem")
	if code == 0 || !strings.Contains(strings.ToLower(out), "access denied") {
		t.Fatalf("other.example.test: exit %d: %s; want curl to fail on a TLS access_denied alert", code, out)
	}
	if got := up.last("other.example.test"); got != "" {
		t.Fatalf("the blocked upstream received a request (%q)", got)
	}

	// Secret use: the grant covers api.example.test, the rule forbids using
	// it there (granting is a secret.use action too, at the API door; the
	// rule names the egress surface, so the grant itself is allowed).
	sec, err := c.PutSecret(ctx, secretName, "sk-live-egress-gov-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.CreateGrant(ctx, sec.ID, warden.Grant{Sandbox: sb.ID, Hosts: []string{"api.example.test"}, EnvName: "API_KEY"})
	if err != nil {
		t.Fatal(err)
	}
	before := up.last("api.example.test")
	code, out = curl("api.example.test", "")
	if code != 0 || !strings.Contains(out, "403") || !strings.Contains(out, "denied by policy: this key may not be used here") {
		t.Fatalf("refused secret use: exit %d: %s\n%s", code, out, d.log)
	}
	if got := up.last("api.example.test"); got != before {
		t.Fatalf("the upstream received %q during a refused secret use", got)
	}
	// Without the rule the same request carries the secret.
	policy.Rules = policy.Rules[:1]
	if _, err := c.UpdatePolicy(ctx, policy.ID, policy); err != nil {
		t.Fatal(err)
	}
	if code, out := curl("api.example.test", ""); code != 0 || !strings.Contains(out, "you sent: Bearer "+g.Placeholder) {
		t.Fatalf("secret use after the rule was removed: exit %d: %s", code, out)
	}
	if got := up.last("api.example.test"); got != "Bearer sk-live-egress-gov-0123456789abcdef" {
		t.Fatalf("after the rule was removed the upstream received %q", got)
	}

	// One audit event per refusal, naming the rule.
	page, err := c.ListAudit(ctx, warden.AuditQuery{Target: sb.ID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]int{}
	for _, ev := range page.Events {
		if ev.Outcome != "denied" || (ev.Action != "egress.connect" && ev.Action != "secret.use") {
			continue
		}
		gv, _ := ev.Detail["govern"].(map[string]any)
		dec, _ := gv["decision"].(map[string]any)
		rules[ev.Action+"/"+fmt.Sprint(dec["rule_id"])]++
	}
	if rules["egress.connect/no-other"] != 1 || rules["secret.use/keep-key-home"] != 1 || len(rules) != 2 {
		t.Fatalf("denied governed events by rule: %v", rules)
	}

	// A template build's RUN steps (sandboxes without a sandbox record)
	// are governed as the traffic of the principal who builds: the rule
	// refuses other.example.test, and api.example.test is reached (a build
	// used to be refused everything once a rule covered egress, its owner
	// being unknown).
	build := func(host string) error {
		dir := writeContext(t, map[string]string{"Dockerfile": "FROM base\nRUN curl -sS -k --max-time 10 -o /dev/null https://" + host + "/echo\n"})
		_, err := c.BuildTemplate(ctx, warden.BuildRequest{Name: "egress-" + strings.Split(host, ".")[0], Network: "allowlist",
			Allow: []string{"api.example.test", "other.example.test"}}, tarDir(t, dir), nil)
		return err
	}
	if err := build("api.example.test"); err != nil {
		t.Fatalf("a build reaching an allowed host under egress rules: %v\n%s", err, d.log)
	}
	if err := build("other.example.test"); err == nil {
		t.Fatal("a build reached other.example.test, which a rule denies")
	}
	me, err := c.Whoami(ctx)
	if err != nil {
		t.Fatal(err)
	}
	page, err = c.ListAudit(ctx, warden.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var buildDenied bool
	for _, ev := range page.Events {
		if ev.Action == "egress.connect" && strings.HasPrefix(ev.Target, "build-") && ev.Outcome == "denied" {
			buildDenied = true
			if ev.PrincipalID != me.Principal.ID {
				t.Errorf("a build's refused flow is audited as %q, want the builder", ev.PrincipalID)
			}
		}
	}
	if !buildDenied {
		t.Error("no audit event for the build's refused flow")
	}
}
