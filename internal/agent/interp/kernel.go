package interp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/warden-sandbox/warden/internal/agent/process"
)

// syncMark is written by a driver to its fd 1 and fd 2 at the end of every
// run, after the user's code: once both arrive, every raw output of the run
// (a subprocess's, say) has been read.
var syncMark = []byte("\x00\x1bwarden-sync\x00")

// kernel is one interpreter process of a context.
type kernel struct {
	child       *process.Child
	ready       chan struct{} // closed on the driver's ready event
	unavailable string        // the driver's unavailable event: its interpreter is not installed
	dead        chan struct{} // closed when the event pipe ends (the process is gone)
	done        chan frame    // the driver's done events
	marks       chan struct{} // one per sync mark read on fd 1 or fd 2

	mu   sync.Mutex
	sink func(Event) // the current run's; nil between runs
}

// frame is one event line from a driver.
type frame struct {
	Type     string `json:"type"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Value    string `json:"value,omitempty"`
	raw      []byte
}

func startKernel(procs *process.Service, spec process.ChildSpec, wait time.Duration) (*kernel, error) {
	c, err := procs.StartChild(spec)
	if err != nil {
		return nil, err
	}
	k := &kernel{
		child: c,
		ready: make(chan struct{}),
		dead:  make(chan struct{}),
		done:  make(chan frame, 4),
		marks: make(chan struct{}, 16),
	}
	go k.readEvents()
	go k.readRaw(c.Stdout, "stdout")
	go k.readRaw(c.Stderr, "stderr")
	select {
	case <-k.ready:
		return k, nil
	case <-k.dead:
		k.child.Close()
		if k.unavailable != "" {
			return nil, &UnavailableError{Message: k.unavailable}
		}
		return nil, fmt.Errorf("interpreter %s exited at start (%s)", spec.Argv[0], describe(c))
	case <-time.After(wait):
		k.child.Close()
		return nil, fmt.Errorf("interpreter %s did not start within %s", spec.Argv[0], wait)
	}
}

func describe(c *process.Child) string {
	select {
	case <-c.Done():
		ws := c.Status()
		if ws.Signaled() {
			return "signal " + ws.Signal().String()
		}
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case <-time.After(200 * time.Millisecond):
		return "still running"
	}
}

// deliver hands ev to the current run, if any.
func (k *kernel) deliver(ev Event) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.sink != nil {
		k.sink(ev)
	}
}

func (k *kernel) setSink(f func(Event)) {
	k.mu.Lock()
	k.sink = f
	k.mu.Unlock()
}

func (k *kernel) readEvents() {
	defer close(k.dead)
	br := bufio.NewReaderSize(k.child.Events, 64<<10)
	readyOnce := sync.OnceFunc(func() { close(k.ready) })
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var f frame
			if json.Unmarshal(line, &f) == nil {
				switch f.Type {
				case "ready":
					readyOnce()
				case "unavailable":
					k.unavailable = f.Value // read by startKernel after dead is closed
				case "done":
					select {
					case k.done <- f:
					default:
					}
				default:
					var ev Event
					if json.Unmarshal(line, &ev) == nil {
						if (ev.Type == "stdout" || ev.Type == "stderr") && ev.Timestamp == 0 {
							ev.Timestamp = now()
						}
						if ev.Type == "result" {
							ev.Text = resultText(ev.Text)
						}
						k.deliver(ev)
					}
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// readRaw forwards what the interpreter process writes to fd 1 or 2 as
// stdout or stderr events, cutting out sync marks.
func (k *kernel) readRaw(f *os.File, kind string) {
	buf := make([]byte, 32<<10)
	var pending []byte
	emit := func(b []byte) {
		if len(b) > 0 {
			k.deliver(Event{Type: kind, Text: strings.ToValidUTF8(string(b), "\uFFFD"), Timestamp: now()})
		}
	}
	for {
		n, err := f.Read(buf)
		pending = append(pending, buf[:n]...)
		for {
			i := bytes.Index(pending, syncMark)
			if i < 0 {
				break
			}
			emit(pending[:i])
			pending = pending[i+len(syncMark):]
			k.marks <- struct{}{}
		}
		// Keep back a possible start of a mark and an incomplete rune.
		keep := 0
		for l := min(len(syncMark)-1, len(pending)); l > 0; l-- {
			if bytes.HasPrefix(syncMark, pending[len(pending)-l:]) {
				keep = l
				break
			}
		}
		cut := len(pending) - keep
		for j := cut - 1; j >= 0 && j >= cut-utf8.UTFMax; j-- {
			if utf8.RuneStart(pending[j]) {
				if !utf8.FullRune(pending[j:cut]) {
					cut = j
				}
				break
			}
		}
		if err != nil {
			cut = len(pending)
		}
		emit(pending[:cut])
		pending = append(pending[:0:0], pending[cut:]...)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				k.deliver(Event{Type: "stderr", Text: fmt.Sprintf("warden: read %s: %v\n", kind, err), Timestamp: now()})
			}
			return
		}
	}
}

// send writes one command to the driver.
func (k *kernel) send(b []byte) error {
	_, err := k.child.Control.Write(b)
	return err
}

func (k *kernel) interrupt() { k.child.Signal(syscall.SIGINT) }

func (k *kernel) close() {
	k.child.Close()
}

func (k *kernel) alive() bool {
	select {
	case <-k.dead:
		return false
	default:
		return true
	}
}

func now() int64 { return time.Now().UnixMicro() }

// resultText is a result's text as E2B's code-interpreter server makes it
// from Jupyter's text/plain: one enclosing pair of quotes is dropped, so
// the result of 'hello' reads hello (its Result model strips a leading and
// trailing ' or ").
func resultText(s string) string {
	if len(s) >= 2 && (s[0] == '\'' && s[len(s)-1] == '\'' || s[0] == '"' && s[len(s)-1] == '"') {
		return s[1 : len(s)-1]
	}
	return s
}
