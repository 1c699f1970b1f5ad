package interp

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	_ "image/png"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/agent/process"
	"github.com/warden-sandbox/warden/internal/agent/sysuser"
)

// These tests run the embedded drivers with the host's python3, node and
// bash (found in process.DefaultPath, as in a sandbox of the base template),
// as the current user, through the agent's process machinery.

func newService(t *testing.T) (*Service, *sysuser.User) {
	t.Helper()
	procs := process.New(process.Config{})
	s := New(Config{Procs: procs, AsActingUser: true, NoDefaultContexts: true})
	t.Cleanup(func() { s.Close(); procs.Close() })
	u := &sysuser.User{Name: "me", UID: uint32(os.Geteuid()), GID: uint32(os.Getegid()), Home: t.TempDir(), Shell: "/bin/sh"}
	if os.Geteuid() == 0 {
		u.Groups = []uint32{0}
	}
	return s, u
}

func need(t *testing.T, bin string) {
	t.Helper()
	for _, dir := range strings.Split(process.DefaultPath, ":") {
		if _, err := os.Stat(dir + "/" + bin); err == nil {
			return
		}
	}
	t.Skipf("SKIP: %s is not installed in %s (scripts/install-deps.sh installs it)", bin, process.DefaultPath)
}

// execution gathers a run's events.
type execution struct {
	events  []Event
	stdout  string
	stderr  string
	results []Event
	err     *Event
	count   int
	ended   bool
}

func (e *execution) main() *Event {
	for i := range e.results {
		if e.results[i].IsMainResult != nil && *e.results[i].IsMainResult {
			return &e.results[i]
		}
	}
	return nil
}

func run(t *testing.T, c *Context, code string, timeout time.Duration) *execution {
	t.Helper()
	return runCtx(t, context.Background(), c, code, timeout)
}

func runCtx(t *testing.T, ctx context.Context, c *Context, code string, timeout time.Duration) *execution {
	t.Helper()
	var mu sync.Mutex
	e := &execution{}
	err := c.Run(ctx, RunRequest{Code: code, Timeout: timeout}, func(ev Event) {
		mu.Lock()
		defer mu.Unlock()
		if e.ended {
			t.Errorf("event after end_of_execution: %+v", ev)
		}
		e.events = append(e.events, ev)
		switch ev.Type {
		case "stdout":
			if ev.Timestamp == 0 {
				t.Errorf("stdout event without timestamp")
			}
			e.stdout += ev.Text
		case "stderr":
			e.stderr += ev.Text
		case "result":
			e.results = append(e.results, ev)
		case "error":
			ev := ev
			e.err = &ev
		case "number_of_executions":
			e.count = ev.ExecutionCount
		case "end_of_execution":
			e.ended = true
		}
	})
	if err != nil {
		t.Fatalf("run %q: %v", code, err)
	}
	if !e.ended {
		t.Fatalf("run %q: no end_of_execution", code)
	}
	return e
}

func mustOK(t *testing.T, e *execution) {
	t.Helper()
	if e.err != nil {
		t.Fatalf("unexpected error %s: %s\n%s", e.err.Name, e.err.Value, e.err.Traceback)
	}
}

func mainText(t *testing.T, e *execution) string {
	t.Helper()
	mustOK(t, e)
	m := e.main()
	if m == nil {
		t.Fatalf("no main result; events %+v", e.events)
	}
	return m.Text
}

