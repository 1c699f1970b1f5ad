package interp

// Issue 18, "Code interpreter": results as E2B's Jupyter-based
// code-interpreter template gives them, cell for cell.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/agent/process"
	"github.com/warden-sandbox/warden/internal/agent/sysuser"
)

func TestResultTextDropsOneQuotePair(t *testing.T) {
	for in, want := range map[string]string{`'hello'`: "hello", `"it's"`: "it's", `42`: "42", `'a' 'b'`: `a' 'b`, `'`: `'`, ``: ``, `[1, 'x']`: `[1, 'x']`} {
		if got := resultText(in); got != want {
			t.Errorf("resultText(%q) = %q, want %q", in, got, want)
		}
	}
	need(t, "python3")
	s, u := newService(t)
	c, err := s.Create(u, false, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := mainText(t, run(t, c, "'hello'", 0)); got != "hello" {
		t.Fatalf("'hello' gave %q", got)
	}
	if got := mainText(t, run(t, c, "['a']", 0)); got != "['a']" {
		t.Fatalf("['a'] gave %q", got)
	}
}

func stdoutEvents(e *execution) []string {
	var out []string
	for _, ev := range e.events {
		if ev.Type == "stdout" {
			out = append(out, ev.Text)
		}
	}
	return out
}

func TestPythonCellsAsIPython(t *testing.T) {
	need(t, "python3")
	s, u := newService(t)
	c, err := s.Create(u, false, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	// One print is one stdout message (print writes its parts separately).
	e := run(t, c, `print("a", "b", 3)`, 0)
	mustOK(t, e)
	if got := stdoutEvents(e); len(got) != 1 || got[0] != "a b 3\n" {
		t.Fatalf("print: %q", got)
	}
	// stdout and stderr keep their order.
	e = run(t, c, "import sys\nprint('1')\nprint('2', file=sys.stderr)\nprint('3')", 0)
	var order []string
	for _, ev := range e.events {
		if ev.Type == "stdout" || ev.Type == "stderr" {
			order = append(order, ev.Type+":"+ev.Text)
		}
	}
	if strings.Join(order, "|") != "stdout:1\n|stderr:2\n|stdout:3\n" {
		t.Fatalf("order %q", order)
	}
	// Indented cells are dedented.
	if got := mainText(t, run(t, c, "    x = 20\n    if x:\n        x += 1\n    x * 2", 0)); got != "42" {
		t.Fatalf("indented cell: %q", got)
	}
	// Shell escapes, with {expr} and $name expanded; x = !cmd captures.
	e = run(t, c, "name = 'world'\n!echo hello $name {1+1}\nfor i in range(1):\n    !echo inner\nlines = !printf 'p\\nq\\n'\nlines", 0)
	if mustOK(t, e); e.stdout != "hello world 2\ninner\n" {
		t.Fatalf("shell escape stdout %q", e.stdout)
	}
	if m := e.main(); m == nil || m.Text != "['p', 'q']" {
		t.Fatalf("captured %+v", e.results)
	}
	if got := mainText(t, run(t, c, "!exit 3\n_exit_code", 0)); got != "3" {
		t.Fatalf("_exit_code %q", got)
	}
	// A syntax error that no transformation explains is still reported.
	if e := run(t, c, "x = = 1", 0); e.err == nil || e.err.Name != "SyntaxError" {
		t.Fatalf("syntax error: %+v", e.err)
	}
}

func TestPythonPILAndDataFrame(t *testing.T) {
	need(t, "python3")
	if !pyHas(t, "PIL") || !pyHas(t, "pandas") {
		t.Skip("SKIP: python3-pil or python3-pandas is not installed (scripts/install-deps.sh installs them)")
	}
	s, u := newService(t)
	c, err := s.Create(u, false, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	e := run(t, c, "from PIL import Image\nimg = Image.new('RGB', (8, 4), 'red')\nimg.show()\ndisplay(img)", 0)
	mustOK(t, e)
	if len(e.results) != 2 {
		t.Fatalf("PIL results %+v", e.results)
	}
	for _, r := range e.results {
		if w, h := pngSize(t, r.PNG); w != 8 || h != 4 {
			t.Fatalf("PIL png %dx%d", w, h)
		}
	}
	e = run(t, c, "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', None], 'c': [1.5, float('nan')]})", 0)
	mustOK(t, e)
	m := e.main()
	if m == nil || !strings.Contains(m.HTML, "<table") {
		t.Fatalf("dataframe result %+v", e.results)
	}
	got, _ := json.Marshal(m.Data)
	if string(got) != `{"a":[1,2],"b":["x",null],"c":[1.5,null]}` {
		t.Fatalf("dataframe data %s", got)
	}
}

func pyHas(t *testing.T, mod string) bool {
	t.Helper()
	for _, dir := range strings.Split(process.DefaultPath, ":") {
		py := filepath.Join(dir, "python3")
		if _, err := os.Stat(py); err == nil {
			return runQuiet(py, "-c", "import "+mod) == nil
		}
	}
	return false
}

func TestPythonChartData(t *testing.T) {
	need(t, "python3")
	if !pyHas(t, "matplotlib") {
		t.Skip("SKIP: python3-matplotlib is not installed (scripts/install-deps.sh installs it)")
	}
	s, u := newService(t)
	c, err := s.Create(u, false, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	chart := func(code string) map[string]any {
		t.Helper()
		e := run(t, c, "import matplotlib.pyplot as plt\n"+code+"\nplt.show()", 0)
		mustOK(t, e)
		if len(e.results) != 1 || e.results[0].PNG == "" {
			t.Fatalf("%s: results %+v", code, e.results)
		}
		m, ok := e.results[0].Chart.(map[string]any)
		if !ok {
			t.Fatalf("%s: no chart in %+v", code, e.results[0])
		}
		return m
	}
	j := func(v any) string { b, _ := json.Marshal(v); return string(b) }

	m := chart("plt.plot([1, 2, 3], [4, 5, 6], label='up')\nplt.title('T')\nplt.xlabel('time (s)')\nplt.ylabel('v')")
	if m["type"] != "line" || m["title"] != "T" || m["x_label"] != "time (s)" || m["x_unit"] != "s" || m["y_label"] != "v" || m["x_scale"] != "linear" {
		t.Fatalf("line chart %s", j(m))
	}
	if got := j(m["elements"]); got != `[{"label":"up","points":[[1,4],[2,5],[3,6]]}]` {
		t.Fatalf("line elements %s", got)
	}
	if _, ok := m["x_ticks"].([]any); !ok {
		t.Fatalf("line x_ticks %s", j(m))
	}
	m = chart("plt.bar(['a', 'b'], [3, 7], label='g')")
	if m["type"] != "bar" || j(m["elements"]) != `[{"group":"g","label":"a","value":3},{"group":"g","label":"b","value":7}]` {
		t.Fatalf("bar chart %s", j(m))
	}
	m = chart("plt.scatter([1, 2], [3, 4], label='s')")
	if m["type"] != "scatter" || j(m["elements"]) != `[{"label":"s","points":[[1,3],[2,4]]}]` {
		t.Fatalf("scatter chart %s", j(m))
	}
	m = chart("plt.pie([1, 3], labels=['x', 'y'])")
	els, _ := m["elements"].([]any)
	if m["type"] != "pie" || len(els) != 2 || j(els[0].(map[string]any)["label"]) != `"x"` || els[1].(map[string]any)["angle"].(float64) != 270 {
		t.Fatalf("pie chart %s", j(m))
	}
	m = chart("plt.boxplot([[1, 2, 3, 4, 5, 100]], labels=['d'])")
	els, _ = m["elements"].([]any)
	if m["type"] != "box_and_whisker" || len(els) != 1 {
		t.Fatalf("box chart %s", j(m))
	}
	b := els[0].(map[string]any)
	if b["label"] != "d" || b["median"] != 3.5 || b["min"] != float64(1) || b["max"] != float64(5) || j(b["outliers"]) != "[100]" || b["first_quartile"] != 2.25 || b["third_quartile"] != 4.75 {
		t.Fatalf("box element %s", j(b))
	}
	m = chart("fig, (a1, a2) = plt.subplots(1, 2)\nfig.suptitle('both')\na1.plot([1, 2])\na2.bar(['q'], [1])")
	els, _ = m["elements"].([]any)
	if m["type"] != "superchart" || m["title"] != "both" || len(els) != 2 || els[0].(map[string]any)["type"] != "line" || els[1].(map[string]any)["type"] != "bar" {
		t.Fatalf("superchart %s", j(m))
	}
}

func TestBashRunEnvDoesNotLeak(t *testing.T) {
	need(t, "bash")
	s, u := newService(t)
	c, err := s.Create(u, false, "bash", "")
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, run(t, c, "export KEEP=before", 0))
	var out string
	err = c.Run(t.Context(), RunRequest{Code: "echo \"$KEEP $ONLY\"; false", Env: map[string]string{"KEEP": "during", "ONLY": "x y"}}, func(ev Event) {
		if ev.Type == "stdout" {
			out += ev.Text
		}
	})
	if err != nil || out != "during x y\n" {
		t.Fatalf("run env: %q %v", out, err)
	}
	e := run(t, c, "echo \"${KEEP}/${ONLY-unset}\"; env | grep -c '^KEEP=before$'", 0)
	if mustOK(t, e); e.stdout != "before/unset\n1\n" {
		t.Fatalf("after the run: %q", e.stdout)
	}
}

func TestJavaScriptESMImport(t *testing.T) {
	need(t, "node")
	s, u := newService(t)
	pkg := filepath.Join(u.Home, "node_modules", "esm-only")
	os.MkdirAll(pkg, 0o755)
	os.WriteFile(filepath.Join(pkg, "package.json"), []byte(`{"name":"esm-only","type":"module","exports":{".":{"import":"./i.js"}}}`), 0o644)
	os.WriteFile(filepath.Join(pkg, "i.js"), []byte("export const v = 41; export default function inc(x) { return x + 1 }\n"), 0o644)
	c, err := s.Create(u, false, "js", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := mainText(t, run(t, c, "import inc, { v as w } from 'esm-only'\nimport * as p from 'node:path'\nimport fs from 'fs'\ninc(w) + p.sep + typeof fs.readFileSync", 0)); got != "42/function" {
		t.Fatalf("esm import: %q", got)
	}
	if got := mainText(t, run(t, c, "inc(1) + (await import('esm-only')).v", 0)); got != "43" {
		t.Fatalf("names persist, import(): %q", got)
	}
	c2, err := s.Create(u, false, "ts", "")
	if err != nil {
		t.Skipf("SKIP: typescript: %v", err)
	}
	if got := mainText(t, run(t, c2, "import { v } from 'esm-only'\nconst n: number = v\nn + 1", 0)); got != "42" {
		t.Fatalf("ts esm import: %q", got)
	}
}

func TestDefaultContextsAndRoot(t *testing.T) {
	need(t, "python3")
	need(t, "node")
	procs := process.New(process.Config{})
	asRoot := os.Geteuid() == 0
	s := New(Config{Procs: procs, AsActingUser: !asRoot})
	t.Cleanup(func() { s.Close(); procs.Close() })
	u := &sysuser.User{Name: "me", UID: uint32(os.Geteuid()), GID: uint32(os.Getegid()), Home: t.TempDir(), Shell: "/bin/sh"}
	mux := http.NewServeMux()
	s.Register(mux)
	// The first request of a fresh service lists the default python and
	// javascript contexts, in creation order; so does every later one.
	sysuser.PasswdFile = writePasswd(t, u)
	sysuser.Forget()
	t.Cleanup(func() { sysuser.PasswdFile = "/etc/passwd"; sysuser.Forget() })
	s.cfg.DefaultUser = u.Name
	for i := 0; i < 2; i++ {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", "/contexts", nil))
		var l []Info
		json.Unmarshal(rec.Body.Bytes(), &l)
		if rec.Code != 200 || len(l) != 2 || l[0].Language != Python || l[1].Language != JavaScript || l[0].Cwd != u.Home {
			t.Fatalf("fresh list %d %s", rec.Code, rec.Body)
		}
	}
	c, err := s.Create(u, false, "python", "")
	if err != nil {
		t.Fatal(err)
	}
	if l := s.List(); len(l) != 3 || l[2].ID != c.Info().ID {
		t.Fatalf("list order %+v", l)
	}
	if !asRoot {
		t.Log("not root: interpreters running as root not checked")
		return
	}
	// Interpreters run as root, so a cwd under /root works.
	dir, err := os.MkdirTemp("/root", "ci18-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o700)
	c, err = s.Create(u, false, "python", dir)
	if err != nil {
		t.Fatalf("cwd under /root: %v", err)
	}
	if got := mainText(t, run(t, c, "import os; (os.getuid(), os.getcwd())", 0)); got != "(0, '"+dir+"')" {
		t.Fatalf("identity %q", got)
	}
}

func writePasswd(t *testing.T, u *sysuser.User) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "passwd")
	line := "root:x:0:0:root:/root:/bin/sh\n"
	if u.UID != 0 {
		line += u.Name + ":x:" + itoa(u.UID) + ":" + itoa(u.GID) + "::" + u.Home + ":/bin/sh\n"
	} else {
		line += u.Name + ":x:0:0::" + u.Home + ":/bin/sh\n"
	}
	os.WriteFile(p, []byte(line), 0o644)
	return p
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

func runQuiet(name string, args ...string) error { return exec.Command(name, args...).Run() }

func pngSize(t *testing.T, b64 string) (int, int) {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("png base64: %v", err)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil || format != "png" {
		t.Fatalf("png: %v %q", err, format)
	}
	return cfg.Width, cfg.Height
}

// TestServeLocal: the interpreter answers on its local port, and takes the
// port back when it was taken from it.
func TestServeLocal(t *testing.T) {
	need(t, "python3")
	s, _ := newService(t)
	s.cfg.DefaultUser = "root"
	old := localRetry
	localRetry = 50 * time.Millisecond
	t.Cleanup(func() { localRetry = old })
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := taken.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.ServeLocal(ctx, addr); close(done) }()
	defer func() { cancel(); <-done }()
	time.Sleep(200 * time.Millisecond) // retrying while the port is taken
	taken.Close()
	var body []byte
	for i := 0; i < 100; i++ {
		resp, err := http.Get("http://" + addr + "/health")
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if string(body) != `"OK"` {
		t.Fatalf("health %q", body)
	}
	resp, err := http.Post("http://"+addr+"/execute", "application/json", strings.NewReader(`{"code":"6*7"}`))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(out), `"text":"42"`) {
		t.Fatalf("execute: %s", out)
	}
}

// TestExplicitUserRunsAsUser: a request that names its user (Warden's own
// API: Authorization, or the acting-user header for the sandbox's default
// user) gets an interpreter running as that user; only a request that names
// none (E2B's clients) gets root.
func TestExplicitUserRunsAsUser(t *testing.T) {
	s := New(Config{NoDefaultContexts: true})
	t.Cleanup(s.Close)
	u := &sysuser.User{Name: "me", UID: 1234, GID: 1234, Home: t.TempDir(), Shell: "/bin/sh"}
	sysuser.PasswdFile = writePasswd(t, u)
	sysuser.Forget()
	t.Cleanup(func() { sysuser.PasswdFile = "/etc/passwd"; sysuser.Forget() })
	s.cfg.DefaultUser = u.Name
	for _, c := range []struct {
		header, value string
		explicit      bool
	}{
		{"", "", false},
		{"Authorization", sysuser.BasicAuth("me"), true},
		{ActingUserHeader, "1", true},
		{ActingUserHeader, "0", false},
	} {
		r := httptest.NewRequest("POST", "/contexts", nil)
		if c.header != "" {
			r.Header.Set(c.header, c.value)
		}
		got, explicit, err := s.user(r)
		if err != nil || got.Name != "me" || explicit != c.explicit {
			t.Errorf("%s=%q: user %v, explicit %v, %v; want me, %v", c.header, c.value, got, explicit, err, c.explicit)
		}
	}
	if os.Geteuid() != 0 {
		t.Log("not root: running an interpreter as another uid not checked")
		return
	}
	need(t, "python3")
	procs := process.New(process.Config{})
	t.Cleanup(func() { procs.Close() })
	s2 := New(Config{Procs: procs, NoDefaultContexts: true})
	t.Cleanup(s2.Close)
	nobody := &sysuser.User{Name: "nobody", UID: 65534, GID: 65534, Home: "/tmp", Shell: "/bin/sh"}
	ctx, err := s2.Create(nobody, true, "python", "/tmp")
	if err != nil {
		t.Fatal(err)
	}
	if got := mainText(t, run(t, ctx, "import os; os.getuid()", 0)); got != "65534" {
		t.Fatalf("an interpreter for a named user runs as uid %s, want 65534", got)
	}
	ctx, err = s2.Create(nobody, false, "python", "/tmp")
	if err != nil {
		t.Fatal(err)
	}
	if got := mainText(t, run(t, ctx, "import os; os.getuid()", 0)); got != "0" {
		t.Fatalf("an interpreter for an unnamed user runs as uid %s, want 0 (root, as E2B's template)", got)
	}
}
