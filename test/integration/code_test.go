package integration

import (
	"bytes"
	"context"
	"image"
	_ "image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestCodeInterpreter drives the code interpreter of a real sandbox (base
// template: the host's python3, node and bash) through the SDK and the CLI.
func TestCodeInterpreter(t *testing.T) {
	state, run := newDirs(t)
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)
	sb := create(t, c, warden.CreateSandboxRequest{})
	ctx := ctxT(t)
	runCode := func(t *testing.T, req warden.RunCodeRequest) *warden.Execution {
		t.Helper()
		ex, err := c.RunCode(ctx, sb.ID, req, warden.CodeHandlers{})
		if err != nil {
			t.Fatalf("run %q: %v", req.Code, err)
		}
		return ex
	}
	ok := func(t *testing.T, ex *warden.Execution) {
		t.Helper()
		if ex.Error != nil {
			t.Fatalf("error %s: %s\n%s", ex.Error.Name, ex.Error.Value, ex.Error.Traceback)
		}
	}

	t.Run("Python", func(t *testing.T) {
		ok(t, runCode(t, warden.RunCodeRequest{Code: "import os\nn = 20\nwho = os.getuid()"}))
		ex := runCode(t, warden.RunCodeRequest{Code: "n * 2 + 2", Language: "python"})
		if ok(t, ex); ex.Text() != "42" || ex.ExecutionCount != 2 {
			t.Fatalf("state: %q count %d", ex.Text(), ex.ExecutionCount)
		}
		if ex := runCode(t, warden.RunCodeRequest{Code: "who"}); ex.Text() != "1000" {
			t.Fatalf("runs as uid %q, want the sandbox user 1000", ex.Text())
		}
		var order []string
		ex, err := c.RunCode(ctx, sb.ID, warden.RunCodeRequest{Code: "import sys\nprint('a', end='')\nprint('b', file=sys.stderr, end='')\nprint('c', end='')"}, warden.CodeHandlers{
			OnStdout: func(s string) { order = append(order, "out:"+s) },
			OnStderr: func(s string) { order = append(order, "err:"+s) },
		})
		if err != nil {
			t.Fatal(err)
		}
		if ok(t, ex); strings.Join(order, ",") != "out:a,err:b,out:c" || strings.Join(ex.Logs.Stdout, "") != "ac" {
			t.Fatalf("order %q logs %+v", order, ex.Logs)
		}
		ex = runCode(t, warden.RunCodeRequest{Code: "def f():\n    return 1 / 0\nf()"})
		if ex.Error == nil || ex.Error.Name != "ZeroDivisionError" || !strings.Contains(ex.Error.Traceback, "return 1 / 0") || !strings.Contains(ex.Error.Traceback, "in f") {
			t.Fatalf("exception: %+v", ex.Error)
		}
		ex = runCode(t, warden.RunCodeRequest{Code: "class H:\n    def _repr_html_(self):\n        return '<table><tr><td>1</td></tr></table>'\nH()"})
		if ok(t, ex); len(ex.Results) != 1 || !ex.Results[0].IsMainResult || ex.Results[0].HTML != "<table><tr><td>1</td></tr></table>" {
			t.Fatalf("html: %+v", ex.Results)
		}
	})

	t.Run("Matplotlib", func(t *testing.T) {
		if exec.Command("/usr/bin/python3", "-c", "import matplotlib").Run() != nil {
			t.Fatal("python3-matplotlib is not installed on the host, whose /usr the base template shares (scripts/install-deps.sh installs it)")
		}
		ex := runCode(t, warden.RunCodeRequest{Code: "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([0, 1, 2], [2, 1, 3])\nplt.show()"})
		ok(t, ex)
		if len(ex.Results) != 1 {
			t.Fatalf("want one figure, got %+v", ex.Results)
		}
		b, err := ex.Results[0].PNGBytes()
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Fatalf("png: %v % x", err, b[:min(len(b), 8)])
		}
		cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
		if err != nil || format != "png" || cfg.Width < 100 || cfg.Height < 100 {
			t.Fatalf("decode: %v %s %+v", err, format, cfg)
		}
	})

	t.Run("TimeoutAndInterrupt", func(t *testing.T) {
		cc, err := c.CreateCodeContext(ctx, sb.ID, warden.CreateCodeContextRequest{Language: "python", Cwd: "/tmp"})
		if err != nil || cc.Cwd != "/tmp" || cc.Language != "python" {
			t.Fatalf("create: %+v %v", cc, err)
		}
		ok(t, runCode(t, warden.RunCodeRequest{ContextID: cc.ID, Code: "kept = 'yes'"}))
		ex := runCode(t, warden.RunCodeRequest{ContextID: cc.ID, Code: "while True: pass", TimeoutSeconds: 1})
		if ex.Error == nil || ex.Error.Name != "TimeoutError" {
			t.Fatalf("timeout: %+v", ex.Error)
		}
		go func() {
			time.Sleep(700 * time.Millisecond)
			c.InterruptCodeContext(ctx, sb.ID, cc.ID)
		}()
		ex = runCode(t, warden.RunCodeRequest{ContextID: cc.ID, Code: "while True: pass"})
		if ex.Error == nil || ex.Error.Name != "KeyboardInterrupt" {
			t.Fatalf("interrupt: %+v", ex.Error)
		}
		if ex := runCode(t, warden.RunCodeRequest{ContextID: cc.ID, Code: "import os\n(kept, os.getcwd())"}); ex.Text() != "('yes', '/tmp')" {
			t.Fatalf("after interrupts: %q %+v", ex.Text(), ex.Error)
		}
		// Another Python context shares nothing with this one.
		if ex := runCode(t, warden.RunCodeRequest{Code: "'kept' in globals()"}); ex.Text() != "False" {
			t.Fatalf("default context sees kept: %q", ex.Text())
		}
		list, err := c.CodeContexts(ctx, sb.ID)
		if err != nil || len(list) < 2 {
			t.Fatalf("list: %+v %v", list, err)
		}
		if err := c.RestartCodeContext(ctx, sb.ID, cc.ID); err != nil {
			t.Fatal(err)
		}
		if ex := runCode(t, warden.RunCodeRequest{ContextID: cc.ID, Code: "kept"}); ex.Error == nil || ex.Error.Name != "NameError" {
			t.Fatalf("after restart: %+v", ex.Error)
		}
		if err := c.DeleteCodeContext(ctx, sb.ID, cc.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.RunCode(ctx, sb.ID, warden.RunCodeRequest{ContextID: cc.ID, Code: "1"}, warden.CodeHandlers{}); !warden.IsNotFound(err) {
			t.Fatalf("run in deleted context: %v", err)
		}
		if _, err := c.RunCode(ctx, sb.ID, warden.RunCodeRequest{ContextID: cc.ID, Language: "python", Code: "1"}, warden.CodeHandlers{}); err == nil {
			t.Fatal("context_id and language accepted together")
		}
	})

	t.Run("JavaScript", func(t *testing.T) {
		ok(t, runCode(t, warden.RunCodeRequest{Language: "javascript", Code: "const base = 40; function add(a, b) { return a + b }"}))
		ex := runCode(t, warden.RunCodeRequest{Language: "js", Code: "const extra = await Promise.resolve(2); add(base, extra)"})
		if ok(t, ex); ex.Text() != "42" {
			t.Fatalf("js: %q", ex.Text())
		}
		ex = runCode(t, warden.RunCodeRequest{Language: "javascript", Code: "await new Promise((_, rej) => setTimeout(() => rej(new Error('rejected!')), 10))"})
		if ex.Error == nil || ex.Error.Name != "Error" || ex.Error.Value != "rejected!" {
			t.Fatalf("rejection: %+v", ex.Error)
		}
		ex = runCode(t, warden.RunCodeRequest{Language: "javascript", Code: "while (true) {}", TimeoutSeconds: 1})
		if ex.Error == nil || ex.Error.Name != "TimeoutError" {
			t.Fatalf("timeout: %+v", ex.Error)
		}
		if ex := runCode(t, warden.RunCodeRequest{Language: "javascript", Code: "base + 2"}); ex.Text() != "42" {
			t.Fatalf("after timeout: %q %+v", ex.Text(), ex.Error)
		}
	})

	t.Run("TypeScript", func(t *testing.T) {
		ex := runCode(t, warden.RunCodeRequest{Language: "typescript", Code: "type N = number\nconst half = (x: N): N => x / 2\nhalf(84)"})
		if ex.Error != nil && ex.Error.Name == "TypeScriptUnavailable" {
			t.Fatal("the typescript npm package is not installed on the host (scripts/install-deps.sh installs it)")
		}
		if ok(t, ex); ex.Text() != "42" {
			t.Fatalf("ts: %q", ex.Text())
		}
	})

	t.Run("Bash", func(t *testing.T) {
		ok(t, runCode(t, warden.RunCodeRequest{Language: "bash", Code: "COUNT=41; cd /tmp"}))
		ex := runCode(t, warden.RunCodeRequest{Language: "bash", Code: "echo $((COUNT + 1)) $PWD $GREETING", Env: map[string]string{"GREETING": "hi"}})
		if ok(t, ex); strings.Join(ex.Logs.Stdout, "") != "42 /tmp hi\n" {
			t.Fatalf("bash: %q", ex.Logs.Stdout)
		}
		if ex := runCode(t, warden.RunCodeRequest{Language: "bash", Code: "exit 3"}); ex.Error == nil {
			t.Fatal("exit: no error")
		}
	})

	t.Run("CLI", func(t *testing.T) {
		out, errb, code := d.cli(t, "", "run", sb.ID, "--lang", "python", "print('hello'); 6 * 7")
		if code != 0 || out != "hello\n42\n" {
			t.Fatalf("run: %d %q %q", code, out, errb)
		}
		out, errb, code = d.cli(t, "console.log(1 + 1)", "run", sb.ID, "--lang", "js", "-")
		if code != 0 || out != "2\n" {
			t.Fatalf("run stdin: %d %q %q", code, out, errb)
		}
		f := filepath.Join(t.TempDir(), "cell.py")
		os.WriteFile(f, []byte("raise KeyError('k')"), 0o644)
		_, errb, code = d.cli(t, "", "run", sb.ID, "-f", f)
		if code != 1 || !strings.Contains(errb, "KeyError") {
			t.Fatalf("run -f error: %d %q", code, errb)
		}
		if exec.Command("/usr/bin/python3", "-c", "import matplotlib").Run() == nil {
			dir := t.TempDir()
			_, errb, code = d.cli(t, "", "run", sb.ID, "--save-images", dir, "import matplotlib.pyplot as plt\nplt.plot([1,2])")
			m, _ := filepath.Glob(filepath.Join(dir, "*.png"))
			if code != 0 || len(m) != 1 {
				t.Fatalf("save images: %d %q %v", code, errb, m)
			}
		}
		out, _, code = d.cli(t, "", "contexts", "ls", sb.ID)
		if code != 0 || !strings.Contains(out, "python") {
			t.Fatalf("contexts ls: %d %q", code, out)
		}
	})
	_ = context.Background
}
