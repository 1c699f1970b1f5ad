package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// ndjson writes events as an NDJSON stream, flushing each.
func ndjson(w http.ResponseWriter, events ...map[string]any) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	for _, ev := range events {
		json.NewEncoder(w).Encode(ev)
		w.(http.Flusher).Flush()
	}
}

func TestExecStreamsAndExits(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  map[string]any
		code int
		err  string // on stderr after the output
	}{
		{"success", map[string]any{"type": "end", "exit_code": 0, "status": "exit status 0"}, 0, ""},
		{"exit 3", map[string]any{"type": "end", "exit_code": 3, "status": "exit status 3"}, 3, ""},
		{"killed", map[string]any{"type": "end", "exit_code": -1, "signal": 9, "status": "signal: killed", "error": "timeout after 5s"}, 137, "warden: process 7: timeout after 5s\n"},
		{"terminated", map[string]any{"type": "end", "exit_code": -1, "signal": 15, "status": "signal: terminated"}, 143, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newFakeDaemon(t)
			var got warden.ExecRequest
			d.handle("POST /v1/sandboxes/sb-1/exec", func(w http.ResponseWriter, r *http.Request) {
				json.NewDecoder(r.Body).Decode(&got)
				ndjson(w,
					map[string]any{"type": "start", "pid": 7},
					map[string]any{"type": "stdout", "data": []byte("out\n")},
					map[string]any{"type": "stderr", "data": []byte("err\n")},
					tc.end)
			})
			res := run(t, d, "exec", "--cwd", "/tmp", "--env", "A=1", "--tag", "job", "--timeout", "5s", "--user", "root", "sb-1", "--", "sh", "-c", "exit 3")
			if res.code != tc.code || res.stdout != "out\n" || res.stderr != "err\n"+tc.err {
				t.Errorf("code %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
			}
			want := warden.ExecRequest{Cmd: []string{"sh", "-c", "exit 3"}, Env: map[string]string{"A": "1"}, Cwd: "/tmp", User: "root", Tag: "job", TimeoutSeconds: 5}
			if got.Cwd != want.Cwd || got.User != want.User || got.Tag != want.Tag || got.TimeoutSeconds != 5 || got.Stdin ||
				strings.Join(got.Cmd, " ") != "sh -c exit 3" || got.Env["A"] != "1" {
				t.Errorf("request %+v, want %+v", got, want)
			}
		})
	}
}

