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
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/network/safedial"
)

// The middleware worker (docs/guardrails.md, "Limits"): scripts run in a
// separate process (wardend mw-worker), started on the first call, whose
// data segment (the Go heap's mappings) is capped with RLIMIT_DATA, so a
// runaway allocation kills the worker, not wardend. (RLIMIT_AS would count
// the Go runtime's address-space reservations, over 1 GiB while idle.) The daemon sends it one JSON request a line (the
// middleware, the phase, the action and the result) and reads one verdict a
// line back; calls run concurrently in the worker. When the worker dies
// (out of memory, killed) every call in flight fails with a clear error
// and gets its middleware's on_error outcome; the next call starts a new
// worker. A call that gets no answer within its time limit plus a grace
// period kills the worker as well (a runaway the interrupt did not stop).

// WorkerCommand is the hidden subcommand of wardend that serves as the
// worker.
const WorkerCommand = "mw-worker"

// DefaultWorkerMemory is the worker's memory limit (RLIMIT_DATA) by default.
const DefaultWorkerMemory = 1 << 30

// workerGrace is how long past a call's time limit the daemon waits for
// the worker's answer before it kills the worker.
const workerGrace = 2 * time.Second

// WorkerOptions configures the worker process of a Set.
type WorkerOptions struct {
	// Command is the worker's argv (for wardend: itself and WorkerCommand).
	Command []string
	// Env is added to the worker's environment.
	Env []string
	// MemoryBytes caps the worker's data segment (RLIMIT_DATA: its heap);
	// 0: DefaultWorkerMemory.
	MemoryBytes uint64
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
}

type workerResponse struct {
	ID      uint64  `json:"id"`
	Verdict Verdict `json:"verdict"`
}

// ErrWorkerDied is the failure of calls in flight when the worker exits.
var ErrWorkerDied = errors.New("middleware worker died (out of memory or killed); it is restarted on the next call")

// worker is the daemon's handle on the worker process.
type worker struct {
	opts WorkerOptions
	log  *slog.Logger

	mu      sync.Mutex
	proc    *workerProc
	nextID  uint64
	started int // how many workers were started (tests)
}

type workerProc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	wmu     sync.Mutex // serialises writes to stdin
	mu      sync.Mutex
	pending map[uint64]chan Verdict
	dead    bool
}

func newWorker(opts WorkerOptions, log *slog.Logger) *worker {
	if opts.MemoryBytes == 0 {
		opts.MemoryBytes = DefaultWorkerMemory
	}
	return &worker{opts: opts, log: log}
}

// get returns the running worker, starting one when there is none.
func (w *worker) get() (*workerProc, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
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
	lim := unix.Rlimit{Cur: w.opts.MemoryBytes, Max: w.opts.MemoryBytes}
	if err := unix.Prlimit(cmd.Process.Pid, unix.RLIMIT_DATA, &lim, nil); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("middleware worker: limit its memory: %w", err)
	}
	p := &workerProc{cmd: cmd, stdin: stdin, pending: map[uint64]chan Verdict{}}
	cfg := workerConfig{MemoryBytes: w.opts.MemoryBytes}
	for _, d := range w.opts.Deny {
		cfg.Deny = append(cfg.Deny, d.String())
	}
	b, _ := json.Marshal(cfg)
	if _, err := stdin.Write(append(b, '\n')); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("middleware worker: configure: %w", err)
	}
	go p.read(stdout, w.log)
	return p, nil
}

// read delivers the worker's answers until it exits, then fails every call
// still waiting.
func (p *workerProc) read(stdout io.Reader, log *slog.Logger) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 4*MaxIOBytes)
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
	p.kill()
	err := p.cmd.Wait()
	log.Warn("middleware worker exited", "err", err)
}

// kill ends the worker and fails the calls waiting on it.
func (p *workerProc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.dead {
		p.dead = true
		p.cmd.Process.Kill()
	}
	for id, ch := range p.pending {
		delete(p.pending, id)
		close(ch)
	}
}

// call runs one hook in the worker.
func (w *worker) call(ctx context.Context, c *compiled, phase string, a *govern.Action, result any) Verdict {
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
	req := workerRequest{Middleware: c.Middleware, Phase: phase, Action: actionJSON}
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
	w.mu.Lock()
	w.nextID++
	req.ID = w.nextID
	w.mu.Unlock()
	ch := make(chan Verdict, 1)
	p.mu.Lock()
	if p.dead {
		p.mu.Unlock()
		return fail(ErrWorkerDied)
	}
	p.pending[req.ID] = ch
	p.mu.Unlock()
	b, err := json.Marshal(req)
	if err != nil {
		return fail(fmt.Errorf("encode request: %w", err))
	}
	p.wmu.Lock()
	_, err = p.stdin.Write(append(b, '\n'))
	p.wmu.Unlock()
	if err != nil {
		p.kill()
		return fail(ErrWorkerDied)
	}
	timer := time.NewTimer(c.timeout() + workerGrace)
	defer timer.Stop()
	select {
	case got, ok := <-ch:
		if !ok {
			return fail(ErrWorkerDied)
		}
		return got
	case <-timer.C:
		p.kill() // a runaway the interrupt did not stop
		return fail(fmt.Errorf("%w: no answer within the time limit", errTimeout))
	case <-ctx.Done():
		p.mu.Lock()
		delete(p.pending, req.ID)
		p.mu.Unlock()
		return fail(fmt.Errorf("cancelled: %w", ctx.Err()))
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
	return s.callHere(context.Background(), c, req.Phase, &a, result)
}
