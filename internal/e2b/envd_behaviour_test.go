package e2b

// Issue 18: getMetrics honours start and end, and a proxied stream that is
// cut mid-way (the client leaves, the sandbox dies) is still audited.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestMetricsWindow: a window that ended before the sandbox existed holds
// no sample; one that covers now holds the current one; bad bounds are 400.
func TestMetricsWindow(t *testing.T) {
	sb := create(t, env.aKey, map[string]any{"templateID": "base", "timeout": 60})
	now := time.Now().Unix()
	count := func(q string) int {
		t.Helper()
		st, _, body := api(t, env.aKey, "GET", "/sandboxes/"+sb.SandboxID+"/metrics"+q, nil)
		if st != http.StatusOK {
			t.Fatalf("metrics%s: %d %s", q, st, body)
		}
		var ms []map[string]any
		decodeJSON(t, body, &ms)
		return len(ms)
	}
	if n := count(fmt.Sprintf("?start=%d&end=%d", now-7200, now-3600)); n != 0 {
		t.Errorf("a window an hour before the sandbox existed has %d samples, want none", n)
	}
	if n := count(fmt.Sprintf("?end=%d", now-3600)); n != 0 {
		t.Errorf("a window ending an hour before the sandbox existed has %d samples, want none", n)
	}
	for _, q := range []string{"", fmt.Sprintf("?start=%d", now-60), fmt.Sprintf("?start=%d&end=%d", now-60, now+3600)} {
		if n := count(q); n != 1 {
			t.Errorf("metrics%s: %d samples, want the current one", q, n)
		}
	}
	if n := count(fmt.Sprintf("?start=%d", now+3600)); n != 0 {
		t.Errorf("a window starting in an hour has %d samples", n)
	}
	for _, q := range []string{fmt.Sprintf("?start=%d&end=%d", now, now-10), "?start=yesterday", "?end=-5"} {
		st, _, body := api(t, env.aKey, "GET", "/sandboxes/"+sb.SandboxID+"/metrics"+q, nil)
		wantError(t, http.StatusBadRequest, st, body)
	}
}

// startStream begins a process.Process/Start stream of an endless printer
// through the proxy and returns it once its first bytes arrived.
func startStream(t *testing.T, ctx context.Context, sb created) *http.Response {
	t.Helper()
	payload := `{"process":{"cmd":"/bin/sh","args":["-c","while :; do echo tick; sleep 0.1; done"]},"stdin":false}`
	req, err := http.NewRequestWithContext(ctx, "POST", env.hs.URL+"/process.Process/Start", bytes.NewReader(envelope(0, []byte(payload))))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": sb.EnvdAccessToken,
		"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("Start: %d %s", resp.StatusCode, b)
	}
	buf := make([]byte, 64)
	if _, err := io.ReadAtLeast(resp.Body, buf, 16); err != nil {
		resp.Body.Close()
		t.Fatalf("first stream bytes: %v", err)
	}
	return resp
}

// waitStreamAudit waits for the e2b.envd event of the Start stream of sb
// and returns its outcome and detail.
func waitStreamAudit(t *testing.T, id string) (string, map[string]any) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, e := range auditActions(t, id) {
			if e.Action != "e2b.envd" || !strings.Contains(string(e.Detail), "/process.Process/Start") {
				continue
			}
			var d map[string]any
			if err := json.Unmarshal(e.Detail, &d); err != nil {
				t.Fatalf("detail %s: %v", e.Detail, err)
			}
			return e.Outcome, d
		}
		if time.Now().After(deadline) {
			t.Fatalf("no e2b.envd audit event for the cut stream of %s", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStreamAuditOnAbort: a reverse-proxied stream that ends because the
// client went away, or because the sandbox died, still writes its audit
// event, saying which side ended it.
func TestStreamAuditOnAbort(t *testing.T) {
	t.Run("client leaves", func(t *testing.T) {
		sb := create(t, env.aKey, nil)
		ctx, cancel := context.WithCancel(context.Background())
		resp := startStream(t, ctx, sb)
		cancel()
		resp.Body.Close()
		outcome, d := waitStreamAudit(t, sb.SandboxID)
		if d["aborted"] != "client" || d["status"] != float64(200) || outcome != "success" {
			t.Fatalf("audit of a stream the client left: %s %v", outcome, d)
		}
	})
	t.Run("sandbox dies", func(t *testing.T) {
		sb := create(t, env.aKey, nil)
		resp := startStream(t, context.Background(), sb)
		defer resp.Body.Close()
		if err := env.mgr.Kill(context.Background(), sb.SandboxID, "test: the sandbox dies mid-stream"); err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body) // cut short by the proxy
		outcome, d := waitStreamAudit(t, sb.SandboxID)
		if d["aborted"] != "sandbox" || outcome != "error" {
			t.Fatalf("audit of a stream whose sandbox died: %s %v", outcome, d)
		}
	})
}
