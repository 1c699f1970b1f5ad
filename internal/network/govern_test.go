package network

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/govern/governtest"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
)

// The egress path through the governed path: the stack asks a real
// govern.Engine (through EgressGovernor) about each flow its network policy
// allowed.

type govAudit struct {
	mu     sync.Mutex
	events []audit.Event
}

func (a *govAudit) Append(_ context.Context, e audit.Event) (audit.Event, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, e)
	return e, nil
}

func (a *govAudit) take() []audit.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	ev := a.events
	a.events = nil
	return ev
}

// governed returns the decision recorded in an egress.connect event.
func governed(t *testing.T, e audit.Event) (govern.AuditRecord, string) {
	t.Helper()
	if e.Action != "egress.connect" || e.Target != "sb-test" || e.PrincipalID != "prn-owner" {
		t.Fatalf("event %s target %s principal %s, want egress.connect of sb-test by prn-owner", e.Action, e.Target, e.PrincipalID)
	}
	var d struct {
		Target string             `json:"target"`
		Govern govern.AuditRecord `json:"govern"`
	}
	if err := json.Unmarshal(e.Detail, &d); err != nil {
		t.Fatal(err)
	}
	return d.Govern, d.Target
}

const egressPolicy = `{
  "id": "egress", "scope": {"kind": "installation"},
  "rules": [
    {"id": "no-other", "kinds": ["egress.connect"], "when": "egress.host == \"other.test\"", "outcome": "deny",
     "message": "other.test is off limits"},
    {"id": "no-udp-echo", "kinds": ["egress.connect"], "when": "egress.proto == \"udp\" && egress.port == 7", "outcome": "deny"},
    {"id": "watch-8080", "kinds": ["egress.connect"], "when": "egress.port == 8080", "outcome": "log_only"}
  ]
}`

func newGovernedHarness(t *testing.T, p Policy, eng *govern.Engine) (*harness, *govAudit, *atomic.Int64) {
	t.Helper()
	rec := &govAudit{}
	var actorCalls atomic.Int64
	gov := &EgressGovernor{Engine: eng, Audit: governtest.AuditLog(t, rec),
		Actor: func(_ context.Context, sb string) (govern.Principal, *govern.SandboxInfo, error) {
			actorCalls.Add(1)
			if sb != "sb-test" {
				return govern.Principal{}, nil, errors.New("unknown sandbox")
			}
			return govern.Principal{ID: "prn-owner", Kind: "user"}, &govern.SandboxInfo{ID: sb, Owner: "prn-owner"}, nil
		}}
	h := newHarness(t, p, func(c *Config) { c.Govern = gov })
	return h, rec, &actorCalls
}

func loadPolicy(t *testing.T, eng *govern.Engine, doc string) {
	t.Helper()
	var p govern.Policy
	if err := json.Unmarshal([]byte(doc), &p); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CreatePolicy(context.Background(), p, "prn-admin"); err != nil {
		t.Fatal(err)
	}
}

