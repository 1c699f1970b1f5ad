// Package agentclient is the host side of the agent protocol: a client for
// warden-agent's process and filesystem services and its HTTP routes, over
// HTTP/2 cleartext on whatever byte stream the backend's DialAgent returns.
// One connection carries many concurrent calls.
package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"connectrpc.com/connect"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
	"github.com/warden-sandbox/warden/internal/agentpb/filesystem/filesystempbconnect"
	processpb "github.com/warden-sandbox/warden/internal/agentpb/process"
	"github.com/warden-sandbox/warden/internal/agentpb/process/processpbconnect"
)

// DialFunc opens a byte stream to the agent.
type DialFunc func(ctx context.Context) (net.Conn, error)

// base is the URL every request uses; the host part is never resolved.
const base = "http://agent"

// Client talks to one agent.
type Client struct {
	HTTP    *http.Client
	Process processpbconnect.ProcessClient
	FS      filesystempbconnect.FilesystemClient
}

// New returns a client that dials with dial.
func New(dial DialFunc) *Client {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols: &protos,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx)
		},
		MaxIdleConns:      4,
		DisableKeepAlives: false,
	}
	hc := &http.Client{Transport: kindTransport{tr}}
	return &Client{
		HTTP:    hc,
		Process: processpbconnect.NewProcessClient(hc, base, connect.WithInterceptors(kindInterceptor{})),
		FS:      filesystempbconnect.NewFilesystemClient(hc, base, connect.WithInterceptors(kindInterceptor{})),
	}
}

// Close drops idle connections.
func (c *Client) Close() { c.HTTP.CloseIdleConnections() }

// Health reports whether the agent answers.
func (c *Client) Health(ctx context.Context) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("agent health: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("agent health: status %d", resp.StatusCode)
	}
	return nil
}

// Cmd describes a process to run.
type Cmd struct {
	Args   []string          // argv; Args[0] is resolved through PATH inside the sandbox
	Env    map[string]string // added to the sandbox environment
	Dir    string            // working directory; default the user's home or the sandbox workdir
	User   string            // acting user; default the sandbox's default user
	Tag    string            // optional unique tag
	Stdin  io.Reader         // nil: stdin closed
	Stdout io.Writer
	Stderr io.Writer
	PTY    *PTYSize // non-nil: run on a terminal; output goes to Stdout
}

// PTYSize is a terminal size.
type PTYSize struct{ Cols, Rows uint32 }

// Result is how a process ended.
type Result struct {
	Pid      uint32
	ExitCode int
	Signal   int
	Status   string
	Error    string
}

// Start starts cmd and returns its event stream. The caller reads it (or hands
// it to Wait).
func (c *Client) Start(ctx context.Context, cmd Cmd) (*connect.ServerStreamForClient[processpb.StartResponse], error) {
	if len(cmd.Args) == 0 {
		return nil, errors.New("empty command")
	}
	stdin := cmd.Stdin != nil
	pc := &processpb.ProcessConfig{Cmd: cmd.Args[0], Args: cmd.Args[1:], Envs: cmd.Env}
	if cmd.Dir != "" {
		pc.Cwd = &cmd.Dir
	}
	sr := &processpb.StartRequest{Process: pc, Stdin: &stdin}
	if cmd.Tag != "" {
		sr.Tag = &cmd.Tag
	}
	if cmd.PTY != nil {
		sr.Pty = &processpb.PTY{Size: &processpb.PTY_Size{Cols: cmd.PTY.Cols, Rows: cmd.PTY.Rows}}
	}
	req := connect.NewRequest(sr)
	if cmd.User != "" {
		req.Header().Set("Authorization", sysuser.BasicAuth(cmd.User))
	}
	return c.Process.Start(ctx, req)
}

