package mcpgw

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/govern/governtest"
	"github.com/warden-sandbox/warden/internal/network/safedial"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
)

// The gateway's overhead (docs/benchmarks.md, "MCP gateway"): a tools/call
// through the gateway to a go-sdk upstream on loopback (a remote
// connector) beside the same call made to the upstream directly, in one
// run, alternating; and calls per second with concurrent clients. The
// gateway runs as wardend runs it (the governed path decides each call,
// with a policy loaded; the audit event is built), except that audit
// events go to memory rather than the daemon's sqlite log
// (BenchmarkMCPGatewayParallelSQLiteAudit sends them there).
//
//	CGO_ENABLED=0 go test -count=3 -run '^$' -bench BenchmarkMCPGateway -benchtime 3000x ./internal/mcpgw
//
// These are benchmarks, not tests: they assert nothing about speed.

// countAudit counts audit events and keeps none.
type countAudit struct{ n atomic.Int64 }

func (c *countAudit) Append(_ context.Context, e audit.Event) (audit.Event, error) {
	c.n.Add(1)
	return e, nil
}

type benchEnv struct {
	gw       *Gateway
	gwURL    string
	upURL    string
	upCalls  atomic.Int64
	auditLog *countAudit
	sqlAudit *audit.Logger // the daemon's audit log, when the env has it
}

// audited returns the number of audit events written so far.
func (e *benchEnv) audited() int64 {
	if e.sqlAudit != nil {
		seq, _ := e.sqlAudit.Head()
		return seq
	}
	return e.auditLog.n.Load()
}

// newBenchEnv sets the gateway up; with sqliteAudit its audit events go,
// as in wardend, to the tamper-evident log in a sqlite store (in a
// temporary directory), else to memory.
func newBenchEnv(b *testing.B, sqliteAudit ...bool) *benchEnv {
	b.Helper()
	e := &benchEnv{auditLog: &countAudit{}}
	var auditLog *govern.AuditLog
	if len(sqliteAudit) > 0 && sqliteAudit[0] {
		auditLog = e.openSQLiteAudit(b)
	} else {
		auditLog = governtest.AuditLog(b, e.auditLog)
	}
	up := mcp.NewServer(&mcp.Implementation{Name: "bench-up", Version: "1"}, nil)
	up.AddTool(&mcp.Tool{Name: "echo", Description: "Echo the text.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			e.upCalls.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(req.Params.Arguments)}}}, nil
		})
	uhs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	b.Cleanup(func() { uhs.CloseClientConnections(); uhs.Close() })
	e.upURL = uhs.URL

	st := newMemStore()
	eng := govern.New(govern.Config{Access: govern.CheckedAccess()})
	// A policy the call is evaluated against (it never matches).
	if _, err := eng.CreatePolicy(context.Background(), govern.Policy{ID: "bench", Scope: govern.Scope{Kind: govern.ScopeInstallation},
		Rules: []govern.Rule{{ID: "no-rm", Kinds: []govern.Kind{govern.KindMCPCall}, Outcome: govern.Deny,
			When: `mcp.tool == "rm_rf"`, Message: "no"}}}, "bench"); err != nil {
		b.Fatal(err)
	}
	ids := fakeAuth{agentKey: {Principal: store.Principal{ID: "agent-1", Kind: store.PrincipalAgent, CreatedBy: "alice"},
		Scopes: []auth.Scope{ScopeUse}}}
	// The daemon's dialer for connectors, with loopback allowed as an
	// admin would.
	dial, err := safedial.New(safedial.Options{Allow: []string{"127.0.0.1"}, AllowHTTP: true, MaxResponseBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	gw, err := New(Config{Store: st, Auth: ids, Govern: eng, Audit: auditLog, HTTPClient: dial.Client})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(gw.Close)
	e.gw = gw
	mux := http.NewServeMux()
	mux.Handle(PathPrefix, gw)
	ghs := httptest.NewServer(mux)
	b.Cleanup(func() { ghs.CloseClientConnections(); ghs.Close() })
	e.gwURL = ghs.URL + PathPrefix + "bench"
	ctx := context.Background()
	if err := st.CreateConnector(ctx, store.MCPConnector{ID: "up", Kind: store.MCPConnectorRemote, UpdatedAt: time.Now(),
		Spec: json.RawMessage(`{"url":"` + uhs.URL + `"}`)}); err != nil {
		b.Fatal(err)
	}
	if err := st.CreateMCPServer(ctx, store.MCPServer{ID: "bench", Spec: json.RawMessage(`{"connectors":[{"connector":"up"}]}`)}); err != nil {
		b.Fatal(err)
	}
	if err := st.PutMCPGrant(ctx, store.MCPGrant{ServerID: "bench", PrincipalID: "agent-1"}); err != nil {
		b.Fatal(err)
	}
	// Approve echo: list once (records it pending), approve, re-read.
	cs := e.client(b, e.gwURL, agentKey)
	if _, err := cs.ListTools(ctx, nil); err != nil {
		b.Fatal(err)
	}
	pins, _ := st.ListToolPins(ctx, store.MCPToolPinFilter{States: []string{store.MCPToolPending}})
	for _, p := range pins {
		if _, err := st.DecideToolPin(ctx, p.Connector, p.Tool, p.Hash, store.MCPToolApproved, "admin", time.Now()); err != nil {
			b.Fatal(err)
		}
	}
	gw.Invalidate()
	res, err := cs.ListTools(ctx, nil)
	if err != nil || len(res.Tools) != 1 {
		b.Fatalf("tools through the gateway: %v %+v", err, res)
	}
	cs.Close()
	return e
}

// openSQLiteAudit opens wardend's kind of audit log: an audit.Logger over
// a sqlite store, with its key and checkpoint file.
func (e *benchEnv) openSQLiteAudit(b *testing.B) *govern.AuditLog {
	b.Helper()
	dir := b.TempDir()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "warden.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	key, err := audit.LoadOrCreateKey(filepath.Join(dir, "secrets", "audit.key"))
	if err != nil {
		b.Fatal(err)
	}
	lg, err := audit.New(ctx, audit.Config{Store: db, Key: key, CheckpointPath: filepath.Join(dir, "secrets", "audit.checkpoint")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lg.Close() })
	al, err := govern.NewAuditLog(lg, db, nil)
	if err != nil {
		b.Fatal(err)
	}
	e.sqlAudit = lg
	return al
}

// client opens a session-era (2025-11-25) go-sdk client session, the
// era every current client speaks; key "" sends no Authorization.
func (e *benchEnv) client(b *testing.B, url, key string) *mcp.ClientSession {
	b.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	hc := &http.Client{Transport: tr}
	if key != "" {
		hc.Transport = keyTransport{key: key, base: tr}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1,
		DisableStandaloneSSE: true}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}

// keyTransport sends a bearer key on its own transport.
type keyTransport struct {
	key  string
	base http.RoundTripper
}

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+k.key)
	return k.base.RoundTrip(r)
}

