package mw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/network/safedial"
)

func mcpAction(principal string, args map[string]any) *govern.Action {
	return &govern.Action{Kind: govern.KindMCPCall, Surface: govern.SurfaceMCP,
		Principal: govern.Principal{ID: principal, Kind: "user"},
		MCP:       &govern.MCPCall{Server: "s", Connector: "c", Tool: "t", Name: "c__t", Arguments: args}}
}

func newSet(t *testing.T, opts Options, mws ...Middleware) *Set {
	t.Helper()
	s, err := New(opts, mws...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func mcpMW(name, script string) Middleware {
	return Middleware{Name: name, Kinds: []govern.Kind{govern.KindMCPCall}, Script: script}
}

func TestMiddlewarePreAllowBlockModify(t *testing.T) {
	ctx := context.Background()
	s := newSet(t, Options{}, mcpMW("guard", `
function pre(a) {
  if (a.mcp.arguments.q === "drop") return {block: "no dropping for " + a.principal.id};
  if (a.mcp.arguments.q === "mask") return {modify: {q: a.mcp.arguments.q.replace("mask", "****"), extra: 1}};
  return {allow: true};
}`))
	vs, blocked := s.Pre(ctx, mcpAction("alice", map[string]any{"q": "hello"}))
	if blocked || len(vs) != 1 || vs[0].Action != "allow" {
		t.Fatalf("allow: blocked=%v verdicts=%+v", blocked, vs)
	}
	vs, blocked = s.Pre(ctx, mcpAction("alice", map[string]any{"q": "drop"}))
	if !blocked || vs[0].Action != "block" || vs[0].Message != "no dropping for alice" {
		t.Fatalf("block: blocked=%v verdicts=%+v", blocked, vs)
	}
	a := mcpAction("alice", map[string]any{"q": "mask"})
	vs, blocked = s.Pre(ctx, a)
	if blocked || vs[0].Action != "modify" {
		t.Fatalf("modify: blocked=%v verdicts=%+v", blocked, vs)
	}
	if a.MCP.Arguments["q"] != "****" || a.MCP.Arguments["extra"] != float64(1) {
		t.Fatalf("arguments not modified: %v", a.MCP.Arguments)
	}
	// Other kinds are not touched.
	vs, blocked = s.Pre(ctx, &govern.Action{Kind: govern.KindExec, Exec: govern.NewExec([]string{"ls"}, "", "", nil)})
	if blocked || len(vs) != 0 {
		t.Fatalf("exec ran mcp middleware: %+v", vs)
	}
}

func TestMiddlewareMintForm(t *testing.T) {
	s := newSet(t, Options{}, mcpMW("mint", `
function pre(ctx) { return ctx.mcp.tool === "t" ? {action: "block", reason: "nope"} : {action: "allow"}; }
function post(ctx, result) { return {action: "mask", maskedResult: {text: "[masked]"}}; }`))
	vs, blocked := s.Pre(context.Background(), mcpAction("u", nil))
	if !blocked || vs[0].Message != "nope" {
		t.Fatalf("mint block: %+v", vs)
	}
	out, _, blocked := s.Post(context.Background(), mcpAction("u", nil), map[string]any{"text": "secret"})
	if blocked || out.(map[string]any)["text"] != "[masked]" {
		t.Fatalf("mint mask: %v %v", out, blocked)
	}
}

func TestMiddlewarePostModify(t *testing.T) {
	s := newSet(t, Options{}, mcpMW("ssn", `
function post(action, result) {
  result.content[0].text = result.content[0].text.replace(/\d{3}-\d{2}-\d{4}/g, "XXX-XX-XXXX");
  return {modify: result};
}`))
	res := []byte(`{"content":[{"type":"text","text":"ssn 123-45-6789 ok"}],"isError":false}`)
	out, blocked, msg := s.PostJSON(context.Background(), mcpAction("u", nil), res)
	if blocked {
		t.Fatalf("blocked: %s", msg)
	}
	if strings.Contains(string(out), "123-45-6789") || !strings.Contains(string(out), "XXX-XX-XXXX") || !json.Valid(out) {
		t.Fatalf("post modify: %s", out)
	}
	// A pre-only middleware leaves results alone (same bytes back).
	s2 := newSet(t, Options{}, mcpMW("preonly", `function pre(a) { return {allow: true}; }`))
	out, blocked, _ = s2.PostJSON(context.Background(), mcpAction("u", nil), res)
	if blocked || string(out) != string(res) {
		t.Fatalf("pre-only post: %s %v", out, blocked)
	}
}

func TestMiddlewareTimeoutOnError(t *testing.T) {
	for _, oe := range []OnError{FailOpen, FailClosed} {
		t.Run(string(oe), func(t *testing.T) {
			m := mcpMW("spin", `function pre(a) { while (true) {} }`)
			m.OnError, m.TimeoutMS = oe, 100
			s := newSet(t, Options{}, m)
			done := make(chan struct{})
			var vs []Verdict
			var blocked bool
			go func() { vs, blocked = s.Pre(context.Background(), mcpAction("u", nil)); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second): // a hang, not a speed check
				t.Fatal("while(true){} was not interrupted")
			}
			if len(vs) != 1 || vs[0].Action != "error" || !strings.Contains(vs[0].Error, "time limit") {
				t.Fatalf("verdicts: %+v", vs)
			}
			if blocked != (oe == FailClosed) {
				t.Fatalf("on_error %s: blocked=%v", oe, blocked)
			}
			// Through the govern stage: open allows, closed denies.
			eng := govern.New(govern.Config{After: []govern.Stage{Stage(s)}})
			d, err := eng.Decide(context.Background(), mcpAction("u", nil))
			if err != nil {
				t.Fatal(err)
			}
			if (d.Outcome == govern.Deny) != (oe == FailClosed) {
				t.Fatalf("decision %+v for on_error %s", d, oe)
			}
			if oe == FailClosed && !errors.Is(d.Err(), govern.ErrDenied) {
				t.Fatalf("err %v", d.Err())
			}
		})
	}
}

func TestMiddlewareMemoryBomb(t *testing.T) {
	m := mcpMW("bomb", `function pre(a) { var s = "x"; for (;;) s += s; }`)
	m.TimeoutMS, m.MaxMemoryMB = 5000, 64
	s := newSet(t, Options{}, m)
	vs, blocked := s.Pre(context.Background(), mcpAction("u", nil))
	if !blocked || len(vs) != 1 || vs[0].Action != "error" {
		t.Fatalf("blocked=%v verdicts=%+v", blocked, vs)
	}
	// Either limit stopping it is fine; the process survived either way.
	t.Logf("stopped: %s", vs[0].Error)
	if !strings.Contains(vs[0].Error, "memory limit") && !strings.Contains(vs[0].Error, "time limit") &&
		!strings.Contains(vs[0].Error, "Invalid string length") {
		t.Fatalf("unexpected error: %s", vs[0].Error)
	}
}

func TestMiddlewareMemoryArrayBomb(t *testing.T) {
	// Growth in many small allocations: only the watchdog stops it
	// before the time limit.
	m := mcpMW("arr", `function pre(a) { var x = []; for (;;) x.push({a: "yyyyyyyyyyyyyyyyyyyyyyyyyy" + x.length}); }`)
	m.TimeoutMS, m.MaxMemoryMB = 5000, 32
	s := newSet(t, Options{}, m)
	vs, blocked := s.Pre(context.Background(), mcpAction("u", nil))
	if !blocked || vs[0].Action != "error" || !strings.Contains(vs[0].Error, "memory limit") {
		t.Fatalf("blocked=%v verdicts=%+v", blocked, vs)
	}
}

func TestMiddlewareDeepRecursion(t *testing.T) {
	m := mcpMW("rec", `function f(n) { return f(n + 1) + 1; } function pre(a) { try { f(0); } catch (e) {} return {allow: true}; }`)
	s := newSet(t, Options{}, m)
	vs, blocked := s.Pre(context.Background(), mcpAction("u", nil))
	if !blocked || vs[0].Action != "error" || !strings.Contains(vs[0].Error, "stack") {
		t.Fatalf("blocked=%v verdicts=%+v", blocked, vs)
	}
}

func TestMiddlewareNoGlobalLeak(t *testing.T) {
	s := newSet(t, Options{}, mcpMW("leak", `
var seen = seen || [];
function pre(a) {
  var prev = globalThis.lastPrincipal;
  globalThis.lastPrincipal = a.principal.id;
  Object.prototype.polluted = a.principal.id;
  seen.push(a.principal.id);
  if (prev !== undefined || seen.length !== 1) return {block: "leaked " + prev + " " + seen.join(",")};
  if (({}).polluted !== a.principal.id) return {block: "prototype"};
  return {allow: true};
}`))
	for _, p := range []string{"alice", "bob", "alice"} {
		vs, blocked := s.Pre(context.Background(), mcpAction(p, nil))
		if blocked {
			t.Fatalf("%s saw another call's globals: %+v", p, vs)
		}
	}
}

func TestMiddlewareFetch(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"verdict":"ok","auth":%q}`, r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	opts := Options{
		Dial:    safedial.Options{Allow: []string{u.Host}, AllowHTTP: true},
		Secrets: secretsMap{"TOKEN": "s3cr3t"},
	}
	base := Middleware{Name: "f", Kinds: []govern.Kind{govern.KindMCPCall}, AllowedDomains: []string{u.Hostname()},
		Secrets: []string{"TOKEN"}, OnError: FailClosed}

	m := base
	m.Script = fmt.Sprintf(`function pre(a) {
  var r = fetch(%q, {headers: {Authorization: "Bearer " + secrets.TOKEN}});
  var j = r.json();
  return j.verdict === "ok" && j.auth === "Bearer s3cr3t" && r.status === 200 ? {allow: true} : {block: "bad " + r.body};
}`, srv.URL)
	vs, blocked := newSet(t, opts, m).Pre(context.Background(), mcpAction("u", nil))
	if blocked {
		t.Fatalf("allowed fetch: %+v", vs)
	}

	// Five fetches are fine, the sixth is refused.
	hits.Store(0)
	m = base
	m.Script = fmt.Sprintf(`function pre(a) {
  for (var i = 0; i < 5; i++) fetch(%q);
  try { fetch(%q); } catch (e) { return {block: "sixth: " + e}; }
  return {allow: true};
}`, srv.URL, srv.URL)
	vs, blocked = newSet(t, opts, m).Pre(context.Background(), mcpAction("u", nil))
	if !blocked || !strings.Contains(vs[0].Message, "at most 5 fetches") || hits.Load() != 5 {
		t.Fatalf("sixth fetch: blocked=%v %+v hits=%d", blocked, vs, hits.Load())
	}

	// An unlisted domain is refused before any connection, even one the
	// dialer would allow.
	hits.Store(0)
	m = base
	m.AllowedDomains = []string{"api.example.com"}
	m.Script = fmt.Sprintf(`function pre(a) { fetch(%q); return {allow: true}; }`, srv.URL)
	vs, blocked = newSet(t, opts, m).Pre(context.Background(), mcpAction("u", nil))
	if !blocked || vs[0].Action != "error" || !strings.Contains(vs[0].Error, "not in the middleware's allowed domains") || hits.Load() != 0 {
		t.Fatalf("unlisted domain: blocked=%v %+v hits=%d", blocked, vs, hits.Load())
	}

	// A listed domain that safedial refuses (loopback, not in its Allow)
	// is refused too.
	m = base
	m.Script = fmt.Sprintf(`function pre(a) { fetch(%q); return {allow: true}; }`, srv.URL)
	vs, blocked = newSet(t, Options{Dial: safedial.Options{AllowHTTP: true}}, m).Pre(context.Background(), mcpAction("u", nil))
	if !blocked || !strings.Contains(vs[0].Error, "refused") || hits.Load() != 0 {
		t.Fatalf("safedial: blocked=%v %+v hits=%d", blocked, vs, hits.Load())
	}

	// A secret not granted cannot be read; its value never shows up.
	m = base
	m.Secrets = nil
	m.Script = `function pre(a) { return {block: "got " + secrets.TOKEN}; }`
	vs, _ = newSet(t, opts, m).Pre(context.Background(), mcpAction("u", nil))
	if vs[0].Action != "error" || strings.Contains(vs[0].Error+vs[0].Message, "s3cr3t") {
		t.Fatalf("ungranted secret: %+v", vs)
	}
}

type secretsMap map[string]string

func (m secretsMap) MiddlewareSecret(_ context.Context, _, name string) (string, []string, error) {
	v, ok := m[name]
	if !ok {
		return "", nil, errors.New("no such secret")
	}
	return v, nil, nil
}

func TestMiddlewareStageModifyAndBlock(t *testing.T) {
	s := newSet(t, Options{},
		Middleware{Name: "rewrite", Kinds: []govern.Kind{govern.KindExec}, Script: `
function pre(a) {
  if (a.exec.cmd === "rm") return {block: "rm is not allowed"};
  if (a.exec.cmd === "curl") return {modify: ["curl", "--proto", "=https"].concat(a.exec.args)};
  return {allow: true};
}`})
	eng := govern.New(govern.Config{After: []govern.Stage{Stage(s)}})
	a := &govern.Action{Kind: govern.KindExec, Exec: govern.NewExec([]string{"curl", "x.com"}, "/", "u", nil)}
	d, err := eng.Decide(context.Background(), a)
	if err != nil || d.Outcome != govern.Allow {
		t.Fatalf("modify: %+v %v", d, err)
	}
	if a.Exec.Argv != "curl --proto =https x.com" || a.Exec.Cwd != "/" {
		t.Fatalf("exec not rewritten: %+v", a.Exec)
	}
	d, err = eng.Decide(context.Background(), &govern.Action{Kind: govern.KindExec, Exec: govern.NewExec([]string{"rm", "-rf", "/"}, "", "", nil)})
	if err != nil || d.Outcome != govern.Deny || d.Stage != StageName || !strings.Contains(d.Message, "rm is not allowed") {
		t.Fatalf("block: %+v %v", d, err)
	}
}

func TestMiddlewareValidate(t *testing.T) {
	bad := []Middleware{
		{Name: "", Kinds: []govern.Kind{govern.KindExec}, Script: "function pre(){}"},
		{Name: "x", Script: "function pre(){}"},
		{Name: "x", Kinds: []govern.Kind{"nope"}, Script: "function pre(){}"},
		{Name: "x", Kinds: []govern.Kind{govern.KindExec}, Script: "function pre({"},
		{Name: "x", Kinds: []govern.Kind{govern.KindExec}, Script: "function pre(){}", OnError: "maybe"},
		{Name: "x", Kinds: []govern.Kind{govern.KindExec}, Script: "function pre(){}", TimeoutMS: 60000},
		{Name: "x", Kinds: []govern.Kind{govern.KindExec}, Script: "function pre(){}", AllowedDomains: []string{"http://a"}},
	}
	for i, m := range bad {
		if _, err := New(Options{}, m); !errors.Is(err, ErrInvalid) {
			t.Errorf("%d: want ErrInvalid, got %v", i, err)
		}
	}
	// No verdict is an error, and closed by default.
	s := newSet(t, Options{}, Middleware{Name: "x", Kinds: []govern.Kind{govern.KindExec}, Script: "function pre(){}"})
	vs, blocked := s.Pre(context.Background(), &govern.Action{Kind: govern.KindExec})
	if !blocked || vs[0].Action != "error" || !strings.Contains(vs[0].Error, "no verdict") {
		t.Fatalf("%+v", vs)
	}
}

func TestMiddlewareAsyncAndThrow(t *testing.T) {
	s := newSet(t, Options{}, mcpMW("async", `async function pre(a) { return {block: "async " + a.principal.id}; }`))
	vs, blocked := s.Pre(context.Background(), mcpAction("carol", nil))
	if !blocked || vs[0].Action != "block" || vs[0].Message != "async carol" {
		t.Fatalf("async: %+v", vs)
	}
	m := mcpMW("throws", `function pre(a) { throw new Error("boom"); }`)
	m.OnError = FailOpen
	s = newSet(t, Options{}, m)
	vs, blocked = s.Pre(context.Background(), mcpAction("u", nil))
	if blocked || vs[0].Action != "error" || !strings.Contains(vs[0].Error, "boom") {
		t.Fatalf("throw open: %v %+v", blocked, vs)
	}
}