func TestGovernEgressRules(t *testing.T) {
	eng := govern.New(govern.Config{})
	loadPolicy(t, eng, egressPolicy)
	h, rec, _ := newGovernedHarness(t, Policy{Mode: ModeOpen}, eng)
	for _, name := range []string{"allowed.test", "other.test"} {
		if _, err := h.lookup(name, dns.TypeA, false, ""); err != nil {
			t.Fatal(err)
		}
	}
	h.fd.take()

	// Plain HTTP: the Host names the host; a refusal is a 403 from
	// wardend with the rule's message, and nothing is dialled.
	body, err := h.get("198.51.100.10:80", "allowed.test")
	mustAllow(t, "http allowed.test", body, err, "hello allowed.test")
	c, err := h.dialTCP("198.51.100.11:80")
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n")
	raw, _ := io.ReadAll(c)
	c.Close()
	if s := string(raw); !strings.HasPrefix(s, "HTTP/1.1 403 ") || !strings.Contains(s, "X-Warden-Denied: policy") ||
		!strings.Contains(s, "denied by policy: other.test is off limits") {
		t.Fatalf("http other.test: got %q, want wardend's 403 with the rule's message", s)
	}
	// The Host decides, not the address: other.test's name on allowed.test's
	// address is refused too (open mode does not check names itself).
	body, err = h.get("198.51.100.10:80", "other.test")
	mustDeny(t, "http other.test on another address", body, err)
	if d := h.fd.take(); len(d) != 1 || d[0] != "tcp 198.51.100.10:80" {
		t.Fatalf("dials = %v, want only the allowed one", d)
	}
	ev := rec.take()
	if len(ev) != 2 {
		t.Fatalf("%d audit events, want one per refused flow: %+v", len(ev), ev)
	}
	for i, e := range ev {
		r, target := governed(t, e)
		if e.Outcome != audit.OutcomeDenied || r.Decision.RuleID != "no-other" || r.Decision.PolicyID != "egress" ||
			r.Decision.PolicyVersion != 1 || r.Action.Egress == nil || r.Action.Egress.Host != "other.test" ||
			r.Action.Egress.Proto != "tcp" || r.Action.Egress.Port != 80 || r.Action.Egress.Mode != "open" ||
			r.Action.Surface != govern.SurfaceEgress {
			t.Fatalf("event %d: %s %+v %+v (target %s)", i, e.Outcome, r.Decision, r.Action.Egress, target)
		}
	}

	// TLS: the server name decides; a refusal is a fatal access_denied alert.
	body, err = h.tlsGet("198.51.100.10:443", "allowed.test")
	mustAllow(t, "tls allowed.test", body, err, "hello allowed.test")
	c, err = h.dialTCP("198.51.100.11:443")
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "other.test", InsecureSkipVerify: true})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	err = tc.Handshake()
	tc.Close()
	if err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("tls other.test: handshake error %v, want an access_denied alert", err)
	}
	ev = rec.take()
	if len(ev) != 1 {
		t.Fatalf("tls: %d events: %+v", len(ev), ev)
	}
	if r, _ := governed(t, ev[0]); r.Decision.RuleID != "no-other" || r.Action.Egress.SNI != "other.test" || r.Action.Egress.Port != 443 {
		t.Fatalf("tls event: %+v %+v", r.Decision, r.Action.Egress)
	}

	// Other ports: decided before the handshake on the name Warden's DNS
	// resolved to the address; the sandbox sees a refused connection.
	h.fd.mu.Lock()
	h.fd.routes["tcp 198.51.100.11:5432"] = h.fd.routes["tcp 198.51.100.11:80"]
	h.fd.routes["tcp 198.51.100.10:8080"] = h.fd.routes["tcp 198.51.100.10:80"]
	h.fd.mu.Unlock()
	h.fd.take()
	if _, err := h.dialTCP("198.51.100.11:5432"); err == nil {
		t.Fatal("connected to other.test:5432")
	}
	h.noDials("other.test:5432")
	if r, _ := governed(t, rec.take()[0]); r.Decision.RuleID != "no-other" || r.Action.Egress.Host != "other.test" {
		t.Fatalf("5432 event: %+v %+v", r.Decision, r.Action.Egress)
	}

	// log_only: allowed, and audited as a success naming the rule.
	body, err = h.get("198.51.100.10:8080", "allowed.test")
	mustAllow(t, "log_only", body, err, "hello allowed.test")
	ev = rec.take()
	if len(ev) != 1 || ev[0].Outcome != audit.OutcomeSuccess {
		t.Fatalf("log_only: events %+v", ev)
	}
	if r, _ := governed(t, ev[0]); r.Decision.RuleID != "watch-8080" || r.Decision.Outcome != govern.LogOnly {
		t.Fatalf("log_only event: %+v", r.Decision)
	}

	// UDP, by address (no name): decided off the packet path.
	if got := h.udpEcho("203.0.113.20:7"); got != "" {
		t.Fatalf("udp echo = %q, want it refused", got)
	}
	for _, d := range h.fd.take() {
		if strings.HasPrefix(d, "udp ") {
			t.Fatalf("udp flow dialled: %v", d)
		}
	}
	ev = rec.take()
	if len(ev) != 1 {
		t.Fatalf("udp: %d events", len(ev))
	}
	if r, _ := governed(t, ev[0]); r.Decision.RuleID != "no-udp-echo" || r.Action.Egress.Host != "203.0.113.20" || r.Action.Egress.Proto != "udp" {
		t.Fatalf("udp event: %+v %+v", r.Decision, r.Action.Egress)
	}
	// Refused flows are listed among the link's denials.
	st := h.l.Stats()
	if st.Denied < 5 || !strings.Contains(fmt.Sprint(st.RecentDenials), "other.test is off limits") {
		t.Fatalf("stats: denied %d, recent %+v", st.Denied, st.RecentDenials)
	}
	// They are not also reported as network.deny (the governor audits them).
	if d := h.deniedLog(); len(d) != 0 {
		t.Fatalf("OnDeny got governed refusals: %v", d)
	}
}

