package webhook

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/network/safedial"
	"github.com/warden-sandbox/warden/internal/store"
)

var testKey = []byte("0123456789abcdef-webhook-key")

type memAudit struct {
	mu  sync.Mutex
	evs []store.AuditEvent
}

func (m *memAudit) add(action, outcome, detail string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.evs = append(m.evs, store.AuditEvent{Seq: int64(len(m.evs) + 1), Time: time.Now(), PrincipalID: "prn_a",
		Action: action, Target: "sb-1", Outcome: outcome, Detail: json.RawMessage(detail), Hash: "h"})
}

func (m *memAudit) head() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int64(len(m.evs))
}

func (m *memAudit) ListAudit(_ context.Context, f store.AuditFilter) ([]store.AuditEvent, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.AuditEvent
	for _, e := range m.evs {
		if e.Seq > f.After && len(out) < f.Limit {
			out = append(out, e)
		}
	}
	return out, nil
}

type memCursors struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *memCursors) WebhookCursor(_ context.Context, ep string) (store.WebhookCursor, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.m[ep]
	if !ok {
		return store.WebhookCursor{}, store.ErrNotFound
	}
	return store.WebhookCursor{Endpoint: ep, Seq: s}, nil
}

func (c *memCursors) SetWebhookCursor(_ context.Context, w store.WebhookCursor) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[w.Endpoint] = w.Seq
	return nil
}

type secretsMap map[string]string

func (s secretsMap) Current(id string) ([]byte, int, error) {
	v, ok := s[id]
	if !ok {
		return nil, 0, errors.New("no such secret")
	}
	return []byte(v), 1, nil
}

// receiver verifies every delivery's signature and records it; fail
// makes it answer 500 to the first n tries.
type receiver struct {
	t    *testing.T
	mu   sync.Mutex
	got  []Payload
	ids  []string
	fail int
	bad  int // deliveries whose signature did not verify
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, req.Header.Get(HeaderID))
	if err := Verify(testKey, req.Header, body, time.Now(), 5*time.Minute); err != nil {
		r.bad++
		w.WriteHeader(401)
		return
	}
	if r.fail > 0 {
		r.fail--
		w.WriteHeader(500)
		return
	}
	var p Payload
	if err := json.Unmarshal(body, &p); err != nil {
		r.t.Errorf("body %s: %v", body, err)
	}
	r.got = append(r.got, p)
}

func (r *receiver) delivered() []Payload {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Payload(nil), r.got...)
}

