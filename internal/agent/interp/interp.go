// Package interp is warden-agent's code interpreter: stateful contexts, each
// a long-lived interpreter process (python3, node, bash) started as the
// acting user through the agent's process machinery, that run cells of code
// and answer with Jupyter-shaped results on the wire of E2B's
// code-interpreter server (see the e2b protocol notes, "code interpreter"):
//
//	POST   /execute                {"code","context_id"?,"language"?,"env_vars"?,"timeout_ms"?} -> NDJSON events
//	GET    /contexts               [{"id","language","cwd"}]
//	POST   /contexts               {"language"?,"cwd"?} -> {"id","language","cwd"}
//	POST   /contexts/{id}/restart  a fresh interpreter, state lost
//	DELETE /contexts/{id}
//
// There is no Jupyter: the drivers (driver.py, driver.js, driver.sh,
// driver.R, driver.java) are embedded in the agent and passed on the
// interpreter's command line (R and Java through a small bash starter); they
// read commands on fd 3 and write JSON events on fd 4, while fd 1 and 2 carry
// raw output (a subprocess's) to the agent.
//
// Without a context_id, /execute uses the default context of the language
// (python when none), created on first use. Runs of one context are
// serialized. A run that times out or whose client goes away is interrupted
// (SIGINT to the interpreter's process group: KeyboardInterrupt in Python,
// breakOnSigint in node); if it has not stopped after a grace period the
// interpreter is killed and replaced, and the run reports that the context
// was reset.
package interp

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/agent/process"
	"github.com/warden-sandbox/warden/internal/agent/sysuser"
)

//go:embed driver.py
var pythonDriver string

//go:embed driver.js
var jsDriver string

//go:embed driver.sh
var bashDriver string

//go:embed driver.R
var rDriver string

//go:embed driver_r.sh
var rStarter string

//go:embed driver.java
var javaDriver string

//go:embed driver_java.sh
var javaStarter string

// javaTag names the compiled Java driver in a user's cache (driver_java.sh):
// a new driver compiles anew.
var javaTag = func() string {
	h := sha256.Sum256([]byte(javaDriver + javaStarter))
	return hex.EncodeToString(h[:8])
}()

// Tunables (variables so tests can shorten them).
var (
	startTimeout   = 15 * time.Second       // interpreter start until its ready event
	slowStart      = 90 * time.Second       // the same for R and Java (a JVM compiling its driver on a loaded machine)
	interruptGrace = 2 * time.Second        // after SIGINT, until the interpreter is replaced
	syncWait       = 500 * time.Millisecond // after done, for the raw-output sync marks
	jsTimeoutSlack = 2 * time.Second        // node's own vm timeout goes first
)

// Languages.
const (
	Python     = "python"
	JavaScript = "javascript"
	TypeScript = "typescript"
	Bash       = "bash"
	R          = "r"
	Java       = "java"
)

// supported lists the languages for error messages.
const supported = "python, javascript, typescript, bash, r, java"

// Normalize maps a language name or alias to one of the languages, or "" if
// unsupported. The empty name is Python.
func Normalize(lang string) string {
	switch strings.ToLower(strings.TrimSpace(lang)) {
	case "", "python", "python3", "py":
		return Python
	case "javascript", "js", "node", "nodejs":
		return JavaScript
	case "typescript", "ts":
		return TypeScript
	case "bash", "sh", "shell":
		return Bash
	case "r":
		return R
	case "java":
		return Java
	}
	return ""
}

// Event is one line of an /execute stream (E2B's shapes).
type Event struct {
	Type      string `json:"type"`
	Text      string `json:"text,omitempty"`
	Timestamp int64  `json:"timestamp,omitempty"` // stdout/stderr: Unix microseconds

	IsMainResult *bool  `json:"is_main_result,omitempty"`
	HTML         string `json:"html,omitempty"`
	Markdown     string `json:"markdown,omitempty"`
	SVG          string `json:"svg,omitempty"`
	PNG          string `json:"png,omitempty"` // base64
	JPEG         string `json:"jpeg,omitempty"`
	PDF          string `json:"pdf,omitempty"`
	LaTeX        string `json:"latex,omitempty"`
	JSON         any    `json:"json,omitempty"`
	JavaScript   string `json:"javascript,omitempty"`
	Data         any    `json:"data,omitempty"`
	Chart        any    `json:"chart,omitempty"`

	Name      string `json:"name,omitempty"`
	Value     string `json:"value,omitempty"`
	Traceback string `json:"traceback,omitempty"`

	ExecutionCount int `json:"execution_count,omitempty"`
}

