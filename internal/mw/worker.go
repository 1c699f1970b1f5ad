package mw

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/isolation/cgroup"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/network/safedial"
)

// The middleware worker (docs/guardrails.md, "Limits"): scripts run in a
// separate process (wardend mw-worker), started on the first call, whose
// data segment (the Go heap's mappings) is capped with RLIMIT_DATA, so a
// runaway allocation kills the worker, not wardend. (RLIMIT_AS would count
// the Go runtime's address-space reservations, over 1 GiB while idle.) Its
// CPU is capped by a cgroup of its own (a CFS quota; cgroup v1's cpu
// hierarchy or cgroup v2's cpu controller, through internal/isolation/
// cgroup), so runaway hooks cannot take a whole core from the host; where no
// cgroup is usable it runs without one and a warning is logged. The daemon
// sends it one JSON request a line (the middleware, the phase, the action,
// the result and the middleware's granted secrets) and reads one verdict a
// line back; calls run concurrently in the worker.
//
// A call that gets no answer within its time limit (plus a short slack) gets
// the time-limit outcome at once; if the worker still has not answered it a
// grace period later (a runaway the interrupt cannot stop, such as a
// catastrophically backtracking regular expression), the worker is killed.
// When a worker dies, the calls in flight on it are not failed for another
// call's runaway: killed for a known call, the others are re-run on a new
// worker; died by itself (out of memory) with several calls in flight, each
// is re-run alone in a worker of its own, where only the runaway one dies
// again. A call that dies alone is the runaway: it fails with ErrWorkerDied
// and gets its middleware's on_error outcome. The next call starts a new
// worker.

// WorkerCommand is the hidden subcommand of wardend that serves as the
// worker.
const WorkerCommand = "mw-worker"

// DefaultWorkerMemory is the worker's memory limit (RLIMIT_DATA) by default.
const DefaultWorkerMemory = 1 << 30

// DefaultWorkerCPU is the worker's CPU limit by default, in thousandths of
// a core: half a core.
const DefaultWorkerCPU = 500

// workerGrace is how long past a call's time limit the daemon waits for
// the worker's answer before it kills the worker.
const workerGrace = 2 * time.Second

// answerSlack is how long past a call's time limit its caller waits for the
// worker's answer (the pipe, a throttled worker) before it gets the
// time-limit outcome without it.
const answerSlack = 500 * time.Millisecond

// workerStartTimeout bounds a worker's start, until it says it is ready.
const workerStartTimeout = 30 * time.Second

// maxSoloWorkers bounds the single-call workers that re-run the calls in
// flight on a worker that died of itself.
const maxSoloWorkers = 4

// cgroupPrefix starts the name of a worker's cgroup:
// mw-worker-<wardend's pid>-<n>.
const cgroupPrefix = "mw-worker-"

// cgroupSeq numbers the workers' cgroups of this process (every Set's).
var cgroupSeq atomic.Uint64

// cgroupAvailable is cgroup.Available (a test replaces it).
var cgroupAvailable = cgroup.Available

// WorkerOptions configures the worker process of a Set.
type WorkerOptions struct {
	// Command is the worker's argv (for wardend: itself and WorkerCommand).
	Command []string
	// Env is added to the worker's environment.
	Env []string
	// MemoryBytes caps the worker's data segment (RLIMIT_DATA: its heap);
	// 0: DefaultWorkerMemory.
	MemoryBytes uint64
	// CPUMillis caps the worker's CPU, in thousandths of a core, with a
	// cgroup CFS quota; 0: DefaultWorkerCPU; negative: no cgroup.
	CPUMillis int64
	// Deny is the daemon's network.deny, for fetch in the worker.
	Deny []netip.Prefix
}

// workerConfig is the first line the worker reads.
type workerConfig struct {
	Deny        []string `json:"deny,omitempty"`
	MemoryBytes uint64   `json:"memory_bytes,omitempty"`
}

type workerRequest struct {
	ID         uint64          `json:"id"`
	Middleware Middleware      `json:"middleware"`
	Phase      string          `json:"phase"`
	Action     json.RawMessage `json:"action"`
	Result     json.RawMessage `json:"result,omitempty"`
	// Secrets are the middleware's declared secrets as the daemon resolved
	// them (the worker has no secret store).
	Secrets map[string]workerSecret `json:"secrets,omitempty"`
	// Test also redacts the secrets read from the modify value (a dry run).
	Test bool `json:"test,omitempty"`
}