// Run runs cmd to completion, streaming its output and feeding its stdin.
func (c *Client) Run(ctx context.Context, cmd Cmd) (Result, error) {
	stream, err := c.Start(ctx, cmd)
	if err != nil {
		return Result{}, err
	}
	defer stream.Close()
	var res Result
	stdinDone := make(chan struct{})
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			res.Pid = ev.GetStart().GetPid()
			if cmd.Stdin != nil {
				go func() {
					defer close(stdinDone)
					c.feedStdin(ctx, res.Pid, cmd.Stdin, cmd.PTY != nil)
				}()
			}
		case ev.GetData() != nil:
			d := ev.GetData()
			switch {
			case d.GetStdout() != nil && cmd.Stdout != nil:
				cmd.Stdout.Write(d.GetStdout())
			case d.GetStderr() != nil && cmd.Stderr != nil:
				cmd.Stderr.Write(d.GetStderr())
			case d.GetPty() != nil && cmd.Stdout != nil:
				cmd.Stdout.Write(d.GetPty())
			}
		case ev.GetEnd() != nil:
			e := ev.GetEnd()
			res.ExitCode = int(e.GetExitCode())
			res.Signal = int(e.GetSignal())
			res.Status = e.GetStatus()
			res.Error = e.GetError()
			return res, nil
		}
	}
	if err := stream.Err(); err != nil {
		return res, err
	}
	return res, errors.New("process stream ended without an end event")
}

func (c *Client) feedStdin(ctx context.Context, pid uint32, r io.Reader, pty bool) {
	sel := &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			in := &processpb.ProcessInput{}
			chunk := bytes.Clone(buf[:n])
			if pty {
				in.Input = &processpb.ProcessInput_Pty{Pty: chunk}
			} else {
				in.Input = &processpb.ProcessInput_Stdin{Stdin: chunk}
			}
			if _, err := c.Process.SendInput(ctx, connect.NewRequest(&processpb.SendInputRequest{Process: sel, Input: in})); err != nil {
				return
			}
		}
		if err != nil {
			if !pty {
				c.Process.CloseStdin(ctx, connect.NewRequest(&processpb.CloseStdinRequest{Process: sel}))
			}
			return
		}
	}
}

// Signal sends sig to the process group of pid.
func (c *Client) Signal(ctx context.Context, pid uint32, sig syscall.Signal) error {
	_, err := c.Process.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}},
		Signal:  processpb.Signal(sig),
	}))
	return err
}

// HTTPError is a non-2xx answer from an agent HTTP route. Its kind comes
// from its status (errors.go).
type HTTPError struct {
	Status  int
	Message string
}

func (e *HTTPError) Error() string { return fmt.Sprintf("agent: %d %s", e.Status, e.Message) }

func (c *Client) do(ctx context.Context, method, path string, q url.Values, user string, body io.Reader, hdr http.Header) (*http.Response, error) {
	if user != "" {
		q.Set("username", user)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path+"?"+q.Encode(), body)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, &HTTPError{Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
	}
	return resp, nil
}

// ReadFile opens a file in the sandbox for reading.
func (c *Client) ReadFile(ctx context.Context, path, user string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, http.MethodGet, "/files", url.Values{"path": {path}}, user, nil, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteFile writes r to path atomically (the agent's atomic mode: a
// temporary file renamed into place); mode 0 keeps the default.
func (c *Client) WriteFile(ctx context.Context, path, user string, mode uint32, r io.Reader) error {
	q := url.Values{"path": {path}, "atomic": {"true"}}
	if mode != 0 {
		q.Set("mode", strconv.FormatUint(uint64(mode), 8))
	}
	resp, err := c.do(ctx, http.MethodPost, "/files", q, user, r, http.Header{"Content-Type": {"application/octet-stream"}})
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

// Download returns path (a directory or file) as a tar stream.
func (c *Client) Download(ctx context.Context, path, user string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, http.MethodGet, "/tar", url.Values{"path": {path}}, user, nil, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Upload extracts the tar stream r under path.
func (c *Client) Upload(ctx context.Context, path, user string, r io.Reader) error {
	resp, err := c.do(ctx, http.MethodPost, "/tar", url.Values{"path": {path}}, user, r, http.Header{"Content-Type": {"application/x-tar"}})
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

// CheckPort reports whether TCP port accepts connections on the sandbox's
// loopback (nil if so).
func (c *Client) CheckPort(ctx context.Context, port int) error {
	resp, err := c.do(ctx, http.MethodGet, "/port", url.Values{"port": {strconv.Itoa(port)}}, "", nil, nil)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

// Init adds env to the sandbox-wide environment (POST /init).
func (c *Client) Init(ctx context.Context, env map[string]string) error {
	body, err := json.Marshal(map[string]any{"envVars": env})
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodPost, "/init", url.Values{}, "", bytes.NewReader(body), http.Header{"Content-Type": {"application/json"}})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
