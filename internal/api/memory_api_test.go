package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/memory"
	"github.com/warden-sandbox/warden/internal/store"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestMemoryRoutes drives /v1/agents/{name}/memory: list and search, a key
// with its history, diff, redact (memory:review), export; scopes; and the
// answers' shapes against spec/openapi.yaml.
func TestMemoryRoutes(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	ms, ok := env.st.(store.MemoryStore)
	if !ok {
		t.Fatal("the test store keeps no memory")
	}
	svc, err := memory.New(memory.Config{Store: ms, Audit: env.audit})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Manager: env.mgr, Store: env.st, Auth: env.auth, Audit: env.audit,
		PresignKey: []byte("test presign key"), Version: "test", Memory: svc})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	agent := "mem-" + uniq()
	a, err := svc.ActorFor(ctx, auth.Identity{Principal: store.Principal{ID: "prn_" + agent, Kind: store.PrincipalAgent, Name: agent}})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct{ key, text string }{{"runbook/deploy", "staging\nthen prod"}, {"runbook/deploy", "canary\nthen prod"},
		{"people/alice", "prefers postgres"}} {
		if _, err := svc.Remember(ctx, a, w.key, w.text, []string{"t1"}); err != nil {
			t.Fatal(err)
		}
	}

	doc := loadSpec(t)
	schemas := obj(obj(doc["components"])["schemas"])
	sc := schemaChecker{doc}
	conform := func(what, schema string, v any) {
		t.Helper()
		b, _ := json.Marshal(v)
		plain := decodeNumbers(t, b)
		if errs := sc.check(what, obj(schemas[schema]), plain); len(errs) > 0 {
			t.Errorf("%s does not match schema %s: %v", what, schema, errs)
		}
	}

	_, readerKey := govUser(t, "mem-reader", auth.ScopeMemoryRead)
	_, reviewerKey := govUser(t, "mem-reviewer", auth.ScopeMemoryRead, auth.ScopeMemoryReview)
	reader, reviewer := govClient(t, hs, readerKey), govClient(t, hs, reviewerKey)

	es, err := reader.ListMemory(ctx, agent, warden.MemoryQuery{})
	if err != nil || len(es) != 2 || es[0].Key != "people/alice" || es[1].Version != 2 {
		t.Fatalf("list = %+v, %v", es, err)
	}
	for _, e := range es {
		conform("list entry", "MemoryEntry", e)
	}
	if es, err = reader.ListMemory(ctx, agent, warden.MemoryQuery{Search: "postgres"}); err != nil || len(es) != 1 || es[0].Key != "people/alice" {
		t.Fatalf("search = %+v, %v", es, err)
	}
	k, err := reader.GetMemory(ctx, agent, "runbook/deploy")
	if err != nil || k.Entry == nil || k.Entry.Text != "canary\nthen prod" || len(k.Versions) != 2 {
		t.Fatalf("get = %+v, %v", k, err)
	}
	d, err := reader.DiffMemory(ctx, agent, "runbook/deploy", 1, 2)
	if err != nil || !strings.Contains(d.Unified, "-staging\n+canary\n then prod\n") {
		t.Fatalf("diff = %+v, %v", d, err)
	}
	conform("diff", "MemoryDiff", d)

	// Errors: a missing key, a bad name, a reader redacting, an agent key.
	var we *warden.Error
	if _, err := reader.GetMemory(ctx, agent, "nope"); !errors.As(err, &we) || we.Status != http.StatusNotFound {
		t.Fatalf("missing key: %v", err)
	}
	if _, err := reader.ListMemory(ctx, "Bad Name!", warden.MemoryQuery{}); !errors.As(err, &we) || we.Status/100 != 4 {
		t.Fatalf("bad name: %v", err)
	}
	if _, err := reader.RedactMemory(ctx, agent, "runbook/deploy", 0, "x"); !errors.As(err, &we) || we.Status != http.StatusForbidden {
		t.Fatalf("reader redacting: %v", err)
	}
	if _, err := govClient(t, hs, env.aKey).ListMemory(ctx, agent, warden.MemoryQuery{}); !errors.As(err, &we) || we.Status != http.StatusForbidden {
		t.Fatalf("agent key: %v", err)
	}
	if _, err := govClient(t, env.hs, env.adminKey).ListMemory(ctx, agent, warden.MemoryQuery{}); !errors.As(err, &we) || we.Status != http.StatusServiceUnavailable {
		t.Fatalf("no memory configured: %v", err)
	}

	// Redact one version, then export.
	n, err := reviewer.RedactMemory(ctx, agent, "runbook/deploy", 1, "wrong")
	if err != nil || n != 1 {
		t.Fatalf("redact = %d, %v", n, err)
	}
	k, _ = reader.GetMemory(ctx, agent, "runbook/deploy")
	if k.Versions[0].Text != "" || k.Versions[0].Redacted == nil || k.Versions[0].Redacted.Reason != "wrong" || k.Versions[1].Text == "" {
		t.Fatalf("after redaction: %+v", k.Versions)
	}
	conform("redacted version", "MemoryEntry", k.Versions[0])
	rc, err := reader.ExportMemory(ctx, agent)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 || strings.Contains(string(b), "staging") {
		t.Fatalf("export:\n%s", b)
	}
	for _, l := range lines {
		e := decodeNumbers(t, []byte(l))
		if errs := sc.check("export line", obj(schemas["MemoryEntry"]), e); len(errs) > 0 {
			t.Errorf("export line: %v", errs)
		}
	}
}

// decodeNumbers decodes JSON keeping numbers as json.Number, as the
// schema checker wants them.
func decodeNumbers(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}