func benchCall(b *testing.B, cs *mcp.ClientSession) {
	if err := call1(cs); err != nil {
		b.Fatal(err)
	}
}

func call1(cs *mcp.ClientSession) error {
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "bench"}})
	if err != nil {
		return err
	}
	if res.IsError {
		return fmt.Errorf("tool error: %+v", res.Content)
	}
	return nil
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return s[i]
}

// BenchmarkMCPGatewayOverhead alternates a call through the gateway with
// the same call made directly, and reports each one's p50 and p99 and
// the gateway's added cost (metrics in microseconds).
func BenchmarkMCPGatewayOverhead(b *testing.B) {
	e := newBenchEnv(b)
	direct := e.client(b, e.upURL, "")
	through := e.client(b, e.gwURL, agentKey)
	for range 50 { // warm both paths
		benchCall(b, direct)
		benchCall(b, through)
	}
	var dd, gd []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		benchCall(b, direct)
		t1 := time.Now()
		benchCall(b, through)
		t2 := time.Now()
		dd = append(dd, t1.Sub(t0))
		gd = append(gd, t2.Sub(t1))
	}
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	d50, d99, g50, g99 := percentile(dd, .5), percentile(dd, .99), percentile(gd, .5), percentile(gd, .99)
	b.ReportMetric(us(d50), "direct-p50-us")
	b.ReportMetric(us(d99), "direct-p99-us")
	b.ReportMetric(us(g50), "gateway-p50-us")
	b.ReportMetric(us(g99), "gateway-p99-us")
	b.ReportMetric(us(g50-d50), "added-p50-us")
	b.ReportMetric(us(g99-d99), "added-p99-us")
	reportLoad(b)
	if e.audited() < int64(b.N) {
		b.Fatalf("%d audit events for %d gateway calls", e.audited(), b.N)
	}
}

// BenchmarkMCPGatewayParallel drives the upstream directly and then the
// gateway with the same number of concurrent client sessions (-cpu sets
// GOMAXPROCS; 16 sessions per proc), b.N calls each way, and reports calls
// per second of each and their ratio. Issue 20's target is 1,000 calls/s
// through the gateway.
func BenchmarkMCPGatewayParallel(b *testing.B) { benchParallel(b, newBenchEnv(b)) }

// BenchmarkMCPGatewayParallelSQLiteAudit is the same with the audit
// events going to the daemon's sqlite-backed, hash-chained audit log (one
// synchronous append per call), as in wardend.
func BenchmarkMCPGatewayParallelSQLiteAudit(b *testing.B) { benchParallel(b, newBenchEnv(b, true)) }

func benchParallel(b *testing.B, e *benchEnv) {
	const perProc = 16
	n := perProc * runtime.GOMAXPROCS(0)
	direct := make([]*mcp.ClientSession, n)
	through := make([]*mcp.ClientSession, n)
	for i := range n {
		direct[i] = e.client(b, e.upURL, "")
		through[i] = e.client(b, e.gwURL, agentKey)
	}
	// run makes b.N calls spread over the sessions and returns calls/s.
	run := func(sessions []*mcp.ClientSession) float64 {
		var left atomic.Int64
		left.Store(int64(b.N))
		var wg sync.WaitGroup
		start := time.Now()
		for _, cs := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for left.Add(-1) >= 0 {
					if err := call1(cs); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return float64(b.N) / time.Since(start).Seconds()
	}
	for _, ss := range [][]*mcp.ClientSession{direct, through} { // warm both
		for _, cs := range ss {
			benchCall(b, cs)
		}
	}
	before := e.audited()
	b.ResetTimer()
	d := run(direct)
	g := run(through)
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(d, "direct-calls/s")
	b.ReportMetric(g, "calls/s")
	b.ReportMetric(g/d, "gateway/direct")
	reportLoad(b)
	if got := e.audited() - before; got < int64(b.N) {
		b.Fatalf("%d audit events for %d gateway calls", got, b.N)
	}
}

// reportLoad reports the 1-minute load average (Linux), so that a figure
// measured on a shared machine says so.
func reportLoad(b *testing.B) {
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		var l float64
		if _, err := fmt.Sscan(string(raw), &l); err == nil {
			b.ReportMetric(l, "load1")
		}
	}
}
