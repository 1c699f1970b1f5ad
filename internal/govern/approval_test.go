package govern

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type auditLog struct {
	mu     sync.Mutex
	events []audit.Event
}

func (l *auditLog) Append(_ context.Context, e audit.Event) (audit.Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
	return e, nil
}

func (l *auditLog) actions() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.events {
		out = append(out, e.Action+":"+e.Target)
	}
	return out
}

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "warden.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// deployPolicy holds "deploy" commands for approval by the group ops.
var deployPolicy = inst("approvals", Rule{ID: "deploys", Kinds: []Kind{KindExec}, When: `exec.cmd == "deploy"`,
	Outcome: RequireApproval, Message: "deploys need a human", Approvers: []string{"group:ops", "principal:carol"}})

func TestApprovalLifecycle(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	alog := &auditLog{}
	e := newTestEngine(t, Config{Store: openStore(t), Now: clk.Now, ApprovalTTL: 10 * time.Minute, Audit: alog}, deployPolicy)
	bot := func(argv ...string) *Action { return execAction("bot", argv...) } // agent bot, owned by alice

	// Held: a pending approval, the same one for an identical retry
	// (whatever the door), another for other arguments.
	d1, err := e.Decide(ctx, bot("deploy", "prod"))
	if err != nil || d1.Outcome != RequireApproval || d1.ApprovalID == "" || d1.RuleID != "deploys" {
		t.Fatalf("first decide: %+v %v", d1, err)
	}
	if err := d1.Err(); !errors.Is(err, ErrApprovalRequired) {
		t.Fatalf("Err() = %v", err)
	}
	again := bot("deploy", "prod")
	again.Surface, again.RequestID = SurfaceE2B, "req-2"
	if d, _ := e.Decide(ctx, again); d.Outcome != RequireApproval || d.ApprovalID != d1.ApprovalID {
		t.Fatalf("identical retry: %+v, want approval %s", d, d1.ApprovalID)
	}
	if d, _ := e.Decide(ctx, bot("deploy", "staging")); d.ApprovalID == d1.ApprovalID || d.ApprovalID == "" {
		t.Fatalf("other arguments share the approval: %+v", d)
	}

	// Who may not decide.
	refusals := []struct {
		who  Principal
		want error
	}{
		{Principal{ID: "bot", Kind: "agent", Owner: "alice", Groups: []string{"ops"}}, ErrSelfApproval},
		{Principal{ID: "bot2", Kind: "agent", Owner: "alice", Groups: []string{"ops"}}, ErrSelfApproval},
		{Principal{ID: "dave", Kind: "user"}, ErrNotApprover},
	}
	for _, r := range refusals {
		if _, err := e.Approve(ctx, d1.ApprovalID, r.who, ""); !errors.Is(err, r.want) {
			t.Fatalf("approve by %s: %v, want %v", r.who.ID, err, r.want)
		}
	}
	if d, _ := e.Decide(ctx, bot("deploy", "prod")); d.Outcome != RequireApproval {
		t.Fatalf("a refused approval let it through: %+v", d)
	}

	// Approved by an approver: one identical action passes, then it is
	// held again under a new approval.
	ap, err := e.Approve(ctx, d1.ApprovalID, Principal{ID: "erin", Kind: "user", Groups: []string{"ops"}}, "ok")
	if err != nil || ap.State != ApprovalApproved || ap.DecidedBy != "erin" {
		t.Fatalf("approve: %+v %v", ap, err)
	}
	if _, err := e.Approve(ctx, d1.ApprovalID, Principal{ID: "carol"}, ""); !errors.Is(err, ErrApprovalNotPending) {
		t.Fatalf("second decision: %v", err)
	}
	d2, err := e.Decide(ctx, bot("deploy", "prod"))
	if err != nil || d2.Outcome != Allow || d2.ApprovalID != d1.ApprovalID || d2.RuleID != "deploys" {
		t.Fatalf("approved retry: %+v %v", d2, err)
	}
	d3, _ := e.Decide(ctx, bot("deploy", "prod"))
	if d3.Outcome != RequireApproval || d3.ApprovalID == d1.ApprovalID {
		t.Fatalf("an approval was used twice: %+v", d3)
	}
	if got, _ := e.GetApproval(ctx, d1.ApprovalID); got.ConsumedAt.IsZero() {
		t.Fatalf("used approval not marked: %+v", got)
	}
	if d, _ := e.Decide(ctx, execAction("mallory", "deploy", "prod")); d.ApprovalID == d1.ApprovalID {
		t.Fatal("another principal used the approval")
	}

	// Rejected: the identical action is denied, saying so.
	rj, err := e.Reject(ctx, d3.ApprovalID, Principal{ID: "carol", Kind: "user"}, "not today")
	if err != nil || rj.State != ApprovalRejected {
		t.Fatalf("reject: %+v %v", rj, err)
	}
	d4, _ := e.Decide(ctx, bot("deploy", "prod"))
	if d4.Outcome != Deny || d4.ApprovalID != d3.ApprovalID || !errors.Is(d4.Err(), ErrApprovalRejected) {
		t.Fatalf("after reject: %+v (%v)", d4, d4.Err())
	}

	// Expired: past the TTL a pending approval cannot be decided and
	// reads as expired; a new request opens a new one.
	d5, _ := e.Decide(ctx, bot("deploy", "dev"))
	clk.Add(11 * time.Minute)
	if got, _ := e.GetApproval(ctx, d5.ApprovalID); got.State != ApprovalExpired {
		t.Fatalf("after the TTL: %+v", got)
	}
	if _, err := e.Approve(ctx, d5.ApprovalID, Principal{ID: "carol"}, ""); !errors.Is(err, ErrApprovalNotPending) {
		t.Fatalf("approve expired: %v", err)
	}
	d6, _ := e.Decide(ctx, bot("deploy", "dev"))
	if d6.Outcome != RequireApproval || d6.ApprovalID == d5.ApprovalID {
		t.Fatalf("after expiry: %+v", d6)
	}
	// The rejection expired too.
	if d, _ := e.Decide(ctx, bot("deploy", "prod")); d.Outcome != RequireApproval {
		t.Fatalf("rejection outlived its expiry: %+v", d)
	}

	list, err := e.ListApprovals(ctx, store.ApprovalFilter{PrincipalID: "bot"})
	if err != nil || len(list) < 5 {
		t.Fatalf("list: %d %v", len(list), err)
	}
	acts := alog.actions()
	want := map[string]bool{"approval.request:" + d1.ApprovalID: true, "approval.decide:" + d1.ApprovalID: true,
		"approval.decide:" + d3.ApprovalID: true}
	for _, a := range acts {
		delete(want, a)
	}
	if len(want) > 0 {
		t.Fatalf("audit events %v lack %v", acts, want)
	}
}

