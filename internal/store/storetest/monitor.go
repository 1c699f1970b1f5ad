package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// RunMonitor runs the conformance tests of store.MonitorStore (the Agent
// Monitor's timeline) against stores returned by open.
func RunMonitor(t *testing.T, open func(t *testing.T) store.MonitorStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.MonitorStore)
	}{
		{"AppendAndGet", testMonitorAppend},
		{"Filters", testMonitorFilters},
		{"TailAndCursor", testMonitorTail},
		{"Redact", testMonitorRedact},
		{"Retention", testMonitorRetention},
		{"LargeBatch", testMonitorLargeBatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open(t)) })
	}
}

func monEvent(id, kind string, at time.Time) store.MonitorEvent {
	return store.MonitorEvent{ID: id, Time: at, Kind: kind, Source: "ingest", Principal: "prn_alice"}
}

func testMonitorAppend(t *testing.T, s store.MonitorStore) {
	evs := []store.MonitorEvent{
		{ID: "evt_1", Time: base, Kind: "exec", Source: "audit", Principal: "prn_a", Agent: "prn_a", Sandbox: "sb-1",
			Session: "s1", Action: "process.exec", Target: "sb-1", Outcome: "denied", RuleID: "no-rm",
			Detail: json.RawMessage(`{"cmd":"rm"}`), Content: "hello", ContentSHA256: "abc", AuditSeq: 7},
		monEvent("evt_2", "agent.prompt", base.Add(time.Second)),
	}
	if err := s.AppendMonitorEvents(ctx(t), evs); err != nil {
		t.Fatal(err)
	}
	if evs[0].Seq <= 0 || evs[1].Seq <= evs[0].Seq {
		t.Fatalf("seqs not assigned increasing: %d, %d", evs[0].Seq, evs[1].Seq)
	}
	got, err := s.GetMonitorEvent(ctx(t), "evt_1")
	if err != nil {
		t.Fatal(err)
	}
	want := evs[0]
	if got.Seq != want.Seq || !got.Time.Equal(want.Time) || got.Kind != want.Kind || got.Source != want.Source ||
		got.Principal != want.Principal || got.Agent != want.Agent || got.Sandbox != want.Sandbox ||
		got.Session != want.Session || got.Action != want.Action || got.Target != want.Target ||
		got.Outcome != want.Outcome || got.RuleID != want.RuleID || string(got.Detail) != string(want.Detail) ||
		got.Content != want.Content || got.ContentSHA256 != want.ContentSHA256 || got.AuditSeq != want.AuditSeq ||
		!got.RedactedAt.IsZero() {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if _, err := s.GetMonitorEvent(ctx(t), "evt_none"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	// A batch with a duplicate id is refused whole.
	dup := []store.MonitorEvent{monEvent("evt_3", "exec", base), monEvent("evt_1", "exec", base)}
	if err := s.AppendMonitorEvents(ctx(t), dup); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate id: %v", err)
	}
	if _, err := s.GetMonitorEvent(ctx(t), "evt_3"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused batch left evt_3 behind: %v", err)
	}
	for _, bad := range []store.MonitorEvent{{ID: "", Kind: "x", Time: base}, {ID: "e", Time: base}, {ID: "e", Kind: "x"}} {
		if err := s.AppendMonitorEvents(ctx(t), []store.MonitorEvent{bad}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("append %+v: %v, want ErrInvalid", bad, err)
		}
	}
	if err := s.AppendMonitorEvents(ctx(t), nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
}

func ids(evs []store.MonitorEvent) string {
	s := ""
	for i, e := range evs {
		if i > 0 {
			s += ","
		}
		s += e.ID
	}
	return s
}

func testMonitorFilters(t *testing.T, s store.MonitorStore) {
	var evs []store.MonitorEvent
	add := func(id, kind, principal, agent, sandbox, session string, at time.Duration) {
		e := monEvent(id, kind, base.Add(at))
		e.Principal, e.Agent, e.Sandbox, e.Session = principal, agent, sandbox, session
		evs = append(evs, e)
	}
	add("a", "exec", "p1", "p1", "sb-1", "", 0)
	add("b", "file.read", "p1", "p1", "sb-1", "", time.Second)
	add("c", "file.write", "p2", "", "sb-2", "", 2*time.Second)
	add("d", "agent.tool", "p1", "p1", "", "sess", 3*time.Second)
	add("e", "agent.prompt", "p2", "", "", "sess", 4*time.Second)
	if err := s.AppendMonitorEvents(ctx(t), evs); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		f    store.MonitorFilter
		want string
	}{
		{store.MonitorFilter{}, "a,b,c,d,e"},
		{store.MonitorFilter{Agent: "p1"}, "a,b,d"},
		{store.MonitorFilter{Principal: "p2"}, "c,e"},
		{store.MonitorFilter{Sandbox: "sb-1"}, "a,b"},
		{store.MonitorFilter{Session: "sess"}, "d,e"},
		{store.MonitorFilter{Kinds: []string{"exec", "agent.prompt"}}, "a,e"},
		{store.MonitorFilter{Kinds: []string{"file."}}, "b,c"},
		{store.MonitorFilter{Since: base.Add(time.Second), Until: base.Add(3 * time.Second)}, "b,c"},
		{store.MonitorFilter{Agent: "p1", Kinds: []string{"file."}}, "b"},
		{store.MonitorFilter{Limit: 2}, "a,b"},
		{store.MonitorFilter{Agent: "nobody"}, ""},
	}
	for _, c := range cases {
		got, err := s.ListMonitorEvents(ctx(t), c.f)
		if err != nil {
			t.Fatal(err)
		}
		if ids(got) != c.want {
			t.Errorf("filter %+v: got %q, want %q", c.f, ids(got), c.want)
		}
	}
}

func testMonitorTail(t *testing.T, s store.MonitorStore) {
	var evs []store.MonitorEvent
	for i := range 10 {
		evs = append(evs, monEvent(fmt.Sprintf("e%d", i), "exec", base.Add(time.Duration(i)*time.Second)))
	}
	if err := s.AppendMonitorEvents(ctx(t), evs); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListMonitorEvents(ctx(t), store.MonitorFilter{Tail: true, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if ids(got) != "e7,e8,e9" {
		t.Fatalf("tail 3: %q", ids(got))
	}
	got, err = s.ListMonitorEvents(ctx(t), store.MonitorFilter{After: evs[5].Seq, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if ids(got) != "e6,e7" {
		t.Fatalf("after e5, limit 2: %q", ids(got))
	}
	got, err = s.ListMonitorEvents(ctx(t), store.MonitorFilter{After: evs[9].Seq})
	if err != nil || len(got) != 0 {
		t.Fatalf("after the newest: %q, %v", ids(got), err)
	}
}

func testMonitorRedact(t *testing.T, s store.MonitorStore) {
	e := monEvent("p", "agent.prompt", base)
	e.Content, e.ContentSHA256 = "my password is hunter2", "digest"
	if err := s.AppendMonitorEvents(ctx(t), []store.MonitorEvent{e}); err != nil {
		t.Fatal(err)
	}
	at := base.Add(time.Hour)
	got, err := s.RedactMonitorEvent(ctx(t), "p", at)
	if err != nil {
		t.Fatal(err)
	}
	if got.Content != "" || got.ContentSHA256 != "digest" || !got.RedactedAt.Equal(at) {
		t.Fatalf("redacted: %+v", got)
	}
	if got, _ = s.GetMonitorEvent(ctx(t), "p"); got.Content != "" {
		t.Fatalf("content still stored: %q", got.Content)
	}
	// A second redaction keeps the first time.
	if got, err = s.RedactMonitorEvent(ctx(t), "p", at.Add(time.Hour)); err != nil || !got.RedactedAt.Equal(at) {
		t.Fatalf("second redaction: %+v, %v", got, err)
	}
	if _, err := s.RedactMonitorEvent(ctx(t), "none", at); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("redact missing: %v", err)
	}
}

func testMonitorRetention(t *testing.T, s store.MonitorStore) {
	var evs []store.MonitorEvent
	for i := range 4 {
		e := monEvent(fmt.Sprintf("r%d", i), "agent.prompt", base.Add(time.Duration(i)*time.Hour))
		e.Content = "text"
		evs = append(evs, e)
	}
	if err := s.AppendMonitorEvents(ctx(t), evs); err != nil {
		t.Fatal(err)
	}
	at := base.Add(10 * time.Hour)
	n, err := s.ExpireMonitorContent(ctx(t), base.Add(2*time.Hour), at)
	if err != nil || n != 2 {
		t.Fatalf("expire: %d, %v; want 2", n, err)
	}
	all, _ := s.ListMonitorEvents(ctx(t), store.MonitorFilter{})
	for i, e := range all {
		if expired := i < 2; expired != (e.Content == "") || expired != !e.RedactedAt.IsZero() {
			t.Fatalf("after expiry, event %s: content %q redacted %v", e.ID, e.Content, e.RedactedAt)
		}
	}
	if n, err = s.DeleteMonitorEvents(ctx(t), base.Add(3*time.Hour)); err != nil || n != 3 {
		t.Fatalf("delete: %d, %v; want 3", n, err)
	}
	all, _ = s.ListMonitorEvents(ctx(t), store.MonitorFilter{})
	if ids(all) != "r3" {
		t.Fatalf("after delete: %q", ids(all))
	}
}

// testMonitorLargeBatch: a batch larger than one insert statement gets the
// seqs its rows are stored under.
func testMonitorLargeBatch(t *testing.T, s store.MonitorStore) {
	var evs []store.MonitorEvent
	for i := range 300 {
		evs = append(evs, monEvent(fmt.Sprintf("big%d", i), "exec", base.Add(time.Duration(i)*time.Millisecond)))
	}
	if err := s.AppendMonitorEvents(ctx(t), evs[:1]); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendMonitorEvents(ctx(t), evs[1:]); err != nil {
		t.Fatal(err)
	}
	all, err := s.ListMonitorEvents(ctx(t), store.MonitorFilter{})
	if err != nil || len(all) != len(evs) {
		t.Fatalf("list: %d events, %v", len(all), err)
	}
	for i, e := range all {
		if e.ID != evs[i].ID || e.Seq != evs[i].Seq {
			t.Fatalf("event %d stored as %s seq %d, appended as %s seq %d", i, e.ID, e.Seq, evs[i].ID, evs[i].Seq)
		}
	}
}