func TestExecStdin(t *testing.T) {
	d := newFakeDaemon(t)
	var (
		mu     sync.Mutex
		stdin  bytes.Buffer
		closed = make(chan struct{})
		req    warden.ExecRequest
	)
	d.handle("POST /v1/sandboxes/sb-1/exec", func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&req)
		ndjson(w, map[string]any{"type": "start", "pid": 7})
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
		}
		mu.Lock()
		data := strings.ToUpper(stdin.String())
		mu.Unlock()
		ndjson(w, map[string]any{"type": "stdout", "data": []byte(data)}, map[string]any{"type": "end", "exit_code": 0})
	})
	d.handle("POST /v1/sandboxes/sb-1/processes/7/stdin", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		stdin.Write(b)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	d.handle("POST /v1/sandboxes/sb-1/processes/7/close-stdin", func(w http.ResponseWriter, r *http.Request) {
		close(closed)
		w.WriteHeader(http.StatusNoContent)
	})
	res := runIn(t, d, "hello stdin\n", "exec", "-i", "sb-1", "cat")
	if res.code != 0 || res.stdout != "HELLO STDIN\n" || res.stderr != "" {
		t.Errorf("code %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
	if !req.Stdin {
		t.Error("exec -i should ask for stdin")
	}
}

func TestExecErrors(t *testing.T) {
	d := newFakeDaemon(t)
	d.apiError("POST /v1/sandboxes/sb-gone/exec", 409, "conflict", "sandbox sb-gone is stopped")
	d.handle("POST /v1/sandboxes/sb-1/exec", func(w http.ResponseWriter, r *http.Request) {
		ndjson(w, map[string]any{"type": "start", "pid": 7}, map[string]any{"type": "error", "code": "internal", "message": "agent lost"})
	})
	res := run(t, d, "exec", "sb-gone", "--", "true")
	if res.code != 1 || !strings.HasPrefix(res.stderr, "warden: start process in sandbox sb-gone: conflict: sandbox sb-gone is stopped (http 409, request req-1)\n") {
		t.Errorf("conflict: code %d stderr %q", res.code, res.stderr)
	}
	res = run(t, d, "exec", "sb-1", "--", "true")
	if res.code != 1 || !strings.Contains(res.stderr, "warden: internal: agent lost") {
		t.Errorf("stream error: code %d stderr %q", res.code, res.stderr)
	}
}

// TestExecInterrupt cancels the context while the command runs: warden stops with 130
// and says how to find the process again.
func TestExecInterrupt(t *testing.T) {
	d := newFakeDaemon(t)
	started := make(chan struct{})
	d.handle("POST /v1/sandboxes/sb-1/exec", func(w http.ResponseWriter, r *http.Request) {
		ndjson(w, map[string]any{"type": "start", "pid": 7}, map[string]any{"type": "stdout", "data": []byte("working\n")})
		close(started)
		<-r.Context().Done()
	})
	env, out, errb := testEnv(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		time.Sleep(50 * time.Millisecond)
		cancel()
	}()
	code := Run(ctx, []string{"--url", d.srv.URL, "exec", "sb-1", "--", "sleep", "100"}, env)
	want := "warden: interrupted\nhint: process 7 keeps running in sandbox sb-1: 'warden process attach sb-1 7' reattaches to it, 'warden process signal sb-1 7' stops it\n"
	if code != ExitInterrupted || out.String() != "working\n" || errb.String() != want {
		t.Errorf("code %d stdout %q stderr:\n%s\nwant:\n%s", code, out.String(), errb.String(), want)
	}
}

func TestProcessAttachAndSignal(t *testing.T) {
	d := newFakeDaemon(t)
	d.handle("GET /v1/sandboxes/sb-1/processes/7/stream", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("replay") != "true" {
			t.Errorf("attach should replay by default: %s", r.URL)
		}
		ndjson(w, map[string]any{"type": "start", "pid": 7}, map[string]any{"type": "stdout", "data": []byte("old output\n")},
			map[string]any{"type": "end", "exit_code": 4})
	})
	var sig map[string]string
	d.handle("POST /v1/sandboxes/sb-1/processes/7/signal", func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&sig)
		w.WriteHeader(http.StatusNoContent)
	})
	res := run(t, d, "process", "attach", "sb-1", "7")
	if res.code != 4 || res.stdout != "old output\n" {
		t.Errorf("attach: code %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
	res = run(t, d, "process", "kill", "-s", "9", "sb-1", "7")
	if res.code != 0 || sig["signal"] != "SIGKILL" {
		t.Errorf("signal: code %d stderr %q sent %v", res.code, res.stderr, sig)
	}
}

// fakeTerminal records what exec -t does to the local terminal.
type fakeTerminal struct {
	mu       sync.Mutex
	cols     int
	rows     int
	raw      bool
	restored bool
	resize   func()
}

func (f *fakeTerminal) Size() (int, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cols, f.rows, nil
}

func (f *fakeTerminal) MakeRaw() (func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.raw = true
	return func() { f.mu.Lock(); f.restored = true; f.mu.Unlock() }, nil
}

func (f *fakeTerminal) NotifyResize(fn func()) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resize = fn
	return func() {}
}

func (f *fakeTerminal) setSize(cols, rows int) {
	f.mu.Lock()
	f.cols, f.rows = cols, rows
	fn := f.resize
	f.mu.Unlock()
	fn()
}

