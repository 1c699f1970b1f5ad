package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// PortConnectPath is the agent route that forwards a byte stream to a TCP
// port on the sandbox's loopback (see servePortConnect).
const PortConnectPath = "/port/connect"

// portDialTimeout bounds the connect to the sandbox's loopback.
const portDialTimeout = 5 * time.Second

// ownPorts remembers the TCP ports the agent itself listens on (Serve with a
// TCP listener; the backends hand it a unix one), which may not be forwarded
// to: the agent is not reachable through its own port forward.
type ownPorts struct {
	mu    sync.Mutex
	ports map[int]bool
}

func (o *ownPorts) add(addr net.Addr) {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ports == nil {
		o.ports = map[int]bool{}
	}
	o.ports[ta.Port] = true
}

func (o *ownPorts) has(port int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ports[port]
}

// servePortConnect is POST /port/connect?port=N: it connects to TCP port N
// on the sandbox's loopback (127.0.0.1, then [::1]) and turns the HTTP/2
// stream into that connection: the request body is written to it, what it
// sends is the response body, flushed as it arrives. The status says
// whether the connect worked: 200 and the stream follows; 400 for a bad
// port, 403 for the agent's own port, 502 when nothing accepts on the port.
//
// The end of the request body half-closes the connection (the program reads
// EOF); the response ends when the program closes its side. A reset stream
// closes the connection. The route needs HTTP/2 (full duplex on one
// stream); the host's agent client always speaks it.
func (a *Agent) servePortConnect(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.URL.Query().Get("port"))
	if err != nil || port < 1 || port > 65535 {
		http.Error(w, "port must be 1 to 65535", http.StatusBadRequest)
		return
	}
	if r.ProtoMajor != 2 {
		http.Error(w, "port forwarding needs HTTP/2", http.StatusHTTPVersionNotSupported)
		return
	}
	if a.own.has(port) {
		http.Error(w, "port "+strconv.Itoa(port)+" is the agent's own", http.StatusForbidden)
		return
	}
	conn, err := dialLoopback(r.Context(), port)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer conn.Close()
	// A reset stream (the host closed its end) cancels the request's
	// context: close the connection so that the copies below end.
	stop := context.AfterFunc(r.Context(), func() { conn.Close() })
	defer stop()

	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}

	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		_, err := io.Copy(conn, r.Body)
		if err == nil {
			conn.CloseWrite() // the host half-closed: pass the EOF on
		} else {
			conn.Close()
		}
	}()

	buf := make([]byte, 32<<10)
	for {
		n, rerr := conn.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				break
			}
			if err := rc.Flush(); err != nil {
				break
			}
		}
		if rerr != nil {
			break
		}
	}
	// The program closed its side (or the stream broke): end the response.
	// The request body must not be read after the handler returns, so stop
	// the upstream copy first.
	r.Body.Close()
	conn.Close()
	<-upDone
}

// dialLoopback connects to port on 127.0.0.1, else on [::1].
func dialLoopback(ctx context.Context, port int) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: portDialTimeout}
	var errs []error
	for _, host := range []string{"127.0.0.1", "::1"} {
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			return c.(*net.TCPConn), nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}