// workerSecret is one resolved secret: its value and hosts, or why it is
// not available.
type workerSecret struct {
	Value string   `json:"value,omitempty"`
	Hosts []string `json:"hosts,omitempty"`
	Error string   `json:"error,omitempty"`
}

type workerResponse struct {
	ID      uint64  `json:"id"`
	Verdict Verdict `json:"verdict"`
}

// ErrWorkerDied is the failure of calls in flight when the worker exits.
var ErrWorkerDied = errors.New("middleware worker died (out of memory or killed); it is restarted on the next call")

// errClosed is the failure of calls after Close.
var errClosed = errors.New("middleware worker: closed")

// worker is the daemon's handle on the worker process.
type worker struct {
	opts     WorkerOptions
	log      *slog.Logger
	solo     chan struct{} // semaphore of the single-call workers
	staleRm  sync.Once     // cgroups left by dead wardends are removed
	cgWarned atomic.Bool
	starts   atomic.Int64 // processes started, single-call ones included (tests)

	mu      sync.Mutex
	proc    *workerProc
	nextID  uint64
	started int // how many shared workers were started (tests)
	closed  bool
}

type workerProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	cg     *cgroup.Group // nil: no CPU limit
	exited chan struct{} // closed once it exited and its cgroup is removed
	wmu    sync.Mutex    // serialises writes to stdin

	mu      sync.Mutex
	pending map[uint64]chan Verdict
	dead    bool
	// culprit is the call the worker was killed for (0: it died of
	// itself); inFlight the calls pending when it died.
	culprit  uint64
	inFlight int
}

// rerun says how a call the worker died under is run again.
type rerun int

const (
	rerunNone   rerun = iota // it is the runaway (or was answered)
	rerunShared              // on the next shared worker
	rerunSolo                // alone, in a worker of its own
)

func newWorker(opts WorkerOptions, log *slog.Logger) *worker {
	if opts.MemoryBytes == 0 {
		opts.MemoryBytes = DefaultWorkerMemory
	}
	if opts.CPUMillis == 0 {
		opts.CPUMillis = DefaultWorkerCPU
	}
	return &worker{opts: opts, log: log, solo: make(chan struct{}, maxSoloWorkers)}
}

// get returns the running worker, starting one when there is none.
func (w *worker) get() (*workerProc, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, errClosed
	}
	if w.proc != nil {
		w.proc.mu.Lock()
		dead := w.proc.dead
		w.proc.mu.Unlock()
		if !dead {
			return w.proc, nil
		}
	}
	p, err := w.start()
	if err != nil {
		return nil, err
	}
	w.proc = p
	w.started++
	return p, nil
}

func (w *worker) start() (*workerProc, error) {
	if len(w.opts.Command) == 0 {
		return nil, errors.New("middleware worker: no command")
	}
	cmd := exec.Command(w.opts.Command[0], w.opts.Command[1:]...)
	cmd.Env = append(os.Environ(), w.opts.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Stderr = io.Discard // a dying Go runtime's dump: no script data of value
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("middleware worker: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("middleware worker: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("middleware worker: start: %w", err)
	}
	w.starts.Add(1)
	p := &workerProc{cmd: cmd, stdin: stdin, pending: map[uint64]chan Verdict{}, exited: make(chan struct{})}
	abort := func(err error) (*workerProc, error) {
		cmd.Process.Kill()
		cmd.Wait()
		if p.cg != nil {
			p.cg.Delete()
		}
		return nil, err
	}
	lim := unix.Rlimit{Cur: w.opts.MemoryBytes, Max: w.opts.MemoryBytes}
	if err := unix.Prlimit(cmd.Process.Pid, unix.RLIMIT_DATA, &lim, nil); err != nil {
		return abort(fmt.Errorf("middleware worker: limit its memory: %w", err))
	}
	if p.cg, err = w.limitCPU(cmd.Process.Pid); err != nil {
		return abort(err)
	}
	cfg := workerConfig{MemoryBytes: w.opts.MemoryBytes}
	for _, d := range w.opts.Deny {
		cfg.Deny = append(cfg.Deny, d.String())
	}
	b, _ := json.Marshal(cfg)
	if _, err := stdin.Write(append(b, '\n')); err != nil {
		return abort(fmt.Errorf("middleware worker: configure: %w", err))
	}
	// Wait for its ready line, so that a call's time limit does not count
	// the worker's start.
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 4*MaxIOBytes)
	ready := make(chan bool, 1)
	go func() { ready <- sc.Scan() }()
	timer := time.NewTimer(workerStartTimeout)
	defer timer.Stop()
	select {
	case ok := <-ready:
		if !ok {
			return abort(errors.New("middleware worker: exited while starting"))
		}
	case <-timer.C:
		cmd.Process.Kill() // ends the Scan above
		<-ready
		return abort(fmt.Errorf("middleware worker: not ready within %v", workerStartTimeout))
	}
	go p.read(sc, w.log)
	return p, nil
}