// TestExecPTY runs exec -it against a fake terminal endpoint: the local terminal goes raw
// and is restored, input reaches the program, a resize is forwarded, and the program's
// exit code becomes warden's.
func TestExecPTY(t *testing.T) {
	d := newFakeDaemon(t)
	term := &fakeTerminal{cols: 120, rows: 40}
	var query string
	d.handle("GET /v1/sandboxes/sb-1/pty", func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.RawQuery
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.CloseNow()
		ctx := r.Context()
		c.Write(ctx, websocket.MessageBinary, []byte("$ "))
		// Read input until "exit\r"; answer a resize with its size.
		var in bytes.Buffer
		for !strings.Contains(in.String(), "exit\r") {
			typ, b, err := c.Read(ctx)
			if err != nil {
				t.Errorf("read: %v", err)
				return
			}
			if typ == websocket.MessageText {
				var rs map[string]any
				json.Unmarshal(b, &rs)
				c.Write(ctx, websocket.MessageBinary, []byte("resized to "+jsonNum(rs["cols"])+"x"+jsonNum(rs["rows"])+"\r\n"))
				continue
			}
			in.Write(b)
			if in.String() == "ls\r" {
				c.Write(ctx, websocket.MessageBinary, []byte("ls\r\nfile\r\n$ "))
				go term.setSize(100, 30)
			}
		}
		c.Write(ctx, websocket.MessageText, []byte(`{"type":"exit","exit_code":5}`))
		c.Close(websocket.StatusNormalClosure, "")
	})
	env, out, errb := testEnv(t, "")
	pr, pw := io.Pipe()
	env.Stdin = pr
	env.Terminal = term
	go func() {
		pw.Write([]byte("ls\r"))
		time.Sleep(200 * time.Millisecond)
		pw.Write([]byte("exit\r"))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := Run(ctx, []string{"--url", d.srv.URL, "exec", "-it", "--user", "root", "sb-1", "--", "/bin/sh"}, env)
	pw.Close()
	if code != 5 {
		t.Errorf("exit code %d, want 5; stderr %q", code, errb.String())
	}
	if want := "$ ls\r\nfile\r\n$ resized to 100x30\r\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
	if query != "cmd=%2Fbin%2Fsh&cols=120&rows=40&user=root" {
		t.Errorf("pty query %q", query)
	}
	term.mu.Lock()
	defer term.mu.Unlock()
	if !term.raw || !term.restored {
		t.Errorf("raw %v restored %v: the terminal must be put in raw mode and restored", term.raw, term.restored)
	}
}

func jsonNum(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestExecTTYWithoutTerminal runs exec -it with stdin from a pipe: no raw mode, the size
// from $COLUMNS and $LINES, and Ctrl-D at the end of input.
func TestExecTTYWithoutTerminal(t *testing.T) {
	d := newFakeDaemon(t)
	var query string
	d.handle("GET /v1/sandboxes/sb-1/pty", func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.RawQuery
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		var in bytes.Buffer
		for !bytes.HasSuffix(in.Bytes(), []byte{eot}) {
			_, b, err := c.Read(r.Context())
			if err != nil {
				t.Errorf("read: %v", err)
				return
			}
			in.Write(b)
		}
		c.Write(r.Context(), websocket.MessageBinary, []byte("got "+strings.TrimSuffix(in.String(), "\x04")))
		c.Write(r.Context(), websocket.MessageText, []byte(`{"type":"exit","exit_code":0}`))
		c.Close(websocket.StatusNormalClosure, "")
	})
	env, out, errb := testEnv(t, "echo hi\n")
	env.Getenv = func(k string) string { return map[string]string{"COLUMNS": "132", "LINES": "50"}[k] }
	code := Run(context.Background(), []string{"--url", d.srv.URL, "exec", "-i", "-t", "sb-1"}, env)
	if code != 0 || out.String() != "got echo hi\n" || errb.Len() != 0 {
		t.Errorf("code %d stdout %q stderr %q", code, out.String(), errb.String())
	}
	if query != "cols=132&rows=50" {
		t.Errorf("query %q", query)
	}
}
