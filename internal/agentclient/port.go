package agentclient

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// portLinger bounds how long a closed port connection waits for the
// program's side to finish after everything written was sent (see
// portConn.Close).
const portLinger = 5 * time.Second

// PortError is the agent's refusal to connect to a port: Status 400 (bad
// port), 403 (the agent's own port) or 502 (nothing accepts connections on
// it).
type PortError struct {
	Port    int
	Status  int
	Message string
}

func (e *PortError) Error() string {
	return fmt.Sprintf("connect to port %d in the sandbox: %s", e.Port, e.Message)
}

// Closed reports whether the error says that nothing listens on the port.
func (e *PortError) Closed() bool { return e.Status == http.StatusBadGateway }

// DialPort connects to TCP port on the sandbox's loopback (127.0.0.1, else
// [::1]) through the agent: one HTTP/2 stream of the agent connection
// (POST /port/connect) carries the bytes both ways. ctx bounds the connect
// only, as with net.Dialer.DialContext.
//
// The returned net.Conn is one end of a socket pair whose other end is
// pumped to and from the stream, so it has the full semantics of a local
// stream socket: deadlines, CloseWrite (*net.UnixConn's; it ends the
// request body, and the program reads EOF) and Close. When the program
// closes its side, reads return EOF. A refused connect is a *PortError.
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, &PortError{Port: port, Status: http.StatusBadRequest, Message: "port must be 1 to 65535"}
	}
	// The stream lives until the connection is closed, not as long as ctx.
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(sctx, http.MethodPost, base+"/port/connect?port="+strconv.Itoa(port), pr)
	if err != nil {
		cancel()
		return nil, err
	}
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.HTTP.Do(req)
	if !stop() {
		// ctx ended during the connect.
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		pw.Close()
		return nil, fmt.Errorf("connect to port %d in the sandbox: %w", port, ctx.Err())
	}
	if err != nil {
		cancel()
		pw.Close()
		return nil, fmt.Errorf("connect to port %d in the sandbox: %w", port, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		cancel()
		pw.Close()
		msg := strings.TrimSpace(string(b))
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		return nil, &PortError{Port: port, Status: resp.StatusCode, Message: msg}
	}
	user, pump, err := socketPair()
	if err != nil {
		resp.Body.Close()
		cancel()
		pw.Close()
		return nil, fmt.Errorf("connect to port %d in the sandbox: %w", port, err)
	}
	pc := &portConn{UnixConn: user, port: port, closing: make(chan struct{})}
	go pc.run(pump, resp.Body, pw, cancel)
	return pc, nil
}

// socketPair returns the two ends of a unix stream socket pair.
func socketPair() (a, b *net.UnixConn, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	conn := func(fd int) (*net.UnixConn, error) {
		f := os.NewFile(uintptr(fd), "port-forward")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			return nil, err
		}
		return c.(*net.UnixConn), nil
	}
	a, err = conn(fds[0])
	if err != nil {
		syscall.Close(fds[1])
		return nil, nil, err
	}
	b, err = conn(fds[1])
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// portConn is the caller's end of a port connection.
type portConn struct {
	*net.UnixConn
	port      int
	closing   chan struct{} // closed by Close (not by CloseWrite)
	closeOnce sync.Once
}

// PortAddr is the remote address of a port connection: a port on the
// sandbox's loopback.
type PortAddr struct{ Port int }

func (a PortAddr) Network() string { return "sandbox" }
func (a PortAddr) String() string  { return "localhost:" + strconv.Itoa(a.Port) }

// RemoteAddr names the sandbox port.
func (c *portConn) RemoteAddr() net.Addr { return PortAddr{Port: c.port} }

// Close closes the connection. What was written before is still sent and
// the program reads EOF after it; the stream is then given up to
// portLinger for the program to close its side before it is reset.
func (c *portConn) Close() error {
	c.closeOnce.Do(func() { close(c.closing) })
	return c.UnixConn.Close()
}

// run pumps the stream to and from the pump end of the socket pair until
// both directions are done, then releases the stream.
func (c *portConn) run(pump *net.UnixConn, body io.ReadCloser, pw *io.PipeWriter, cancel context.CancelFunc) {
	defer cancel()
	defer body.Close()
	defer pump.Close()
	down := make(chan struct{})
	go func() {
		defer close(down)
		buf := make([]byte, 32<<10)
		var werr error
		for {
			n, rerr := body.Read(buf)
			if n > 0 && werr == nil {
				// Once the caller is gone, what the program still sends
				// is drained and dropped, which keeps the stream open
				// until the program is done.
				_, werr = pump.Write(buf[:n])
			}
			if rerr == io.EOF {
				pump.CloseWrite() // the program closed its side: EOF for the caller
				return
			}
			if rerr != nil {
				pump.Close() // the stream broke
				return
			}
		}
	}()
	// Up: what the caller writes, until it half-closes or closes.
	_, err := io.Copy(pw, pump)
	pw.CloseWithError(err) // nil: end of the request body, the program reads EOF
	if err == nil {
		// Half-closed: the program may still answer, for as long as the
		// caller keeps its end open.
		select {
		case <-down:
			return
		case <-c.closing:
		}
	}
	// Closed (or the stream broke): give what the program still sends a
	// moment to drain (the caller is gone, so it is dropped), then reset.
	t := time.NewTimer(portLinger)
	defer t.Stop()
	select {
	case <-down:
	case <-t.C:
	}
}
