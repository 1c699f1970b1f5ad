package integration

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestWebhooksAPI: through the real daemon and the CLI, an endpoint added
// at run time gets the next matching audit event, signed; its delivery
// state is listed next to the config file's endpoint (read-only); it and
// its state survive a restart; a test ping is answered; after rm it gets
// nothing more.
func TestWebhooksAPI(t *testing.T) {
	key := []byte("it-api-webhook-signing-key-0123456789")
	var mu sync.Mutex
	got := map[string][]string{} // path -> "type target"
	bad := 0
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		mac := hmac.New(sha256.New, key)
		fmt.Fprintf(mac, "%s.%s.%s", r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), b)
		if r.Header.Get("webhook-signature") != "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)) {
			bad++
			w.WriteHeader(401)
			return
		}
		var p struct {
			Type string `json:"type"`
			Data struct {
				Target string `json:"target"`
			} `json:"data"`
		}
		_ = json.Unmarshal(b, &p)
		got[r.URL.Path] = append(got[r.URL.Path], p.Type+" "+p.Data.Target)
	}))
	defer rcv.Close()
	deliveries := func(path string) []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got[path]...)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}

	state, run := newDirs(t)
	conf := filepath.Join(filepath.Dir(state), "wardend.yaml")
	cfg := fmt.Sprintf("webhooks:\n  allow_hosts: [\"127.0.0.1\"]\n  allow_http: true\n  endpoints:\n"+
		"    - {name: from-file, url: %q, secret: sec_later, events: [\"nothing.here\"]}\n", rcv.URL+"/file")
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, state, run, "--config", conf)
	ctx := context.Background()
	admin := d.client(t, d.adminKey)
	sec, err := admin.PutSecret(ctx, "hook-key", "whsec_"+base64.StdEncoding.EncodeToString(key))
	if err != nil {
		t.Fatal(err)
	}

	// A URL the destination check refuses is a clear 400.
	if _, errOut, code := d.cli(t, "", "webhook", "create", "meta", "https://169.254.169.254/x", "--secret", sec.ID, "--events", "*"); code == 0 ||
		!strings.Contains(errOut, "169.254.169.254") {
		t.Fatalf("metadata URL: exit %d: %s", code, errOut)
	}
	if out, errOut, code := d.cli(t, "", "webhook", "create", "live", rcv.URL+"/live", "--secret", sec.ID, "--events", "secret.*"); code != 0 {
		t.Fatalf("create: exit %d: %s%s", code, out, errOut)
	}
	if _, err := admin.PutSecret(ctx, "after-create", "value-after-create"); err != nil {
		t.Fatal(err)
	}
	waitFor("the delivery", func() bool { return len(deliveries("/live")) == 1 })
	if g := deliveries("/live"); !strings.HasPrefix(g[0], "secret.put ") {
		t.Fatalf("delivered %v", g)
	}

	out, errOut, code := d.cli(t, "", "webhook", "ls")
	if code != 0 || !strings.Contains(out, "from-file") || !strings.Contains(out, "config") || !strings.Contains(out, "live") {
		t.Fatalf("ls: exit %d: %s%s", code, out, errOut)
	}
	if _, _, code := d.cli(t, "", "webhook", "rm", "from-file"); code == 0 {
		t.Fatal("rm of the config file's endpoint succeeded")
	}

	// The endpoint and its delivery state survive a restart.
	d.stop(syscall.SIGTERM)
	d = startDaemon(t, state, run, "--config", conf)
	admin = d.client(t, d.adminKey)
	w, err := admin.GetWebhook(ctx, "live")
	if err != nil || !w.Delivery.Running || w.Delivery.Delivered != 1 || w.Delivery.LastStatus != 200 || w.Source != "api" {
		t.Fatalf("after restart: %+v %v", w, err)
	}
	if out, errOut, code := d.cli(t, "", "webhook", "test", "live"); code != 0 || !strings.Contains(out, "ok: HTTP 200") {
		t.Fatalf("test: exit %d: %s%s", code, out, errOut)
	}
	waitFor("the test ping", func() bool { return len(deliveries("/live")) == 2 })

	// Removed: nothing more.
	if out, errOut, code := d.cli(t, "", "webhook", "rm", "live"); code != 0 {
		t.Fatalf("rm: exit %d: %s%s", code, out, errOut)
	}
	if _, err := admin.PutSecret(ctx, "after-rm", "value-after-rm"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.GetWebhook(ctx, "live"); err == nil {
		t.Fatal("the removed endpoint is still there")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got["/live"]) != 2 || bad != 0 {
		t.Fatalf("deliveries %v, bad signatures %d", got, bad)
	}
}
