package mw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/metrics"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dop251/goja"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/network/safedial"
	"github.com/warden-sandbox/warden/internal/secrets"
)

// Secrets serves the secrets granted to middleware; values are never
// logged or recorded.
type Secrets interface {
	// MiddlewareSecret returns the value of the secret called name that is
	// granted to middleware mw, and the hosts a fetch may send it to (none:
	// any of the middleware's allowed domains). Its errors never hold a
	// value.
	MiddlewareSecret(ctx context.Context, mw, name string) (value string, hosts []string, err error)
}

// secretLookup resolves one secret a script reads (see Secrets).
type secretLookup func(name string) (value string, hosts []string, err error)

// lookupFor is the secret lookup of middleware c for one call: through
// the Set's Secrets.
func (s *Set) lookupFor(ctx context.Context, c *compiled) secretLookup {
	return func(name string) (string, []string, error) {
		if s.opts.Secrets == nil {
			return "", nil, errors.New("this daemon has no secret store")
		}
		return s.opts.Secrets.MiddlewareSecret(ctx, c.Name, name)
	}
}

// Options configures a Set.
type Options struct {
	// Secrets serves secrets.NAME; nil: no secret is available.
	Secrets Secrets
	// Dial configures fetch's SSRF-checked client (its Allow list is the
	// administrator's exceptions for private addresses; a middleware's
	// AllowedDomains are checked before it).
	Dial safedial.Options
	Log  *slog.Logger
	// Worker, when set, runs the scripts in a separate worker process
	// (worker.go); nil runs them in this process.
	Worker *WorkerOptions
}

// Set is the installed middleware, in order. Safe for concurrent use;
// Replace swaps the list atomically.
type Set struct {
	opts   Options
	log    *slog.Logger
	client *http.Client
	mws    atomic.Pointer[[]*compiled]
	worker *worker // nil: scripts run in this process
}

// New compiles mws into a Set.
func New(opts Options, mws ...Middleware) (*Set, error) {
	if opts.Dial.MaxResponseBytes == 0 {
		opts.Dial.MaxResponseBytes = MaxIOBytes
	}
	client, err := safedial.NewClient(opts.Dial)
	if err != nil {
		return nil, fmt.Errorf("middleware fetch client: %w", err)
	}
	s := &Set{opts: opts, log: opts.Log, client: client}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := s.Replace(mws...); err != nil {
		return nil, err
	}
	if opts.Worker != nil {
		s.worker = newWorker(*opts.Worker, s.log)
	}
	return s, nil
}

// Replace installs mws in place of the current list; on error nothing
// changes.
func (s *Set) Replace(mws ...Middleware) error {
	list := make([]*compiled, 0, len(mws))
	seen := map[string]bool{}
	for _, m := range mws {
		c, err := compile(m)
		if err != nil {
			return err
		}
		if seen[m.Name] {
			return fmt.Errorf("%w: duplicate name %q", ErrInvalid, m.Name)
		}
		seen[m.Name] = true
		list = append(list, c)
	}
	s.mws.Store(&list)
	return nil
}

// List returns the installed middleware.
func (s *Set) List() []Middleware {
	list := *s.mws.Load()
	out := make([]Middleware, len(list))
	for i, c := range list {
		out[i] = c.Middleware
	}
	return out
}

// Pre runs the pre hooks of the middleware for a.Kind, in order. A block
// (or a failure of a closed middleware) stops and is returned with blocked
// true; a modify is applied to a before the next middleware runs. The
// verdicts are returned for the audit log.
func (s *Set) Pre(ctx context.Context, a *govern.Action) (verdicts []Verdict, blocked bool) {
	for _, c := range *s.mws.Load() {
		if !c.runsFor(a.Kind) {
			continue
		}
		v := s.call(ctx, c, "pre", a, nil, false)
		if v.Action == "modify" {
			if err := applyPre(a, v.Modified); err != nil {
				v = failed(c, v, fmt.Errorf("apply modify: %w", err))
			}
		}
		verdicts = append(verdicts, v)
		if v.Action == "block" || (v.Action == "error" && v.OnError == FailClosed) {
			return verdicts, true
		}
	}
	return verdicts, false
}