// limitCPU puts the worker pid into a new cgroup with the CPU quota. With no
// usable cgroup it returns none and logs a warning (once); an error means
// the worker is partly moved and must be killed.
func (w *worker) limitCPU(pid int) (*cgroup.Group, error) {
	if w.opts.CPUMillis < 0 {
		return nil, nil
	}
	if _, err := cgroupAvailable(); err != nil {
		w.noCgroup(err)
		return nil, nil
	}
	w.staleRm.Do(func() { removeStaleGroups(w.log) })
	name := fmt.Sprintf("%s%d-%d", cgroupPrefix, os.Getpid(), cgroupSeq.Add(1))
	lim := cgroup.Limits{CPUMillis: w.opts.CPUMillis}
	g, err := cgroup.Create(name, lim)
	if errors.Is(err, cgroup.ErrExist) { // left by an earlier wardend with this pid
		if old, lerr := cgroup.Load(name); lerr == nil {
			old.Delete()
		}
		g, err = cgroup.Create(name, lim)
	}
	if err != nil {
		w.noCgroup(err)
		return nil, nil
	}
	if err := g.AddProc(pid); err != nil {
		g.Delete()
		return nil, fmt.Errorf("middleware worker: limit its CPU: %w", err)
	}
	return g, nil
}

func (w *worker) noCgroup(err error) {
	if w.cgWarned.CompareAndSwap(false, true) {
		w.log.Warn("middleware worker: no cgroup for its CPU limit; its CPU is bounded by the time limits only", "err", err)
	}
}

// removeStaleGroups removes the workers' cgroups of wardends that are gone
// (a crash leaves the empty group behind).
func removeStaleGroups(log *slog.Logger) {
	names, err := cgroup.List()
	if err != nil {
		return
	}
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, cgroupPrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := unix.Kill(pid, 0); err == nil || errors.Is(err, unix.EPERM) {
			continue // its wardend lives
		}
		if g, err := cgroup.Load(n); err == nil {
			if err := g.Delete(); err != nil {
				log.Warn("middleware worker: remove a stale cgroup", "cgroup", n, "err", err)
			}
		}
	}
}

// read delivers the worker's answers until it exits, then fails every call
// still waiting and removes the worker's cgroup.
func (p *workerProc) read(sc *bufio.Scanner, log *slog.Logger) {
	defer close(p.exited)
	for sc.Scan() {
		var r workerResponse
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue
		}
		p.mu.Lock()
		ch := p.pending[r.ID]
		delete(p.pending, r.ID)
		p.mu.Unlock()
		if ch != nil {
			ch <- r.Verdict
		}
	}
	p.kill(0, false)
	err := p.cmd.Wait()
	if p.cg != nil {
		if derr := p.cg.Delete(); derr != nil {
			log.Warn("middleware worker: remove its cgroup", "err", derr)
		}
	}
	p.mu.Lock()
	culprit := p.culprit
	p.mu.Unlock()
	log.Info("middleware worker exited", "err", err, "killed_for_a_runaway", culprit != 0)
}

// kill ends the worker (for call culprit; 0: it died of itself) and fails
// the calls waiting on it. With onlyIfPending it does so only while call
// culprit still waits for its answer.
func (p *workerProc) kill(culprit uint64, onlyIfPending bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if onlyIfPending {
		if _, ok := p.pending[culprit]; !ok {
			return
		}
	}
	if !p.dead {
		p.dead, p.culprit, p.inFlight = true, culprit, len(p.pending)
		p.cmd.Process.Kill()
	}
	for id, ch := range p.pending {
		delete(p.pending, id)
		close(ch)
	}
}

// forget drops a call that no longer waits.
func (p *workerProc) forget(id uint64) {
	p.mu.Lock()
	delete(p.pending, id)
	p.mu.Unlock()
}

// rerunFor says whether call id, which the worker died under, is run again.
func (p *workerProc) rerunFor(id uint64) rerun {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.culprit == id:
		return rerunNone // killed for this very call
	case p.culprit != 0:
		return rerunShared // killed for another call
	case p.inFlight > 1:
		return rerunSolo // died of itself with others in flight: which one is unknown
	default:
		return rerunNone // died alone with it: it is the runaway
	}
}

