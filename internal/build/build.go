// Package build builds templates from Dockerfiles.
//
// Each step that changes files (RUN, COPY, ADD, WORKDIR) runs in a Warden
// sandbox of the backend the daemon uses, booted from the layers built so
// far, whose writable layer goes to a host directory (backend.Spec.Uppers)
// instead of scratch space. When the step ends, that directory is already a
// layer in overlayfs form and is published to the template store as is: no
// diffing, no copying. Steps that only change metadata (ENV, ARG, USER,
// CMD, ENTRYPOINT, EXPOSE, LABEL, HEALTHCHECK, SHELL) change the state
// carried to later steps.
//
// Every step has a cache key: the SHA-256 of the previous step's key and
// everything the step depends on (its instruction after variable expansion,
// the environment, user, working directory and shell, and for COPY and ADD
// the names, modes and contents of the files it copies). A step whose key
// is in the store's cache reuses the layers it made before, so an unchanged
// prefix of a Dockerfile rebuilds without running anything.
//
// The cache is private to each principal: every stage's chain of keys
// starts from a scope, HMAC-SHA256(daemon build-cache key, principal id), so
// one principal never gets a hit on (and so can never confirm) another's
// steps, build arguments, Dockerfile text or copied files, and the layer
// ids derived from the keys cannot be guessed offline without the daemon's
// key (cacheScope).
//
// Build sandboxes are ordinary sandboxes with two differences: their
// writable layer is captured, and root keeps a small set of capabilities
// inside the sandbox's user namespace (buildCaps), so package managers can
// chown files and switch users as in a rootless image build. They have no
// network: RUN steps that download need the networking issue's egress
// proxy.
package build

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/image"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/safefile"
	"github.com/warden-sandbox/warden/internal/template"
	"github.com/warden-sandbox/warden/internal/template/dockerfile"
)

// buildCaps are the capabilities root keeps in a build sandbox (within its
// user namespace): Docker's default set without NET_RAW, MKNOD, SETFCAP,
// SYS_CHROOT and AUDIT_WRITE.
var buildCaps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE"}

// ErrBuild marks errors in the Dockerfile or its steps (the caller's
// fault), as opposed to failures of the builder itself. It is of kind
// Invalid (internal/errkind), and the detail written after it is shown to
// callers.
var ErrBuild = errkind.Sentinel(errkind.Invalid, "build failed", errkind.WithDetail)

// imageKind gives buildErr, a FROM that failed on imgErr, the kind of a
// refused registry (Forbidden) or of an import over a limit (TooLarge), so
// the API answers them 403 and 413; its message stays the build's.
func imageKind(buildErr, imgErr error) error {
	if k, _ := errkind.Of(imgErr); k == errkind.Forbidden || k == errkind.TooLarge {
		return errkind.Mark(buildErr, k, "")
	}
	return buildErr
}

// Builder builds templates.
type Builder struct {
	Store   *template.Store
	Backend backend.Backend
	// Net, if set, gives build sandboxes the network a build asks for
	// (Request.Network); without it builds have loopback only.
	Net *network.Manager
	// Actor, if set, is told which principal a build sandbox's traffic
	// belongs to before its network is attached (the governed egress path
	// decides its flows as that principal's); the returned func forgets it.
	Actor func(sandboxID, principal string) (forget func())
	// Images is the policy of FROM pulls (registries, import limits);
	// nil is internal/image's default.
	Images *image.Policy
	// CacheKey keys the per-principal scopes of the build cache
	// (cacheScope). If nil, it is read from CacheKeyFile in the store's
	// directory, created there on first use.
	CacheKey []byte

	cacheKeyOnce sync.Once
	cacheKeyErr  error
}

// CacheKeyFile is the file, in the template store's directory, holding the
// key of the build cache's per-principal scopes (32 bytes in hex, mode 0600).
const CacheKeyFile = "build-cache.key"