// Post runs the post hooks for a.Kind on a call's result (any JSON value),
// in order, and returns the result as modified. blocked is true when a
// middleware blocked it (or a closed middleware failed): the caller must
// not return the result.
func (s *Set) Post(ctx context.Context, a *govern.Action, result any) (out any, verdicts []Verdict, blocked bool) {
	out = result
	for _, c := range *s.mws.Load() {
		if !c.runsFor(a.Kind) {
			continue
		}
		v := s.call(ctx, c, "post", a, out, false)
		if v.Action == "modify" {
			var r any
			if err := json.Unmarshal(v.Modified, &r); err != nil {
				v = failed(c, v, fmt.Errorf("apply modify: %w", err))
			} else {
				out = r
			}
		}
		verdicts = append(verdicts, v)
		if v.Action == "block" || (v.Action == "error" && v.OnError == FailClosed) {
			return out, verdicts, true
		}
	}
	return out, verdicts, false
}

// Test runs one middleware (installed or not) on an action, without
// applying anything: what `warden middleware test` shows.
func (s *Set) Test(ctx context.Context, m Middleware, phase string, a *govern.Action, result any) (Verdict, error) {
	c, err := compile(m)
	if err != nil {
		return Verdict{}, err
	}
	if phase != "pre" && phase != "post" {
		return Verdict{}, fmt.Errorf("%w: phase %q is not pre or post", ErrInvalid, phase)
	}
	v := s.call(ctx, c, phase, a, result, true)
	return v, nil
}

func failed(c *compiled, v Verdict, err error) Verdict {
	v.Action, v.Error, v.OnError, v.Modified = "error", err.Error(), c.OnError, nil
	return v
}

// applyPre replaces the kind's payload with a pre hook's modify value:
// mcp.call its arguments (an object), exec and pty the command line (an
// array of strings), code.run the code (a string).
func applyPre(a *govern.Action, raw json.RawMessage) error {
	switch a.Kind {
	case govern.KindMCPCall:
		var args map[string]any
		if err := json.Unmarshal(raw, &args); err != nil || args == nil {
			return errors.New("mcp.call modify must be the arguments object")
		}
		if a.MCP == nil {
			a.MCP = &govern.MCPCall{}
		}
		a.MCP.Arguments = args
	case govern.KindExec, govern.KindPTY:
		var argv []string
		if err := json.Unmarshal(raw, &argv); err != nil || len(argv) == 0 {
			return errors.New("exec modify must be a non-empty array of strings (argv)")
		}
		old := govern.Exec{}
		if a.Exec != nil {
			old = *a.Exec
		}
		a.Exec = govern.NewExec(argv, old.Cwd, old.User, old.EnvKeys)
	case govern.KindCodeRun:
		var code string
		if err := json.Unmarshal(raw, &code); err != nil {
			return errors.New("code.run modify must be a string (the code)")
		}
		if a.Code == nil {
			a.Code = &govern.Code{}
		}
		a.Code.Code = code
	default:
		return fmt.Errorf("%s actions cannot be modified", a.Kind)
	}
	return nil
}

// errTimeout and errMemory are the interrupt reasons.
var (
	errTimeout = errors.New("time limit exceeded")
	errMemory  = errors.New("memory limit exceeded")
)

// call runs one hook: in the worker process when the Set has one
// (worker.go), else here. test (a dry run the API shows) also redacts the
// secrets the script read from the modify value.
func (s *Set) call(ctx context.Context, c *compiled, phase string, a *govern.Action, result any, test bool) Verdict {
	if s.worker != nil {
		return s.worker.call(ctx, c, phase, a, result, s.resolveSecrets(ctx, c), test)
	}
	return s.callHere(ctx, c, phase, a, result, s.lookupFor(ctx, c), test)
}