// call runs one hook in the worker. secrets are the middleware's declared
// secrets, resolved.
func (w *worker) call(ctx context.Context, c *compiled, phase string, a *govern.Action, result any, secrets map[string]workerSecret, test bool) Verdict {
	v := Verdict{Middleware: c.Name}
	start := time.Now()
	fail := func(err error) Verdict {
		w.log.Warn("middleware failed", "middleware", c.Name, "phase", phase, "kind", a.Kind, "on_error", c.OnError, "err", err)
		v = failed(c, v, err)
		v.Elapsed = time.Since(start)
		return v
	}
	actionJSON, err := json.Marshal(a)
	if err != nil {
		return fail(fmt.Errorf("encode action: %w", err))
	}
	if len(actionJSON) > MaxIOBytes {
		return fail(fmt.Errorf("action larger than %d bytes", MaxIOBytes))
	}
	req := workerRequest{Middleware: c.Middleware, Phase: phase, Action: actionJSON, Secrets: secrets, Test: test}
	if phase == "post" {
		if req.Result, err = json.Marshal(result); err != nil {
			return fail(fmt.Errorf("encode result: %w", err))
		}
		if len(req.Result) > MaxIOBytes {
			return fail(fmt.Errorf("result larger than %d bytes", MaxIOBytes))
		}
	}
	p, err := w.get()
	if err != nil {
		return fail(err)
	}
	got, again, err := w.roundTrip(ctx, p, c, &req)
	switch again {
	case rerunShared:
		w.log.Info("middleware: re-running a call on a new worker (another call's runaway ended the one it ran in)", "middleware", c.Name)
		if p, err = w.get(); err == nil {
			got, _, err = w.roundTrip(ctx, p, c, &req)
		}
	case rerunSolo:
		w.log.Info("middleware: re-running a call alone (its worker died with several calls in flight)", "middleware", c.Name)
		got, err = w.runSolo(ctx, c, &req)
	}
	if err != nil {
		return fail(err)
	}
	return got
}

// roundTrip sends req to worker p and waits for the verdict. When p dies
// under the call, err is ErrWorkerDied and again says how to re-run it.
func (w *worker) roundTrip(ctx context.Context, p *workerProc, c *compiled, req *workerRequest) (got Verdict, again rerun, err error) {
	w.mu.Lock()
	w.nextID++
	id := w.nextID
	w.mu.Unlock()
	req.ID = id
	b, err := json.Marshal(req)
	if err != nil {
		return Verdict{}, rerunNone, fmt.Errorf("encode request: %w", err)
	}
	ch := make(chan Verdict, 1)
	p.mu.Lock()
	if p.dead { // it died between get and here: nothing of this call ran
		p.mu.Unlock()
		return Verdict{}, rerunShared, ErrWorkerDied
	}
	p.pending[id] = ch
	p.mu.Unlock()
	p.wmu.Lock()
	_, err = p.stdin.Write(append(b, '\n'))
	p.wmu.Unlock()
	if err != nil {
		p.kill(0, false)
	}
	answer := time.NewTimer(c.timeout() + answerSlack)
	defer answer.Stop()
	select {
	case got, ok := <-ch:
		if !ok {
			return Verdict{}, p.rerunFor(id), ErrWorkerDied
		}
		return got, rerunNone, nil
	case <-answer.C:
		// The caller gets the time-limit outcome now; the worker is killed
		// if the call still runs a grace period later.
		time.AfterFunc(workerGrace-answerSlack, func() { p.kill(id, true) })
		return Verdict{}, rerunNone, fmt.Errorf("%w: no answer within the time limit", errTimeout)
	case <-ctx.Done():
		p.forget(id)
		return Verdict{}, rerunNone, fmt.Errorf("cancelled: %w", ctx.Err())
	}
}

// runSolo runs req alone in a worker of its own, stopped after it.
func (w *worker) runSolo(ctx context.Context, c *compiled, req *workerRequest) (Verdict, error) {
	select {
	case w.solo <- struct{}{}:
	case <-ctx.Done():
		return Verdict{}, fmt.Errorf("cancelled: %w", ctx.Err())
	}
	defer func() { <-w.solo }()
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return Verdict{}, errClosed
	}
	p, err := w.start()
	if err != nil {
		return Verdict{}, err
	}
	defer p.kill(0, false)
	got, _, err := w.roundTrip(ctx, p, c, req)
	return got, err
}