func TestDecideWait(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, Config{Store: openStore(t), ApprovalTTL: time.Hour}, deployPolicy)
	carol := Principal{ID: "carol", Kind: "user"}

	// Approved while held: the action runs.
	approveNext(t, e, carol, true)
	d, err := e.DecideWait(ctx, execAction("bot", "deploy", "a"), time.Minute)
	if err != nil || d.Outcome != Allow || d.ApprovalState != ApprovalApproved {
		t.Fatalf("approved while held: %+v %v", d, err)
	}
	// Rejected while held: denied with the rejection.
	approveNext(t, e, carol, false)
	d, err = e.DecideWait(ctx, execAction("bot", "deploy", "b"), time.Minute)
	if err != nil || !errors.Is(d.Err(), ErrApprovalRejected) {
		t.Fatalf("rejected while held: %+v %v", d, err)
	}
	// Nobody decides within the hold: still pending.
	d, err = e.DecideWait(ctx, execAction("bot", "deploy", "c"), 50*time.Millisecond)
	if err != nil || d.Outcome != RequireApproval || !errors.Is(d.Err(), ErrApprovalRequired) {
		t.Fatalf("hold ran out: %+v %v", d, err)
	}
}

func TestDecideWaitExpires(t *testing.T) {
	e := newTestEngine(t, Config{Store: openStore(t), ApprovalTTL: 300 * time.Millisecond}, deployPolicy)
	d, err := e.DecideWait(context.Background(), execAction("bot", "deploy", "x"), time.Minute)
	if err != nil || !errors.Is(d.Err(), ErrApprovalExpired) || d.ApprovalState != ApprovalExpired {
		t.Fatalf("expired while held: %+v %v", d, err)
	}
}

