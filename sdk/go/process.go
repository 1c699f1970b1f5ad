package warden

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"sync"
)

// stdinChunk is the most stdin bytes sent in one request by [Client.Exec].
const stdinChunk = 64 << 10

// ExecIO connects a process started by [Client.Exec] to the caller. Nil writers discard
// the output; a nil Stdin gives the process an empty stdin.
type ExecIO struct {
	// Stdin is copied to the process's stdin, which is closed at EOF.
	Stdin io.Reader
	// Stdout receives stdout, and terminal output of processes on a terminal.
	Stdout io.Writer
	// Stderr receives stderr.
	Stderr io.Writer
}

// Exec runs a process to completion: it copies the process's output to stdio.Stdout and
// stdio.Stderr, feeds stdio.Stdin to it once it has started, and returns how it exited. A
// non-zero exit status is not an error; see [ExitResult.Success].
//
// Cancelling ctx stops the call but not the process, which keeps running in the sandbox
// (use req.TimeoutSeconds to bound it, or [Client.Signal]). Exec does not wait for a
// blocked Stdin read to return.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest, stdio ExecIO) (ExitResult, error) {
	req.Stdin = stdio.Stdin != nil
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // also stops the stdin copy

	s, err := c.StartProcess(ctx, id, req)
	if err != nil {
		return ExitResult{}, fmt.Errorf("exec: %w", err)
	}
	defer s.Close()

	stdinDone := make(chan error, 1)
	if stdio.Stdin != nil {
		go func() { stdinDone <- c.copyStdin(ctx, id, s.PID(), stdio.Stdin) }()
	}
	res, err := s.Copy(stdio.Stdout, stdio.Stderr)
	if err != nil {
		return ExitResult{}, fmt.Errorf("exec: %w", err)
	}
	select {
	case serr := <-stdinDone:
		// Once the process has exited, failures to feed it are expected; anything else
		// means it may have seen less input than given.
		if serr != nil && !IsConflict(serr) && !IsNotFound(serr) && !errors.Is(serr, context.Canceled) {
			return res, fmt.Errorf("exec: %w", serr)
		}
	default:
	}
	return res, nil
}

// copyStdin sends r to the process's stdin in chunks, then closes it.
func (c *Client) copyStdin(ctx context.Context, id string, pid int, r io.Reader) error {
	buf := make([]byte, stdinChunk)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if err := c.SendStdin(ctx, id, pid, buf[:n]); err != nil {
				return err
			}
		}
		switch {
		case rerr == io.EOF:
			return c.CloseStdin(ctx, id, pid)
		case rerr != nil:
			return fmt.Errorf("read stdin: %w", rerr)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// StartProcess starts a process and returns once it has started, with a stream of its
// events. Close the stream when done; closing it or cancelling ctx does not stop the
// process.
func (c *Client) StartProcess(ctx context.Context, id string, req ExecRequest) (*ProcessStream, error) {
	resp, err := c.send(ctx, &request{
		method: http.MethodPost,
		path:   pathf("/v1/sandboxes/%s/exec", id),
		json:   req,
		accept: "application/x-ndjson",
	})
	if err != nil {
		return nil, fmt.Errorf("start process in sandbox %s: %w", id, err)
	}
	s := c.newProcessStream(ctx, id, 0, resp)
	ev, err := s.Next()
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("start process in sandbox %s: %w", id, err)
	}
	if ev.Type != EventStart {
		s.pending = &ev // keep it for the caller
	}
	return s, nil
}

// StreamProcess attaches to a process started earlier, such as one whose [Client.Exec]
// was interrupted. With replay, output retained while nobody listened comes first.
func (c *Client) StreamProcess(ctx context.Context, id string, pid int, replay bool) (*ProcessStream, error) {
	q := url.Values{}
	if replay {
		q.Set("replay", "true")
	}
	resp, err := c.send(ctx, &request{
		method:     http.MethodGet,
		path:       pathf("/v1/sandboxes/%s/processes/%d/stream", id, pid),
		query:      q,
		accept:     "application/x-ndjson",
		idempotent: true,
	})
	if err != nil {
		return nil, fmt.Errorf("stream process %d in sandbox %s: %w", pid, id, err)
	}
	return c.newProcessStream(ctx, id, pid, resp), nil
}

// Processes lists the processes started through the API in the sandbox.
func (c *Client) Processes(ctx context.Context, id string) ([]ProcessInfo, error) {
	var out struct {
		Processes []ProcessInfo `json:"processes"`
	}
	err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/sandboxes/%s/processes", id), idempotent: true}, &out)
	if err != nil {
		return nil, fmt.Errorf("list processes in sandbox %s: %w", id, err)
	}
	return out.Processes, nil
}

// SendStdin writes data to the stdin of a process started with ExecRequest.Stdin set.
func (c *Client) SendStdin(ctx context.Context, id string, pid int, data []byte) error {
	err := c.do(ctx, &request{
		method:      http.MethodPost,
		path:        pathf("/v1/sandboxes/%s/processes/%d/stdin", id, pid),
		body:        bytesReader(data),
		contentType: "application/octet-stream",
	}, nil)
	if err != nil {
		return fmt.Errorf("send stdin to process %d: %w", pid, err)
	}
	return nil
}

