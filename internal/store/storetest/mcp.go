package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// RunMCP runs the conformance tests of store.MCPStore (connectors,
// virtual servers, grants, tool pins, credential bindings) against stores
// returned by open.
func RunMCP(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"Connectors", testMCPConnectors},
		{"Servers", testMCPServers},
		{"ConnectorInUse", testMCPConnectorInUse},
		{"Grants", testMCPGrants},
		{"ToolPins", testMCPToolPins},
		{"Credentials", testMCPCredentials},
		{"ConcurrentUpdates", testMCPConcurrentUpdates},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open(t)) })
	}
}

func mcpConnector(id string) store.MCPConnector {
	return store.MCPConnector{ID: id, Kind: store.MCPConnectorRemote, Description: "the " + id,
		Spec: json.RawMessage(`{"url":"https://mcp.example.com/` + id + `"}`), OwnerID: "alice",
		CreatedAt: base, CreatedBy: "alice", UpdatedAt: base}
}

func mcpServer(id string, connectors ...string) store.MCPServer {
	return store.MCPServer{ID: id, Description: "server " + id, Spec: json.RawMessage(`{"connectors":[]}`),
		Connectors: connectors, CreatedAt: base, CreatedBy: "alice", UpdatedAt: base}
}

func mustMCPConnector(t *testing.T, s store.Store, id string) {
	t.Helper()
	if err := s.CreateConnector(ctx(t), mcpConnector(id)); err != nil {
		t.Fatalf("CreateConnector(%s): %v", id, err)
	}
}

