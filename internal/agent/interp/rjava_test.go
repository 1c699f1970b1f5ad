package interp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"image"
	_ "image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Issue 18: the R and Java kernels, with the host's Rscript and JDK (what
// scripts/install-deps.sh installs: r-base-core, default-jdk-headless).
// They are required: a missing one fails these tests instead of skipping.

func requireBin(t *testing.T, bins ...string) {
	t.Helper()
	for _, bin := range bins {
		found := false
		for _, dir := range filepath.SplitList("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin") {
			if _, err := os.Stat(filepath.Join(dir, bin)); err == nil {
				found = true
			}
		}
		if !found {
			t.Fatalf("%s is not installed; scripts/install-deps.sh installs it (r-base-core, default-jdk-headless)", bin)
		}
	}
}

// runReq runs req and gathers its events, as run does.
func runReq(t *testing.T, ctx context.Context, c *Context, req RunRequest) *execution {
	t.Helper()
	var mu sync.Mutex
	e := &execution{}
	err := c.Run(ctx, req, func(ev Event) {
		mu.Lock()
		defer mu.Unlock()
		e.events = append(e.events, ev)
		switch ev.Type {
		case "stdout":
			e.stdout += ev.Text
		case "stderr":
			e.stderr += ev.Text
		case "result":
			e.results = append(e.results, ev)
		case "error":
			ev := ev
			e.err = &ev
		case "end_of_execution":
			e.ended = true
		}
	})
	if err != nil {
		t.Fatalf("run %q: %v", req.Code, err)
	}
	if !e.ended {
		t.Fatalf("run %q: no end_of_execution", req.Code)
	}
	return e
}

