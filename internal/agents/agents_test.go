package agents

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
)

func TestScheduleNext(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skipf("SKIP: no time zone data on this host: %v", err)
	}
	base := time.Date(2026, 3, 10, 10, 7, 30, 0, time.UTC) // a Tuesday
	cases := []struct {
		spec, tz string
		from     time.Time
		want     time.Time
	}{
		{"*/15 * * * *", "", base, time.Date(2026, 3, 10, 10, 15, 0, 0, time.UTC)},
		{"0 9 * * 1-5", "", base, time.Date(2026, 3, 11, 9, 0, 0, 0, time.UTC)},
		{"30 8 1 * *", "", base, time.Date(2026, 4, 1, 8, 30, 0, 0, time.UTC)},
		{"0 0 * * 0", "", base, time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)},
		{"0 0 * * 7", "", base, time.Date(2026, 3, 15, 0, 0, 0, 0, time.UTC)},
		{"@hourly", "", base, time.Date(2026, 3, 10, 11, 0, 0, 0, time.UTC)},
		// 09:00 in Paris is 08:00 UTC in March (before the switch to summer time).
		{"0 9 * * *", "Europe/Paris", base, time.Date(2026, 3, 11, 9, 0, 0, 0, paris)},
		// Day of month or day of week when both are restricted.
		{"0 0 13 * 5", "", base, time.Date(2026, 3, 13, 0, 0, 0, 0, time.UTC)},
		{"@every 90s", "", base, base.Add(90 * time.Second)},
	}
	for _, c := range cases {
		s, err := ParseSchedule(c.spec, c.tz)
		if err != nil {
			t.Fatalf("%q: %v", c.spec, err)
		}
		if got := s.Next(c.from); !got.Equal(c.want) {
			t.Errorf("%q in %q: next after %v = %v, want %v", c.spec, c.tz, c.from, got, c.want)
		}
	}
	for _, bad := range []string{"", "* * * *", "60 * * * *", "* 24 * * *", "*/0 * * * *", "5-1 * * * *", "@every 10ms", "x * * * *"} {
		if _, err := ParseSchedule(bad, ""); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, err := ParseSchedule("* * * * *", "Mars/Olympus"); err == nil {
		t.Error("unknown time zone accepted")
	}
}

