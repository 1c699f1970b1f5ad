package warden

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/coder/websocket"
)

// PTYOptions describes the terminal [Client.PTY] opens. Zero fields take the daemon's
// defaults: 80x24, /bin/bash, the sandbox's user.
type PTYOptions struct {
	Cols, Rows int
	// Cmd is the program to run on the terminal.
	Cmd string
	// Args are Cmd's arguments.
	Args []string
	User string
}

// PTY is an interactive terminal in a sandbox. Read returns its output and Write sends it
// input; Wait returns the exit code once the program exits.
//
// Output must be read (until io.EOF) for Wait to return: the terminal does not buffer
// output nobody reads.
type PTY struct {
	conn   *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	out    *io.PipeReader

	done     chan struct{} // closed when the exit frame arrives or the connection ends
	exitCode int
	exitErr  error
	once     sync.Once
}

// ptyResize is the client's text frame that resizes the terminal.
type ptyResize struct {
	Type string `json:"type"` // "resize"
	Cols int    `json:"cols"`
	Rows int    `json:"rows"`
}

// ptyExit is the server's final text frame.
type ptyExit struct {
	Type     string `json:"type"` // "exit"
	ExitCode int    `json:"exit_code"`
}

// PTY opens an interactive terminal running opts.Cmd in the sandbox, over a WebSocket.
// Cancelling ctx ends the session.
func (c *Client) PTY(ctx context.Context, id string, opts PTYOptions) (*PTY, error) {
	q := url.Values{}
	if opts.Cols > 0 {
		q.Set("cols", strconv.Itoa(opts.Cols))
	}
	if opts.Rows > 0 {
		q.Set("rows", strconv.Itoa(opts.Rows))
	}
	if opts.Cmd != "" {
		q.Set("cmd", opts.Cmd)
	}
	for _, a := range opts.Args {
		q.Add("arg", a)
	}
	if opts.User != "" {
		q.Set("user", opts.User)
	}
	u := c.base + pathf("/v1/sandboxes/%s/pty", id)
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	h := http.Header{}
	h.Set("User-Agent", c.userAgent)
	if c.apiKey != "" {
		h.Set("Authorization", "Bearer "+c.apiKey)
	}
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient: c.hc,
		HTTPHeader: h,
	})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			err = decodeError(resp)
		} else if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("open pty in sandbox %s: %w", id, err)
	}
	conn.SetReadLimit(int64(c.maxEvent))

	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	p := &PTY{conn: conn, ctx: ctx, cancel: cancel, out: pr, done: make(chan struct{})}
	go p.readLoop(pw)
	return p, nil
}

// readLoop copies output frames to pw until the exit frame or the end of the connection.
func (p *PTY) readLoop(pw *io.PipeWriter) {
	for {
		typ, data, err := p.conn.Read(p.ctx)
		if err != nil {
			if p.ctx.Err() != nil {
				err = p.ctx.Err()
			}
			err = fmt.Errorf("pty closed before the program exited: %w", err)
			p.finish(-1, err)
			pw.CloseWithError(err)
			return
		}
		switch typ {
		case websocket.MessageBinary:
			if _, err := pw.Write(data); err != nil {
				// The reader closed the PTY; keep draining for the exit frame.
				continue
			}
		case websocket.MessageText:
			var msg ptyExit
			if json.Unmarshal(data, &msg) != nil || msg.Type != "exit" {
				continue // unknown control messages are ignored
			}
			p.finish(msg.ExitCode, nil)
			pw.Close()
			// Answer the server's close handshake.
			_ = p.conn.Close(websocket.StatusNormalClosure, "")
			p.cancel()
			return
		}
	}
}

func (p *PTY) finish(code int, err error) {
	p.once.Do(func() {
		p.exitCode, p.exitErr = code, err
		close(p.done)
	})
}

// Read reads terminal output. It returns io.EOF after the program exited.
func (p *PTY) Read(b []byte) (int, error) { return p.out.Read(b) }

// Write sends terminal input.
func (p *PTY) Write(b []byte) (int, error) {
	if err := p.conn.Write(p.ctx, websocket.MessageBinary, b); err != nil {
		return 0, fmt.Errorf("write pty: %w", err)
	}
	return len(b), nil
}

// Resize changes the terminal's size.
func (p *PTY) Resize(cols, rows int) error {
	if cols <= 0 || rows <= 0 {
		return errors.New("resize pty: cols and rows must be positive")
	}
	b, _ := json.Marshal(ptyResize{Type: "resize", Cols: cols, Rows: rows})
	if err := p.conn.Write(p.ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("resize pty: %w", err)
	}
	return nil
}

// Wait waits for the program to exit and returns its exit code. It returns an error when
// the connection ended before the exit code arrived.
func (p *PTY) Wait() (int, error) {
	<-p.done
	return p.exitCode, p.exitErr
}

// Done is closed when the program has exited or the connection has ended.
func (p *PTY) Done() <-chan struct{} { return p.done }

// Close ends the session. Wait then returns an error unless the program had exited.
func (p *PTY) Close() error {
	p.out.Close() // unblocks a readLoop waiting for a reader
	select {
	case <-p.done:
	default:
		_ = p.conn.Close(websocket.StatusNormalClosure, "")
	}
	p.cancel()
	return nil
}