// close stops the shared worker and waits (boundedly) until its cgroup is
// removed; calls after it fail.
func (w *worker) close() {
	w.mu.Lock()
	w.closed = true
	p := w.proc
	w.mu.Unlock()
	if p == nil {
		return
	}
	p.kill(0, false)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		w.log.Warn("middleware worker: did not exit in time")
	}
}

// Close stops the Set's worker process, if any, and removes its cgroup.
// Middleware calls after it fail (and get their on_error outcome).
func (s *Set) Close() {
	if s.worker != nil {
		s.worker.close()
	}
}

// resolveSecrets resolves the secrets middleware c declares, for the
// worker: the values granted to it, or why each is not available.
func (s *Set) resolveSecrets(ctx context.Context, c *compiled) map[string]workerSecret {
	if len(c.Secrets) == 0 {
		return nil
	}
	look := s.lookupFor(ctx, c)
	out := make(map[string]workerSecret, len(c.Secrets))
	for _, n := range c.Secrets {
		v, hosts, err := look(n)
		if err != nil {
			out[n] = workerSecret{Error: err.Error()}
			continue
		}
		out[n] = workerSecret{Value: v, Hosts: hosts}
	}
	return out
}

// mapLookup serves a request's resolved secrets in the worker.
func mapLookup(m map[string]workerSecret) secretLookup {
	return func(name string) (string, []string, error) {
		ws, ok := m[name]
		switch {
		case !ok:
			return "", nil, errors.New("not resolved")
		case ws.Error != "":
			return "", nil, errors.New(ws.Error)
		}
		return ws.Value, ws.Hosts, nil
	}
}

// ServeWorker is the worker process's main loop (wardend mw-worker): it
// reads its configuration and then requests from in, runs each in its own
// goroutine and writes the verdicts to out. It returns when in ends.
func ServeWorker(in io.Reader, out io.Writer) error {
	br := bufio.NewReaderSize(in, 64<<10)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("read worker config: %w", err)
	}
	var cfg workerConfig
	if err := json.Unmarshal(line, &cfg); err != nil {
		return fmt.Errorf("worker config: %w", err)
	}
	if cfg.MemoryBytes > 0 {
		// Also set by the daemon once the worker started; set here too, so
		// it holds before the first script whatever the timing.
		lim := unix.Rlimit{Cur: cfg.MemoryBytes, Max: cfg.MemoryBytes}
		if err := unix.Setrlimit(unix.RLIMIT_DATA, &lim); err != nil {
			return fmt.Errorf("worker: limit memory: %w", err)
		}
	}
	var deny []netip.Prefix
	for _, d := range cfg.Deny {
		p, err := netip.ParsePrefix(d)
		if err != nil {
			return fmt.Errorf("worker config: %w", err)
		}
		deny = append(deny, p)
	}
	s, err := New(Options{Dial: safedial.Options{Dest: network.NewDestinationPolicy(deny)}})
	if err != nil {
		return err
	}
	var wmu sync.Mutex
	enc := json.NewEncoder(out)
	if err := enc.Encode(workerResponse{}); err != nil { // ready (id 0: no call)
		return fmt.Errorf("worker: %w", err)
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 64<<10), 4*MaxIOBytes)
	var wg sync.WaitGroup
	for sc.Scan() {
		var req workerRequest
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := runRequest(s, req)
			wmu.Lock()
			enc.Encode(workerResponse{ID: req.ID, Verdict: v})
			wmu.Unlock()
		}()
	}
	wg.Wait()
	return sc.Err()
}

func runRequest(s *Set, req workerRequest) Verdict {
	c, err := compile(req.Middleware)
	if err != nil {
		return Verdict{Middleware: req.Middleware.Name, Action: "error", Error: err.Error(), OnError: req.Middleware.OnError}
	}
	var a govern.Action
	if err := json.Unmarshal(req.Action, &a); err != nil {
		return failed(c, Verdict{Middleware: c.Name}, fmt.Errorf("decode action: %w", err))
	}
	var result any
	if len(req.Result) > 0 {
		if err := json.Unmarshal(req.Result, &result); err != nil {
			return failed(c, Verdict{Middleware: c.Name}, fmt.Errorf("decode result: %w", err))
		}
	}
	return s.callHere(context.Background(), c, req.Phase, &a, result, mapLookup(req.Secrets), req.Test)
}