// callHere runs one hook in a fresh runtime of this process under the
// limits. The values of the secrets the script read never appear in the
// verdict's message or error (nor, with redactModify, in its modify
// value), nor in the log.
func (s *Set) callHere(ctx context.Context, c *compiled, phase string, a *govern.Action, result any, lookup secretLookup, redactModify bool) (v Verdict) {
	start := time.Now()
	v = Verdict{Middleware: c.Name}
	sec := &secretObj{c: c, lookup: lookup, read: map[string]secretRead{}}
	defer func() {
		v.Elapsed = time.Since(start)
		v.Message = sec.redact(v.Message)
		v.Error = sec.redact(v.Error)
		if redactModify && len(v.Modified) > 0 {
			v.Modified = json.RawMessage(sec.redactJSON(string(v.Modified)))
		}
	}()
	fail := func(err error) Verdict {
		err = errors.New(sec.redact(err.Error()))
		s.log.Warn("middleware failed", "middleware", c.Name, "phase", phase, "kind", a.Kind,
			"on_error", c.OnError, "err", err)
		return failed(c, v, err)
	}
	// Never let a runtime panic reach the daemon.
	defer func() {
		if p := recover(); p != nil {
			v = fail(fmt.Errorf("middleware panicked: %v", p))
		}
	}()

	actionJSON, err := json.Marshal(a)
	if err != nil {
		return fail(fmt.Errorf("encode action: %w", err))
	}
	if len(actionJSON) > MaxIOBytes {
		return fail(fmt.Errorf("action larger than %d bytes", MaxIOBytes))
	}
	var resultJSON []byte
	if phase == "post" {
		if resultJSON, err = json.Marshal(result); err != nil {
			return fail(fmt.Errorf("encode result: %w", err))
		}
		if len(resultJSON) > MaxIOBytes {
			return fail(fmt.Errorf("result larger than %d bytes", MaxIOBytes))
		}
	}

	cctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	vm := goja.New()
	vm.SetMaxCallStackSize(MaxStackDepth)
	var reason atomic.Pointer[error]
	interrupt := func(err error) {
		if reason.CompareAndSwap(nil, &err) {
			vm.Interrupt(err)
		}
	}
	stopCtx := context.AfterFunc(cctx, func() {
		if errors.Is(cctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			interrupt(errTimeout)
		} else {
			interrupt(fmt.Errorf("cancelled: %w", ctx.Err()))
		}
	})
	defer stopCtx()
	done := make(chan struct{})
	defer close(done)
	go watchMemory(done, c.maxMemory(), func() { interrupt(errMemory) })

	runErr := func() error {
		if err := s.setupGlobals(cctx, vm, c, sec); err != nil {
			return err
		}
		if _, err := vm.RunProgram(c.prog); err != nil {
			return err
		}
		fn, ok := goja.AssertFunction(vm.Get(phase))
		if !ok {
			v.Action = "allow" // no hook for this phase
			return nil
		}
		parse, _ := goja.AssertFunction(vm.Get("JSON").ToObject(vm).Get("parse"))
		av, err := parse(goja.Undefined(), vm.ToValue(string(actionJSON)))
		if err != nil {
			return err
		}
		args := []goja.Value{av}
		if phase == "post" {
			rv, err := parse(goja.Undefined(), vm.ToValue(string(resultJSON)))
			if err != nil {
				return err
			}
			args = append(args, rv)
		}
		ret, err := fn(goja.Undefined(), args...)
		if err != nil {
			return err
		}
		return s.verdict(vm, phase, ret, &v)
	}()
	if runErr != nil {
		if r := reason.Load(); r != nil {
			runErr = *r
		}
		return fail(scriptError(runErr))
	}
	if r := reason.Load(); r != nil { // interrupted after the last instruction
		return fail(*r)
	}
	return v
}

// scriptError trims a goja error to its message (no Go internals).
func scriptError(err error) error {
	var ex *goja.Exception
	if errors.As(err, &ex) {
		return fmt.Errorf("script error: %s", ex.Error())
	}
	var ie *goja.InterruptedError
	if errors.As(err, &ie) {
		if e, ok := ie.Value().(error); ok {
			return e
		}
	}
	var so *goja.StackOverflowError
	if errors.As(err, &so) {
		return errors.New("call stack depth exceeded")
	}
	return err
}

