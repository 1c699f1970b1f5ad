package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestMaxTimeoutBothDoors: the daemon's max_timeout bounds sandbox timeouts
// on the native API and the E2B API alike, because both leave the check to
// the sandbox manager. With max_timeout 1h, 2 h is refused by both (422 and
// E2B's 400, for create and for a timeout change) and 30 min accepted by
// both; with 48h, 30 h (over the old fixed 24 h of the native API) is
// accepted by both.
func TestMaxTimeoutBothDoors(t *testing.T) {
	type verdict struct {
		status int
		body   string
	}
	for _, tc := range []struct {
		maxTimeout     string
		maxSecs        int
		ok, refused    int // seconds
		okLabel, label string
	}{
		{"1h", 3600, 1800, 7200, "30 min", "2 h"},
		{"48h", 172800, 30 * 3600, 49 * 3600, "30 h", "49 h"},
	} {
		t.Run("max_timeout="+tc.maxTimeout, func(t *testing.T) {
			state, run := newDirs(t)
			e2bAddr := freePort(t)
			cfg := lnWriteConfig(t, "max_timeout: "+tc.maxTimeout+"\n")
			d := startDaemon(t, state, run, "--config", cfg, "--e2b-listen", e2bAddr)
			e2bURL := "http://" + e2bAddr

			native := func(method, path string, body string) verdict {
				hdr := http.Header{"Authorization": {"Bearer " + d.adminKey}, "Content-Type": {"application/json"}}
				code, b := e2bCall(t, method, d.url+path, hdr, strings.NewReader(body))
				return verdict{code, string(b)}
			}
			e2b := func(method, path string, body string) verdict {
				hdr := http.Header{"X-API-Key": {d.adminKey}, "Content-Type": {"application/json"}}
				code, b := e2bCall(t, method, e2bURL+path, hdr, strings.NewReader(body))
				return verdict{code, string(b)}
			}
			bound := fmt.Sprintf("between 1 and %d seconds", tc.maxSecs)
			refusedBoth := func(what string, n, e verdict) {
				t.Helper()
				if n.status != 422 || !strings.Contains(n.body, "validation_failed") || !strings.Contains(n.body, bound) {
					t.Errorf("native %s: %d %s, want 422 validation_failed naming %q", what, n.status, n.body, bound)
				}
				if e.status != 400 || !strings.Contains(e.body, bound) {
					t.Errorf("e2b %s: %d %s, want 400 naming %q", what, e.status, e.body, bound)
				}
			}

			// Create: refused over max_timeout, accepted under it, on both.
			refusedBoth("create with "+tc.label,
				native("POST", "/v1/sandboxes", fmt.Sprintf(`{"timeout_seconds":%d}`, tc.refused)),
				e2b("POST", "/sandboxes", fmt.Sprintf(`{"templateID":"base","timeout":%d}`, tc.refused)))
			n := native("POST", "/v1/sandboxes", fmt.Sprintf(`{"timeout_seconds":%d}`, tc.ok))
			if n.status != 201 {
				t.Fatalf("native create with %s: %d %s", tc.okLabel, n.status, n.body)
			}
			e := e2b("POST", "/sandboxes", fmt.Sprintf(`{"templateID":"base","timeout":%d}`, tc.ok))
			if e.status != 201 {
				t.Fatalf("e2b create with %s: %d %s", tc.okLabel, e.status, e.body)
			}
			var nsb struct {
				ID string `json:"id"`
			}
			var esb struct {
				SandboxID string `json:"sandboxID"`
			}
			if err := json.Unmarshal([]byte(n.body), &nsb); err != nil || nsb.ID == "" {
				t.Fatalf("native create: %v: %s", err, n.body)
			}
			if err := json.Unmarshal([]byte(e.body), &esb); err != nil || esb.SandboxID == "" {
				t.Fatalf("e2b create: %v: %s", err, e.body)
			}

			// Timeout changes: the same verdicts.
			refusedBoth("set timeout to "+tc.label,
				native("POST", "/v1/sandboxes/"+nsb.ID+"/timeout", fmt.Sprintf(`{"timeout_seconds":%d}`, tc.refused)),
				e2b("POST", "/sandboxes/"+esb.SandboxID+"/timeout", fmt.Sprintf(`{"timeout":%d}`, tc.refused)))
			if v := native("POST", "/v1/sandboxes/"+nsb.ID+"/timeout", fmt.Sprintf(`{"timeout_seconds":%d}`, tc.ok)); v.status != 200 {
				t.Errorf("native set timeout to %s: %d %s", tc.okLabel, v.status, v.body)
			}
			if v := e2b("POST", "/sandboxes/"+esb.SandboxID+"/timeout", fmt.Sprintf(`{"timeout":%d}`, tc.ok)); v.status != 204 {
				t.Errorf("e2b set timeout to %s: %d %s", tc.okLabel, v.status, v.body)
			}
			// E2B's connect checks before it acts.
			if v := e2b("POST", "/sandboxes/"+esb.SandboxID+"/connect", fmt.Sprintf(`{"timeout":%d}`, tc.refused)); v.status != 400 || !strings.Contains(v.body, bound) {
				t.Errorf("e2b connect with %s: %d %s, want 400 naming %q", tc.label, v.status, v.body, bound)
			}
			// An explicit 0 is out of range on both (0 is not "the default").
			refusedBoth("create with timeout 0",
				native("POST", "/v1/sandboxes", `{"timeout_seconds":0}`),
				e2b("POST", "/sandboxes", `{"templateID":"base","timeout":0}`))
		})
	}
}