func testMCPConnectors(t *testing.T, s store.Store) {
	c := mcpConnector("github")
	if err := s.CreateConnector(ctx(t), c); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateConnector(ctx(t), c); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate create: %v", err)
	}
	for name, bad := range map[string]func(*store.MCPConnector){
		"empty id":    func(c *store.MCPConnector) { c.ID = "" },
		"bad kind":    func(c *store.MCPConnector) { c.Kind = "ftp" },
		"bad spec":    func(c *store.MCPConnector) { c.Spec = json.RawMessage(`{`) },
		"no spec":     func(c *store.MCPConnector) { c.Spec = nil },
		"no creation": func(c *store.MCPConnector) { c.CreatedAt = time.Time{} },
	} {
		b := mcpConnector("bad")
		bad(&b)
		if err := s.CreateConnector(ctx(t), b); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("create with %s: %v, want ErrInvalid", name, err)
		}
	}
	got, err := s.GetConnector(ctx(t), "github")
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("get: %+v %v, want %+v", got, err, c)
	}
	if _, err := s.GetConnector(ctx(t), "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	h := mcpConnector("aaa-hosted")
	h.Kind, h.Spec = store.MCPConnectorHosted, json.RawMessage(`{"template":"node","command":["npx","-y","x"]}`)
	if err := s.CreateConnector(ctx(t), h); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListConnectors(ctx(t))
	if err != nil || len(list) != 2 || list[0].ID != "aaa-hosted" || list[1].ID != "github" {
		t.Fatalf("list: %+v %v", list, err)
	}

	later := base.Add(time.Minute)
	up, err := s.UpdateConnector(ctx(t), "github", func(c *store.MCPConnector) error {
		c.Description, c.Spec, c.UpdatedAt = "changed", json.RawMessage(`{"url":"https://other.example.com/"}`), later
		return nil
	})
	if err != nil || up.Description != "changed" || !up.UpdatedAt.Equal(later) || !up.CreatedAt.Equal(base) {
		t.Fatalf("update: %+v %v", up, err)
	}
	if got, _ := s.GetConnector(ctx(t), "github"); !reflect.DeepEqual(got, up) {
		t.Fatalf("after update: %+v, want %+v", got, up)
	}
	if _, err := s.UpdateConnector(ctx(t), "github", func(c *store.MCPConnector) error { c.ID = "x"; return nil }); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("update changing the id: %v", err)
	}
	if _, err := s.UpdateConnector(ctx(t), "github", func(c *store.MCPConnector) error { c.Spec = json.RawMessage(`[`); return nil }); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("update to a bad spec: %v", err)
	}
	boom := errors.New("boom")
	if _, err := s.UpdateConnector(ctx(t), "github", func(*store.MCPConnector) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("update fn error: %v", err)
	}
	if got, _ := s.GetConnector(ctx(t), "github"); !reflect.DeepEqual(got, up) {
		t.Fatalf("failed updates changed it: %+v", got)
	}
	if _, err := s.UpdateConnector(ctx(t), "nope", func(*store.MCPConnector) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update missing: %v", err)
	}
	if err := s.DeleteConnector(ctx(t), "github"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteConnector(ctx(t), "github"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	if _, err := s.GetConnector(ctx(t), "github"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
}

func testMCPServers(t *testing.T, s store.Store) {
	mustMCPConnector(t, s, "a")
	mustMCPConnector(t, s, "b")
	m := mcpServer("dev", "b", "a")
	if err := s.CreateMCPServer(ctx(t), m); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateMCPServer(ctx(t), m); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate create: %v", err)
	}
	if err := s.CreateMCPServer(ctx(t), mcpServer("x", "a", "missing")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("create with a missing connector: %v", err)
	}
	if _, err := s.GetMCPServer(ctx(t), "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a failed create left a server: %v", err)
	}
	if err := s.CreateMCPServer(ctx(t), mcpServer("x", "a", "a")); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("create with a connector twice: %v", err)
	}
	bad := mcpServer("x")
	bad.Spec = json.RawMessage(`nope`)
	if err := s.CreateMCPServer(ctx(t), bad); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("create with a bad spec: %v", err)
	}
	got, err := s.GetMCPServer(ctx(t), "dev")
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("get: %+v %v, want %+v", got, err, m)
	}
	empty := mcpServer("an-empty")
	if err := s.CreateMCPServer(ctx(t), empty); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListMCPServers(ctx(t))
	if err != nil || len(list) != 2 || !reflect.DeepEqual(list[0], empty) || !reflect.DeepEqual(list[1], m) {
		t.Fatalf("list: %+v %v", list, err)
	}
	later := base.Add(time.Hour)
	up, err := s.UpdateMCPServer(ctx(t), "dev", func(m *store.MCPServer) error {
		m.Connectors, m.UpdatedAt, m.Description = []string{"a"}, later, "only a"
		return nil
	})
	if err != nil || !reflect.DeepEqual(up.Connectors, []string{"a"}) || up.Description != "only a" {
		t.Fatalf("update: %+v %v", up, err)
	}
	if _, err := s.UpdateMCPServer(ctx(t), "dev", func(m *store.MCPServer) error {
		m.Connectors = []string{"a", "gone"}
		return nil
	}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update to a missing connector: %v", err)
	}
	if _, err := s.UpdateMCPServer(ctx(t), "dev", func(m *store.MCPServer) error { m.ID = "y"; return nil }); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("update changing the id: %v", err)
	}
	if got, _ := s.GetMCPServer(ctx(t), "dev"); !reflect.DeepEqual(got, up) {
		t.Fatalf("failed updates changed it: %+v, want %+v", got, up)
	}
	// b is no longer used by dev: it can go.
	if err := s.DeleteConnector(ctx(t), "b"); err != nil {
		t.Fatalf("delete a connector no server uses any more: %v", err)
	}
	if err := s.DeleteMCPServer(ctx(t), "dev"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMCPServer(ctx(t), "dev"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	if _, err := s.UpdateMCPServer(ctx(t), "dev", func(*store.MCPServer) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update deleted: %v", err)
	}
}

func testMCPConnectorInUse(t *testing.T, s store.Store) {
	mustMCPConnector(t, s, "a")
	if err := s.CreateMCPServer(ctx(t), mcpServer("dev", "a")); err != nil {
		t.Fatal(err)
	}
	err := s.DeleteConnector(ctx(t), "a")
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete a connector in use: %v, want ErrConflict", err)
	}
	if _, err := s.GetConnector(ctx(t), "a"); err != nil {
		t.Fatalf("the refused delete removed it: %v", err)
	}
	if err := s.DeleteMCPServer(ctx(t), "dev"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteConnector(ctx(t), "a"); err != nil {
		t.Fatalf("delete after its server went: %v", err)
	}
}

func testMCPGrants(t *testing.T, s store.Store) {
	mustPrincipal(t, s, "p1")
	mustPrincipal(t, s, "p2")
	mustMCPConnector(t, s, "a")
	for _, id := range []string{"s1", "s2"} {
		if err := s.CreateMCPServer(ctx(t), mcpServer(id, "a")); err != nil {
			t.Fatal(err)
		}
	}
	g := store.MCPGrant{ServerID: "s1", PrincipalID: "p1", CreatedAt: base, CreatedBy: "alice"}
	if err := s.PutMCPGrant(ctx(t), g); err != nil {
		t.Fatal(err)
	}
	again := g
	again.CreatedAt, again.CreatedBy = base.Add(time.Hour), "bob"
	if err := s.PutMCPGrant(ctx(t), again); err != nil {
		t.Fatalf("idempotent put: %v", err)
	}
	for _, put := range []store.MCPGrant{
		{ServerID: "s2", PrincipalID: "p2", CreatedAt: base},
		{ServerID: "s2", PrincipalID: "p1", CreatedAt: base},
	} {
		if err := s.PutMCPGrant(ctx(t), put); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutMCPGrant(ctx(t), store.MCPGrant{ServerID: "nope", PrincipalID: "p1", CreatedAt: base}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("grant of a missing server: %v", err)
	}
	if err := s.PutMCPGrant(ctx(t), store.MCPGrant{ServerID: "s1", PrincipalID: "nobody", CreatedAt: base}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("grant to a missing principal: %v", err)
	}
	keys := func(gs []store.MCPGrant) []string {
		var out []string
		for _, g := range gs {
			out = append(out, g.ServerID+"/"+g.PrincipalID)
		}
		return out
	}
	all, err := s.ListMCPGrants(ctx(t), "", "")
	if err != nil || fmt.Sprint(keys(all)) != "[s1/p1 s2/p1 s2/p2]" {
		t.Fatalf("list all: %v %v", keys(all), err)
	}
	if !reflect.DeepEqual(all[0], g) {
		t.Fatalf("the repeated put changed the grant: %+v, want %+v", all[0], g)
	}
	if got, _ := s.ListMCPGrants(ctx(t), "s2", ""); fmt.Sprint(keys(got)) != "[s2/p1 s2/p2]" {
		t.Fatalf("list by server: %v", keys(got))
	}
	if got, _ := s.ListMCPGrants(ctx(t), "", "p1"); fmt.Sprint(keys(got)) != "[s1/p1 s2/p1]" {
		t.Fatalf("list by principal: %v", keys(got))
	}
	if got, _ := s.ListMCPGrants(ctx(t), "s1", "p2"); len(got) != 0 {
		t.Fatalf("list by both: %v", keys(got))
	}
	if err := s.DeleteMCPGrant(ctx(t), "s1", "p1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMCPGrant(ctx(t), "s1", "p1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoke twice: %v", err)
	}
	if err := s.DeleteMCPServer(ctx(t), "s2"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ListMCPGrants(ctx(t), "", ""); len(got) != 0 {
		t.Fatalf("grants outlived their server: %v", keys(got))
	}
}

func testMCPToolPins(t *testing.T, s store.Store) {
	mustMCPConnector(t, s, "a")
	mustMCPConnector(t, s, "b")
	pin := func(conn, tool, hash string, seen time.Time) store.MCPToolPin {
		return store.MCPToolPin{Connector: conn, Tool: tool, Hash: hash,
			Definition: json.RawMessage(`{"name":"` + tool + `","description":"` + hash + `"}`),
			State:      store.MCPToolPending, FirstSeen: seen}
	}
	p1 := pin("a", "search", "h1", base)
	got, err := s.PutToolPin(ctx(t), p1)
	if err != nil || !reflect.DeepEqual(got, p1) {
		t.Fatalf("put: %+v %v", got, err)
	}
	// Seen again later with another first-seen time and state: kept as it was.
	again := p1
	again.FirstSeen, again.State = base.Add(time.Hour), store.MCPToolApproved
	if got, err := s.PutToolPin(ctx(t), again); err != nil || !reflect.DeepEqual(got, p1) {
		t.Fatalf("put again: %+v %v, want the first %+v", got, err, p1)
	}
	if _, err := s.PutToolPin(ctx(t), pin("gone", "t", "h", base)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("pin of a missing connector: %v", err)
	}
	badDef := pin("a", "t", "h", base)
	badDef.Definition = json.RawMessage(`{"x"`)
	if _, err := s.PutToolPin(ctx(t), badDef); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("pin with a bad definition: %v", err)
	}
	badState := pin("a", "t", "h", base)
	badState.State = "maybe"
	if _, err := s.PutToolPin(ctx(t), badState); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("pin with a bad state: %v", err)
	}
	p2 := pin("a", "search", "h0", base.Add(time.Second)) // a later definition, smaller hash
	p3 := pin("a", "fetch", "h9", base.Add(time.Minute))
	p4 := pin("b", "echo", "h5", base)
	for _, p := range []store.MCPToolPin{p2, p3, p4} {
		if _, err := s.PutToolPin(ctx(t), p); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(ps []store.MCPToolPin) string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Connector+"/"+p.Tool+"/"+p.Hash+"/"+p.State)
		}
		return fmt.Sprint(out)
	}
	all, err := s.ListToolPins(ctx(t), store.MCPToolPinFilter{})
	if err != nil || ids(all) != "[a/fetch/h9/pending a/search/h1/pending a/search/h0/pending b/echo/h5/pending]" {
		t.Fatalf("list all: %s %v", ids(all), err)
	}
	decidedAt := base.Add(2 * time.Hour)
	d, err := s.DecideToolPin(ctx(t), "a", "search", "h1", store.MCPToolApproved, "admin", decidedAt)
	if err != nil || d.State != store.MCPToolApproved || d.DecidedBy != "admin" || !d.DecidedAt.Equal(decidedAt) ||
		string(d.Definition) != string(p1.Definition) || !d.FirstSeen.Equal(base) {
		t.Fatalf("approve: %+v %v", d, err)
	}
	if _, err := s.DecideToolPin(ctx(t), "b", "echo", "h5", store.MCPToolRejected, "admin", decidedAt); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DecideToolPin(ctx(t), "a", "search", "nope", store.MCPToolApproved, "admin", decidedAt); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("decide a missing pin: %v", err)
	}
	if _, err := s.DecideToolPin(ctx(t), "a", "search", "h0", store.MCPToolPending, "admin", decidedAt); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("decide to pending: %v", err)
	}
	if got, _ := s.ListToolPins(ctx(t), store.MCPToolPinFilter{States: []string{store.MCPToolPending}}); ids(got) != "[a/fetch/h9/pending a/search/h0/pending]" {
		t.Fatalf("list pending: %s", ids(got))
	}
	if got, _ := s.ListToolPins(ctx(t), store.MCPToolPinFilter{Connector: "a", Tool: "search"}); ids(got) != "[a/search/h1/approved a/search/h0/pending]" {
		t.Fatalf("list one tool: %s", ids(got))
	}
	if got, _ := s.ListToolPins(ctx(t), store.MCPToolPinFilter{States: []string{store.MCPToolApproved, store.MCPToolRejected}}); ids(got) != "[a/search/h1/approved b/echo/h5/rejected]" {
		t.Fatalf("list decided: %s", ids(got))
	}
	// Approving a second hash leaves the first approved.
	if _, err := s.DecideToolPin(ctx(t), "a", "search", "h0", store.MCPToolApproved, "admin", decidedAt); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ListToolPins(ctx(t), store.MCPToolPinFilter{Connector: "a", Tool: "search"}); ids(got) != "[a/search/h1/approved a/search/h0/approved]" {
		t.Fatalf("after a second approval: %s", ids(got))
	}
	if err := s.DeleteConnector(ctx(t), "a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ListToolPins(ctx(t), store.MCPToolPinFilter{}); ids(got) != "[b/echo/h5/rejected]" {
		t.Fatalf("pins outlived their connector: %s", ids(got))
	}
}