// verdict reads a hook's return value into v.
func (s *Set) verdict(vm *goja.Runtime, phase string, ret goja.Value, v *Verdict) error {
	if p, ok := ret.Export().(*goja.Promise); ok {
		switch p.State() {
		case goja.PromiseStateFulfilled:
			ret = p.Result()
		case goja.PromiseStateRejected:
			return fmt.Errorf("script error: %s returned a rejected promise: %s", phase, p.Result())
		default:
			return fmt.Errorf("%s returned a promise that never settled", phase)
		}
	}
	if goja.IsUndefined(ret) || goja.IsNull(ret) {
		return fmt.Errorf("%s returned no verdict (want {allow: true}, {block: \"message\"} or {modify: ...})", phase)
	}
	obj := ret.ToObject(vm)
	has := func(k string) bool { x := obj.Get(k); return x != nil && !goja.IsUndefined(x) }
	modify := func(x goja.Value) error {
		raw, err := json.Marshal(x.Export())
		if err != nil {
			return fmt.Errorf("encode modify: %w", err)
		}
		if len(raw) > MaxIOBytes {
			return fmt.Errorf("modify larger than %d bytes", MaxIOBytes)
		}
		v.Action, v.Modified = "modify", raw
		return nil
	}
	switch {
	case has("block"):
		v.Action, v.Message = "block", obj.Get("block").String()
	case has("modify"):
		return modify(obj.Get("modify"))
	case has("allow") && obj.Get("allow").ToBoolean():
		v.Action = "allow"
	case has("action"): // MintMCP's form
		switch act := obj.Get("action").String(); act {
		case "allow":
			v.Action = "allow"
		case "block":
			v.Action = "block"
			if has("reason") {
				v.Message = obj.Get("reason").String()
			}
		case "mask":
			key := "maskedArguments"
			if phase == "post" {
				key = "maskedResult"
			}
			if !has(key) {
				return fmt.Errorf("mask verdict without %s", key)
			}
			return modify(obj.Get(key))
		default:
			return fmt.Errorf("unknown verdict action %q", act)
		}
	default:
		return fmt.Errorf("%s returned no verdict (want {allow: true}, {block: \"message\"} or {modify: ...})", phase)
	}
	if v.Action == "block" && v.Message == "" {
		v.Message = "blocked"
	}
	if len(v.Message) > 1024 {
		v.Message = v.Message[:1024]
	}
	return nil
}

// setupGlobals installs fetch, secrets and console.
func (s *Set) setupGlobals(ctx context.Context, vm *goja.Runtime, c *compiled, sec *secretObj) error {
	fetches := 0
	fetch := func(call goja.FunctionCall) goja.Value {
		fetches++
		if fetches > MaxFetches {
			panic(vm.NewGoError(fmt.Errorf("fetch refused: at most %d fetches per call", MaxFetches)))
		}
		res, err := s.fetch(ctx, c, call.Argument(0).String(), call.Argument(1), vm, sec)
		if err != nil {
			panic(vm.NewGoError(err))
		}
		return res
	}
	if err := vm.Set("fetch", fetch); err != nil {
		return err
	}
	sec.vm = vm
	if err := vm.Set("secrets", vm.NewDynamicObject(sec)); err != nil {
		return err
	}
	console := vm.NewObject()
	noop := func(goja.FunctionCall) goja.Value { return goja.Undefined() } // output may hold secrets
	for _, k := range []string{"log", "info", "warn", "error", "debug"} {
		if err := console.Set(k, noop); err != nil {
			return err
		}
	}
	return vm.Set("console", console)
}

// fetch is a synchronous fetch(url, {method, headers, body}) returning
// {status, ok, headers, body, json()}.
func (s *Set) fetch(ctx context.Context, c *compiled, raw string, opts goja.Value, vm *goja.Runtime, sec *secretObj) (goja.Value, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("fetch refused: bad url: %w", err)
	}
	if !c.domainAllowed(u.Hostname()) {
		return nil, fmt.Errorf("fetch refused: host %q is not in the middleware's allowed domains", u.Hostname())
	}
	method, body := http.MethodGet, ""
	headers := map[string]string{}
	if opts != nil && !goja.IsUndefined(opts) && !goja.IsNull(opts) {
		o := opts.ToObject(vm)
		if m := o.Get("method"); m != nil && !goja.IsUndefined(m) {
			method = strings.ToUpper(m.String())
		}
		if b := o.Get("body"); b != nil && !goja.IsUndefined(b) {
			body = b.String()
		}
		if h := o.Get("headers"); h != nil && !goja.IsUndefined(h) {
			ho := h.ToObject(vm)
			for _, k := range ho.Keys() {
				headers[k] = ho.Get(k).String()
			}
		}
	}
	if len(body) > MaxIOBytes {
		return nil, fmt.Errorf("fetch refused: body larger than %d bytes", MaxIOBytes)
	}
	if name, ok := sec.sentTo(u.Hostname(), raw, headers, body); !ok {
		return nil, fmt.Errorf("fetch refused: secret %q is granted for other hosts than %q", name, u.Hostname())
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("fetch: read body: %w", err)
	}
	out := vm.NewObject()
	hdr := vm.NewObject()
	for k := range resp.Header {
		_ = hdr.Set(strings.ToLower(k), resp.Header.Get(k))
	}
	text := string(data)
	_ = out.Set("status", resp.StatusCode)
	_ = out.Set("ok", resp.StatusCode >= 200 && resp.StatusCode < 300)
	_ = out.Set("headers", hdr)
	_ = out.Set("body", text)
	_ = out.Set("text", func(goja.FunctionCall) goja.Value { return vm.ToValue(text) })
	_ = out.Set("json", func(goja.FunctionCall) goja.Value {
		parse, _ := goja.AssertFunction(vm.Get("JSON").ToObject(vm).Get("parse"))
		v, err := parse(goja.Undefined(), vm.ToValue(text))
		if err != nil {
			panic(vm.NewGoError(fmt.Errorf("fetch: response is not JSON: %w", err)))
		}
		return v
	})
	return out, nil
}

