package agents

import (
	"encoding/json"
	"testing"
	"time"
)

// TestCronCatchUp: a daemon keeps each trigger's next time; the next
// daemon (a new Service on the same store, an injected clock) fires a
// trigger with catch_up once for the fires it missed while down, marked
// catch_up, and skips them for a trigger without it; a changed schedule
// starts afresh.
func TestCronCatchUp(t *testing.T) {
	now := time.Date(2026, 6, 1, 8, 30, 0, 0, time.UTC)
	s1, st := testService(t, &now)
	catch := addAgent(t, st, "catcher", Spec{Name: "catcher", Command: []string{"true"},
		Triggers: Triggers{Cron: []CronTrigger{{Schedule: "0 9 * * *", CatchUp: true}}}})
	skip := addAgent(t, st, "skipper", Spec{Name: "skipper", Command: []string{"true"},
		Triggers: Triggers{Cron: []CronTrigger{{Schedule: "0 9 * * *"}}}})
	s1.CronTick(now) // keeps 09:00 for both
	kept, err := st.ListAgentCron(t.Context(), catch.ID)
	if err != nil || len(kept) != 1 || !kept[0].NextAt.Equal(time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)) {
		t.Fatalf("kept: %+v %v", kept, err)
	}

	// The daemon is down from 08:31 until 11:00 the next day: two fires missed.
	now = time.Date(2026, 6, 2, 11, 0, 0, 0, time.UTC)
	s2, err := New(Config{Store: st, Sandboxes: nilSandboxes{}, Keys: nilKeys{}, LogDir: t.TempDir(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	s2.CronTick(now)
	runs := cronRuns(t, st, catch.ID)
	if len(runs) != 1 {
		t.Fatalf("catch_up: %d runs, want one for the missed fires", len(runs))
	}
	var in struct {
		Time    time.Time `json:"time"`
		CatchUp bool      `json:"catch_up"`
	}
	if json.Unmarshal(runs[0].Input, &in) != nil || !in.CatchUp || !in.Time.Equal(time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)) {
		t.Errorf("catch-up input: %s", runs[0].Input)
	}
	if n := len(cronRuns(t, st, skip.ID)); n != 0 {
		t.Errorf("no catch_up: %d runs, want none", n)
	}
	// Both go on from now: 09:00 the day after, kept.
	for _, id := range []string{catch.ID, skip.ID} {
		kept, _ := st.ListAgentCron(t.Context(), id)
		if len(kept) != 1 || !kept[0].NextAt.Equal(time.Date(2026, 6, 3, 9, 0, 0, 0, time.UTC)) {
			t.Errorf("%s kept after the restart: %+v", id, kept)
		}
	}
	s2.CronTick(now.Add(time.Minute))
	if n := len(cronRuns(t, st, catch.ID)); n != 1 {
		t.Errorf("a second catch-up: %d runs", n)
	}

	// A changed schedule does not use the kept time.
	spec := Spec{Name: "catcher", Command: []string{"true"}, Triggers: Triggers{Cron: []CronTrigger{{Schedule: "30 9 * * *", CatchUp: true}}}}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(spec)
	if _, err := st.UpdateAgentSpec(t.Context(), catch.ID, raw, "pr-owner", now); err != nil {
		t.Fatal(err)
	}
	now = time.Date(2026, 6, 4, 12, 0, 0, 0, time.UTC)
	s3, err := New(Config{Store: st, Sandboxes: nilSandboxes{}, Keys: nilKeys{}, LogDir: t.TempDir(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	s3.CronTick(now)
	if n := len(cronRuns(t, st, catch.ID)); n != 1 {
		t.Errorf("changed schedule caught up a time kept for the old one: %d runs", n)
	}
	kept, _ = st.ListAgentCron(t.Context(), catch.ID)
	if len(kept) != 1 || kept[0].Schedule != "30 9 * * *\x00" || !kept[0].NextAt.Equal(time.Date(2026, 6, 5, 9, 30, 0, 0, time.UTC)) {
		t.Errorf("kept for the new schedule: %+v", kept)
	}
}
