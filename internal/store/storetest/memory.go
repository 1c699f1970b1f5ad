package storetest

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// RunMemory runs the conformance tests of store.MemoryStore against
// stores returned by open.
func RunMemory(t *testing.T, open func(t *testing.T) store.MemoryStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.MemoryStore)
	}{
		{"Versions", testMemoryVersions},
		{"Forget", testMemoryForget},
		{"ListAndSearch", testMemoryListSearch},
		{"Redact", testMemoryRedact},
		{"Export", testMemoryExport},
		{"Invalid", testMemoryInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open(t)) })
	}
}

func memEntry(ns, key, text string, tags ...string) store.MemoryEntry {
	return store.MemoryEntry{Namespace: ns, Key: key, Text: text, Tags: tags, SHA256: "sha-" + text,
		PrincipalID: "prn_agent", Agent: ns, RunID: "run_1", CreatedAt: base}
}

func mustPutMemory(t *testing.T, s store.MemoryStore, e store.MemoryEntry) store.MemoryEntry {
	t.Helper()
	got, err := s.PutMemory(ctx(t), e)
	if err != nil {
		t.Fatalf("PutMemory(%s/%s): %v", e.Namespace, e.Key, err)
	}
	return got
}

func memKeys(es []store.MemoryEntry) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.Key)
	}
	return out
}

func testMemoryVersions(t *testing.T, s store.MemoryStore) {
	v1 := mustPutMemory(t, s, memEntry("bot", "deploy", "deploys go through staging", "ops"))
	if v1.Version != 1 {
		t.Fatalf("first version = %d, want 1", v1.Version)
	}
	e2 := memEntry("bot", "deploy", "deploys go through canary", "ops", "prod")
	e2.RunID, e2.CreatedAt = "run_2", base.Add(time.Minute)
	v2 := mustPutMemory(t, s, e2)
	if v2.Version != 2 {
		t.Fatalf("second version = %d, want 2", v2.Version)
	}
	got, err := s.GetMemory(ctx(t), "bot", "deploy")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, v2) {
		t.Fatalf("GetMemory = %+v, want %+v", got, v2)
	}
	h, err := s.MemoryHistory(ctx(t), "bot", "deploy")
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || !reflect.DeepEqual(h[0], v1) || !reflect.DeepEqual(h[1], v2) {
		t.Fatalf("history = %+v", h)
	}
	// Namespaces are apart.
	if _, err := s.GetMemory(ctx(t), "other", "deploy"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("other namespace: %v", err)
	}
	if _, err := s.MemoryHistory(ctx(t), "bot", "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("history of a missing key: %v", err)
	}
}

func testMemoryForget(t *testing.T, s store.MemoryStore) {
	mustPutMemory(t, s, memEntry("bot", "k", "remember me"))
	f := memEntry("bot", "k", "ignored")
	f.Forgotten = true
	tomb := mustPutMemory(t, s, f)
	if tomb.Version != 2 || tomb.Text != "" || !tomb.Forgotten {
		t.Fatalf("tombstone = %+v", tomb)
	}
	if _, err := s.GetMemory(ctx(t), "bot", "k"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get forgotten: %v", err)
	}
	if l, _ := s.ListMemory(ctx(t), "bot", store.MemoryFilter{}); len(l) != 0 {
		t.Fatalf("list after forget = %v", memKeys(l))
	}
	if r, _ := s.SearchMemory(ctx(t), "bot", "remember", store.MemoryFilter{}); len(r) != 0 {
		t.Fatalf("search after forget = %v", memKeys(r))
	}
	h, err := s.MemoryHistory(ctx(t), "bot", "k")
	if err != nil || len(h) != 2 || h[0].Text != "remember me" {
		t.Fatalf("history keeps the forgotten versions: %+v, %v", h, err)
	}
	// Written again, it is back.
	mustPutMemory(t, s, memEntry("bot", "k", "again"))
	if got, err := s.GetMemory(ctx(t), "bot", "k"); err != nil || got.Version != 3 || got.Text != "again" {
		t.Fatalf("rewritten = %+v, %v", got, err)
	}
}