// MarshalJSON keeps is_main_result on results and text on stdout/stderr even
// when empty.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	b, err := json.Marshal(plain(e))
	if err != nil {
		return nil, err
	}
	if e.Type == "result" && e.IsMainResult == nil {
		b = append([]byte(`{"is_main_result":false,`), b[1:]...)
	}
	if (e.Type == "stdout" || e.Type == "stderr") && e.Text == "" {
		b = append([]byte(`{"text":"",`), b[1:]...)
	}
	if e.Type == "error" { // name, value and traceback are always present
		m := map[string]any{}
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, err
		}
		m["name"], m["value"], m["traceback"] = e.Name, e.Value, e.Traceback
		return json.Marshal(m)
	}
	return b, nil
}

// Info describes a context.
type Info struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// Config configures the service.
type Config struct {
	DefaultUser string            // acting user without an Authorization header
	Procs       *process.Service  // starts the interpreters
	Env         map[string]string // extra environment for every interpreter (tests)
	// AsActingUser runs interpreters as the acting user (tests, which may
	// not run as root). Otherwise they run as root, as the kernels of E2B's
	// code-interpreter template do; the acting user only picks the default
	// working directory (its home).
	AsActingUser bool
	// NoDefaultContexts turns off the default python and javascript
	// contexts that the first request creates (tests).
	NoDefaultContexts bool
}

// Service holds the contexts of one agent.
type Service struct {
	cfg      Config
	mu       sync.Mutex
	closed   bool
	contexts map[string]*Context
	defaults map[string]string // language -> context id
	seq      uint64            // creation order of contexts
	started  sync.Once         // the default contexts
}

// New creates the service.
func New(cfg Config) *Service {
	if cfg.DefaultUser == "" {
		cfg.DefaultUser = "user"
	}
	return &Service{cfg: cfg, contexts: map[string]*Context{}, defaults: map[string]string{}}
}

// Context is one interpreter context.
type Context struct {
	svc      *Service
	info     Info
	user     *sysuser.User
	runMu    chan struct{} // a one-slot semaphore serializing runs
	intr     chan struct{} // Interrupt's request to the running cell
	mu       sync.Mutex
	k        *kernel
	count    int // executions in the current kernel
	seq      uint64
	removed  bool
	restarts int
}

// ErrNotFound is returned for an unknown context.
var ErrNotFound = errors.New("context not found")

// ErrBadRequest wraps invalid requests.
var ErrBadRequest = errors.New("bad request")

// Create creates a context for user (its home is the default cwd). The
// interpreter runs as user when asUser is set (a request that names its
// user), else as root, as E2B's template runs its kernels. It starts now,
// so a missing interpreter fails here.
func (s *Service) Create(user *sysuser.User, asUser bool, language, cwd string) (*Context, error) {
	lang := Normalize(language)
	if lang == "" {
		return nil, fmt.Errorf("%w: unsupported language %q (%s)", ErrBadRequest, language, supported)
	}
	if cwd == "" {
		cwd = user.Home
	} else {
		cwd = user.Resolve(cwd, user.Home)
	}
	if !asUser && !s.cfg.AsActingUser {
		root, err := sysuser.Lookup("root")
		if err != nil {
			return nil, fmt.Errorf("interpreters run as root: %w", err)
		}
		user = root
	}
	c := &Context{svc: s, user: user, runMu: make(chan struct{}, 1), intr: make(chan struct{}, 1), info: Info{ID: newID(), Language: lang, Cwd: cwd}}
	if _, err := c.kernel(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.close()
		return nil, errors.New("the agent is shutting down")
	}
	s.seq++
	c.seq = s.seq
	s.contexts[c.info.ID] = c
	return c, nil
}

// StartDefaults creates the default python and javascript contexts (cwd the
// home of user), in that order, once: E2B's code-interpreter server creates
// them at start, so a fresh sandbox lists them. An interpreter that is not
// installed is left out.
func (s *Service) StartDefaults(user *sysuser.User) {
	if s.cfg.NoDefaultContexts {
		return
	}
	s.started.Do(func() {
		for _, lang := range []string{Python, JavaScript} {
			s.Default(user, false, lang)
		}
	})
}