// CloseStdin closes the process's stdin, so that it reads end of file.
func (c *Client) CloseStdin(ctx context.Context, id string, pid int) error {
	err := c.do(ctx, &request{
		method:     http.MethodPost,
		path:       pathf("/v1/sandboxes/%s/processes/%d/close-stdin", id, pid),
		idempotent: true,
	}, nil)
	if err != nil {
		return fmt.Errorf("close stdin of process %d: %w", pid, err)
	}
	return nil
}

// Signal sends sig to the process.
func (c *Client) Signal(ctx context.Context, id string, pid int, sig Signal) error {
	err := c.do(ctx, &request{
		method: http.MethodPost,
		path:   pathf("/v1/sandboxes/%s/processes/%d/signal", id, pid),
		json:   map[string]Signal{"signal": sig},
	}, nil)
	if err != nil {
		return fmt.Errorf("signal process %d: %w", pid, err)
	}
	return nil
}

// ProcessStream reads the events of one process. Its methods must not be called
// concurrently, except Close.
type ProcessStream struct {
	ctx       context.Context
	c         *Client
	sandboxID string
	pid       int
	dec       *lineDecoder
	pending   *ProcessEvent
	result    *ExitResult
	err       error // terminal error, returned again by later calls
	closeOnce sync.Once
}

func (c *Client) newProcessStream(ctx context.Context, id string, pid int, resp *http.Response) *ProcessStream {
	return &ProcessStream{ctx: ctx, c: c, sandboxID: id, pid: pid, dec: newLineDecoder(resp.Body, c.maxEvent)}
}

// PID returns the process ID in the sandbox.
func (s *ProcessStream) PID() int { return s.pid }

// Next returns the next event. After the end event it returns io.EOF; an error event is
// returned as an *Error; a stream that stops before the end event returns an error
// wrapping io.ErrUnexpectedEOF.
func (s *ProcessStream) Next() (ProcessEvent, error) {
	if s.pending != nil {
		ev := *s.pending
		s.pending = nil
		return ev, nil
	}
	if s.err != nil {
		return ProcessEvent{}, s.err
	}
	var ev ProcessEvent
	if err := s.dec.next(&ev); err != nil {
		switch {
		case s.ctx.Err() != nil:
			err = s.ctx.Err()
		case err == io.EOF:
			err = fmt.Errorf("process stream ended before the end event: %w", io.ErrUnexpectedEOF)
		}
		s.err = err
		return ProcessEvent{}, err
	}
	switch ev.Type {
	case EventStart:
		if ev.PID != 0 {
			s.pid = ev.PID
		}
	case EventEnd:
		s.result = &ExitResult{ExitCode: ev.ExitCode, Signal: ev.Signal, Status: ev.Status, Error: ev.Error}
		s.err = io.EOF
		s.dec.close()
	case EventError:
		s.err = &Error{Code: ev.Code, Message: ev.Message}
		s.dec.close()
		return ProcessEvent{}, s.err
	}
	return ev, nil
}

// Events iterates over the remaining events, up to and including the end event. A failure
// is yielded once, as the last element.
func (s *ProcessStream) Events() iter.Seq2[ProcessEvent, error] {
	return func(yield func(ProcessEvent, error) bool) {
		for {
			ev, err := s.Next()
			if err == io.EOF {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// Copy writes the remaining output to stdout (stdout and pty events) and stderr, and
// returns how the process exited. Nil writers discard.
func (s *ProcessStream) Copy(stdout, stderr io.Writer) (ExitResult, error) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	for {
		ev, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return ExitResult{}, err
		}
		var w io.Writer
		switch ev.Type {
		case EventStdout, EventPTY:
			w = stdout
		case EventStderr:
			w = stderr
		default:
			continue
		}
		if _, err := w.Write(ev.Data); err != nil {
			return ExitResult{}, fmt.Errorf("write %s: %w", ev.Type, err)
		}
	}
	if s.result == nil {
		return ExitResult{}, errors.New("process stream ended without a result")
	}
	return *s.result, nil
}

// Result returns how the process exited, once the end event has been read.
func (s *ProcessStream) Result() (ExitResult, bool) {
	if s.result == nil {
		return ExitResult{}, false
	}
	return *s.result, true
}

// SendStdin writes data to the process's stdin; see [Client.SendStdin].
func (s *ProcessStream) SendStdin(ctx context.Context, data []byte) error {
	return s.c.SendStdin(ctx, s.sandboxID, s.pid, data)
}

// CloseStdin closes the process's stdin; see [Client.CloseStdin].
func (s *ProcessStream) CloseStdin(ctx context.Context) error {
	return s.c.CloseStdin(ctx, s.sandboxID, s.pid)
}

// Signal sends sig to the process; see [Client.Signal].
func (s *ProcessStream) Signal(ctx context.Context, sig Signal) error {
	return s.c.Signal(ctx, s.sandboxID, s.pid, sig)
}

// Close stops reading the stream. The process keeps running.
func (s *ProcessStream) Close() error {
	s.closeOnce.Do(func() { s.dec.close() })
	return nil
}