// The network policy is the access stage: what it refuses never reaches the
// rules; and without rules for egress.connect the stack asks nothing.
func TestGovernEgressOrderAndNoRules(t *testing.T) {
	eng := govern.New(govern.Config{})
	h, rec, actorCalls := newGovernedHarness(t, allowPolicy, eng)
	if _, err := h.lookup("allowed.test", dns.TypeA, false, ""); err != nil {
		t.Fatal(err)
	}
	body, err := h.get("198.51.100.10:80", "allowed.test")
	mustAllow(t, "no rules", body, err, "hello allowed.test")
	if n := actorCalls.Load(); n != 0 {
		t.Fatalf("without rules the actor was resolved %d times", n)
	}
	loadPolicy(t, eng, `{"id": "all", "scope": {"kind": "installation"}, "rules": [
		{"id": "none-out", "kinds": ["egress.connect"], "outcome": "deny"}]}`)
	// Denied by the network policy (other.test is not in the allowlist):
	// reported to OnDeny as before, not decided by the rules.
	if _, err := h.dialTCP("198.51.100.11:80"); err == nil {
		t.Fatal("connected to a destination outside the allowlist")
	}
	if n := actorCalls.Load(); n != 0 || len(rec.take()) != 0 {
		t.Fatalf("a flow the network policy refused reached the rules (%d actor calls)", n)
	}
	// Allowed by the network policy, refused by the rule (which has no
	// message: the sandbox is told which rule).
	c, err := h.dialTCP("198.51.100.10:80")
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	raw, _ := io.ReadAll(c)
	c.Close()
	if !strings.Contains(string(raw), "403") || !strings.Contains(string(raw), "rule none-out of policy all") {
		t.Fatalf("got %q", raw)
	}
	if ev := rec.take(); len(ev) != 1 {
		t.Fatalf("%d events", len(ev))
	}
	if err := eng.DeletePolicy(context.Background(), "all"); err != nil {
		t.Fatal(err)
	}
	body, err = h.get("198.51.100.10:80", "allowed.test")
	mustAllow(t, "rule deleted", body, err, "hello allowed.test")
}

// require_approval refuses the flow and opens an approval; the identical
// flow passes once it is approved, once.
func TestGovernEgressApproval(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "warden.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	eng := govern.New(govern.Config{Store: st})
	loadPolicy(t, eng, `{"id": "hold", "scope": {"kind": "installation"}, "rules": [
		{"id": "ask-other", "kinds": ["egress.connect"], "when": "egress.host == \"other.test\"", "outcome": "require_approval"}]}`)
	h, rec, _ := newGovernedHarness(t, Policy{Mode: ModeOpen}, eng)
	if _, err := h.lookup("other.test", dns.TypeA, false, ""); err != nil {
		t.Fatal(err)
	}
	get := func() string {
		c, err := h.dialTCP("198.51.100.11:80")
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n")
		raw, _ := io.ReadAll(c)
		c.Close()
		return string(raw)
	}
	if got := get(); !strings.Contains(got, "403") || !strings.Contains(got, "approval required: approval apr_") {
		t.Fatalf("held flow: %q", got)
	}
	ev := rec.take()
	if len(ev) != 1 {
		t.Fatalf("%d events", len(ev))
	}
	r, _ := governed(t, ev[0])
	if r.Decision.Outcome != govern.RequireApproval || r.Decision.ApprovalID == "" || ev[0].Outcome != audit.OutcomeDenied {
		t.Fatalf("held event: %s %+v", ev[0].Outcome, r.Decision)
	}
	if _, err := eng.Approve(context.Background(), r.Decision.ApprovalID, govern.Principal{ID: "prn-approver", Kind: "user"}, "ok"); err != nil {
		t.Fatal(err)
	}
	if got := get(); !strings.Contains(got, "hello other.test") {
		t.Fatalf("approved flow: %q", got)
	}
	ev = rec.take()
	if len(ev) != 1 || ev[0].Outcome != audit.OutcomeSuccess {
		t.Fatalf("approved flow events: %+v", ev)
	}
	if r2, _ := governed(t, ev[0]); r2.Decision.ApprovalID != r.Decision.ApprovalID {
		t.Fatalf("approved flow decided by %+v", r2.Decision)
	}
	// Used: the next identical flow is held again (a new approval).
	if got := get(); !strings.Contains(got, "approval required") || strings.Contains(got, r.Decision.ApprovalID) {
		t.Fatalf("flow after the approval was used: %q", got)
	}
}

// An actor that cannot be resolved refuses the flow (fail closed).
func TestGovernEgressUnknownActor(t *testing.T) {
	eng := govern.New(govern.Config{})
	loadPolicy(t, eng, egressPolicy)
	rec := &govAudit{}
	g := &EgressGovernor{Engine: eng, Audit: governtest.AuditLog(t, rec), Actor: func(context.Context, string) (govern.Principal, *govern.SandboxInfo, error) {
		return govern.Principal{}, nil, errors.New("store down")
	}}
	err := g.DecideFlow(context.Background(), Flow{Sandbox: "sb-x", Proto: "tcp", Host: "allowed.test"})
	if err == nil || !strings.Contains(err.Error(), "store down") {
		t.Fatalf("DecideFlow = %v", err)
	}
}

func TestGovernAuditLimiter(t *testing.T) {
	var l auditLimiter
	t0 := time.Unix(1000, 0)
	if !l.allow("a", t0) || l.allow("a", t0.Add(500*time.Millisecond)) || !l.allow("b", t0) || !l.allow("a", t0.Add(time.Second)) {
		t.Fatal("limiter: want one event a second per key")
	}
}