// cacheScope returns the scope of principal's build cache entries: the
// HMAC-SHA256, under the daemon's build-cache key, of the principal id.
// Each stage's chain of step keys starts from it.
func (b *Builder) cacheScope(principal string) (string, error) {
	b.cacheKeyOnce.Do(func() {
		if b.CacheKey != nil {
			return
		}
		b.CacheKey, b.cacheKeyErr = safefile.LoadOrCreateKey(filepath.Join(b.Store.Root(), CacheKeyFile), 32)
		if b.cacheKeyErr != nil {
			b.cacheKeyErr = fmt.Errorf("build cache key: %w", b.cacheKeyErr)
		}
	})
	if b.cacheKeyErr != nil {
		return "", b.cacheKeyErr
	}
	m := hmac.New(sha256.New, b.CacheKey)
	fmt.Fprintf(m, "warden build cache scope v1\x00%s", principal)
	return hex.EncodeToString(m.Sum(nil)), nil
}

// attachNetwork gives a build sandbox its network link.
func (b *Builder) attachNetwork(ctx context.Context, id string, h backend.Handle, p network.Policy) (*network.Link, error) {
	pider, ok := b.Backend.(interface {
		PID(ctx context.Context, h backend.Handle) (int, error)
	})
	if b.Net == nil || !ok {
		return nil, fmt.Errorf("%w: this daemon cannot give build sandboxes a network", ErrBuild)
	}
	pid, err := pider.PID(ctx, h)
	if err != nil {
		return nil, fmt.Errorf("build sandbox network: %w", err)
	}
	l, err := b.Net.Attach(ctx, id, pid, p)
	if err != nil {
		return nil, fmt.Errorf("build sandbox network: %w", err)
	}
	return l, nil
}

// Request is one build.
type Request struct {
	Dockerfile []byte            // the Dockerfile's text
	Context    string            // directory holding the build context
	Name       string            // "name[:tag]" to tag the result with
	Args       map[string]string // build arguments (ARG values)
	NoCache    bool              // run every step even when cached
	Limits     backend.Limits    // limits of the build sandboxes; also the template's resource defaults
	Registry   image.RegistryOptions
	// Network of the RUN steps' sandboxes; nil is none (loopback only). It
	// is part of each step's cache key only through what the step wrote.
	Network *network.Policy
	// By is who builds: the tag is written on its behalf, so a tag owned
	// by another principal is refused (template.ErrNotOwner). The build
	// cache is scoped to By.Principal (see the package comment).
	By template.Actor
}

// Event is one line of build progress.
type Event struct {
	Type   string `json:"type"` // "step", "log", "cached", "done"
	Step   int    `json:"step,omitempty"`
	Steps  int    `json:"steps,omitempty"`
	Line   int    `json:"line,omitempty"` // Dockerfile line
	Text   string `json:"text,omitempty"`
	Stream string `json:"stream,omitempty"` // "stdout" or "stderr" for logs
}

// Result describes a finished build.
type Result struct {
	Name      string   `json:"name"`
	ID        string   `json:"id"`
	Steps     int      `json:"steps"`
	CacheHits int      `json:"cache_hits"`
	Executed  int      `json:"executed"`
	Layers    int      `json:"layers"`
	Warnings  []string `json:"warnings,omitempty"`
	// OldID is the template id the name pointed at before ("" if it was
	// new), for the audit log.
	OldID string `json:"-"`
}

// state is what the steps so far have made.
type state struct {
	scope      string // the principal's cache scope (cacheScope)
	key        string
	layers     []template.LayerRef // top-first per target
	env        map[string]string
	args       map[string]string
	user       string
	workdir    string
	shell      []string
	entrypoint []string
	cmd        []string
	ready      *template.Ready
	expose     []string
	labels     map[string]string
}

