package mw

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/network/safedial"
)

// grantedSecrets serves middleware their granted secrets: by middleware,
// then by name.
type grantedSecrets map[string]map[string]struct {
	value string
	hosts []string
}

func (g grantedSecrets) MiddlewareSecret(_ context.Context, mw, name string) (string, []string, error) {
	s, ok := g[mw][name]
	if !ok {
		return "", nil, fmt.Errorf("not granted to middleware %s", mw)
	}
	return s.value, s.hosts, nil
}

// lockedBuf is a log sink for checks that a value never reaches the log.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

const mwSecretValue = `tok-"9f8e7d6c5b4a"-value`

// TestMiddlewareSecrets: secrets.NAME reads a secret the middleware declares
// and that is granted to it, in the worker and in-process; an undeclared or
// ungranted one throws a clear error; the value never shows in a verdict's
// message or error, in a dry run's modify value, or in the log.
func TestMiddlewareSecrets(t *testing.T) {
	granted := grantedSecrets{"hook": {"TOKEN": {value: mwSecretValue}}}
	for _, mode := range []string{"worker", "in-process"} {
		t.Run(mode, func(t *testing.T) {
			logs := &lockedBuf{}
			opts := Options{Secrets: granted, Log: slog.New(slog.NewTextHandler(logs, nil))}
			var s *Set
			if mode == "worker" {
				s = workerSet(t, WorkerOptions{}, opts)
			} else {
				s = newSet(t, opts)
			}
			hook := func(script string) Middleware {
				return Middleware{Name: "hook", Kinds: []govern.Kind{govern.KindCodeRun}, Secrets: []string{"TOKEN", "MISSING"}, Script: script}
			}
			action := func() *govern.Action {
				return &govern.Action{Kind: govern.KindCodeRun, Code: govern.NewCode("python", "x")}
			}
			run := func(m Middleware) Verdict {
				t.Helper()
				v, err := s.Test(context.Background(), m, "pre", action(), nil)
				if err != nil {
					t.Fatal(err)
				}
				if b := fmt.Sprintf("%+v %s", v, v.Modified); strings.Contains(b, mwSecretValue) || strings.Contains(b, `9f8e7d6c5b4a`) {
					t.Fatalf("the verdict holds the value: %s", b)
				}
				return v
			}
			// Granted: readable (the reversed value proves it was read).
			v := run(hook(`function pre(a) { return {modify: secrets.TOKEN.split("").reverse().join("")}; }`))
			if want := reverse(mwSecretValue); v.Action != "modify" || string(v.Modified) != fmt.Sprintf("%q", want) {
				t.Fatalf("granted: %+v %s, want the reversed value", v, v.Modified)
			}
			if v := run(hook(`function pre(a) { return "TOKEN" in secrets && Object.keys(secrets).length === 2 ? {allow: true} : {block: "keys"}; }`)); v.Action != "allow" {
				t.Fatalf("keys: %+v", v)
			}
			// Declared, not granted; not declared.
			if v := run(hook(`function pre(a) { return {block: secrets.MISSING}; }`)); v.Action != "error" || !strings.Contains(v.Error, `secret "MISSING": not granted to middleware hook`) {
				t.Fatalf("ungranted: %+v", v)
			}
			if v := run(hook(`function pre(a) { return {block: secrets.OTHER}; }`)); v.Action != "error" || !strings.Contains(v.Error, `secret "OTHER" is not declared by middleware hook`) {
				t.Fatalf("undeclared: %+v", v)
			}
			other := hook(`function pre(a) { return {block: secrets.TOKEN}; }`)
			other.Name = "other"
			if v := run(other); v.Action != "error" || !strings.Contains(v.Error, "not granted to middleware other") {
				t.Fatalf("another middleware: %+v", v)
			}
			// The value is redacted from messages, errors and a dry run's modify.
			if v := run(hook(`function pre(a) { return {block: "got " + secrets.TOKEN}; }`)); v.Message != "got [secret TOKEN]" {
				t.Fatalf("block message: %+v", v)
			}
			if v := run(hook(`function pre(a) { throw new Error("leak " + secrets.TOKEN); }`)); v.Action != "error" || !strings.Contains(v.Error, "leak [secret TOKEN]") {
				t.Fatalf("error: %+v", v)
			}
			if v := run(hook(`function pre(a) { return {modify: "k=" + secrets.TOKEN}; }`)); string(v.Modified) != `"k=[secret TOKEN]"` {
				t.Fatalf("dry-run modify: %s", v.Modified)
			}
			// On the governed path a modify is the payload: the script's choice.
			a := action()
			if vs, blocked := func() ([]Verdict, bool) {
				if err := s.Replace(hook(`function pre(a) { return {modify: secrets.TOKEN}; }`)); err != nil {
					t.Fatal(err)
				}
				return s.Pre(context.Background(), a)
			}(); blocked || a.Code.Code != mwSecretValue {
				t.Fatalf("modify on the governed path: %+v %v", vs, blocked)
			}
			if strings.Contains(logs.String(), "9f8e7d6c5b4a") {
				t.Fatalf("the log holds the value: %s", logs)
			}
		})
	}
}

func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

// TestMiddlewareSecretHosts: a grant's hosts bound where fetch may send its
// value; a fetch without it is not affected.
func TestMiddlewareSecretHosts(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	granted := grantedSecrets{"f": {
		"BOUND": {value: "bound-secret-value", hosts: []string{"api.example.com"}},
		"FREE":  {value: "free-secret-value"},
	}}
	s := newSet(t, Options{Dial: safedial.Options{Allow: []string{u.Host}, AllowHTTP: true}, Secrets: granted})
	m := Middleware{Name: "f", Kinds: []govern.Kind{govern.KindMCPCall}, AllowedDomains: []string{u.Hostname()},
		Secrets: []string{"BOUND", "FREE"}}
	for _, tc := range []struct{ expr, want string }{
		{`fetch(%q, {headers: {Authorization: "Bearer " + secrets.BOUND}})`, `secret "BOUND" is granted for other hosts`},
		{`fetch(%q + "?k=" + secrets.BOUND)`, `secret "BOUND" is granted for other hosts`},
		{`fetch(%q, {method: "POST", body: secrets.BOUND})`, `secret "BOUND" is granted for other hosts`},
		{`(secrets.BOUND, fetch(%q, {headers: {Authorization: "Bearer " + secrets.FREE}}))`, ""},
	} {
		hits.Store(0)
		m.Script = fmt.Sprintf(`function pre(a) { var r = `+tc.expr+`; return {allow: r.ok}; }`, srv.URL)
		v, err := s.Test(context.Background(), m, "pre", mcpAction("u", nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.want == "" {
			if v.Action != "allow" || hits.Load() != 1 {
				t.Fatalf("%s: %+v hits=%d", tc.expr, v, hits.Load())
			}
			continue
		}
		if v.Action != "error" || !strings.Contains(v.Error, tc.want) || hits.Load() != 0 || strings.Contains(v.Error, "bound-secret-value") {
			t.Fatalf("%s: %+v hits=%d", tc.expr, v, hits.Load())
		}
	}
}
