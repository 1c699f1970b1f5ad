package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestMiddlewareSecretsDaemon (issue 21): through the real daemon and its
// middleware worker (wardend mw-worker), a middleware reads a secret by
// name only once an admin granted it (POST /v1/secrets/{id}/grants with
// "middleware"); an ungranted or undeclared name throws a clear error; the
// value never appears in verdicts, listings, the audit log or the daemon's
// log; removing the middleware removes its grants. And a runaway hook that
// gets the worker killed (a regular expression that backtracks past the
// interrupt) is cut off at its limit while an innocent call in flight on
// the same worker still gets its verdict.
func TestMiddlewareSecretsDaemon(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	admin := d.client(t, d.adminKey)
	ctx := ctxT(t)
	const value = "mw-it-9c1f2e3d4b5a6978"
	sec, err := admin.PutSecret(ctx, "mw_token", value)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.PutMiddleware(ctx, warden.Middleware{Name: "sec-hook", Kinds: []string{"code.run"},
		Secrets: []string{"mw_token", "absent"}, Script: `function pre(a) {
  var c = a.code.code;
  if (c === "read") return {modify: secrets.mw_token.split("").reverse().join("")};
  if (c === "missing") return {block: secrets.absent};
  if (c === "undeclared") return {block: secrets.nope};
  if (c === "leak") throw new Error("leak " + secrets.mw_token);
  if (c === "block") return {block: "saw " + secrets.mw_token};
  return {allow: true};
}`}); err != nil {
		t.Fatal(err)
	}
	try := func(name, code string) warden.MiddlewareVerdict {
		t.Helper()
		act, _ := json.Marshal(map[string]any{"kind": "code.run", "code": map[string]string{"language": "python", "code": code}})
		v, err := admin.TestMiddleware(ctx, warden.MiddlewareTestRequest{Name: name, Action: act})
		if err != nil {
			t.Fatalf("test %s %s: %v", name, code, err)
		}
		if b, _ := json.Marshal(v); strings.Contains(string(b), value) {
			t.Fatalf("the verdict holds the value: %s", b)
		}
		return v
	}
	reversed := []rune(value)
	for i, j := 0, len(reversed)-1; i < j; i, j = i+1, j-1 {
		reversed[i], reversed[j] = reversed[j], reversed[i]
	}

	if v := try("sec-hook", "read"); v.Action != "error" || !strings.Contains(v.Error, "not granted to middleware sec-hook") {
		t.Fatalf("before the grant: %+v", v)
	}
	var apiErr *warden.Error
	if _, err := admin.CreateGrant(ctx, sec.ID, warden.Grant{Middleware: "no-such-hook"}); !errors.As(err, &apiErr) || apiErr.Status != 404 {
		t.Fatalf("a grant to a middleware that does not exist: %v", err)
	}
	// Only an admin grants a secret to a middleware: a user key with
	// secrets:write, granting its own secret, is refused.
	p, err := admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "user", Name: "mw-user"})
	if err != nil {
		t.Fatal(err)
	}
	k, err := admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: "mw-user", Scopes: []string{"secrets:read", "secrets:write"}})
	if err != nil {
		t.Fatal(err)
	}
	user := d.client(t, k.Key)
	usec, err := user.PutSecret(ctx, "mw_token", "user-value-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := user.CreateGrant(ctx, usec.ID, warden.Grant{Middleware: "sec-hook"}); !errors.As(err, &apiErr) || apiErr.Status != 403 {
		t.Fatalf("a middleware grant by a non-admin key: %v", err)
	}
	g, err := admin.CreateGrant(ctx, sec.ID, warden.Grant{Middleware: "sec-hook"})
	if err != nil || g.Middleware != "sec-hook" {
		t.Fatalf("grant: %+v %v", g, err)
	}
	if v := try("sec-hook", "read"); v.Action != "modify" || string(v.Modified) != fmt.Sprintf("%q", string(reversed)) {
		t.Fatalf("granted: %+v %s", v, v.Modified)
	}
	if v := try("sec-hook", "missing"); v.Action != "error" || !strings.Contains(v.Error, `secret "absent": not granted to middleware sec-hook`) {
		t.Fatalf("declared, not granted: %+v", v)
	}
	if v := try("sec-hook", "undeclared"); v.Action != "error" || !strings.Contains(v.Error, `secret "nope" is not declared`) {
		t.Fatalf("undeclared: %+v", v)
	}
	if v := try("sec-hook", "leak"); v.Action != "error" || !strings.Contains(v.Error, "leak [secret mw_token]") {
		t.Fatalf("thrown with the value: %+v", v)
	}
	if v := try("sec-hook", "block"); v.Action != "block" || v.Message != "saw [secret mw_token]" {
		t.Fatalf("blocked with the value: %+v", v)
	}

	// Runaway isolation in the daemon's worker.
	for _, m := range []warden.Middleware{
		{Name: "slow", Kinds: []string{"code.run"}, TimeoutMS: 5000,
			Script: `function pre(a) { var t = Date.now(); while (Date.now() - t < Number(a.code.code)) {} return {allow: true}; }`},
		{Name: "backtrack", Kinds: []string{"code.run"}, TimeoutMS: 100,
			Script: `function pre(a) { /^(a+)+\1$/.test("a".repeat(40) + "!"); return {allow: true}; }`},
	} {
		if _, err := admin.PutMiddleware(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	try("slow", "1") // the worker is up
	var wg sync.WaitGroup
	var slowV warden.MiddlewareVerdict
	var slowErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		slowV, slowErr = admin.TestMiddleware(ctx, warden.MiddlewareTestRequest{Name: "slow",
			Action: json.RawMessage(`{"kind": "code.run", "code": {"language": "python", "code": "3500"}}`)})
	}()
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	v := try("backtrack", "x")
	took := time.Since(start)
	wg.Wait()
	if v.Action != "error" || !strings.Contains(v.Error, "time limit exceeded") || took > 1500*time.Millisecond {
		t.Fatalf("the runaway: %+v after %v, want the time limit within about 100 ms", v, took)
	}
	if slowErr != nil || slowV.Action != "allow" {
		t.Fatalf("the innocent call in flight when the worker was killed: %+v %v", slowV, slowErr)
	}
	if !d.log.waitFor("re-running a call on a new worker", 5*time.Second) {
		t.Fatalf("no re-run logged:\n%s", d.log)
	}

	// The value is nowhere: listings, audit, log.
	list, err := admin.ListMiddleware(ctx)
	if err != nil {
		t.Fatal(err)
	}
	one, err := admin.GetMiddleware(ctx, "sec-hook")
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []any{list, one} {
		if b, _ := json.Marshal(x); strings.Contains(string(b), value) {
			t.Fatalf("a listing holds the value: %s", b)
		}
	}
	var events int
	for e, err := range admin.AllAuditEvents(ctx, warden.AuditQuery{}) {
		if err != nil {
			t.Fatal(err)
		}
		events++
		if b, _ := json.Marshal(e); strings.Contains(string(b), value) {
			t.Fatalf("an audit event holds the value: %s", b)
		}
	}
	if events == 0 {
		t.Fatal("no audit events")
	}
	if strings.Contains(d.log.String(), value) {
		t.Fatal("the daemon's log holds the value")
	}

	// The CLI: show (names, never values) and a draft tested with the
	// definition flags, reading the secrets granted to its --name.
	if out, errOut, code := d.cli(t, "", "middleware", "show", "sec-hook"); code != 0 || !strings.Contains(out, "secrets: mw_token,absent") ||
		!strings.Contains(out, "function pre(a)") || strings.Contains(out, value) {
		t.Fatalf("middleware show: %d %s %s", code, out, errOut)
	}
	actFile := filepath.Join(t.TempDir(), "action.json")
	if err := os.WriteFile(actFile, []byte(`{"kind": "code.run", "code": {"language": "python", "code": "x"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	draft := `function pre(a) { return {modify: secrets.mw_token.length + ":" + secrets.mw_token}; }`
	out, errOut, code := d.cli(t, draft, "middleware", "test", "--script", "-", "--name", "sec-hook", "--secrets", "mw_token",
		"--timeout-ms", "1000", "--action", actFile)
	if want := fmt.Sprintf(`modify: "%d:[secret mw_token]"`, len(value)); code != 0 || strings.TrimSpace(out) != want {
		t.Fatalf("middleware test of a draft: %d %q %s, want %q", code, out, errOut, want)
	}
	if out, _, code := d.cli(t, draft, "middleware", "test", "--script", "-", "--name", "unnamed", "--secrets", "mw_token",
		"--action", actFile); code != 0 || !strings.Contains(out, "not granted to middleware unnamed") {
		t.Fatalf("a draft under another name: %d %q", code, out)
	}

	// Removing the middleware removes its grants.
	if err := admin.DeleteMiddleware(ctx, "sec-hook"); err != nil {
		t.Fatal(err)
	}
	if gs, err := admin.ListGrants(ctx, sec.ID); err != nil || len(gs) != 0 {
		t.Fatalf("grants after the middleware was removed: %+v %v", gs, err)
	}
}
