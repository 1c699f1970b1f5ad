package api

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/govern"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestGuardDoor: the guard stage through the native API. A secret in an
// exec command line (and in its environment) is refused naming the
// detector, and the audit event holds the finding, never the value; a
// file write holding a card number is masked when the policy says mask.
func TestGuardDoor(t *testing.T) {
	ctx := ctxT(t, 120*time.Second)
	g, hs := doorServer(t, govern.Config{})
	const secret = "ghp_R8xQ2vLm9TzK4pWn7YbJc3HfDs6GaE1uVo5i"
	const card = "4539 1488 0343 6467"
	for _, p := range []govern.Policy{
		{ID: "guard-exec-" + uniq(), Scope: govern.Scope{Kind: govern.ScopeInstallation},
			Guard: &govern.Guard{Detectors: []string{"secrets"}, Targets: []string{"exec"}, Action: govern.GuardBlock}},
		{ID: "guard-files-" + uniq(), Scope: govern.Scope{Kind: govern.ScopeInstallation},
			Guard: &govern.Guard{Detectors: []string{"pii"}, Targets: []string{"file.write"}, Action: govern.GuardMask}},
	} {
		if _, err := g.CreatePolicy(ctx, p, "test"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.DeletePolicy(ctx, p.ID) })
	}
	sbp := "/v1/sandboxes/" + env.sbA

	for _, body := range []string{
		`{"cmd":["curl","-H","Authorization: token ` + secret + `","https://api.github.com/user"]}`,
		`{"cmd":["env"],"env":{"GH_TOKEN":"` + secret + `"}}`,
	} {
		r := call(t, hs, env.aKey, "POST", sbp+"/exec", "application/json", []byte(body), nil)
		if r.status != http.StatusForbidden {
			t.Fatalf("exec with a secret: %d %s", r.status, r.body)
		}
		e := r.apiError(t)
		if !strings.Contains(e.Message, "secrets detector") || strings.Contains(string(r.body), secret) {
			t.Fatalf("refusal: %s", r.body)
		}
		evs := eventsOf(t, r.reqID)
		if len(evs) != 1 {
			t.Fatalf("audit events: %+v", evs)
		}
		if strings.Contains(string(evs[0].Detail), secret) {
			t.Fatalf("audit event holds the secret: %s", evs[0].Detail)
		}
		rec := decisionOf(t, evs[0])
		if rec.Decision.Outcome != govern.Deny || rec.Decision.Stage != "guard" || len(rec.Decision.Findings) == 0 ||
			rec.Decision.Findings[0].Detector != "secrets" {
			t.Fatalf("recorded decision: %+v", rec.Decision)
		}
	}
	// A clean command runs.
	if r := call(t, hs, env.aKey, "POST", sbp+"/exec", "application/json", []byte(`{"cmd":["true"]}`), nil); r.status != http.StatusOK {
		t.Fatalf("clean exec: %d %s", r.status, r.body)
	}

	// A file write with a card number is masked, the JSON stays valid.
	// A writable directory: the sandbox's TMPDIR (the fake backend's own
	// tmp/, /tmp in a real sandbox).
	var tmp strings.Builder
	if _, err := env.a.Exec(ctx, env.sbA, warden.ExecRequest{Cmd: []string{"sh", "-c", `echo "${TMPDIR:-/tmp}"`}},
		warden.ExecIO{Stdout: &tmp}); err != nil {
		t.Fatal(err)
	}
	path := strings.TrimSpace(tmp.String()) + "/warden-guard-door-" + uniq() + ".json"
	t.Cleanup(func() { call(t, hs, env.aKey, "DELETE", sbp+"/files?path="+url.QueryEscape(path), "", nil, nil) })
	doc := `{"name":"Ann","card":"` + card + `"}`
	r := call(t, hs, env.aKey, "PUT", sbp+"/files?path="+url.QueryEscape(path), "application/octet-stream", []byte(doc), nil)
	if r.status != http.StatusOK {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	evs := eventsOf(t, r.reqID)
	if len(evs) != 1 || strings.Contains(string(evs[0].Detail), card) {
		t.Fatalf("write audit: %+v", evs)
	}
	if rec := decisionOf(t, evs[0]); rec.Decision.Outcome != govern.Allow || len(rec.Decision.Findings) != 1 ||
		rec.Decision.Findings[0].Kind != "credit_card" {
		t.Fatalf("write decision: %+v", rec.Decision)
	}
	r = call(t, hs, env.aKey, "GET", sbp+"/files?path="+url.QueryEscape(path), "", nil, nil)
	if r.status != http.StatusOK || strings.Contains(string(r.body), card) || !json.Valid(r.body) ||
		!strings.Contains(string(r.body), "[REDACTED:credit_card]") {
		t.Fatalf("written file: %d %s", r.status, r.body)
	}
	// A clean file is written as sent.
	r = call(t, hs, env.aKey, "PUT", sbp+"/files?path="+url.QueryEscape(path), "application/octet-stream", []byte("plain"), nil)
	if r.status != http.StatusOK {
		t.Fatalf("clean write: %d %s", r.status, r.body)
	}
	if r = call(t, hs, env.aKey, "GET", sbp+"/files?path="+url.QueryEscape(path), "", nil, nil); string(r.body) != "plain" {
		t.Fatalf("clean file: %q", r.body)
	}
}

// TestGuardTestRoute: POST /v1/guard/test shows what fires, never the value.
func TestGuardTestRoute(t *testing.T) {
	const secret = "ghp_R8xQ2vLm9TzK4pWn7YbJc3HfDs6GaE1uVo5i"
	body, _ := json.Marshal(map[string]any{"json": map[string]any{"env": []string{"X=1", "TOKEN=" + secret}}, "detectors": []string{"secrets"}})
	r := call(t, env.hs, env.adminKey, "POST", "/v1/guard/test", "application/json", body, nil)
	if r.status != http.StatusOK || strings.Contains(string(r.body), secret) {
		t.Fatalf("guard test: %d %s", r.status, r.body)
	}
	var res struct {
		Findings []govern.GuardFinding `json:"findings"`
	}
	if err := json.Unmarshal(r.body, &res); err != nil || len(res.Findings) != 1 || res.Findings[0].Where != "env[1]" ||
		res.Findings[0].Detector != "secrets" {
		t.Fatalf("findings: %s %v", r.body, err)
	}
	for _, bad := range []string{`{}`, `{"text":"a","json":{}}`, `{"text":"a","detectors":["nope"]}`} {
		if r := call(t, env.hs, env.adminKey, "POST", "/v1/guard/test", "application/json", []byte(bad), nil); r.status != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d %s", bad, r.status, r.body)
		}
	}
	// Needs policies:read.
	if r := call(t, env.hs, env.aKey, "POST", "/v1/guard/test", "application/json", []byte(`{"text":"x"}`), nil); r.status != http.StatusForbidden {
		t.Errorf("without policies:read: %d %s", r.status, r.body)
	}
}