// Default returns the default context of language for user (run as root
// unless asUser; see Create), creating it.
func (s *Service) Default(user *sysuser.User, asUser bool, language string) (*Context, error) {
	lang := Normalize(language)
	if lang == "" {
		return nil, fmt.Errorf("%w: unsupported language %q (%s)", ErrBadRequest, language, supported)
	}
	key := lang // interpreters that run as root: one default per language
	if asUser || s.cfg.AsActingUser {
		key += "\x00" + user.Name
	}
	s.mu.Lock()
	if id, ok := s.defaults[key]; ok {
		if c := s.contexts[id]; c != nil {
			s.mu.Unlock()
			return c, nil
		}
	}
	s.mu.Unlock()
	c, err := s.Create(user, asUser, lang, "")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.defaults[key]; ok && s.contexts[id] != nil { // lost a race
		other := s.contexts[id]
		delete(s.contexts, c.info.ID)
		go c.close()
		return other, nil
	}
	s.defaults[key] = c.info.ID
	return c, nil
}

// Get finds a context.
func (s *Service) Get(id string) (*Context, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.contexts[id]
	if c == nil {
		return nil, fmt.Errorf("%w: Context %s not found", ErrNotFound, id)
	}
	return c, nil
}

// List lists the contexts in creation order.
func (s *Service) List() []Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := make([]*Context, 0, len(s.contexts))
	for _, c := range s.contexts {
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].seq < cs[j].seq })
	out := make([]Info, len(cs))
	for i, c := range cs {
		out[i] = c.info
	}
	return out
}

// Remove deletes a context and ends its interpreter.
func (s *Service) Remove(id string) error {
	s.mu.Lock()
	c := s.contexts[id]
	delete(s.contexts, id)
	for k, v := range s.defaults {
		if v == id {
			delete(s.defaults, k)
		}
	}
	s.mu.Unlock()
	if c == nil {
		return fmt.Errorf("%w: Context %s not found", ErrNotFound, id)
	}
	c.mu.Lock()
	c.removed = true
	c.mu.Unlock()
	c.close()
	return nil
}

// Close ends every interpreter.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	cs := make([]*Context, 0, len(s.contexts))
	for _, c := range s.contexts {
		cs = append(cs, c)
	}
	s.contexts = map[string]*Context{}
	s.mu.Unlock()
	for _, c := range cs {
		c.close()
	}
}

func newID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Info describes the context.
func (c *Context) Info() Info { return c.info }

func (c *Context) argv() []string {
	switch c.info.Language {
	case Python:
		return []string{"python3", "-u", "-c", pythonDriver}
	case JavaScript, TypeScript:
		return []string{"node", "-e", jsDriver}
	case R:
		return []string{"bash", "--noprofile", "--norc", "-c", rStarter, "warden-r", rDriver}
	case Java:
		return []string{"bash", "--noprofile", "--norc", "-c", javaStarter, "warden-java", javaDriver, javaTag}
	default:
		return []string{"bash", "--noprofile", "--norc", "-c", bashDriver}
	}
}

// kernel returns the running interpreter, starting one if there is none.
func (c *Context) kernel() (*kernel, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed {
		return nil, fmt.Errorf("%w: Context %s not found", ErrNotFound, c.info.ID)
	}
	if c.k != nil && c.k.alive() {
		return c.k, nil
	}
	if c.k != nil {
		c.k.close()
		c.k = nil
	}
	env := map[string]string{"MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1", "PYTHONIOENCODING": "utf-8"}
	if c.info.Language == JavaScript || c.info.Language == TypeScript {
		env["WARDEN_LANGUAGE"] = c.info.Language
	}
	for k, v := range c.svc.cfg.Env {
		env[k] = v
	}
	wait := startTimeout
	if c.info.Language == R || c.info.Language == Java {
		wait = max(wait, slowStart)
	}
	k, err := startKernel(c.svc.cfg.Procs, process.ChildSpec{User: c.user, Argv: c.argv(), Env: env, Cwd: c.info.Cwd}, wait)
	var un *UnavailableError
	if errors.As(err, &un) {
		un.Language = c.info.Language
		return nil, un
	}
	if err != nil {
		return nil, fmt.Errorf("start %s interpreter: %w", c.info.Language, err)
	}
	c.k, c.count = k, 0
	return k, nil
}

// Restart replaces the interpreter: all state is lost.
func (c *Context) Restart() error {
	c.runMu <- struct{}{}
	defer func() { <-c.runMu }()
	c.mu.Lock()
	if c.k != nil {
		c.k.close()
		c.k = nil
	}
	c.mu.Unlock()
	_, err := c.kernel()
	return err
}

func (c *Context) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.k != nil {
		c.k.close()
		c.k = nil
	}
}

// RunRequest is one cell.
type RunRequest struct {
	Code    string
	Env     map[string]string
	Timeout time.Duration // 0: none
}