func TestRKernel(t *testing.T) {
	requireBin(t, "Rscript")
	s, u := newService(t)
	c, err := s.Create(u, false, "r", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Info().Language != "r" {
		t.Fatalf("language %q", c.Info().Language)
	}
	// The last value's printed form, as IRkernel's text/plain; state persists.
	if got := mainText(t, run(t, c, "x <- 1+1; x", 0)); got != "[1] 2" {
		t.Fatalf("main result %q, want [1] 2", got)
	}
	if got := mainText(t, run(t, c, "x + 40", 0)); got != "[1] 42" {
		t.Fatalf("state not kept: %q", got)
	}
	// stdout; every visible top-level value is a result, the last
	// expression's (here invisible) would be the main one.
	e := run(t, c, "cat('hi\\n'); print(1:3); 5; invisible(7)", 0)
	mustOK(t, e)
	if !strings.Contains(e.stdout, "hi\n[1] 1 2 3\n") {
		t.Fatalf("stdout %q", e.stdout)
	}
	if len(e.results) != 1 || e.results[0].Text != "[1] 5" || e.main() != nil {
		t.Fatalf("results %+v", e.results)
	}
	// A character value reads as R prints it (E2B drops no quotes: they
	// do not enclose the whole text).
	if got := mainText(t, run(t, c, `"hello"`, 0)); got != `[1] "hello"` {
		t.Fatalf("string %q", got)
	}
	// A data.frame: its printed form and an HTML table.
	e = run(t, c, "data.frame(a = c(1, 2), b = c('x', 'y'))", 0)
	m := e.main()
	if mustOK(t, e); m == nil || m.Text != "  a b\n1 1 x\n2 2 y" || !strings.Contains(m.HTML, "<table") || !strings.Contains(m.HTML, "<td>y</td>") {
		t.Fatalf("data.frame %+v", e.results)
	}
	// Errors: name, message, the cell's calls; warnings go to stderr.
	e = run(t, c, "f <- function() stop('boom')\ng <- function() f()\ng()", 0)
	if e.err == nil || e.err.Name != "ERROR" || e.err.Value != "boom" || !strings.Contains(e.err.Traceback, "Error in f(): boom") ||
		!strings.Contains(e.err.Traceback, "1. g()") || strings.Contains(e.err.Traceback, "withCallingHandlers") {
		t.Fatalf("error %+v", e.err)
	}
	if e = run(t, c, "y <- ", 0); e.err == nil || e.err.Name != "ERROR" || !strings.Contains(e.err.Value, "unexpected end of input") {
		t.Fatalf("parse error %+v", e.err)
	}
	e = run(t, c, "log(-1)", 0)
	if got := mainText(t, e); got != "[1] NaN" || !strings.Contains(e.stderr, "NaNs produced") {
		t.Fatalf("warning: %q stderr %q", got, e.stderr)
	}
	// The run's env is set for the run only.
	e = runReq(t, context.Background(), c, RunRequest{Code: "Sys.getenv('WARDEN_X')", Env: map[string]string{"WARDEN_X": "during"}})
	if got := mainText(t, e); got != `[1] "during"` {
		t.Fatalf("env during %q", got)
	}
	if got := mainText(t, run(t, c, "Sys.getenv('WARDEN_X', 'unset')", 0)); got != `[1] "unset"` {
		t.Fatalf("env after %q", got)
	}
	// A plot comes back as PNG.
	e = run(t, c, "plot(1:3)", 0)
	mustOK(t, e)
	if len(e.results) != 1 || e.results[0].PNG == "" {
		t.Fatalf("plot %+v", e.results)
	}
	png, err := base64.StdEncoding.DecodeString(e.results[0].PNG)
	if err != nil {
		t.Fatal(err)
	}
	if _, format, err := image.Decode(bytes.NewReader(png)); err != nil || format != "png" {
		t.Fatalf("plot image: %v %q", err, format)
	}
	// Interrupt and timeout: the context keeps its state.
	go func() { time.Sleep(time.Second); c.Interrupt() }()
	if e = run(t, c, "Sys.sleep(60)", 0); e.err == nil || e.err.Name != "KeyboardInterrupt" {
		t.Fatalf("interrupt %+v", e.err)
	}
	if e = run(t, c, "repeat {}", time.Second); e.err == nil || e.err.Name != "TimeoutError" || !strings.Contains(e.err.Value, "keeps its state") {
		t.Fatalf("timeout %+v", e.err)
	}
	if got := mainText(t, run(t, c, "x", 0)); got != "[1] 2" {
		t.Fatalf("after interrupts %q", got)
	}
	// quit() ends the interpreter: the context restarts.
	if e = run(t, c, "quit()", 0); e.err == nil || e.err.Name != "ContextRestarted" {
		t.Fatalf("quit %+v", e.err)
	}
	if e = run(t, c, "exists('x')", 0); mainText(t, e) != "[1] FALSE" {
		t.Fatalf("after restart %+v", e.results)
	}
}

func TestJavaKernel(t *testing.T) {
	requireBin(t, "java", "javac")
	s, u := newService(t)
	c, err := s.Create(u, false, "java", "")
	if err != nil {
		t.Fatal(err)
	}
	if c.Info().Language != "java" {
		t.Fatalf("language %q", c.Info().Language)
	}
	// The driver was compiled into the user's cache.
	if _, err := os.Stat(filepath.Join(u.Home, ".cache", "warden", "java-"+javaTag, "WardenJava.class")); err != nil {
		t.Fatalf("compiled driver: %v", err)
	}
	// A declaration has no value; an expression's value is the main result.
	e := run(t, c, "int x = 1 + 1;", 0)
	if mustOK(t, e); len(e.results) != 0 {
		t.Fatalf("declaration results %+v", e.results)
	}
	if got := mainText(t, run(t, c, "x", 0)); got != "2" {
		t.Fatalf("main result %q, want 2", got)
	}
	// A String reads without quotes, as IJava shows it.
	if got := mainText(t, run(t, c, `"it's \"q\""`, 0)); got != `it's "q"` {
		t.Fatalf("string %q", got)
	}
	e = run(t, c, "System.out.println(\"hi\");\nSystem.err.println(\"oops\");\nint sq(int n) { return n * n; }\nsq(x) + 38", 0)
	if got := mainText(t, e); got != "42" || e.stdout != "hi\n" || e.stderr != "oops\n" {
		t.Fatalf("result %q stdout %q stderr %q", got, e.stdout, e.stderr)
	}
	// Methods and classes persist and may be redefined.
	mustOK(t, run(t, c, "record P(int a, int b) {}\nint sq(int n) { return n * n * 1; }", 0))
	if got := mainText(t, run(t, c, "new P(sq(2), 1)", 0)); got != "P[a=4, b=1]" {
		t.Fatalf("record %q", got)
	}
	// Errors: an exception with its class and trace; a compile error.
	e = run(t, c, "void f() { throw new IllegalStateException(\"boom\"); }\nf();", 0)
	if e.err == nil || e.err.Name != "java.lang.IllegalStateException" || e.err.Value != "boom" || !strings.Contains(e.err.Traceback, "at .f(") {
		t.Fatalf("exception %+v", e.err)
	}
	if e = run(t, c, "undefinedThing + 1", 0); e.err == nil || e.err.Name != "CompilationException" || !strings.Contains(e.err.Value, "cannot find symbol") {
		t.Fatalf("compile error %+v", e.err)
	}
	if e = run(t, c, "int y = ", 0); e.err == nil || e.err.Name != "CompilationException" {
		t.Fatalf("incomplete %+v", e.err)
	}
	// The run's env: System.getenv and a system property, for the run only.
	e = runReq(t, context.Background(), c, RunRequest{Code: `System.getenv("WARDEN_X") + "/" + System.getProperty("WARDEN_X")`, Env: map[string]string{"WARDEN_X": "during"}})
	if got := mainText(t, e); got != "during/during" {
		t.Fatalf("env during %q", got)
	}
	if got := mainText(t, run(t, c, `System.getenv("WARDEN_X") + "/" + System.getProperty("WARDEN_X")`, 0)); got != "null/null" {
		t.Fatalf("env after %q", got)
	}
	// Interrupts (a sleep, a busy loop) and a timeout keep the state.
	go func() { time.Sleep(time.Second); c.Interrupt() }()
	if e = run(t, c, "Thread.sleep(60000);", 0); e.err == nil || e.err.Name != "KeyboardInterrupt" {
		t.Fatalf("interrupt sleep %+v", e.err)
	}
	go func() { time.Sleep(time.Second); c.Interrupt() }()
	if e = run(t, c, "while (true) {}", 0); e.err == nil || e.err.Name != "KeyboardInterrupt" {
		t.Fatalf("interrupt loop %+v", e.err)
	}
	if e = run(t, c, "long n = 0; while (true) { n++; }", time.Second); e.err == nil || e.err.Name != "TimeoutError" || !strings.Contains(e.err.Value, "keeps its state") {
		t.Fatalf("timeout %+v", e.err)
	}
	if got := mainText(t, run(t, c, "x", 0)); got != "2" {
		t.Fatalf("after interrupts %q", got)
	}

	// Where the cache cannot be written, the source launcher runs it.
	s.cfg.Env = map[string]string{"XDG_CACHE_HOME": "/proc/warden-no-cache"}
	c2, err := s.Create(u, false, "java", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := mainText(t, run(t, c2, "Math.max(3, 7)", 0)); got != "7" {
		t.Fatalf("source-launched driver %q", got)
	}
	// Two contexts do not share state.
	if e := run(t, c2, "x", 0); e.err == nil || e.err.Name != "CompilationException" {
		t.Fatalf("second context sees x: %+v", e.err)
	}
}

// TestRJavaUnavailable: without R or Java in the sandbox, a run fails at
// once with RUnavailable or JavaUnavailable (as TypeScriptUnavailable),
// and creating a context says why.
func TestRJavaUnavailable(t *testing.T) {
	bin := t.TempDir()
	bash, err := filepath.EvalSymlinks("/bin/bash")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bash, filepath.Join(bin, "bash")); err != nil {
		t.Fatal(err)
	}
	s, u := newService(t)
	s.cfg.Env = map[string]string{"PATH": bin}
	s.cfg.DefaultUser = "root"
	for _, lang := range []string{"r", "java"} {
		_, err := s.Create(u, false, lang, "")
		var un *UnavailableError
		if !errors.As(err, &un) || !strings.Contains(un.Message, "not installed") {
			t.Fatalf("%s: create: %v", lang, err)
		}
	}
	mux := http.NewServeMux()
	s.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for lang, want := range map[string]string{"r": `"name":"RUnavailable"`, "java": `"name":"JavaUnavailable"`} {
		resp, err := http.Post(srv.URL+"/execute", "application/json", strings.NewReader(`{"code":"1","language":"`+lang+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), want) || !strings.Contains(string(out), "end_of_execution") {
			t.Fatalf("%s: %d %s", lang, resp.StatusCode, out)
		}
	}
}
