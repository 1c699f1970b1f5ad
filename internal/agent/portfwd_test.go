package agent_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/agent"
	"github.com/warden-sandbox/warden/internal/agentclient"
)

// serveAgent serves an agent on a unix socket (as the backends do) and on
// the given extra listeners, and returns a client dialling the socket.
func serveAgent(t *testing.T, extra ...net.Listener) *agentclient.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := agent.New(agent.Config{DefaultUser: "root", DefaultWorkdir: os.TempDir()})
	go a.Serve(ctx, ln)
	for _, l := range extra {
		go a.Serve(ctx, l)
	}
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	t.Cleanup(func() { c.Close(); cancel(); a.Close() })
	return c
}

// listen starts a TCP server on 127.0.0.1 that runs handle on every
// connection; it returns the port.
func listen(t *testing.T, network, addr string, handle func(net.Conn)) int {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); handle(c) }()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

func TestDialPortEcho(t *testing.T) {
	c := serveAgent(t)
	// An upper-casing echo that answers "bye" after EOF: it shows that the
	// half-close reaches the program and its answer still comes back.
	port := listen(t, "tcp", "127.0.0.1:0", func(conn net.Conn) {
		b, _ := io.ReadAll(conn)
		conn.Write([]byte(strings.ToUpper(string(b)) + " bye"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := c.DialPort(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := conn.RemoteAddr().String(); got != "localhost:"+strconv.Itoa(port) {
		t.Errorf("RemoteAddr %q", got)
	}
	big := strings.Repeat("abcdefgh", 1<<17) // 1 MiB: more than one flow-control window
	go func() {
		conn.Write([]byte(big))
		conn.(interface{ CloseWrite() error }).CloseWrite()
	}()
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != strings.ToUpper(big)+" bye" {
		t.Fatalf("got %d bytes, want %d", len(got), len(big)+4)
	}
}

func TestDialPortInteractive(t *testing.T) {
	c := serveAgent(t)
	port := listen(t, "tcp", "127.0.0.1:0", func(conn net.Conn) {
		sc := bufio.NewScanner(conn)
		for sc.Scan() {
			if _, err := conn.Write([]byte("echo: " + sc.Text() + "\n")); err != nil {
				return
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := c.DialPort(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	for i := range 20 {
		msg := "line " + strconv.Itoa(i)
		if _, err := conn.Write([]byte(msg + "\n")); err != nil {
			t.Fatal(err)
		}
		line, err := r.ReadString('\n')
		if err != nil || line != "echo: "+msg+"\n" {
			t.Fatalf("round trip %d: %q %v", i, line, err)
		}
	}
	// Deadlines are those of a local socket.
	conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := r.ReadByte(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	conn.SetReadDeadline(time.Time{})
	conn.Write([]byte("again\n"))
	if line, err := r.ReadString('\n'); err != nil || line != "echo: again\n" {
		t.Fatalf("after the deadline: %q %v", line, err)
	}
}

// TestDialPortServerCloses: the program closing its side is EOF for the
// caller, and HTTP through the connection works (what the daemon's preview
// proxy does).
func TestDialPortHTTP(t *testing.T) {
	c := serveAgent(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("hello " + r.URL.Path))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port

	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return c.DialPort(ctx, port) }}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for i := range 3 { // the second and third reuse the connection
		resp, err := hc.Get("http://sandbox/x" + strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "hello /x"+strconv.Itoa(i) {
			t.Fatalf("got %q", b)
		}
	}
	// Connection: close makes the server close; the caller reads EOF.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := c.DialPort(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write([]byte("GET /bye HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
	b, err := io.ReadAll(conn)
	if err != nil || !strings.HasSuffix(string(b), "hello /bye") {
		t.Fatalf("got %q %v", b, err)
	}
}

func TestDialPortIPv6Only(t *testing.T) {
	c := serveAgent(t)
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skip("no IPv6 loopback:", err)
	}
	ln.Close()
	port := listen(t, "tcp6", "[::1]:0", func(conn net.Conn) { conn.Write([]byte("six")) })
	conn, err := c.DialPort(context.Background(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if b, _ := io.ReadAll(conn); string(b) != "six" {
		t.Fatalf("got %q", b)
	}
}

func TestDialPortRefused(t *testing.T) {
	own, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := serveAgent(t, own)
	ownPort := own.Addr().(*net.TCPAddr).Port
	// Wait until the agent serves on the TCP listener too.
	for i := 0; ; i++ {
		if resp, err := http.Get("http://" + own.Addr().String() + "/health"); err == nil {
			resp.Body.Close()
			break
		}
		if i > 100 {
			t.Fatal("agent does not serve on its TCP listener")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		port   int
		status int
		msg    string
	}{
		{closedPort(t), http.StatusBadGateway, "connection refused"},
		{0, http.StatusBadRequest, "1 to 65535"},
		{65536, http.StatusBadRequest, "1 to 65535"},
		{ownPort, http.StatusForbidden, "agent's own"},
	} {
		conn, err := c.DialPort(ctx, tc.port)
		var pe *agentclient.PortError
		if !errors.As(err, &pe) || pe.Status != tc.status || !strings.Contains(pe.Message, tc.msg) {
			if conn != nil {
				conn.Close()
			}
			t.Errorf("port %d: %v, want %d %q", tc.port, err, tc.status, tc.msg)
		}
		if tc.status == http.StatusBadGateway && (pe == nil || !pe.Closed()) {
			t.Errorf("port %d: not reported closed", tc.port)
		}
	}
	// A bad port straight to the agent (not through the client's check).
	resp, err := c.HTTP.Post("http://agent/port/connect?port=0", "application/octet-stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("port=0: %d", resp.StatusCode)
	}
	// HTTP/1.1 cannot carry the stream.
	resp, err = http.Post("http://"+own.Addr().String()+"/port/connect?port=1", "application/octet-stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusHTTPVersionNotSupported {
		t.Errorf("HTTP/1.1: %d", resp.StatusCode)
	}
}

// TestDialPortClose: closing the caller's end closes the program's
// connection (it reads EOF), and a dial whose context ends fails.
func TestDialPortClose(t *testing.T) {
	c := serveAgent(t)
	gotEOF := make(chan string, 1)
	port := listen(t, "tcp", "127.0.0.1:0", func(conn net.Conn) {
		b, _ := io.ReadAll(conn)
		gotEOF <- string(b)
	})
	conn, err := c.DialPort(context.Background(), port)
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte("last words"))
	conn.Close()
	select {
	case s := <-gotEOF:
		if s != "last words" {
			t.Errorf("program read %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the program never saw the close")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if conn, err := c.DialPort(ctx, port); err == nil {
		conn.Close()
		t.Fatal("dial with a done context worked")
	}
}
