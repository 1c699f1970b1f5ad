package cli

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestGuardTestCmd: `warden guard test` sends the text (or the JSON
// document of --json, or stdin) and the detectors, prints the findings
// without any value, and refuses bad input before calling the daemon.
func TestGuardTestCmd(t *testing.T) {
	d := newFakeDaemon(t)
	var got []map[string]json.RawMessage
	d.handle("POST /v1/guard/test", func(w http.ResponseWriter, r *http.Request) {
		var q map[string]json.RawMessage
		json.NewDecoder(r.Body).Decode(&q)
		got = append(got, q)
		if _, ok := q["json"]; ok {
			writeJSON(w, 200, warden.GuardTestResult{Findings: []warden.GuardFinding{}})
			return
		}
		writeJSON(w, 200, warden.GuardTestResult{Findings: []warden.GuardFinding{
			{Detector: "secrets", Kind: "aws-access-token", Start: 10, End: 30, Confidence: 0.95}}})
	})
	res := run(t, d, "guard", "test", "my key is AKIAZ3MSJV4WQXRTY7KD", "--detectors", "secrets, pii")
	if res.code != 0 || !strings.Contains(res.stdout, "DETECTOR") || !strings.Contains(res.stdout, "aws-access-token") ||
		!strings.Contains(res.stdout, "10-30") || !strings.Contains(res.stdout, "0.95") || strings.Contains(res.stdout, "AKIA") {
		t.Fatalf("text: %+v", res)
	}
	if string(got[0]["text"]) != `"my key is AKIAZ3MSJV4WQXRTY7KD"` || string(got[0]["detectors"]) != `["secrets","pii"]` {
		t.Fatalf("request: %s %s", got[0]["text"], got[0]["detectors"])
	}
	doc := filepath.Join(t.TempDir(), "call.json")
	os.WriteFile(doc, []byte(`{"query":"hello"}`), 0o600)
	if res := run(t, d, "guard", "test", "--json-file", doc); res.code != 0 || res.stdout != "no findings\n" {
		t.Fatalf("json: %+v", res)
	}
	if string(got[1]["json"]) != `{"query":"hello"}` || got[1]["text"] != nil {
		t.Fatalf("json request: %v", got[1])
	}
	if res := runIn(t, d, "from stdin", "guard", "test", "-", "--no-such-flag"); res.code != 2 {
		t.Fatalf("unknown flag: %+v", res)
	}
	if res := runIn(t, d, "from stdin", "guard", "test", "-"); res.code != 0 || string(got[2]["text"]) != `"from stdin"` {
		t.Fatalf("stdin: %+v %v", res, got[2])
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"query":`), 0o600)
	for _, args := range [][]string{
		{"guard", "test"},                          // nothing to test
		{"guard", "test", "a", "b"},                // two texts
		{"guard", "test", "a", "--json-file", doc}, // both
	} {
		if res := run(t, d, args...); res.code != 2 {
			t.Errorf("%v: %+v, want a usage error", args, res)
		}
	}
	if res := run(t, d, "guard", "test", "--json-file", bad); res.code == 0 || !strings.Contains(res.stderr, "not a JSON document") {
		t.Errorf("bad JSON: %+v", res)
	}
	if len(got) != 3 {
		t.Errorf("%d requests reached the daemon, want 3", len(got))
	}
}