func TestPythonStateResultsAndErrors(t *testing.T) {
	need(t, "python3")
	s, u := newService(t)
	c, err := s.Create(u, false, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := mainText(t, run(t, c, "import math\nx = 40\ndef f(a):\n    return a + 2\nf(x)", 0)); got != "42" {
		t.Fatalf("main result %q, want 42", got)
	}
	e := run(t, c, "x += 1\nx", 0)
	if got := mainText(t, e); got != "41" {
		t.Fatalf("state not kept: %q", got)
	}
	if e.count != 2 {
		t.Fatalf("execution_count %d, want 2", e.count)
	}
	// stdout/stderr interleaving of the cell's own output keeps its order,
	// and a subprocess's output (raw fd 1, a separate pipe whose place
	// among the prints is up to the scheduler) arrives before the end.
	e = run(t, c, "import sys, os\nprint('one')\nprint('two', file=sys.stderr)\nprint('three')\nos.system('echo sub')", 0)
	mustOK(t, e)
	var order []string
	for _, ev := range e.events {
		if (ev.Type == "stdout" || ev.Type == "stderr") && strings.TrimSpace(ev.Text) != "" && strings.TrimSpace(ev.Text) != "sub" {
			order = append(order, ev.Type+":"+strings.TrimSpace(ev.Text))
		}
	}
	if got := strings.Join(order, ","); got != "stdout:one,stderr:two,stdout:three" || !strings.Contains(e.stdout, "sub\n") {
		t.Fatalf("output order %q stdout %q", got, e.stdout)
	}
	// An exception with its traceback; the context lives on.
	e = run(t, c, "def boom():\n    raise ValueError('bad value')\nboom()", 0)
	if e.err == nil || e.err.Name != "ValueError" || e.err.Value != "bad value" ||
		!strings.Contains(e.err.Traceback, "Traceback (most recent call last)") || !strings.Contains(e.err.Traceback, "in boom") ||
		!strings.Contains(e.err.Traceback, "raise ValueError('bad value')") || strings.Contains(e.err.Traceback, "driver") {
		t.Fatalf("error %+v", e.err)
	}
	e = run(t, c, "1 +", 0)
	if e.err == nil || e.err.Name != "SyntaxError" {
		t.Fatalf("syntax error %+v", e.err)
	}
	if got := mainText(t, run(t, c, "x", 0)); got != "41" {
		t.Fatalf("after errors: %q", got)
	}
	// Rich results: _repr_html_ and friends, display().
	e = run(t, c, `class T:
    def _repr_html_(self): return "<b>hi</b>"
    def _repr_markdown_(self): return "**hi**"
    def _repr_json_(self): return {"a": 1}
    def __repr__(self): return "T()"
display("shown")
T()`, 0)
	m := e.main()
	if mustOK(t, e); m == nil || m.HTML != "<b>hi</b>" || m.Markdown != "**hi**" || m.Text != "T()" {
		t.Fatalf("html result %+v", e.results)
	}
	if js, ok := m.JSON.(map[string]any); !ok || js["a"] != float64(1) {
		t.Fatalf("json %#v", m.JSON)
	}
	if len(e.results) != 2 || e.results[0].Text != "shown" || *e.results[0].IsMainResult {
		t.Fatalf("display result %+v", e.results)
	}
	// Env vars per run.
	c2, err := s.Create(u, false, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	var env execution
	c2.Run(context.Background(), RunRequest{Code: "import os\nos.environ.get('WARDEN_X')", Env: map[string]string{"WARDEN_X": "yes"}}, func(ev Event) {
		if ev.Type == "result" {
			env.results = append(env.results, ev)
		}
	})
	if len(env.results) != 1 || env.results[0].Text != "yes" {
		t.Fatalf("env var: %+v", env.results)
	}
	// Two contexts do not share state.
	if e := run(t, c2, "x", 0); e.err == nil || e.err.Name != "NameError" {
		t.Fatalf("second context sees x: %+v", e.err)
	}
}

func TestPythonTimeoutAndInterrupt(t *testing.T) {
	need(t, "python3")
	s, u := newService(t)
	c, err := s.Create(u, false, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, run(t, c, "y = 7", 0))
	start := time.Now()
	e := run(t, c, "while True:\n    pass", 500*time.Millisecond)
	if e.err == nil || e.err.Name != "TimeoutError" || !strings.Contains(e.err.Value, "keeps its state") {
		t.Fatalf("timeout error %+v", e.err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("timeout took %s", d)
	}
	if got := mainText(t, run(t, c, "y", 0)); got != "7" {
		t.Fatalf("after timeout: %q", got)
	}
	// Interrupt (what the API's client disconnect and /interrupt do).
	go func() { time.Sleep(500 * time.Millisecond); c.Interrupt() }()
	e = run(t, c, "import time\nfor i in range(100):\n    time.sleep(0.1)", 0)
	if e.err == nil || e.err.Name != "KeyboardInterrupt" || !strings.Contains(e.err.Traceback, "time.sleep") {
		t.Fatalf("interrupt error %+v", e.err)
	}
	if got := mainText(t, run(t, c, "y * 6", 0)); got != "42" {
		t.Fatalf("after interrupt: %q", got)
	}
	// A client that goes away interrupts the run too.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	e = runCtx(t, ctx, c, "while True: pass", 0)
	if e.err == nil || e.err.Name != "KeyboardInterrupt" {
		t.Fatalf("cancel error %+v", e.err)
	}
	if got := mainText(t, run(t, c, "y", 0)); got != "7" {
		t.Fatalf("after cancel: %q", got)
	}
	// Restart loses state.
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	if e := run(t, c, "y", 0); e.err == nil || e.err.Name != "NameError" {
		t.Fatalf("after restart: %+v", e.err)
	}
}

func TestPythonMatplotlib(t *testing.T) {
	need(t, "python3")
	if err := exec.Command("/usr/bin/env", "PATH="+process.DefaultPath, "python3", "-c", "import matplotlib").Run(); err != nil {
		t.Skip("SKIP: matplotlib is not importable by python3 in " + process.DefaultPath + " (scripts/install-deps.sh installs python3-matplotlib)")
	}
	s, u := newService(t)
	c, err := s.Default(u, false, "python")
	if err != nil {
		t.Fatal(err)
	}
	e := run(t, c, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\nprint('plotted')", 0)
	mustOK(t, e)
	if len(e.results) != 1 || e.results[0].PNG == "" {
		t.Fatalf("want one PNG result, got %+v", e.results)
	}
	checkPNG(t, e.results[0].PNG)
	// plt.show() displays at once; the figure is not shown twice.
	e = run(t, c, "plt.figure(); plt.bar(['a','b'], [3, 5]); plt.show()", 0)
	mustOK(t, e)
	if len(e.results) != 1 {
		t.Fatalf("show: %d results", len(e.results))
	}
	checkPNG(t, e.results[0].PNG)
}

func checkPNG(t *testing.T, b64 string) {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("not a PNG: % x", b[:min(8, len(b))])
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil || format != "png" || cfg.Width < 50 || cfg.Height < 50 {
		t.Fatalf("decode PNG: %v %s %dx%d", err, format, cfg.Width, cfg.Height)
	}
}

func TestJavaScript(t *testing.T) {
	need(t, "node")
	s, u := newService(t)
	c, err := s.Create(u, false, "js", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Info().Language != JavaScript {
		t.Fatalf("language %q", c.Info().Language)
	}
	mustOK(t, run(t, c, "const a = 40; let b = 1; function f(x) { return x + 1 } class K { v() { return 'k' } }", 0))
	if got := mainText(t, run(t, c, "f(a) + b", 0)); got != "42" {
		t.Fatalf("bindings: %q", got)
	}
	// Declaring again is allowed, like a notebook re-running a cell.
	if got := mainText(t, run(t, c, "const a = 1; new K().v() + a", 0)); got != "k1" {
		t.Fatalf("redeclare: %q", got)
	}
	// Top-level await.
	if got := mainText(t, run(t, c, "const r = await new Promise(res => setTimeout(() => res(5), 50)); r * 2", 0)); got != "10" {
		t.Fatalf("await: %q", got)
	}
	if got := mainText(t, run(t, c, "r", 0)); got != "5" {
		t.Fatalf("await binding: %q", got)
	}
	// Output order.
	e := run(t, c, "console.log('one'); console.error('two'); process.stdout.write('three\\n'); ({x: 1})", 0)
	var order []string
	for _, ev := range e.events {
		if (ev.Type == "stdout" || ev.Type == "stderr") && strings.TrimSpace(ev.Text) != "" {
			order = append(order, ev.Type+":"+strings.TrimSpace(ev.Text))
		}
	}
	if got := strings.Join(order, ","); got != "stdout:one,stderr:two,stdout:three" || mainText(t, e) != "{ x: 1 }" {
		t.Fatalf("order %q result %+v err %+v", got, e.results, e.err)
	}
	// A rejected promise is an error.
	e = run(t, c, "await Promise.reject(new TypeError('nope'))", 0)
	if e.err == nil || e.err.Name != "TypeError" || e.err.Value != "nope" || !strings.Contains(e.err.Traceback, "TypeError: nope") {
		t.Fatalf("rejection: %+v", e.err)
	}
	e = run(t, c, "throw new RangeError('sync')", 0)
	if e.err == nil || e.err.Name != "RangeError" {
		t.Fatalf("throw: %+v", e.err)
	}
	// Infinite loop: timeout, then interrupt; the context survives both.
	e = run(t, c, "while (true) {}", 500*time.Millisecond)
	if e.err == nil || e.err.Name != "TimeoutError" || !strings.Contains(e.err.Value, "keeps its state") {
		t.Fatalf("timeout: %+v", e.err)
	}
	go func() { time.Sleep(400 * time.Millisecond); c.Interrupt() }()
	e = run(t, c, "for (;;) {}", 0)
	if e.err == nil || !strings.Contains(e.err.Value, "interrupted") {
		t.Fatalf("interrupt: %+v", e.err)
	}
	go func() { time.Sleep(400 * time.Millisecond); c.Interrupt() }()
	e = run(t, c, "await new Promise(() => {})", 0)
	if e.err == nil || !strings.Contains(e.err.Value, "interrupted") {
		t.Fatalf("interrupt await: %+v", e.err)
	}
	if got := mainText(t, run(t, c, "a + b", 0)); got != "2" {
		t.Fatalf("after interrupts: %q", got)
	}
	// Another context does not share state.
	c2, err := s.Create(u, false, "javascript", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := mainText(t, run(t, c2, "typeof a", 0)); got != "undefined" {
		t.Fatalf("second context: %q", got)
	}
}

func TestTypeScript(t *testing.T) {
	need(t, "node")
	s, u := newService(t)
	c, err := s.Create(u, false, "ts", "")
	if err != nil {
		t.Fatal(err)
	}
	e := run(t, c, "interface P { n: number }\nconst p: P = { n: 41 };\nfunction inc(x: number): number { return x + 1 }\ninc(p.n)", 0)
	if e.err != nil && e.err.Name == "TypeScriptUnavailable" {
		t.Skip("SKIP: the typescript npm package is not installed (scripts/install-deps.sh installs it)")
	}
	if got := mainText(t, e); got != "42" {
		t.Fatalf("ts: %q", got)
	}
	if got := mainText(t, run(t, c, "const q: number = await Promise.resolve(p.n); q", 0)); got != "41" {
		t.Fatalf("ts state: %q", got)
	}
}

func TestBash(t *testing.T) {
	need(t, "bash")
	s, u := newService(t)
	c, err := s.Create(u, false, "bash", "")
	if err != nil {
		t.Fatal(err)
	}
	e := run(t, c, "X=hello; greet() { echo \"$1 $X\"; }; cd /tmp", 0)
	mustOK(t, e)
	e = run(t, c, "greet world; pwd; echo err >&2", 0)
	mustOK(t, e)
	if e.stdout != "world hello\n/tmp\n" || e.stderr != "err\n" {
		t.Fatalf("stdout %q stderr %q", e.stdout, e.stderr)
	}
	e = run(t, c, "false", 0)
	if e.err == nil || e.err.Value != "exit status 1" {
		t.Fatalf("exit status: %+v", e.err)
	}
	e = run(t, c, "sleep 30", 300*time.Millisecond)
	if e.err == nil || e.err.Name != "TimeoutError" {
		t.Fatalf("timeout: %+v", e.err)
	}
	if e := run(t, c, "echo $X", 0); e.stdout != "hello\n" {
		t.Fatalf("after timeout: %q %+v", e.stdout, e.err)
	}
	// exit ends the shell: the context is reset and says so.
	e = run(t, c, "exit 3", 0)
	if e.err == nil || e.err.Name != "ContextRestarted" {
		t.Fatalf("exit: %+v", e.err)
	}
	if e := run(t, c, "echo ${X:-unset}", 0); e.stdout != "unset\n" {
		t.Fatalf("after exit: %q", e.stdout)
	}
}

func TestServiceContexts(t *testing.T) {
	need(t, "python3")
	s, u := newService(t)
	if _, err := s.Create(u, false, "cobol", ""); err == nil {
		t.Fatal("unsupported language accepted")
	}
	d1, err := s.Default(u, false, "")
	if err != nil {
		t.Fatal(err)
	}
	d2, _ := s.Default(u, false, "python")
	if d1 != d2 || d1.Info().Cwd != u.Home {
		t.Fatalf("default contexts %v %v", d1.Info(), d2.Info())
	}
	if l := s.List(); len(l) != 1 || l[0].Language != Python {
		t.Fatalf("list %+v", l)
	}
	if err := s.Remove(d1.Info().ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(d1.Info().ID); err == nil {
		t.Fatal("removed context found")
	}
	if err := s.Remove(d1.Info().ID); err == nil {
		t.Fatal("removed twice")
	}
	if _, err := s.Create(u, false, "python", "/nonexistent/dir"); err == nil {
		t.Fatal("missing cwd accepted")
	}
}