// approveNext decides the next pending approval as soon as it appears.
func approveNext(t *testing.T, e *Engine, by Principal, approve bool) {
	t.Helper()
	ctx := context.Background()
	seen := map[string]bool{}
	if list, err := e.ListApprovals(ctx, store.ApprovalFilter{}); err == nil {
		for _, a := range list {
			seen[a.ID] = true
		}
	}
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		for range 1000 {
			list, err := e.ListApprovals(ctx, store.ApprovalFilter{States: []string{"pending"}})
			if err != nil {
				t.Error(err)
				return
			}
			for _, a := range list {
				if seen[a.ID] {
					continue
				}
				if approve {
					_, err = e.Approve(ctx, a.ID, by, "")
				} else {
					_, err = e.Reject(ctx, a.ID, by, "no")
				}
				if err != nil {
					t.Error(err)
				}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Error("no pending approval appeared")
	}()
}

func TestWebhookAnnouncer(t *testing.T) {
	secret := []byte("s3cret")
	got := make(chan *http.Request, 1)
	bodies := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- b
	}))
	defer srv.Close()
	e := newTestEngine(t, Config{Store: openStore(t), Announcer: &Webhook{URL: srv.URL, Secret: secret}}, deployPolicy)
	d, err := e.Decide(context.Background(), execAction("bot", "deploy"))
	if err != nil || d.Outcome != RequireApproval {
		t.Fatalf("%+v %v", d, err)
	}
	e.Close()
	r, body := <-got, <-bodies
	var msg struct {
		Type     string   `json:"type"`
		Approval Approval `json:"approval"`
	}
	if err := json.Unmarshal(body, &msg); err != nil || msg.Type != "approval.pending" || msg.Approval.ID != d.ApprovalID {
		t.Fatalf("body %s: %v", body, err)
	}
	sig := r.Header.Get("X-Warden-Signature")
	var ts int64
	var v1 string
	if _, err := fmt.Sscanf(sig, "t=%d,v1=%s", &ts, &v1); err != nil {
		t.Fatalf("signature %q: %v", sig, err)
	}
	want := WebhookSignature(secret, time.Unix(ts, 0), body)
	if !hmac.Equal([]byte(sig), []byte(want)) {
		t.Fatalf("signature %q, want %q", sig, want)
	}
	if WebhookSignature([]byte("other"), time.Unix(ts, 0), body) == sig {
		t.Fatal("signature does not depend on the secret")
	}
}

func TestNoStoreRefusesApprovals(t *testing.T) {
	e := newTestEngine(t, Config{}, deployPolicy)
	d, err := e.Decide(context.Background(), execAction("bot", "deploy"))
	if !errors.Is(err, ErrNoApprovals) || d.Outcome != Deny {
		t.Fatalf("%+v %v", d, err)
	}
}

func TestStoredPoliciesLoad(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	e := newTestEngine(t, Config{Store: st}, deployPolicy)
	if _, err := e.UpdatePolicy(ctx, deployPolicy, "bob"); err != nil {
		t.Fatal(err)
	}
	e2 := New(Config{Store: st})
	if err := e2.Load(ctx); err != nil {
		t.Fatal(err)
	}
	ps := e2.Policies()
	if len(ps) != 1 || ps[0].Version != 2 || ps[0].UpdatedBy != "bob" || ps[0].CreatedBy != "admin" {
		t.Fatalf("loaded %+v", ps)
	}
	v1, err := e2.PolicyVersion(ctx, "approvals", 1)
	if err != nil || v1.Version != 1 || len(v1.Rules) != 1 {
		t.Fatalf("version 1: %+v %v", v1, err)
	}
	if err := e2.DeletePolicy(ctx, "approvals"); err != nil {
		t.Fatal(err)
	}
	if _, err := e2.PolicyVersion(ctx, "approvals", 2); err != nil {
		t.Fatalf("history of a deleted policy: %v", err)
	}
	// A stored policy that does not compile stops Load.
	if _, err := st.CreatePolicy(ctx, store.Policy{ID: "broken", ScopeKind: "installation", CreatedAt: time.Now(),
		UpdatedAt: time.Now(), Document: json.RawMessage(`{"rules":[{"id":"r","kinds":["exec"],"when":"exec.gone","outcome":"deny"}]}`)}); err != nil {
		t.Fatal(err)
	}
	if err := New(Config{Store: st}).Load(ctx); err == nil {
		t.Fatal("Load accepted a policy that does not compile")
	}
}
