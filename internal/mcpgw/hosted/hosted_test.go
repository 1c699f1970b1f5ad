package hosted

// These tests run real native sandboxes (root, like CI): a sqlite store,
// the native backend running warden-agent (built here), the template store
// and the sandbox manager. The stdio MCP server is this test binary itself
// (static, CGO_ENABLED=0), copied into each sandbox by Config.Setup and run
// with WARDEN_HOSTED_TEST_SERVER=1, driven by a go-sdk client through the
// Runner's transport.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/backend/native"
	"github.com/warden-sandbox/warden/internal/mcpgw"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	"github.com/warden-sandbox/warden/internal/template"
)

const serverEnv = "WARDEN_HOSTED_TEST_SERVER"

// serverPath is where Setup puts the server binary in a sandbox.
const serverPath = "/tmp/mcp-test-server"

var env struct {
	st    store.Store
	mgr   *sandbox.Manager
	owner string
	self  []byte // this test binary
}

func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) == "1" {
		serve()
		return
	}
	os.Exit(run(m))
}

// serve is the stdio MCP server run inside sandboxes.
func serve() {
	s := mcp.NewServer(&mcp.Implementation{Name: "hosted-test", Version: "1"}, nil)
	type echoIn struct {
		Text string `json:"text"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "echoes text"}, func(ctx context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "pid and token"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		text := fmt.Sprintf("pid=%d token=%s static=%s", os.Getpid(), os.Getenv("TEST_TOKEN"), os.Getenv("STATIC"))
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "crash", Description: "exits"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		os.Exit(3)
		return nil, nil, nil
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}

func run(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "SKIP: the hosted connector tests run real native sandboxes, which need root (CI runs as root); skipping the whole package")
		return 0
	}
	dir, err := os.MkdirTemp("", "warden-hosted-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	if err := setup(dir); err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		return 1
	}
	code := m.Run()
	// Nothing may be left running.
	ctx := context.Background()
	sbs, _, err := env.mgr.List(ctx, store.SandboxFilter{States: []string{"starting", "running", "paused"}, Limit: 1000})
	if err == nil && len(sbs) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d sandboxes left running\n", len(sbs))
		code = 1
		for _, sb := range sbs {
			env.mgr.Kill(ctx, sb.ID, "test teardown")
		}
	}
	env.mgr.Shutdown()
	env.st.Close()
	return code
}

func setup(dir string) error {
	ctx := context.Background()
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		return err
	}
	env.self = self
	st, err := sqlite.Open(ctx, filepath.Join(dir, "warden.db"))
	if err != nil {
		return err
	}
	env.st = st
	now := time.Now().UTC()
	env.owner = "prn-hostedowner"
	if err := st.CreatePrincipal(ctx, store.Principal{ID: env.owner, Kind: store.PrincipalUser, Name: "mcp-owner", CreatedAt: now}); err != nil {
		return fmt.Errorf("create principal: %w", err)
	}
	agentBin := filepath.Join(dir, "warden-agent")
	build := exec.Command("go", "build", "-o", agentBin, "github.com/warden-sandbox/warden/cmd/warden-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build warden-agent: %v\n%s", err, out)
	}
	if err := native.Preflight(); err != nil {
		return fmt.Errorf("native preflight: %w", err)
	}
	b, err := native.New(native.Config{RunDir: filepath.Join(dir, "run"), AgentPath: agentBin})
	if err != nil {
		return err
	}
	tmpl, err := template.OpenStore(filepath.Join(dir, "templates"))
	if err != nil {
		return err
	}
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("WARDEN_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	env.mgr = sandbox.New(sandbox.Config{}, st, b, tmpl, log)
	return nil
}

// newRunner returns a Runner over the shared manager whose sandboxes get
// the server binary, closed with the test.
func newRunner(t *testing.T, mod func(*Config)) *Runner {
	t.Helper()
	cfg := Config{
		Sandboxes:  env.mgr,
		Connectors: env.st,
		Owner:      env.owner,
		Setup: func(ctx context.Context, sb store.Sandbox, agent *agentclient.Client) error {
			return agent.WriteFile(ctx, serverPath, "", 0o755, strings.NewReader(string(env.self)))
		},
		Env: func(ctx context.Context, connectorID, principalID string) (map[string]string, error) {
			return map[string]string{"TEST_TOKEN": "token-of-" + connectorID + "-" + principalID}, nil
		},
		Grace:      2 * time.Second,
		MinBackoff: 100 * time.Millisecond,
		MaxBackoff: time.Second,
		Check:      200 * time.Millisecond,
	}
	if os.Getenv("WARDEN_TEST_LOG") != "" {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

func specJSON(t *testing.T, extra map[string]any) json.RawMessage {
	t.Helper()
	m := map[string]any{
		"command": []string{serverPath},
		"env":     map[string]string{serverEnv: "1", "STATIC": "static-value"},
	}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// dial opens a go-sdk client session through r's transport.
func dial(t *testing.T, ctx context.Context, r *Runner, connector string, spec json.RawMessage, principal string) *mcp.ClientSession {
	t.Helper()
	tr, err := r.Transport(ctx, connector, spec, principal)
	if err != nil {
		t.Fatal(err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return cs
}

func callText(ctx context.Context, cs *mcp.ClientSession, tool string, args map[string]any) (string, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "", err
	}
	if len(res.Content) == 0 {
		return "", errors.New("empty result")
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return "", fmt.Errorf("content %T", res.Content[0])
	}
	if res.IsError {
		return "", errors.New(tc.Text)
	}
	return tc.Text, nil
}

func pidOf(t *testing.T, whoami string) int {
	t.Helper()
	f := strings.Fields(whoami)
	if len(f) == 0 || !strings.HasPrefix(f[0], "pid=") {
		t.Fatalf("whoami = %q", whoami)
	}
	n, err := strconv.Atoi(strings.TrimPrefix(f[0], "pid="))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// alive reports whether pid runs in sandbox id.
func alive(t *testing.T, ctx context.Context, id string, pid int) bool {
	t.Helper()
	agent, err := env.mgr.Agent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	res, err := agent.Run(ctx, agentclient.Cmd{Args: []string{"/bin/sh", "-c", fmt.Sprintf("test -d /proc/%d && ! grep -q '^State:.*Z' /proc/%d/status", pid, pid)}})
	if err != nil {
		t.Fatal(err)
	}
	return res.ExitCode == 0
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func sandboxState(t *testing.T, ctx context.Context, id string) string {
	sb, err := env.mgr.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return sb.State
}

// TestHostedRoundTrip: list and call tools of a stdio server in a sandbox;
// the connector's env and the credential env reach the process; closing
// the session ends the process; one sandbox serves many connections.
func TestHostedRoundTrip(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	r := newRunner(t, nil)
	spec := specJSON(t, nil)
	cs := dial(t, ctx, r, "rt", spec, "prn-a")
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "crash,echo,whoami" {
		t.Errorf("tools = %v", names)
	}
	if got, err := callText(ctx, cs, "echo", map[string]any{"text": "hello\nworld"}); err != nil || got != "hello\nworld" {
		t.Errorf("echo = %q, %v", got, err)
	}
	who, err := callText(ctx, cs, "whoami", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(who, "token=token-of-rt- ") || !strings.Contains(who, "static=static-value") {
		t.Errorf("whoami = %q: want the shared credential and the spec's env", who)
	}
	sb := r.Sandbox("rt", "")
	if sb == "" {
		t.Fatal("no sandbox recorded")
	}
	pid := pidOf(t, who)
	if !alive(t, ctx, sb, pid) {
		t.Fatal("server not running")
	}
	cs.Close()
	waitFor(t, ctx, "the server to exit", func() bool { return !alive(t, ctx, sb, pid) })

	// A second connection: same sandbox, a new process.
	cs2 := dial(t, ctx, r, "rt", spec, "prn-b")
	who2, err := callText(ctx, cs2, "whoami", nil)
	if err != nil {
		t.Fatal(err)
	}
	if pidOf(t, who2) == pid && r.Sandbox("rt", "") == sb {
		// (pids may be reused, but not by the very next process)
		t.Errorf("the second connection reused the process")
	}
	if r.Sandbox("rt", "") != sb {
		t.Errorf("sandbox changed: %s -> %s", sb, r.Sandbox("rt", ""))
	}
	cs2.Close()

	// Close kills the sandbox.
	r.Close(ctx)
	if st := sandboxState(t, ctx, sb); st != string(sandbox.StateStopped) {
		t.Errorf("after Close the sandbox is %s", st)
	}
	if _, err := r.Transport(ctx, "rt", spec, ""); !errors.Is(err, ErrClosed) {
		t.Errorf("Transport after Close: %v", err)
	}
}

// TestHostedServerDies: a server that exits ends its session; the next
// Connect starts a new process in the same sandbox.
func TestHostedServerDies(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	r := newRunner(t, nil)
	spec := specJSON(t, nil)
	cs := dial(t, ctx, r, "crashy", spec, "")
	who, err := callText(ctx, cs, "whoami", nil)
	if err != nil {
		t.Fatal(err)
	}
	sb := r.Sandbox("crashy", "")
	if _, err := callText(ctx, cs, "crash", nil); err == nil {
		t.Fatal("crash returned a result")
	}
	if _, err := callText(ctx, cs, "echo", map[string]any{"text": "x"}); err == nil {
		t.Error("the session outlived its server")
	}
	cs.Close()
	cs2 := dial(t, ctx, r, "crashy", spec, "")
	defer cs2.Close()
	who2, err := callText(ctx, cs2, "whoami", nil)
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if pidOf(t, who2) == pidOf(t, who) {
		t.Error("same pid after the crash")
	}
	if r.Sandbox("crashy", "") != sb {
		t.Error("a server crash replaced the sandbox")
	}
}

// TestHostedSandboxKilled: a killed sandbox ends its sessions; the
// supervisor starts another while the connector is in use, and the next
// Connect uses it.
func TestHostedSandboxKilled(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	r := newRunner(t, nil)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go r.Run(rctx)
	spec := specJSON(t, nil)
	cs := dial(t, ctx, r, "killed", spec, "")
	if _, err := callText(ctx, cs, "echo", map[string]any{"text": "x"}); err != nil {
		t.Fatal(err)
	}
	old := r.Sandbox("killed", "")
	if err := env.mgr.Kill(ctx, old, "test kills it"); err != nil {
		t.Fatal(err)
	}
	if _, err := callText(ctx, cs, "echo", map[string]any{"text": "x"}); err == nil {
		t.Error("the session outlived its sandbox")
	}
	cs.Close()
	waitFor(t, ctx, "the supervisor's new sandbox", func() bool {
		id := r.Sandbox("killed", "")
		return id != "" && id != old
	})
	fresh := r.Sandbox("killed", "")
	if st := sandboxState(t, ctx, fresh); st != string(sandbox.StateRunning) {
		t.Fatalf("new sandbox is %s", st)
	}
	cs2 := dial(t, ctx, r, "killed", spec, "")
	defer cs2.Close()
	if got, err := callText(ctx, cs2, "echo", map[string]any{"text": "again"}); err != nil || got != "again" {
		t.Errorf("after restart: %q, %v", got, err)
	}
	if r.Sandbox("killed", "") != fresh {
		t.Error("Connect did not use the supervisor's sandbox")
	}
}

// TestHostedKilledWithoutSupervisor: without Run, the next Connect after a
// sandbox death makes a new sandbox itself.
func TestHostedKilledWithoutSupervisor(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	r := newRunner(t, nil)
	spec := specJSON(t, nil)
	cs := dial(t, ctx, r, "nosup", spec, "")
	old := r.Sandbox("nosup", "")
	cs.Close()
	if err := env.mgr.Kill(ctx, old, "test kills it"); err != nil {
		t.Fatal(err)
	}
	cs2 := dial(t, ctx, r, "nosup", spec, "")
	defer cs2.Close()
	if _, err := callText(ctx, cs2, "echo", map[string]any{"text": "x"}); err != nil {
		t.Fatal(err)
	}
	if id := r.Sandbox("nosup", ""); id == old || id == "" {
		t.Errorf("sandbox %q after the kill (old %s)", id, old)
	}
}

// TestHostedPerUser: per-user connectors get one sandbox per principal,
// each with only its principal's credential.
func TestHostedPerUser(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	r := newRunner(t, nil)
	spec := specJSON(t, map[string]any{"per_user": true})
	if _, err := r.Transport(ctx, "pu", spec, ""); err == nil {
		t.Error("per-user transport without a principal")
	}
	a := dial(t, ctx, r, "pu", spec, "prn-a")
	defer a.Close()
	b := dial(t, ctx, r, "pu", spec, "prn-b")
	defer b.Close()
	wa, err := callText(ctx, a, "whoami", nil)
	if err != nil {
		t.Fatal(err)
	}
	wb, err := callText(ctx, b, "whoami", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(wa, "token=token-of-pu-prn-a ") || !strings.Contains(wb, "token=token-of-pu-prn-b ") {
		t.Errorf("credentials: a %q, b %q", wa, wb)
	}
	sa, sb := r.Sandbox("pu", "prn-a"), r.Sandbox("pu", "prn-b")
	if sa == "" || sb == "" || sa == sb {
		t.Errorf("sandboxes %q and %q", sa, sb)
	}
	got, err := env.mgr.Get(ctx, sa)
	if err != nil {
		t.Fatal(err)
	}
	if got.Metadata[MetaPrincipal] != "prn-a" || got.Metadata[MetaConnector] != "pu" || got.Owner != env.owner {
		t.Errorf("sandbox metadata %v, owner %s", got.Metadata, got.Owner)
	}
	if _, ok := got.Env["TEST_TOKEN"]; ok {
		t.Error("the credential is stored with the sandbox")
	}
}

// TestHostedSpecChange: a changed spec replaces the sandbox; Forget kills
// the connector's sandboxes.
func TestHostedSpecChange(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	r := newRunner(t, nil)
	cs := dial(t, ctx, r, "chg", specJSON(t, nil), "")
	old := r.Sandbox("chg", "")
	cs.Close()
	spec2 := specJSON(t, map[string]any{"env": map[string]string{serverEnv: "1", "STATIC": "v2"}})
	cs2 := dial(t, ctx, r, "chg", spec2, "")
	who, err := callText(ctx, cs2, "whoami", nil)
	if err != nil {
		t.Fatal(err)
	}
	cs2.Close()
	if !strings.Contains(who, "static=v2") {
		t.Errorf("whoami = %q", who)
	}
	if st := sandboxState(t, ctx, old); st != string(sandbox.StateStopped) {
		t.Errorf("old sandbox is %s", st)
	}
	fresh := r.Sandbox("chg", "")
	r.Forget(ctx, "chg")
	if st := sandboxState(t, ctx, fresh); st != string(sandbox.StateStopped) {
		t.Errorf("after Forget the sandbox is %s", st)
	}
}

// TestHostedBadServer: a command that exits at once fails the session; the
// next Connect waits out the backoff (here longer than its context).
func TestHostedBadServer(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	r := newRunner(t, func(c *Config) { c.MinBackoff, c.MaxBackoff = time.Hour, time.Hour })
	spec := json.RawMessage(`{"command":["/bin/sh","-c","echo broken >&2; exit 7"]}`)
	tr, err := r.Transport(ctx, "bad", spec, "")
	if err != nil {
		t.Fatal(err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	if cs, err := c.Connect(ctx, tr, nil); err == nil {
		cs.Close()
		t.Fatal("initialize succeeded against a server that exited")
	}
	// The server's end is recorded when its process stream ends.
	waitFor(t, ctx, "the server's end", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		in := r.insts[instKey{connector: "bad"}]
		return in != nil && len(in.conns) == 0 && in.failures > 0
	})
	tr2, err := r.Transport(ctx, "bad", spec, "")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = tr2.Connect(short)
	if err == nil || !strings.Contains(err.Error(), "restarting after failures") {
		t.Errorf("second connect: %v, want the backoff", err)
	}
	// A missing command is an error at Connect.
	r2 := newRunner(t, nil)
	tr3, err := r2.Transport(ctx, "missing", json.RawMessage(`{"command":["/nonexistent/server"]}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := tr3.Connect(ctx); err == nil {
		// The agent may report the failure as an end event instead.
		_, rerr := conn.Read(ctx)
		conn.Close()
		if rerr == nil || !errors.Is(rerr, io.EOF) && !strings.Contains(rerr.Error(), "closed") {
			t.Errorf("read from a missing command: %v", rerr)
		}
	}
}

// TestHostedReap: sandboxes marked as hosted that no Runner knows (left by
// an earlier daemon) are killed; others are left alone.
func TestHostedReap(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	left, err := env.mgr.Create(ctx, sandbox.CreateRequest{Owner: env.owner, Metadata: map[string]string{MetaHosted: "true", MetaConnector: "old"}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := env.mgr.Create(ctx, sandbox.CreateRequest{Owner: env.owner})
	if err != nil {
		t.Fatal(err)
	}
	defer env.mgr.Kill(ctx, other.ID, "test end")
	r := newRunner(t, nil)
	cs := dial(t, ctx, r, "mine", specJSON(t, nil), "")
	defer cs.Close()
	n, err := r.Reap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("reaped %d, want 1", n)
	}
	if st := sandboxState(t, ctx, left.ID); st != string(sandbox.StateStopped) {
		t.Errorf("leftover is %s", st)
	}
	if st := sandboxState(t, ctx, other.ID); st != string(sandbox.StateRunning) {
		t.Errorf("unrelated sandbox is %s", st)
	}
	if st := sandboxState(t, ctx, r.Sandbox("mine", "")); st != string(sandbox.StateRunning) {
		t.Errorf("the runner's own sandbox is %s", st)
	}
}

// TestNetworkPolicy maps the spec's network list to a sandbox policy.
func TestNetworkPolicy(t *testing.T) {
	if p, err := NetworkPolicy(&mcpgw.HostedSpec{}); p != nil || err != nil {
		t.Errorf("empty: %v, %v", p, err)
	}
	if p, err := NetworkPolicy(&mcpgw.HostedSpec{Network: []string{"*"}}); err != nil || p.Mode != network.ModeOpen {
		t.Errorf("*: %v, %v", p, err)
	}
	p, err := NetworkPolicy(&mcpgw.HostedSpec{Network: []string{"registry.npmjs.org", "*.github.com", "203.0.113.0/24"}})
	if err != nil || p.Mode != network.ModeAllowlist || len(p.Allow) != 3 || p.Allow[2].CIDR == "" || p.Allow[1].Host != "*.github.com" {
		t.Errorf("allowlist: %+v, %v", p, err)
	}
	for _, bad := range [][]string{{"exa mple.com"}, {"10.0.0.0/99"}, {"*", "x.com"}} {
		if _, err := NetworkPolicy(&mcpgw.HostedSpec{Network: bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New without a manager")
	}
}
