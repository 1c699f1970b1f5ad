package warden

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestFollowMonitorEvents: the first call selects the page q asks for (the
// newest events: no cursor, no since), later calls long-poll from the last
// seq seen, and an empty first page waits from the timeline's start.
func TestFollowMonitorEvents(t *testing.T) {
	var mu sync.Mutex
	var queries []map[string]string
	pages := []MonitorPage{
		{Events: []MonitorEvent{{Seq: 7, ID: "a"}, {Seq: 9, ID: "b"}}, NextCursor: 9},
		{Events: nil, NextCursor: 9},
		{Events: []MonitorEvent{{Seq: 12, ID: "c"}}, NextCursor: 12},
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n := len(queries)
		q := map[string]string{}
		for k := range r.URL.Query() {
			q[k] = r.URL.Query().Get(k)
		}
		queries = append(queries, q)
		mu.Unlock()
		p := MonitorPage{NextCursor: 12}
		if n < len(pages) {
			p = pages[n]
		} else {
			time.Sleep(20 * time.Millisecond)
		}
		json.NewEncoder(w).Encode(p)
	}))
	defer hs.Close()
	c, err := New(WithBaseURL(hs.URL), WithAPIKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []string
	for ev, err := range c.FollowMonitorEvents(ctx, MonitorQuery{Kinds: []string{"exec", "file."}, Limit: 20, Wait: 5 * time.Second}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.ID)
		if len(got) == 3 {
			break
		}
	}
	if len(got) != 3 || got[0] != "a" || got[1] != "b" || got[2] != "c" {
		t.Fatalf("followed %v, want a b c", got)
	}
	mu.Lock()
	defer mu.Unlock()
	first := queries[0]
	if first["cursor"] != "" || first["since"] != "" || first["wait"] != "" || first["kind"] != "exec,file." || first["limit"] != "20" {
		t.Errorf("first query %v: want the newest 20 of the kinds, without waiting", first)
	}
	for i, q := range queries[1:3] {
		if q["cursor"] != "9" || q["wait"] != strconv.Itoa(5) || q["since"] != "" {
			t.Errorf("query %d: %v, want a long poll after seq 9", i+1, q)
		}
	}

	// Nothing yet: the follow waits from the start, not the newest again.
	queries = nil
	pages = []MonitorPage{{NextCursor: 0}, {Events: []MonitorEvent{{Seq: 1, ID: "x"}}, NextCursor: 1}}
	mu.Unlock()
	for ev, err := range c.FollowMonitorEvents(ctx, MonitorQuery{}) {
		if err != nil || ev.ID != "x" {
			t.Fatalf("followed %+v, %v", ev, err)
		}
		break
	}
	mu.Lock()
	if len(queries) < 2 || queries[1]["since"] == "" || queries[1]["wait"] != "30" {
		t.Errorf("queries after an empty first page: %v", queries)
	}
}
