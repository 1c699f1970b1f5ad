package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/network/safedial"
	"github.com/warden-sandbox/warden/internal/secrets"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/webhook"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// testWebhookAdmin builds the outgoing webhooks as the daemon does, over
// the package's store and audit log: the safe dialer (loopback allowed
// only as allow lists), a dispatcher that polls fast and retries at once,
// and the admin; the config file's endpoints are started.
func testWebhookAdmin(t *testing.T, v webhook.Secrets, allow []string, fromFile []config.WebhookEndpoint) (*webhook.Admin, *webhook.Dispatcher) {
	t.Helper()
	dial, err := safedial.New(safedial.Options{Dest: network.NewDestinationPolicy(nil), Allow: allow, AllowHTTP: true, MaxRedirects: -1})
	if err != nil {
		t.Fatal(err)
	}
	d, err := webhook.New(webhook.Config{Audit: env.st, Cursors: env.st.(store.WebhookStore), Secrets: v,
		Head: func() int64 { s, _ := env.alog.Head(); return s }, Client: dial.Client(),
		Poll: 20 * time.Millisecond, Backoff: func(int) time.Duration { return time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	for _, e := range fromFile {
		if err := d.Start(e, webhook.SourceConfig); err != nil {
			t.Fatal(err)
		}
	}
	a, err := webhook.NewAdmin(webhook.AdminConfig{Dispatcher: d, Store: env.st.(store.WebhookEndpointStore), Config: fromFile,
		CheckURL: dial.CheckURL, AllowHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return a, d
}

// hookReceiver is a webhook receiver that verifies Standard Webhooks
// signatures and records what each path got.
type hookReceiver struct {
	key []byte

	mu     sync.Mutex
	got    map[string][]webhook.Payload // by path
	tests  map[string]int               // webhook.test pings by path
	bad    int                          // deliveries with a bad signature
	status map[string]int               // answer per path (default 200)
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := webhook.Verify(h.key, r.Header, body, time.Now(), 5*time.Minute); err != nil {
		h.bad++
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var p webhook.Payload
	if err := json.Unmarshal(body, &p); err != nil {
		h.bad++
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if p.Type == webhook.TypeTest {
		h.tests[r.URL.Path]++
	} else {
		h.got[r.URL.Path] = append(h.got[r.URL.Path], p)
	}
	if s := h.status[r.URL.Path]; s != 0 {
		w.WriteHeader(s)
	}
}

// targets returns the targets of the events path got.
func (h *hookReceiver) targets(path string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, p := range h.got[path] {
		out = append(out, p.Data.Target)
	}
	return out
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func auditNow(t *testing.T, action, target string) {
	t.Helper()
	env.audit.Write(context.Background(), govern.AuditEvent{Principal: "system", Name: action, Target: target, Outcome: govern.AuditSuccess})
}

type webhookResp struct {
	webhookView
	Webhooks []webhookView `json:"webhooks"`
	webhook.TestResult
}

func decodeHook(t *testing.T, r doorResp) webhookResp {
	t.Helper()
	var v webhookResp
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("status %d body %s: %v", r.status, r.body, err)
	}
	return v
}

// TestWebhooksAPI: endpoints made, changed and removed through the API
// start and stop delivering at once; deliveries are signed; the delivery
// state is shown; bad destinations, foreign secrets and non-admins are
// refused; the config file's endpoints are listed read-only.
func TestWebhooksAPI(t *testing.T) {
	key := []byte("0123456789abcdef-api-webhook-key")
	rcv := &hookReceiver{key: key, got: map[string][]webhook.Payload{}, tests: map[string]int{}, status: map[string]int{"/flaky": 503}}
	rs := httptest.NewServer(rcv)
	defer rs.Close()

	v, err := secrets.New(bytes.Repeat([]byte{9}, secrets.KeySize), &secrets.MemStore{})
	if err != nil {
		t.Fatal(err)
	}
	fileEP := "file-" + uniq()
	cfg := env.srv.cfg
	cfg.Metrics = nil
	cfg.Secrets = v
	var disp *webhook.Dispatcher
	// The secret the config file's endpoint names is put below; a missing
	// one is retried, not fatal.
	cfg.Webhooks, disp = testWebhookAdmin(t, v, []string{"127.0.0.1"}, []config.WebhookEndpoint{{Name: fileEP,
		URL: rs.URL + "/file", Secret: "sec_none", Events: []string{"nothing.matches"}}})
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	admin := env.adminKey
	js := "application/json"

	r := call(t, hs, admin, "POST", "/v1/secrets", js, []byte(`{"name":"hook-`+uniq()+`","value":"whsec_`+base64.StdEncoding.EncodeToString(key)+`"}`), nil)
	if r.status != http.StatusCreated && r.status != http.StatusOK {
		t.Fatalf("put secret: %d %s", r.status, r.body)
	}
	var sec struct {
		ID string `json:"id"`
	}
	json.Unmarshal(r.body, &sec)
	// Another principal's secret, which the admin key may name (admin) but
	// a webhooks:admin key of someone else may not.
	foreign, err := v.Put("theirs", env.bID, []byte("whsec_"+base64.StdEncoding.EncodeToString(key)))
	if err != nil {
		t.Fatal(err)
	}

	live, other, flaky := "live-"+uniq(), "other-"+uniq(), "flaky-"+uniq()
	def := func(name, path string, extra string) []byte {
		return []byte(`{"name":"` + name + `","url":"` + rs.URL + path + `","secret":"` + sec.ID + `","events":["sandbox.*"]` + extra + `}`)
	}

	t.Run("refused", func(t *testing.T) {
		for name, c := range map[string]struct {
			key, body string
			status    int
			msg       string
		}{
			"agent key":         {env.aKey, string(def("x", "/x", "")), http.StatusForbidden, "webhooks:admin"},
			"ftp url":           {admin, `{"name":"x","url":"ftp://hooks.example.com/x","secret":"` + sec.ID + `","events":["*"]}`, http.StatusBadRequest, "not an https URL"},
			"metadata address":  {admin, `{"name":"x","url":"https://169.254.169.254/x","secret":"` + sec.ID + `","events":["*"]}`, http.StatusBadRequest, "169.254.169.254"},
			"loopback not here": {admin, `{"name":"x","url":"http://127.0.0.2:9/x","secret":"` + sec.ID + `","events":["*"]}`, http.StatusBadRequest, "127.0.0.2"},
			"localhost":         {admin, `{"name":"x","url":"https://localhost/x","secret":"` + sec.ID + `","events":["*"]}`, http.StatusBadRequest, "localhost"},
			"no such secret":    {admin, `{"name":"x","url":"https://hooks.example.com/x","secret":"sec_nosuch","events":["*"]}`, http.StatusBadRequest, "secret"},
			"no events":         {admin, `{"name":"x","url":"https://hooks.example.com/x","secret":"` + sec.ID + `","events":[]}`, http.StatusBadRequest, "event"},
			"bad outcome":       {admin, `{"name":"x","url":"https://hooks.example.com/x","secret":"` + sec.ID + `","events":["*"],"outcomes":["maybe"]}`, http.StatusBadRequest, "outcome"},
			"bad name":          {admin, `{"name":"Bad Name","url":"https://hooks.example.com/x","secret":"` + sec.ID + `","events":["*"]}`, http.StatusBadRequest, "name"},
			"config name":       {admin, `{"name":"` + fileEP + `","url":"https://hooks.example.com/x","secret":"` + sec.ID + `","events":["*"]}`, http.StatusConflict, "exists"},
		} {
			r := call(t, hs, c.key, "POST", "/v1/webhooks", js, []byte(c.body), nil)
			if e := r.apiError(t); r.status != c.status || !strings.Contains(e.Message, c.msg) {
				t.Errorf("%s: %d %s %q, want %d with %q", name, r.status, e.Code, e.Message, c.status, c.msg)
			}
		}
		if r := call(t, hs, env.aKey, "GET", "/v1/webhooks", "", nil, nil); r.status != http.StatusForbidden {
			t.Errorf("list with an agent key: %d %s", r.status, r.body)
		}
		// A webhooks:admin key (not admin) may not sign with another
		// principal's secret.
		whKey, err := newUserKey(t.Context(), "hooks-"+uniq(), "webhooks:admin")
		if err != nil {
			t.Fatal(err)
		}
		body := `{"name":"x","url":"https://hooks.example.com/x","secret":"` + foreign.ID + `","events":["*"]}`
		if r := call(t, hs, whKey, "POST", "/v1/webhooks", js, []byte(body), nil); r.status != http.StatusBadRequest {
			t.Errorf("someone else's secret: %d %s", r.status, r.body)
		}
		if r := call(t, hs, whKey, "GET", "/v1/webhooks", "", nil, nil); r.status != http.StatusOK {
			t.Errorf("list with webhooks:admin: %d %s", r.status, r.body)
		}
	})

	// A live-added endpoint gets the next event, signed.
	auditNow(t, "sandbox.pause", "before-"+live) // before it existed: not delivered
	for _, c := range []struct{ name, path, extra string }{{live, "/live", ""}, {other, "/other", ""}, {flaky, "/flaky", `,"max_attempts":2`}} {
		r := call(t, hs, admin, "POST", "/v1/webhooks", js, def(c.name, c.path, c.extra), nil)
		if r.status != http.StatusCreated {
			t.Fatalf("create %s: %d %s", c.name, r.status, r.body)
		}
		if w := decodeHook(t, r); w.Source != "api" || !w.Enabled || !w.Delivery.Running || w.CreatedBy == "" || w.MaxAttempts == 0 {
			t.Fatalf("created %s: %s", c.name, r.body)
		}
	}
	auditNow(t, "sandbox.kill", "first-"+live)
	auditNow(t, "process.exec", "not-subscribed") // skipped
	waitUntil(t, "the first event at both receivers", func() bool {
		return len(rcv.targets("/live")) == 1 && len(rcv.targets("/other")) == 1
	})
	if got := rcv.targets("/live"); got[0] != "first-"+live {
		t.Fatalf("live got %v", got)
	}

	// The delivery state: delivered and acknowledged; the flaky endpoint
	// gave up after its two attempts with the receiver's answer.
	waitUntil(t, "flaky to give up", func() bool {
		w := decodeHook(t, call(t, hs, admin, "GET", "/v1/webhooks/"+flaky, "", nil, nil))
		return w.Delivery.GivenUp == 1
	})
	w := decodeHook(t, call(t, hs, admin, "GET", "/v1/webhooks/"+flaky, "", nil, nil))
	if w.Delivery.LastStatus != 503 || !strings.Contains(w.Delivery.LastError, "503") || w.Delivery.Delivered != 0 || w.Delivery.Attempts != 0 {
		t.Errorf("flaky delivery state %+v", w.Delivery)
	}
	waitUntil(t, "live's delivery acknowledged", func() bool {
		return decodeHook(t, call(t, hs, admin, "GET", "/v1/webhooks/"+live, "", nil, nil)).Delivery.Delivered == 1
	})
	w = decodeHook(t, call(t, hs, admin, "GET", "/v1/webhooks/"+live, "", nil, nil))
	if d := w.Delivery; d.Delivered != 1 || d.GivenUp != 0 || d.LastStatus != 200 || d.LastError != "" || d.LastDeliveredAt == nil || !d.Running {
		t.Errorf("live delivery state %+v", d)
	}

	// The list: the config file's endpoint first, read-only.
	l := decodeHook(t, call(t, hs, admin, "GET", "/v1/webhooks", "", nil, nil))
	if len(l.Webhooks) < 4 || l.Webhooks[0].Name != fileEP || l.Webhooks[0].Source != "config" || !l.Webhooks[0].Delivery.Running {
		t.Fatalf("list %+v", l.Webhooks)
	}
	for _, m := range []string{"PUT", "DELETE"} {
		if r := call(t, hs, admin, m, "/v1/webhooks/"+fileEP, js, def(fileEP, "/file", ""), nil); r.status != http.StatusConflict {
			t.Errorf("%s of the config file's endpoint: %d %s", m, r.status, r.body)
		}
	}

	// A test ping, signed, answered; one to a failing receiver is ok false.
	tr := decodeHook(t, call(t, hs, admin, "POST", "/v1/webhooks/"+live+"/test", "", nil, nil))
	if !tr.OK || tr.StatusCode != 200 || !strings.HasPrefix(tr.MessageID, "msg_test_") {
		t.Errorf("test ping %+v", tr.TestResult)
	}
	tr = decodeHook(t, call(t, hs, admin, "POST", "/v1/webhooks/"+flaky+"/test", "", nil, nil))
	if tr.OK || tr.StatusCode != 503 {
		t.Errorf("test ping to a failing receiver %+v", tr.TestResult)
	}
	rcv.mu.Lock()
	if rcv.tests["/live"] != 1 || rcv.tests["/flaky"] != 1 || rcv.bad != 0 {
		t.Errorf("test pings %v, bad signatures %d", rcv.tests, rcv.bad)
	}
	rcv.mu.Unlock()

	// Disabled: its deliverer stops; enabled again, it gets what was
	// written meanwhile.
	r = call(t, hs, admin, "PUT", "/v1/webhooks/"+other, js, def("", "/other", `,"enabled":false`), nil)
	if w := decodeHook(t, r); r.status != http.StatusOK || w.Enabled || w.Delivery.Running || w.Delivery.Delivered != 1 {
		t.Fatalf("disable: %d %s", r.status, r.body)
	}
	if _, ok := disp.StatusOf(other); ok {
		t.Fatal("a disabled endpoint's deliverer still runs")
	}
	if r := call(t, hs, admin, "PUT", "/v1/webhooks/"+other, js, def("renamed", "/other", ""), nil); r.status != http.StatusBadRequest {
		t.Errorf("rename: %d %s", r.status, r.body)
	}

	// Deleted: its deliverer is stopped before the answer, so it gets
	// nothing more.
	if r := call(t, hs, admin, "DELETE", "/v1/webhooks/"+live, "", nil, nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if _, ok := disp.StatusOf(live); ok {
		t.Fatal("a deleted endpoint's deliverer still runs")
	}
	if r := call(t, hs, admin, "GET", "/v1/webhooks/"+live, "", nil, nil); r.status != http.StatusNotFound {
		t.Errorf("get after delete: %d %s", r.status, r.body)
	}
	auditNow(t, "sandbox.kill", "second-"+live)
	r = call(t, hs, admin, "PUT", "/v1/webhooks/"+other, js, def(other, "/other", ""), nil)
	if r.status != http.StatusOK || !decodeHook(t, r).Delivery.Running {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	waitUntil(t, "the re-enabled endpoint to catch up", func() bool { return len(rcv.targets("/other")) == 2 })
	if got := rcv.targets("/other"); got[1] != "second-"+live {
		t.Errorf("other got %v", got)
	}
	if got := rcv.targets("/live"); len(got) != 1 {
		t.Errorf("the deleted endpoint got %v", got)
	}

	// Leave no enabled endpoint in the package's store for other tests'
	// dispatchers to start.
	for _, n := range []string{other, flaky} {
		if r := call(t, hs, admin, "DELETE", "/v1/webhooks/"+n, "", nil, nil); r.status != http.StatusNoContent {
			t.Errorf("delete %s: %d %s", n, r.status, r.body)
		}
	}

	// Changes are audited with their governed kind.
	evs, err := env.st.ListAudit(context.Background(), store.AuditFilter{Action: "webhook.create", Target: live, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Target == live && e.Outcome == "success" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d webhook.create events for %s, want 1", n, live)
	}
}

// newUserKey makes a user principal with a key of scopes.
func newUserKey(ctx context.Context, name string, scopes ...string) (string, error) {
	p, err := env.admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: warden.KindUser, Name: name})
	if err != nil {
		return "", err
	}
	k, err := env.admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: name, Scopes: scopes})
	if err != nil {
		return "", err
	}
	return k.Key, nil
}