func testMemoryListSearch(t *testing.T, s store.MemoryStore) {
	mustPutMemory(t, s, memEntry("bot", "user/alice", "Alice prefers Postgres over MySQL", "people"))
	mustPutMemory(t, s, memEntry("bot", "user/bob", "Bob is on call for the billing service", "people", "oncall"))
	mustPutMemory(t, s, memEntry("bot", "runbook", "Restart billing with systemctl restart billing", "ops"))
	mustPutMemory(t, s, memEntry("other", "secret-plan", "billing billing billing postgres"))

	l, err := s.ListMemory(ctx(t), "bot", store.MemoryFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := memKeys(l), []string{"runbook", "user/alice", "user/bob"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("list = %v, want %v", got, want)
	}
	l, _ = s.ListMemory(ctx(t), "bot", store.MemoryFilter{Prefix: "user/"})
	if got, want := memKeys(l), []string{"user/alice", "user/bob"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("list prefix = %v, want %v", got, want)
	}
	l, _ = s.ListMemory(ctx(t), "bot", store.MemoryFilter{Tag: "oncall"})
	if got, want := memKeys(l), []string{"user/bob"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("list tag = %v, want %v", got, want)
	}
	l, _ = s.ListMemory(ctx(t), "bot", store.MemoryFilter{Limit: 1})
	if len(l) != 1 {
		t.Fatalf("list limit 1 = %v", memKeys(l))
	}

	r, err := s.SearchMemory(ctx(t), "bot", "who knows POSTGRES?", store.MemoryFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := memKeys(r), []string{"user/alice"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("search postgres = %v, want %v", got, want)
	}
	// Prefix terms; every match of the namespace, never another's.
	r, _ = s.SearchMemory(ctx(t), "bot", "bill", store.MemoryFilter{})
	if got := memKeys(r); len(got) != 2 || !strings.Contains(strings.Join(got, ","), "runbook") {
		t.Fatalf("search bill = %v", got)
	}
	r, _ = s.SearchMemory(ctx(t), "bot", "billing", store.MemoryFilter{Tag: "ops"})
	if got, want := memKeys(r), []string{"runbook"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("search with tag = %v, want %v", got, want)
	}
	// Tags are searched too; a new version replaces the indexed text.
	r, _ = s.SearchMemory(ctx(t), "bot", "oncall", store.MemoryFilter{})
	if got, want := memKeys(r), []string{"user/bob"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("search tag word = %v, want %v", got, want)
	}
	mustPutMemory(t, s, memEntry("bot", "user/alice", "Alice moved to SQLite"))
	if r, _ = s.SearchMemory(ctx(t), "bot", "postgres", store.MemoryFilter{}); len(r) != 0 {
		t.Fatalf("search finds an old version: %v", memKeys(r))
	}
	// Query syntax is not FTS syntax: quotes and operators are words.
	if _, err := s.SearchMemory(ctx(t), "bot", `"AND OR NEAR( * ^`, store.MemoryFilter{}); err != nil {
		t.Fatalf("search with operators: %v", err)
	}
	if _, err := s.SearchMemory(ctx(t), "bot", " ?! ", store.MemoryFilter{}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("search without words: %v", err)
	}
}

func testMemoryRedact(t *testing.T, s store.MemoryStore) {
	mustPutMemory(t, s, memEntry("bot", "creds", "the password is hunter2"))
	mustPutMemory(t, s, memEntry("bot", "creds", "the password is still hunter2"))
	mustPutMemory(t, s, memEntry("bot", "other", "unrelated"))
	at := base.Add(time.Hour)
	n, err := s.RedactMemory(ctx(t), "bot", "creds", 0, "prn_admin", "a secret", at)
	if err != nil || n != 2 {
		t.Fatalf("RedactMemory = %d, %v; want 2", n, err)
	}
	h, err := s.MemoryHistory(ctx(t), "bot", "creds")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range h {
		if e.Text != "" || e.SHA256 != "" || !e.RedactedAt.Equal(at) || e.RedactedBy != "prn_admin" || e.RedactReason != "a secret" {
			t.Fatalf("redacted version = %+v", e)
		}
	}
	if r, _ := s.SearchMemory(ctx(t), "bot", "hunter2", store.MemoryFilter{}); len(r) != 0 {
		t.Fatalf("search finds redacted text: %v", memKeys(r))
	}
	var all []string
	if err := s.ExportMemory(ctx(t), "bot", func(e store.MemoryEntry) error { all = append(all, e.Text); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(all, "|"), "hunter2") {
		t.Fatalf("export holds redacted text: %q", all)
	}
	// Again: nothing left to redact.
	if n, err := s.RedactMemory(ctx(t), "bot", "creds", 0, "prn_admin", "", at); err != nil || n != 0 {
		t.Fatalf("second redaction = %d, %v", n, err)
	}
	// One version only.
	mustPutMemory(t, s, memEntry("bot", "one", "v1 text"))
	mustPutMemory(t, s, memEntry("bot", "one", "v2 text"))
	if n, err := s.RedactMemory(ctx(t), "bot", "one", 1, "prn_admin", "", at); err != nil || n != 1 {
		t.Fatalf("redact one version = %d, %v", n, err)
	}
	if got, _ := s.GetMemory(ctx(t), "bot", "one"); got.Text != "v2 text" {
		t.Fatalf("latest after redacting v1 = %+v", got)
	}
	if r, _ := s.SearchMemory(ctx(t), "bot", "v2", store.MemoryFilter{}); len(r) != 1 {
		t.Fatalf("latest still found: %v", memKeys(r))
	}
	if _, err := s.RedactMemory(ctx(t), "bot", "one", 9, "prn_admin", "", at); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("redact missing version: %v", err)
	}
	if _, err := s.RedactMemory(ctx(t), "bot", "nope", 0, "prn_admin", "", at); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("redact missing key: %v", err)
	}
}

func testMemoryExport(t *testing.T, s store.MemoryStore) {
	mustPutMemory(t, s, memEntry("bot", "b", "b1"))
	mustPutMemory(t, s, memEntry("bot", "a", "a1"))
	mustPutMemory(t, s, memEntry("bot", "b", "b2"))
	mustPutMemory(t, s, memEntry("else", "c", "c1"))
	var got []string
	err := s.ExportMemory(ctx(t), "bot", func(e store.MemoryEntry) error {
		got = append(got, e.Key+":"+e.Text)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a:a1", "b:b1", "b:b2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("export = %v, want %v", got, want)
	}
	stop := errors.New("stop")
	if err := s.ExportMemory(ctx(t), "bot", func(store.MemoryEntry) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("export's callback error: %v", err)
	}
}

func testMemoryInvalid(t *testing.T, s store.MemoryStore) {
	if _, err := s.PutMemory(ctx(t), memEntry("", "k", "x")); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("no namespace: %v", err)
	}
	if _, err := s.PutMemory(ctx(t), memEntry("bot", "", "x")); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("no key: %v", err)
	}
	if _, err := s.GetMemory(ctx(t), "bot", "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
}