func hash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func canon(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// errorAt is a build error naming a Dockerfile line.
func errorAt(line int, format string, args ...any) error {
	return fmt.Errorf("%w: Dockerfile:%d: %s", ErrBuild, line, fmt.Sprintf(format, args...))
}

// Build runs req, reporting progress to emit (which may be nil).
func (b *Builder) Build(ctx context.Context, req Request, emit func(Event)) (Result, error) {
	if emit == nil {
		emit = func(Event) {}
	}
	var res Result
	if _, _, err := template.ParseName(req.Name); err != nil {
		return res, fmt.Errorf("%w: %w", ErrBuild, err)
	}
	// Refuse a tag the builder may not write before running anything; Tag
	// checks again when it writes.
	if err := b.Store.CheckTag(req.Name, req.By); err != nil {
		return res, err
	}
	df, err := dockerfile.Parse(bytes.NewReader(req.Dockerfile))
	if err != nil {
		return res, fmt.Errorf("%w: %w", ErrBuild, err)
	}
	res.Warnings = df.Warnings
	for _, w := range df.Warnings {
		emit(Event{Type: "log", Stream: "stderr", Text: "warning: " + w})
	}
	scope, err := b.cacheScope(req.By.Principal)
	if err != nil {
		return res, err
	}
	defer b.Store.Pin()()

	st := &state{scope: scope, env: map[string]string{}, args: map[string]string{}, labels: map[string]string{}, shell: []string{"/bin/sh", "-c"}}
	global := map[string]string{}
	for _, a := range df.Args {
		if v, ok := req.Args[a.Name]; ok {
			global[a.Name] = v
		} else if a.Default != nil {
			// Defaults may use the ARGs declared before them.
			v, err := dockerfile.Expand(*a.Default, func(n string) (string, bool) { v, ok := global[n]; return v, ok })
			if err != nil {
				return res, fmt.Errorf("%w: ARG %s: %w", ErrBuild, a.Name, err)
			}
			global[a.Name] = v
		}
	}
	steps := len(df.Instructions)
	res.Steps = steps
	for i, in := range df.Instructions {
		n := i + 1
		emit(Event{Type: "step", Step: n, Steps: steps, Line: in.Line, Text: in.Original})
		cached, err := b.step(ctx, req, st, in, global, emit)
		if err != nil {
			return res, err
		}
		switch cached {
		case stepCached:
			res.CacheHits++
			emit(Event{Type: "cached", Step: n, Steps: steps, Line: in.Line, Text: "CACHED " + in.Original})
		case stepRan:
			res.Executed++
		}
	}
	m := &template.Manifest{
		Layers: st.layers, Env: st.env, User: st.user, Workdir: st.workdir,
		Limits: req.Limits, Expose: st.expose, Labels: st.labels,
		Source: "build", Created: time.Now().UTC(),
	}
	if len(m.Labels) == 0 {
		m.Labels = nil
	}
	if m.Workdir == "" {
		m.Workdir = "/"
	}
	if start := append(slices.Clone(st.entrypoint), st.cmd...); len(start) > 0 {
		m.Start = &template.Start{Cmd: start, Ready: st.ready}
	} else if st.ready != nil {
		return res, fmt.Errorf("%w: a ready check (HEALTHCHECK or warden.ready.port) needs a CMD or ENTRYPOINT to check", ErrBuild)
	}
	id, err := b.Store.PutManifest(m)
	if err != nil {
		return res, err
	}
	old, err := b.Store.Tag(req.Name, id, req.By)
	if err != nil {
		return res, err
	}
	res.OldID = old
	res.Name, res.ID, res.Layers = req.Name, id, len(st.layers)
	emit(Event{Type: "done", Text: fmt.Sprintf("built %s (%s): %d steps, %d cached", req.Name, id, steps, res.CacheHits)})
	return res, nil
}

type stepKind int

const (
	stepMeta   stepKind = iota // metadata only
	stepRan                    // ran in a sandbox
	stepCached                 // reused from the cache
)

// lookup returns the variables visible to an instruction: build args, then
// the environment (ENV wins over ARG, as in Docker).
func (st *state) lookup(global map[string]string, fromOnly bool) func(string) (string, bool) {
	return func(name string) (string, bool) {
		if fromOnly {
			v, ok := global[name]
			return v, ok
		}
		if v, ok := st.env[name]; ok {
			return v, true
		}
		v, ok := st.args[name]
		return v, ok
	}
}

func (b *Builder) step(ctx context.Context, req Request, st *state, in dockerfile.Instruction, global map[string]string, emit func(Event)) (stepKind, error) {
	expand := func(s string) (string, error) {
		v, err := dockerfile.Expand(s, st.lookup(global, false))
		if err != nil {
			return "", errorAt(in.Line, "%s: %v", in.Cmd, err)
		}
		return v, nil
	}
	switch in.Cmd {
	case "FROM":
		ref, err := dockerfile.Expand(in.From.Image, st.lookup(global, true))
		if err != nil {
			return 0, errorAt(in.Line, "FROM: %v", err)
		}
		if err := b.from(ctx, req, st, ref, in.Line, emit); err != nil {
			return 0, err
		}
		// Every key of the stage, and every layer id made from one,
		// depends on the principal's scope.
		st.key = hash(st.key, "cache scope", st.scope)
		return stepMeta, nil
	case "ARG":
		a := in.Arg
		if v, ok := req.Args[a.Name]; ok {
			st.args[a.Name] = v
		} else if v, ok := global[a.Name]; ok && a.Default == nil {
			st.args[a.Name] = v
		} else if a.Default != nil {
			v, err := expand(*a.Default)
			if err != nil {
				return 0, err
			}
			st.args[a.Name] = v
		} else {
			st.args[a.Name] = ""
		}
		st.key = hash(st.key, "ARG", a.Name, st.args[a.Name])
		return stepMeta, nil
	case "ENV":
		for _, kv := range in.Env {
			v, err := expand(kv.Value)
			if err != nil {
				return 0, err
			}
			st.env[kv.Key] = v
		}
		st.key = hash(st.key, "ENV", canon(st.env))
		return stepMeta, nil
	case "LABEL":
		for _, kv := range in.Label {
			v, err := expand(kv.Value)
			if err != nil {
				return 0, err
			}
			st.labels[kv.Key] = v
			if kv.Key == "warden.ready.port" {
				p, err := strconv.Atoi(v)
				if err != nil || p < 1 || p > 65535 {
					return 0, errorAt(in.Line, "LABEL warden.ready.port=%q is not a port", v)
				}
				if st.ready == nil {
					st.ready = &template.Ready{}
				}
				st.ready.Port, st.ready.Cmd = p, nil
			}
		}
		return stepMeta, nil
	case "USER":
		u, err := expand(in.User)
		if err != nil {
			return 0, err
		}
		st.user = u
		st.key = hash(st.key, "USER", u)
		return stepMeta, nil
	case "SHELL":
		st.shell = slices.Clone(in.Shell)
		st.key = hash(st.key, "SHELL", canon(st.shell))
		return stepMeta, nil
	case "EXPOSE":
		for _, p := range in.Expose {
			p, err := expand(p)
			if err != nil {
				return 0, err
			}
			if p, err = dockerfile.NormalizePort(p); err != nil {
				return 0, errorAt(in.Line, "EXPOSE: %v", err)
			}
			if !slices.Contains(st.expose, p) {
				st.expose = append(st.expose, p)
			}
		}
		return stepMeta, nil
	case "ENTRYPOINT":
		st.entrypoint = st.command(*in.Entrypoint)
		st.cmd = nil // as in Docker: ENTRYPOINT resets an inherited CMD
		return stepMeta, nil
	case "CMD":
		st.cmd = st.command(*in.CmdCommand)
		return stepMeta, nil
	case "HEALTHCHECK":
		h := in.Healthcheck
		if h.None {
			st.ready = nil
			return stepMeta, nil
		}
		r := &template.Ready{Cmd: st.command(h.Command)}
		if h.Interval > 0 {
			r.IntervalMS = h.Interval.Milliseconds()
		}
		if t := max(h.StartPeriod, h.Timeout*time.Duration(max(h.Retries, 1))); t > 0 {
			r.TimeoutMS = t.Milliseconds()
		}
		st.ready = r
		return stepMeta, nil
	case "WORKDIR":
		w, err := expand(in.Workdir)
		if err != nil {
			return 0, err
		}
		if !path.IsAbs(w) {
			w = path.Join(cmp.Or(st.workdir, "/"), w)
		}
		st.workdir = path.Clean(w)
		key := hash(st.key, "WORKDIR", st.workdir)
		// The directory exists from here on, as in Docker.
		return b.fsStep(ctx, req, st, in, key, emit, func(c *agentclient.Client) error {
			return mkdirAll(ctx, c, st.workdir)
		})
	case "RUN":
		argv := st.command(in.Run.Command)
		env := maps.Clone(st.args)
		maps.Copy(env, st.env)
		key := hash(st.key, "RUN", canon(argv), canon(env), st.user, st.workdir)
		return b.fsStep(ctx, req, st, in, key, emit, func(c *agentclient.Client) error {
			out := &logWriter{emit: emit, stream: "stdout"}
			errw := &logWriter{emit: emit, stream: "stderr"}
			res, err := c.Run(ctx, agentclient.Cmd{Args: argv, Env: env, User: cmp.Or(st.user, "root"), Dir: cmp.Or(st.workdir, "/"), Stdout: out, Stderr: errw})
			out.flush()
			errw.flush()
			if err != nil {
				return errorAt(in.Line, "RUN: %v", err)
			}
			if res.ExitCode != 0 {
				return errorAt(in.Line, "RUN %s: exit code %d%s", in.Original[len("RUN "):], res.ExitCode, ifs(res.Error != "", " ("+res.Error+")"))
			}
			return nil
		})
	case "COPY", "ADD":
		return b.copyStep(ctx, req, st, in, expand, emit)
	}
	return 0, errorAt(in.Line, "%s is not supported", in.Cmd)
}

func ifs(c bool, s string) string {
	if c {
		return s
	}
	return ""
}

// command turns a Dockerfile command into argv: the exec form as is, the
// shell form through the current SHELL.
func (st *state) command(c dockerfile.Command) []string {
	if c.Shell {
		return append(slices.Clone(st.shell), c.Args...)
	}
	return slices.Clone(c.Args)
}

// from sets the state to the parent: scratch, Warden's base, another
// Warden template, or an image reference imported from its registry.
func (b *Builder) from(ctx context.Context, req Request, st *state, ref string, line int, emit func(Event)) error {
	switch {
	case ref == "scratch":
		empty, err := b.emptyLayer()
		if err != nil {
			return err
		}
		st.layers = []template.LayerRef{{Target: "/", ID: empty}}
		st.key = hash("FROM", "scratch")
		st.env["PATH"] = template.DefaultPath
		return nil
	case ref == template.BaseName || ref == template.BaseName+":latest":
		base, err := b.Store.Base()
		if err != nil {
			return err
		}
		refs, err := b.Store.BaseLayers()
		if err != nil {
			return err
		}
		st.layers = refs
		maps.Copy(st.env, base.Env)
		st.user, st.workdir = base.User, base.Workdir
		st.key = hash("FROM", "base:"+base.Version)
		return nil
	}
	if id, err := b.Store.Resolve(ref); err == nil {
		m, err := b.Store.Manifest(id)
		if err != nil {
			return err
		}
		st.layers = slices.Clone(m.Layers)
		maps.Copy(st.env, m.Env)
		st.user, st.workdir = m.User, m.Workdir
		if m.Start != nil {
			st.cmd = slices.Clone(m.Start.Cmd)
			st.ready = m.Start.Ready
		}
		maps.Copy(st.labels, m.Labels)
		st.expose = slices.Clone(m.Expose)
		st.key = hash("FROM", id)
		emit(Event{Type: "log", Stream: "stdout", Text: "using template " + ref + " (" + id + ")"})
		return nil
	}
	emit(Event{Type: "log", Stream: "stdout", Text: "pulling " + ref})
	img, err := b.Images.FromRegistry(ctx, ref, req.Registry)
	if err != nil {
		return imageKind(fmt.Errorf("%w: Dockerfile:%d: FROM %s: not a template here, and pulling it failed: %w", ErrBuild, line, ref, err), err)
	}
	r, err := b.Images.Import(ctx, img, b.Store, func(p image.Progress) {
		if p.Phase == "done" || p.Cached {
			emit(Event{Type: "log", Stream: "stdout", Text: fmt.Sprintf("layer %d/%d %s %s", p.Index+1, p.Count, p.Layer, ifs(p.Cached, "(stored)"))})
		}
	})
	if err != nil {
		return imageKind(fmt.Errorf("%w: Dockerfile:%d: FROM %s: %w", ErrBuild, line, ref, err), err)
	}
	m := template.FromImage(r, "", false)
	st.layers = m.Layers
	maps.Copy(st.env, m.Env)
	st.user, st.workdir = m.User, m.Workdir
	st.key = hash("FROM", r.Digest)
	return nil
}

// emptyLayer returns the id of an empty layer, storing it on first use.
func (b *Builder) emptyLayer() (string, error) {
	id := hash("empty layer")
	return id, b.Store.Put(id, func(string) error { return nil })
}

// fsStep runs fn in a build sandbox and appends the layers it wrote, or
// reuses the cached ones for key.
func (b *Builder) fsStep(ctx context.Context, req Request, st *state, in dockerfile.Instruction, key string, emit func(Event), fn func(*agentclient.Client) error) (stepKind, error) {
	st.key = key
	if !req.NoCache {
		if c, ok := b.Store.CacheGet(key); ok {
			st.layers = append(slices.Clone(c.Layers), st.layers...)
			return stepCached, nil
		}
	}
	added, err := b.runInSandbox(ctx, req, st, key, fn)
	if err != nil {
		return 0, err
	}
	st.layers = append(added, st.layers...)
	if err := b.Store.CachePut(key, template.CacheEntry{Layers: added}); err != nil {
		return 0, err
	}
	return stepRan, nil
}

// runInSandbox boots a build sandbox on st's layers with captured uppers,
// runs fn, and publishes what it wrote as new layers.
func (b *Builder) runInSandbox(ctx context.Context, req Request, st *state, key string, fn func(*agentclient.Client) error) ([]template.LayerRef, error) {
	if !b.Backend.Capabilities().CaptureUpper {
		return nil, fmt.Errorf("backend %s cannot capture a writable layer; builds need one that can", b.Backend.ID())
	}
	var targets []string
	for _, l := range st.layers {
		if !slices.Contains(targets, l.Target) {
			targets = append(targets, l.Target)
		}
	}
	uppers := map[string]string{}
	defer func() {
		for _, d := range uppers {
			os.RemoveAll(d)
		}
	}()
	for _, t := range targets {
		d, err := b.Store.TempDir("upper-")
		if err != nil {
			return nil, err
		}
		uppers[t] = d
	}
	tmpl, err := b.Store.Layers(st.layers)
	if err != nil {
		return nil, err
	}
	var rb [6]byte
	rand.Read(rb[:])
	spec := backend.Spec{
		ID: "build-" + hex.EncodeToString(rb[:]), Hostname: "build",
		Layers: tmpl, Env: maps.Clone(st.env), User: cmp.Or(st.user, "root"), Workdir: "/",
		Limits: req.Limits.WithDefaults(), Uppers: uppers, RootCaps: buildCaps,
	}
	if spec.Env == nil {
		spec.Env = map[string]string{}
	}
	if _, ok := spec.Env["PATH"]; !ok {
		spec.Env["PATH"] = template.DefaultPath
	}
	bctx := context.WithoutCancel(ctx)
	h, err := b.Backend.Create(bctx, spec)
	if err != nil {
		return nil, fmt.Errorf("build sandbox: %w", err)
	}
	deleted := false
	defer func() {
		if !deleted {
			b.Backend.Delete(bctx, h)
		}
	}()
	if h, err = b.Backend.Start(bctx, h); err != nil {
		return nil, fmt.Errorf("build sandbox: %w", err)
	}
	if req.Network != nil && req.Network.Mode != network.ModeNone {
		if b.Actor != nil {
			defer b.Actor(spec.ID, req.By.Principal)()
		}
		link, err := b.attachNetwork(bctx, spec.ID, h, *req.Network)
		if err != nil {
			return nil, err
		}
		defer link.Close()
	}
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return b.Backend.DialAgent(ctx, h) })
	ferr := fn(c)
	c.Close()
	deleted = true
	if err := b.Backend.Delete(bctx, h); err != nil {
		return nil, fmt.Errorf("stop build sandbox: %w", err)
	}
	if ferr != nil {
		return nil, ferr
	}
	var added []template.LayerRef
	for _, t := range targets {
		up := filepath.Join(uppers[t], "upper")
		ents, err := os.ReadDir(up)
		if err != nil {
			return nil, fmt.Errorf("read captured layer: %w", err)
		}
		if len(ents) == 0 {
			continue
		}
		id := hash(key, t)
		if err := b.Store.PutDir(id, up); err != nil {
			return nil, err
		}
		added = append(added, template.LayerRef{Target: t, ID: id})
	}
	return added, nil
}

// mkdirAll creates dir (and its parents) in the sandbox as root, through
// the agent, so it works in images without a mkdir binary.
func mkdirAll(ctx context.Context, c *agentclient.Client, dir string) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.Close()
	return c.Upload(ctx, dir, "root", &buf)
}

// logWriter turns process output into log events, one per line.
type logWriter struct {
	emit   func(Event)
	stream string
	buf    []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(Event{Type: "log", Stream: w.stream, Text: string(w.buf[:i])})
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 {
		w.flush()
	}
	return len(p), nil
}

func (w *logWriter) flush() {
	if len(w.buf) > 0 {
		w.emit(Event{Type: "log", Stream: w.stream, Text: string(w.buf)})
		w.buf = nil
	}
}