func TestWebhookSignature(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"hello":"world"}`)
	h := Sign("sec", now, body)
	if _, err := VerifySignature("sec", h, body, now.Add(time.Minute)); err != nil {
		t.Fatalf("good signature: %v", err)
	}
	if _, err := VerifySignature("other", h, body, now); !errors.Is(err, ErrBadSignature) {
		t.Errorf("wrong secret: %v", err)
	}
	if _, err := VerifySignature("sec", h, []byte(`{"hello":"there"}`), now); !errors.Is(err, ErrBadSignature) {
		t.Errorf("changed body: %v", err)
	}
	if _, err := VerifySignature("sec", h, body, now.Add(SignatureWindow+time.Second)); !errors.Is(err, ErrStale) {
		t.Errorf("stale: %v", err)
	}
	if _, err := VerifySignature("sec", h, body, now.Add(-SignatureWindow-time.Second)); !errors.Is(err, ErrStale) {
		t.Errorf("from the future: %v", err)
	}
	for _, bad := range []string{"", "v1=00", "t=abc,v1=00", strings.Replace(h, "v1=", "v0=", 1)} {
		if _, err := VerifySignature("sec", bad, body, now); !errors.Is(err, ErrBadSignature) {
			t.Errorf("header %q: %v", bad, err)
		}
	}
	var c replayCache
	if !c.add("k", now) || c.add("k", now.Add(time.Minute)) {
		t.Error("the replay cache let a key through twice")
	}
	if !c.add("k", now.Add(3*SignatureWindow)) {
		t.Error("the replay cache kept a key past twice the window")
	}
}

// testService is a Service on a real store whose loop is not started:
// tests drive CronTick and dispatch themselves.
func testService(t *testing.T, now *time.Time) (*Service, *sqlite.Store) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s, err := New(Config{Store: st, Sandboxes: nilSandboxes{}, Keys: nilKeys{}, LogDir: t.TempDir(), Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	return s, st
}

func addAgent(t *testing.T, st *sqlite.Store, name string, spec Spec) store.Agent {
	t.Helper()
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(spec)
	p := store.Principal{ID: "pr-" + name, Kind: store.PrincipalAgent, Name: name, CreatedAt: time.Now()}
	if err := st.CreatePrincipal(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	a := store.Agent{ID: "ag-" + name, Name: name, PrincipalID: p.ID, OwnerID: "pr-owner", Version: 1, Spec: raw, CreatedAt: time.Now()}
	if err := st.CreateAgent(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	return a
}

func cronRuns(t *testing.T, st *sqlite.Store, agentID string) []store.AgentRun {
	t.Helper()
	runs, err := st.ListAgentRuns(t.Context(), store.AgentRunFilter{AgentID: agentID, Trigger: TriggerCron})
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

func TestCronTickInjectedClock(t *testing.T) {
	now := time.Date(2026, 6, 1, 8, 59, 10, 0, time.UTC)
	s, st := testService(t, &now)
	skip := addAgent(t, st, "skipper", Spec{Name: "skipper", Command: []string{"true"},
		Triggers: Triggers{Cron: []CronTrigger{{Schedule: "0 9 * * *"}}}})
	par := addAgent(t, st, "par", Spec{Name: "par", Command: []string{"true"}, Concurrency: 2,
		Triggers: Triggers{Cron: []CronTrigger{{Schedule: "*/5 * * * *", Overlap: OverlapParallel, MaxParallel: 2}}}})

	s.CronTick(now) // learns the next times: nothing fires
	if n := len(cronRuns(t, st, skip.ID)) + len(cronRuns(t, st, par.ID)); n != 0 {
		t.Fatalf("%d runs before any schedule was due", n)
	}
	now = now.Add(30 * time.Second) // 08:59:40
	s.CronTick(now)
	if n := len(cronRuns(t, st, skip.ID)); n != 0 {
		t.Fatalf("skipper fired early: %d runs", n)
	}
	now = time.Date(2026, 6, 1, 9, 0, 1, 0, time.UTC)
	s.CronTick(now)
	runs := cronRuns(t, st, skip.ID)
	if len(runs) != 1 || runs[0].State != store.RunQueued || runs[0].Trigger != TriggerCron {
		t.Fatalf("skipper at 09:00: %+v", runs)
	}
	var in struct{ Schedule string }
	if json.Unmarshal(runs[0].Input, &in) != nil || in.Schedule != "0 9 * * *" {
		t.Errorf("cron input %s", runs[0].Input)
	}
	if n := len(cronRuns(t, st, par.ID)); n != 1 {
		t.Fatalf("par at 09:00: %d runs", n)
	}
	// The next day the first run still waits: skip fires no other.
	now = now.Add(24 * time.Hour)
	s.CronTick(now)
	if n := len(cronRuns(t, st, skip.ID)); n != 1 {
		t.Fatalf("skip overlap: %d runs, want 1", n)
	}
	// parallel(2): one more may queue beside the first, not a third.
	if n := len(cronRuns(t, st, par.ID)); n != 2 {
		t.Fatalf("parallel overlap: %d runs, want 2", n)
	}
	now = now.Add(5 * time.Minute)
	s.CronTick(now)
	if n := len(cronRuns(t, st, par.ID)); n != 2 {
		t.Fatalf("parallel overlap past its limit: %d runs, want 2", n)
	}
}

func TestSpecValidate(t *testing.T) {
	good := Spec{Name: "ok", Command: []string{"python3", "agent.py"}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if good.Sandbox != SandboxFresh || good.Concurrency != 1 || len(good.Scopes) != 2 {
		t.Errorf("defaults: %+v", good)
	}
	for name, s := range map[string]Spec{
		"bad name":        {Name: "Bad_Name", Command: []string{"x"}},
		"no command":      {Name: "ok"},
		"human-only":      {Name: "ok", Command: []string{"x"}, Scopes: []string{"policies:write"}},
		"admin":           {Name: "ok", Command: []string{"x"}, Scopes: []string{"admin"}},
		"agents:write":    {Name: "ok", Command: []string{"x"}, Scopes: []string{"agents:write"}},
		"sandbox mode":    {Name: "ok", Command: []string{"x"}, Sandbox: "shared"},
		"overlap":         {Name: "ok", Command: []string{"x"}, Triggers: Triggers{Cron: []CronTrigger{{Schedule: "* * * * *", Overlap: "some"}}}},
		"schedule":        {Name: "ok", Command: []string{"x"}, Triggers: Triggers{Cron: []CronTrigger{{Schedule: "* * *"}}}},
		"timeout":         {Name: "ok", Command: []string{"x"}, Limits: Limits{TimeoutSeconds: -1}},
		"slack secrets":   {Name: "ok", Command: []string{"x"}, Triggers: Triggers{Slack: &SlackTrigger{}}},
		"concurrency max": {Name: "ok", Command: []string{"x"}, Concurrency: 1000},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

type nilSandboxes struct{ Sandboxes }
type nilKeys struct{ Keys }