// Run runs a cell and sends its events to emit (serialized, in order),
// ending with end_of_execution. It returns once the run is over; the error
// is only for a run that could not start (emit got nothing then).
func (c *Context) Run(ctx context.Context, req RunRequest, emit func(Event)) error {
	select {
	case c.runMu <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-c.runMu }()
	k, err := c.kernel()
	if err != nil {
		return err
	}
	for len(k.marks) > 0 { // stale marks from an interrupted run
		<-k.marks
	}
	for len(k.done) > 0 {
		<-k.done
	}
	select {
	case <-c.intr:
	default:
	}
	cmd, err := c.command(req)
	if err != nil {
		return err
	}
	var timedOut bool
	var emu sync.Mutex
	send := func(ev Event) {
		emu.Lock()
		defer emu.Unlock()
		if timedOut && ev.Type == "error" {
			return // the interrupt's error: replaced by the timeout's
		}
		if ev.Type == "result" && ev.IsMainResult == nil {
			f := false
			ev.IsMainResult = &f
		}
		emit(ev)
	}
	c.mu.Lock()
	c.count++
	count := c.count
	c.mu.Unlock()
	send(Event{Type: "number_of_executions", ExecutionCount: count})
	k.setSink(send)
	defer k.setSink(nil)
	if err := k.send(cmd); err != nil {
		k.setSink(nil)
		c.reset(k)
		send(Event{Type: "error", Name: "ContextRestarted", Value: fmt.Sprintf("the %s interpreter was gone and has been restarted; state was lost: %v", c.info.Language, err)})
		send(Event{Type: "end_of_execution"})
		return nil
	}
	var timer <-chan time.Time
	if req.Timeout > 0 {
		d := req.Timeout
		if c.info.Language == JavaScript || c.info.Language == TypeScript {
			// node's vm stops synchronous code at the deadline itself and
			// says so; SIGINT is only for a run stuck in an await.
			d += jsTimeoutSlack
		}
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	var grace <-chan time.Time
	interrupted := false
	for {
		select {
		case f := <-k.done:
			c.waitMarks(k)
			if c.info.Language == Bash && f.ExitCode != nil && *f.ExitCode != 0 && !timedOut {
				send(Event{Type: "error", Name: "ExitError", Value: fmt.Sprintf("exit status %d", *f.ExitCode),
					Traceback: fmt.Sprintf("the cell's last command exited with status %d", *f.ExitCode)})
			}
			if timedOut {
				k.setSink(nil)
				emu.Lock()
				timedOut = false
				emu.Unlock()
				send(timeoutError(req.Timeout, false))
			}
			send(Event{Type: "end_of_execution"})
			return nil
		case <-k.dead:
			k.setSink(nil)
			c.reset(k)
			if timedOut {
				emu.Lock()
				timedOut = false
				emu.Unlock()
				send(timeoutError(req.Timeout, true))
			} else {
				send(Event{Type: "error", Name: "ContextRestarted", Value: fmt.Sprintf("the %s interpreter exited (%s); the context was reset and its state lost", c.info.Language, describe(k.child))})
			}
			send(Event{Type: "end_of_execution"})
			return nil
		case <-timer:
			timer = nil
			emu.Lock()
			timedOut = true
			emu.Unlock()
			if !interrupted {
				interrupted = true
				k.interrupt()
				grace = time.After(interruptGrace)
			}
		case <-ctx.Done():
			if !interrupted {
				interrupted = true
				k.interrupt()
				grace = time.After(interruptGrace)
			}
			ctx = context.Background()
		case <-c.intr:
			if !interrupted {
				interrupted = true
				grace = time.After(interruptGrace)
			}
			k.interrupt()
		case <-grace:
			// The interpreter did not stop: replace it.
			k.setSink(nil)
			c.reset(k)
			if timedOut {
				emu.Lock()
				timedOut = false
				emu.Unlock()
				send(timeoutError(req.Timeout, true))
			} else {
				send(Event{Type: "error", Name: "ContextRestarted", Value: fmt.Sprintf("the run did not stop on interrupt; the %s interpreter was restarted and its state lost", c.info.Language)})
			}
			send(Event{Type: "end_of_execution"})
			return nil
		}
	}
}

func timeoutError(d time.Duration, reset bool) Event {
	v := fmt.Sprintf("execution timed out after %s", d)
	if reset {
		v += "; the interpreter did not stop and was restarted, so the context's state was lost"
	} else {
		v += " and was interrupted; the context keeps its state"
	}
	return Event{Type: "error", Name: "TimeoutError", Value: v, Traceback: "TimeoutError: " + v}
}

// Interrupt stops the running cell, if any: SIGINT to the interpreter, and
// if the cell has not stopped after a grace period the interpreter is
// replaced (the run reports it).
func (c *Context) Interrupt() {
	select {
	case c.intr <- struct{}{}:
	default:
	}
}

// reset kills k if it is still the context's kernel and starts a new one.
func (c *Context) reset(k *kernel) {
	c.mu.Lock()
	if c.k == k {
		c.k = nil
	}
	c.restarts++
	c.mu.Unlock()
	k.close()
	c.kernel() // an error shows again at the next run
}

func (c *Context) waitMarks(k *kernel) {
	t := time.NewTimer(syncWait)
	defer t.Stop()
	for i := 0; i < 2; i++ {
		select {
		case <-k.marks:
		case <-t.C:
			return
		case <-k.dead:
			return
		}
	}
}

func (c *Context) command(req RunRequest) ([]byte, error) {
	if c.info.Language == R || c.info.Language == Java {
		return hexCommand(c.info.Language, req)
	}
	if c.info.Language == Bash {
		if strings.ContainsRune(req.Code, 0) {
			return nil, fmt.Errorf("%w: bash code may not contain NUL bytes", ErrBadRequest)
		}
		var b strings.Builder
		keys := make([]string, 0, len(req.Env))
		for k := range req.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		// The run's variables are exported for this cell only: the
		// epilogue (a second NUL-terminated string, evaluated after the
		// cell) puts back what each was before, as E2B's template does.
		var after strings.Builder
		for i, k := range keys {
			if !validName(k) || strings.ContainsRune(req.Env[k], 0) {
				return nil, fmt.Errorf("%w: invalid environment variable %q", ErrBadRequest, k)
			}
			fmt.Fprintf(&b, "__warden_env_%d=$(declare -p %s 2>/dev/null)\nexport %s=%s\n", i, k, k, shellQuote(req.Env[k]))
			fmt.Fprintf(&after, "unset %s; eval \"$__warden_env_%d\"; unset __warden_env_%d\n", k, i, i)
		}
		b.WriteString(req.Code)
		b.WriteByte(0)
		b.WriteString(after.String())
		b.WriteByte(0)
		return []byte(b.String()), nil
	}
	m := map[string]any{"id": c.count, "code": req.Code, "env": req.Env}
	if req.Timeout > 0 {
		m["timeout_ms"] = req.Timeout.Milliseconds()
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// hexCommand is a run for the R and Java drivers, which have no JSON
// parser: one line of space-separated fields, each "x" and the hex of a
// string: the code, then the run's environment as name, value pairs.
func hexCommand(lang string, req RunRequest) ([]byte, error) {
	if lang == R && strings.ContainsRune(req.Code, 0) {
		return nil, fmt.Errorf("%w: r code may not contain NUL bytes", ErrBadRequest)
	}
	var b strings.Builder
	field := func(s string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte('x')
		b.WriteString(hex.EncodeToString([]byte(s)))
	}
	field(req.Code)
	keys := make([]string, 0, len(req.Env))
	for k := range req.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !validName(k) || strings.ContainsRune(req.Env[k], 0) {
			return nil, fmt.Errorf("%w: invalid environment variable %q", ErrBadRequest, k)
		}
		field(k)
		field(req.Env[k])
	}
	b.WriteByte('\n')
	return []byte(b.String()), nil
}

// UnavailableError is a context whose interpreter is not installed in the
// sandbox (R or Java). A run through /execute reports it as the run's
// error, named as TypeScriptUnavailable is (RUnavailable, JavaUnavailable).
type UnavailableError struct {
	Language string
	Message  string
}

func (e *UnavailableError) Error() string { return e.Message }

// Name is the error's name in a run's error event.
func (e *UnavailableError) Name() string {
	switch e.Language {
	case R:
		return "RUnavailable"
	case Java:
		return "JavaUnavailable"
	}
	return "InterpreterUnavailable"
}

func validName(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Handler serves the routes on mux.
func (s *Service) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /execute", s.serveExecute)
	mux.HandleFunc("GET /contexts", s.serveList)
	mux.HandleFunc("POST /contexts", s.serveCreate)
	mux.HandleFunc("POST /contexts/{id}/restart", s.serveRestart)
	mux.HandleFunc("DELETE /contexts/{id}", s.serveRemove)
	mux.HandleFunc("POST /contexts/{id}/interrupt", s.serveInterrupt)
}