func testMCPCredentials(t *testing.T, s store.Store) {
	mustPrincipal(t, s, "p1")
	mustMCPConnector(t, s, "a")
	own := store.MCPCredential{Connector: "a", PrincipalID: "p1", Kind: "header", SecretID: "sec-1",
		CreatedAt: base, CreatedBy: "p1", UpdatedAt: base}
	shared := store.MCPCredential{Connector: "a", Kind: "header", SecretID: "sec-shared",
		CreatedAt: base, CreatedBy: "admin", UpdatedAt: base}
	for _, c := range []store.MCPCredential{own, shared} {
		if err := s.PutMCPCredential(ctx(t), c); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.GetMCPCredential(ctx(t), "a", "p1"); err != nil || !reflect.DeepEqual(got, own) {
		t.Fatalf("get own: %+v %v", got, err)
	}
	if got, err := s.GetMCPCredential(ctx(t), "a", ""); err != nil || !reflect.DeepEqual(got, shared) {
		t.Fatalf("get shared: %+v %v", got, err)
	}
	replaced := own
	replaced.Kind, replaced.SecretID, replaced.UpdatedAt = "oauth", "sec-2", base.Add(time.Hour)
	if err := s.PutMCPCredential(ctx(t), replaced); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetMCPCredential(ctx(t), "a", "p1"); !reflect.DeepEqual(got, replaced) {
		t.Fatalf("after replacing: %+v, want %+v", got, replaced)
	}
	missing := own
	missing.PrincipalID = "nobody"
	if err := s.PutMCPCredential(ctx(t), missing); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("credential of a missing principal: %v", err)
	}
	missing = own
	missing.Connector = "gone"
	if err := s.PutMCPCredential(ctx(t), missing); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("credential of a missing connector: %v", err)
	}
	missing = own
	missing.SecretID = ""
	if err := s.PutMCPCredential(ctx(t), missing); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("credential without a secret: %v", err)
	}
	if _, err := s.GetMCPCredential(ctx(t), "a", "p2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	if err := s.DeleteMCPCredential(ctx(t), "a", "p1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMCPCredential(ctx(t), "a", "p1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	if err := s.DeleteConnector(ctx(t), "a"); err != nil {
		t.Fatal(err)
	}
	mustMCPConnector(t, s, "a")
	if _, err := s.GetMCPCredential(ctx(t), "a", ""); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a credential outlived its connector: %v", err)
	}
}

func testMCPConcurrentUpdates(t *testing.T, s store.Store) {
	mustMCPConnector(t, s, "a")
	if err := s.CreateMCPServer(ctx(t), mcpServer("dev", "a")); err != nil {
		t.Fatal(err)
	}
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := s.UpdateConnector(ctx(t), "a", func(c *store.MCPConnector) error {
				c.Description += "x"
				return nil
			})
			errs <- err
		}()
		go func() {
			defer wg.Done()
			_, err := s.UpdateMCPServer(ctx(t), "dev", func(m *store.MCPServer) error {
				m.Description += "y"
				return nil
			})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	c, _ := s.GetConnector(ctx(t), "a")
	m, _ := s.GetMCPServer(ctx(t), "dev")
	if want := len("the a") + n; len(c.Description) != want {
		t.Errorf("connector description %q: lost updates", c.Description)
	}
	if want := len("server dev") + n; len(m.Description) != want {
		t.Errorf("server description %q: lost updates", m.Description)
	}
}