func start(t *testing.T, a *memAudit, cur *memCursors, url string, allow bool, ep config.WebhookEndpoint) *Dispatcher {
	t.Helper()
	opts := safedial.Options{AllowHTTP: true, MaxRedirects: -1}
	if allow {
		opts.Allow = []string{"127.0.0.1"}
	}
	dial, err := safedial.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ep.URL, ep.Secret = url, "sec_hook"
	d, err := New(Config{Endpoints: []config.WebhookEndpoint{ep}, Audit: a, Cursors: cur, Head: a.head,
		Secrets: secretsMap{"sec_hook": "whsec_" + base64.StdEncoding.EncodeToString(testKey)},
		Client:  dial.Client(), Poll: 5 * time.Millisecond, Backoff: func(int) time.Duration { return time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDeliverSignedChosenEvents(t *testing.T) {
	a := &memAudit{}
	a.add("sandbox.pause", "success", `{}`) // before the endpoint existed: not delivered
	rcv := &receiver{t: t, fail: 2}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	cur := &memCursors{m: map[string]int64{}}
	d := start(t, a, cur, srv.URL+"/hook", true, config.WebhookEndpoint{Name: "soc",
		Events: []string{"sandbox.pause", "sandbox.kill", "approval.request", TypeBudgetExceeded}})
	waitFor(t, "the cursor at the head", func() bool { c, err := cur.WebhookCursor(context.Background(), "soc"); return err == nil && c.Seq == 1 })
	a.add("sandbox.exec", "success", `{}`)
	a.add("sandbox.pause", "success", `{"state":"paused"}`)
	a.add("llm.call", "denied", `{"budget":"daily","model":"m"}`)
	a.add("llm.call", "success", `{"model":"m"}`)
	a.add("approval.request", "success", `{"approval":"apr_1"}`)
	d.Notify()
	waitFor(t, "three deliveries", func() bool { return len(rcv.delivered()) == 3 })
	waitFor(t, "the cursor past them", func() bool { c, _ := cur.WebhookCursor(context.Background(), "soc"); return c.Seq == 6 })
	d.Close()
	got := rcv.delivered()
	if got[0].Type != "sandbox.pause" || got[0].Data.Seq != 3 || string(got[0].Data.Detail) != `{"state":"paused"}` ||
		got[1].Type != TypeBudgetExceeded || got[1].Data.Seq != 4 || got[2].Type != "approval.request" {
		t.Fatalf("deliveries %+v", got)
	}
	rcv.mu.Lock()
	// The first delivery failed twice and was retried under the same id.
	if rcv.bad != 0 || len(rcv.ids) != 5 || rcv.ids[0] != MessageID(3) || rcv.ids[2] != MessageID(3) {
		t.Fatalf("ids %v, bad signatures %d", rcv.ids, rcv.bad)
	}
	rcv.mu.Unlock()
	if s := d.Status(); s[0].State.Delivered != 3 || s[0].State.GivenUp != 0 {
		t.Fatalf("status %+v", s)
	}
}

// TestAtLeastOnceAcrossRestart: a delivery the receiver has not taken
// when the dispatcher stops is made by the next one.
func TestAtLeastOnceAcrossRestart(t *testing.T) {
	a := &memAudit{}
	rcv := &receiver{t: t, fail: 1 << 30}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	cur := &memCursors{m: map[string]int64{}}
	ep := config.WebhookEndpoint{Name: "soc", Events: []string{"sandbox.*"}, MaxAttempts: 1 << 20}
	d := start(t, a, cur, srv.URL, true, ep)
	waitFor(t, "the cursor", func() bool { _, err := cur.WebhookCursor(context.Background(), "soc"); return err == nil })
	a.add("sandbox.kill", "success", `{}`)
	waitFor(t, "a failed try", func() bool { rcv.mu.Lock(); defer rcv.mu.Unlock(); return len(rcv.ids) > 0 })
	d.Close()
	if c, _ := cur.WebhookCursor(context.Background(), "soc"); c.Seq != 0 {
		t.Fatalf("the cursor moved past an undelivered event: %d", c.Seq)
	}
	rcv.mu.Lock()
	rcv.fail = 0
	rcv.mu.Unlock()
	d = start(t, a, cur, srv.URL, true, ep)
	defer d.Close()
	// A try cut by the stop may still have reached the receiver's
	// handler after it recovered: a repeat with the same webhook-id, as at
	// least once allows.
	waitFor(t, "the delivery after the restart", func() bool { return len(rcv.delivered()) > 0 })
	for _, p := range rcv.delivered() {
		if p.Type != "sandbox.kill" || p.Data.Seq != 1 {
			t.Fatalf("delivery %+v", p)
		}
	}
	waitFor(t, "the cursor past it", func() bool { c, _ := cur.WebhookCursor(context.Background(), "soc"); return c.Seq == 1 })
}

// TestLoopbackRefused: without the admin's exception a loopback endpoint
// is refused by the dialer and the event given up on, not retried.
func TestLoopbackRefused(t *testing.T) {
	a := &memAudit{}
	rcv := &receiver{t: t}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	cur := &memCursors{m: map[string]int64{}}
	d := start(t, a, cur, srv.URL, false, config.WebhookEndpoint{Name: "soc", Events: []string{"*"}})
	defer d.Close()
	waitFor(t, "the cursor", func() bool { _, err := cur.WebhookCursor(context.Background(), "soc"); return err == nil })
	a.add("sandbox.kill", "success", `{}`)
	waitFor(t, "the refusal", func() bool { return d.Status()[0].State.GivenUp == 1 })
	if s := d.Status()[0]; !strings.Contains(s.State.LastError, "refused") {
		t.Fatalf("status %+v", s)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.ids) != 0 {
		t.Fatalf("the loopback receiver was reached: %v", rcv.ids)
	}
}

func TestSignKnownAnswer(t *testing.T) {
	// The Standard Webhooks specification's example.
	key, err := ParseKey([]byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))
	if err != nil {
		t.Fatal(err)
	}
	got := Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", []byte(`{"test": 2432232314}`))
	if got != "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Fatalf("signature %s", got)
	}
	if err := Check([]config.WebhookEndpoint{{Name: "x", URL: "http://h/", Secret: "s", Events: []string{"*"}}}, false); err == nil {
		t.Fatal("http accepted without allow_http")
	}
}