// secretObj is the secrets global: secrets.NAME reads a secret that the
// middleware declares (its Secrets) and an administrator granted to it. It
// remembers the values read, to keep them out of what the call reports.
type secretObj struct {
	c      *compiled
	lookup secretLookup
	vm     *goja.Runtime
	read   map[string]secretRead // by name
}

type secretRead struct {
	value string
	hosts []string
}

func (o *secretObj) declared(k string) bool { return slices.Contains(o.c.Secrets, k) }

func (o *secretObj) Get(k string) goja.Value {
	if r, ok := o.read[k]; ok {
		return o.vm.ToValue(r.value)
	}
	if !o.declared(k) {
		panic(o.vm.NewGoError(fmt.Errorf("secret %q is not declared by middleware %s (list it in its secrets)", k, o.c.Name)))
	}
	if o.lookup == nil {
		panic(o.vm.NewGoError(fmt.Errorf("secret %q is not available", k)))
	}
	v, hosts, err := o.lookup(k)
	if err != nil {
		panic(o.vm.NewGoError(fmt.Errorf("secret %q: %w", k, err)))
	}
	o.read[k] = secretRead{value: v, hosts: hosts}
	return o.vm.ToValue(v)
}
func (o *secretObj) Set(string, goja.Value) bool { return false }
func (o *secretObj) Has(k string) bool           { return o.declared(k) }
func (o *secretObj) Delete(string) bool          { return false }
func (o *secretObj) Keys() []string              { return append([]string(nil), o.c.Secrets...) }

// sentTo checks a fetch to host against the hosts of the secrets read so
// far: a request that carries a secret's value (in its URL, a header or
// the body) may go only to that secret's hosts, when its grant names any.
// It returns the first secret whose hosts do not cover host.
func (o *secretObj) sentTo(host, rawURL string, headers map[string]string, body string) (string, bool) {
	for name, r := range o.read {
		if len(r.hosts) == 0 || r.value == "" {
			continue
		}
		carried := strings.Contains(rawURL, r.value) || strings.Contains(body, r.value)
		for k, v := range headers {
			carried = carried || strings.Contains(k, r.value) || strings.Contains(v, r.value)
		}
		if !carried {
			continue
		}
		if !slices.ContainsFunc(r.hosts, func(p string) bool { return secrets.MatchHost(p, strings.ToLower(strings.TrimSuffix(host, "."))) }) {
			return name, false
		}
	}
	return "", true
}

// redact replaces the values of the secrets read in s.
func (o *secretObj) redact(s string) string {
	for name, r := range o.read {
		if r.value != "" {
			s = strings.ReplaceAll(s, r.value, "[secret "+name+"]")
		}
	}
	return s
}

// redactJSON is redact for JSON text, where a value may appear escaped.
func (o *secretObj) redactJSON(s string) string {
	for name, r := range o.read {
		if r.value == "" {
			continue
		}
		s = strings.ReplaceAll(s, r.value, "[secret "+name+"]")
		if b, err := json.Marshal(r.value); err == nil && len(b) > 2 {
			s = strings.ReplaceAll(s, string(b[1:len(b)-1]), "[secret "+name+"]")
		}
	}
	return s
}

// watchMemory samples the live heap until done and calls over once it has
// grown by more than limit bytes.
func watchMemory(done <-chan struct{}, limit uint64, over func()) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return sample[0].Value.Uint64()
	}
	base := read()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if cur := read(); cur > base && cur-base > limit {
				over()
				return
			}
		}
	}
}
