package webhook

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/warden-sandbox/warden/internal/config"
)

// TestStartStopLive: deliverers start and stop at run time. A started
// endpoint gets the events written after Start returns; Stop waits for its
// deliverer to end, so nothing is delivered after it; started again, it
// resumes from its cursor (it gets what was written meanwhile).
func TestStartStopLive(t *testing.T) {
	a := &memAudit{}
	a.add("sandbox.pause", "success", `{}`) // before the endpoint: not delivered
	rcv := &receiver{t: t}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	cur := &memCursors{m: map[string]int64{}}
	d := start(t, a, cur, srv.URL, true, config.WebhookEndpoint{Name: "cfg", Events: []string{"nothing"}})
	defer d.Close()
	if d.Stop("none") {
		t.Fatal("Stop of an endpoint that has no deliverer")
	}
	ep := config.WebhookEndpoint{Name: "live", URL: srv.URL + "/live", Secret: "sec_hook", Events: []string{"sandbox.*"}}
	if err := d.Start(ep, SourceAPI); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ep, SourceAPI); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Start: %v, want ErrRunning", err)
	}
	if c, err := cur.WebhookCursor(context.Background(), "live"); err != nil || c.Seq != 1 {
		t.Fatalf("cursor after Start: %+v %v, want at the head (1)", c, err)
	}
	a.add("sandbox.kill", "success", `{}`) // seq 2
	waitFor(t, "the first delivery acknowledged", func() bool { s, _ := d.StatusOf("live"); return s.State.Delivered == 1 })
	if s, ok := d.StatusOf("live"); !ok || s.Source != SourceAPI || s.State.Seq != 2 || s.State.LastStatus != 200 || len(rcv.delivered()) != 1 {
		t.Fatalf("status %+v %v", s, ok)
	}
	if st := d.Status(); len(st) != 2 || st[0].Name != "cfg" || st[1].Name != "live" {
		t.Fatalf("Status %+v", st)
	}

	if !d.Stop("live") {
		t.Fatal("Stop found no deliverer")
	}
	if _, ok := d.StatusOf("live"); ok {
		t.Fatal("a stopped endpoint still has a status")
	}
	a.add("sandbox.kill", "success", `{}`) // seq 3: written while stopped
	d.Notify()
	// The other deliverer reads past it: once it has, a running "live"
	// would have seen it too.
	waitFor(t, "cfg's cursor past seq 3", func() bool { c, _ := cur.WebhookCursor(context.Background(), "cfg"); return c.Seq == 3 })
	if n := len(rcv.delivered()); n != 1 {
		t.Fatalf("%d deliveries after Stop, want 1", n)
	}
	if err := d.Start(ep, SourceAPI); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the event written while stopped", func() bool { return len(rcv.delivered()) == 2 })
	if got := rcv.delivered(); got[1].Data.Seq != 3 {
		t.Fatalf("delivered %+v", got)
	}
	d.Close()
	if err := d.Start(config.WebhookEndpoint{Name: "late", URL: srv.URL, Secret: "sec_hook", Events: []string{"*"}}, SourceAPI); err == nil {
		t.Fatal("Start after Close succeeded")
	}
}

// TestTestPing: Test sends one signed webhook.test delivery and reports
// the answer, without touching any cursor.
func TestTestPing(t *testing.T) {
	a := &memAudit{}
	rcv := &receiver{t: t, fail: 1}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	cur := &memCursors{m: map[string]int64{}}
	d := start(t, a, cur, srv.URL, true, config.WebhookEndpoint{Name: "soc", Events: []string{"nothing"}})
	defer d.Close()
	ep := config.WebhookEndpoint{Name: "soc", URL: srv.URL, Secret: "sec_hook"}
	if res := d.Test(context.Background(), ep, "prn_a"); res.OK || res.StatusCode != 500 || res.Error == "" {
		t.Fatalf("first ping (answered 500): %+v", res)
	}
	res := d.Test(context.Background(), ep, "prn_a")
	if !res.OK || res.StatusCode != 200 || len(res.MessageID) < len("msg_test_")+8 {
		t.Fatalf("second ping: %+v", res)
	}
	got := rcv.delivered()
	if len(got) != 1 || got[0].Type != TypeTest || rcv.bad != 0 {
		t.Fatalf("received %+v, bad %d", got, rcv.bad)
	}
	if res := d.Test(context.Background(), config.WebhookEndpoint{Name: "x", URL: srv.URL, Secret: "sec_none"}, "prn_a"); res.OK || res.Error == "" {
		t.Fatalf("ping without a key: %+v", res)
	}
}
