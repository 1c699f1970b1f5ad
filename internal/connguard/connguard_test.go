package connguard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serve serves h on a loopback listener wrapped by lim and returns its
// address.
func serve(t *testing.T, lim *Limiter, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if lim != nil {
		ln = lim.Listen(ln, APIReject)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// dialFrom connects to addr from the loopback address src (127.0.0.0/8
// is all loopback on Linux: each is its own client for the caps).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends GET / on c and returns the status, or an error when the
// server closed or reset the connection without answering.
func roundTrip(c net.Conn) (int, string, error) {
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

// refused checks that c is refused: closed or reset without an answer, or
// answered with want and a JSON error.
func refused(t *testing.T, c net.Conn, want int) {
	t.Helper()
	st, body, err := roundTrip(c)
	if err == nil && (st != want || !strings.Contains(body, `"error"`)) {
		t.Fatalf("over the cap: %d %q, want %d or a closed connection", st, body, want)
	}
}

func TestPerIPCap(t *testing.T) {
	lim := NewLimiter(0, 3, nil)
	a1, a2 := serve(t, lim, ok), serve(t, lim, ok)
	var held []net.Conn
	// Three from 127.0.0.2, across both listeners: the count is shared.
	for i, a := range []string{a1, a2, a1} {
		c := dialFrom(t, "127.0.0.2", a)
		if st, _, err := roundTrip(c); err != nil || st != 200 {
			t.Fatalf("conn %d: %d %v", i, st, err)
		}
		held = append(held, c)
	}
	refused(t, dialFrom(t, "127.0.0.2", a2), 429)
	refused(t, dialFrom(t, "127.0.0.2", a1), 429)
	// Another client is served meanwhile.
	if st, _, err := roundTrip(dialFrom(t, "127.0.0.3", a1)); err != nil || st != 200 {
		t.Fatalf("another client: %d %v", st, err)
	}
	// Released slots come back once the server sees the close.
	held[0].Close()
	waitOpen(t, lim, "127.0.0.2", 2)
	if st, _, err := roundTrip(dialFrom(t, "127.0.0.2", a2)); err != nil || st != 200 {
		t.Fatalf("after a close: %d %v", st, err)
	}
}

func TestGlobalCap(t *testing.T) {
	lim := NewLimiter(2, 0, nil)
	a := serve(t, lim, ok)
	for i, src := range []string{"127.0.0.2", "127.0.0.3"} {
		if st, _, err := roundTrip(dialFrom(t, src, a)); err != nil || st != 200 {
			t.Fatalf("conn %d: %d %v", i, st, err)
		}
	}
	refused(t, dialFrom(t, "127.0.0.4", a), 503)
	total, _ := lim.Open(&net.TCPAddr{IP: net.ParseIP("127.0.0.4")})
	if total != 2 {
		t.Fatalf("open connections: %d, want 2", total)
	}
}

// waitOpen waits (generously) until the limiter counts n connections from
// ip: the server notices a client's close asynchronously.
func waitOpen(t *testing.T, lim *Limiter, ip string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, got := lim.Open(&net.TCPAddr{IP: net.ParseIP(ip)})
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections from %s still counted, want %d", got, ip, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestClientBucket(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:5":                   "127.0.0.1",
		"[::ffff:10.0.0.1]:80":          "10.0.0.1",
		"[2001:db8:1:2:3:4:5:6]:443":    "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:443":    "2001:db8:1:2::/64",
		"@":                             "@",
		"/run/warden/wardend.sock":      "/run/warden/wardend.sock",
		"[fe80::1%eth0]:1":              "fe80::/64",
		"not an address at all, really": "not an address at all, really",
	} {
		if got := ClientBucket(in); got != want {
			t.Errorf("ClientBucket(%q) = %q, want %q", in, got, want)
		}
	}
}

// slowBody sends a request with a large declared body, then one byte every
// gap, and returns how long the server took to close the connection (or
// fails after limit).
func slowBody(t *testing.T, addr string, gap, limit time.Duration) time.Duration {
	t.Helper()
	c := dialFrom(t, "127.0.0.1", addr)
	start := time.Now()
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	if gap > 0 {
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(gap):
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
				}
			}
		}()
	}
	c.SetReadDeadline(time.Now().Add(limit))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("slow body (a byte every %s) still connected after %s", gap, limit)
	}
	return time.Since(start)
}

func TestSlowBodies(t *testing.T) {
	var started, handled = make(chan string, 10), make(chan error, 10)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- r.URL.Path
		if r.URL.Path == "/read" {
			_, err := io.Copy(io.Discard, r.Body)
			handled <- err
			if err != nil {
				http.Error(w, err.Error(), http.StatusRequestTimeout)
				return
			}
		}
		io.WriteString(w, "ok") // "/": does not read the body
	})
	b := BodyLimits{Timeout: time.Second, MinRate: 1024}
	addr := serve(t, nil, b.Handler(h))
	// The handler does not read: the server's own draining is bounded.
	slowBody(t, addr, 200*time.Millisecond, 20*time.Second)
	<-started
	// Nothing at all after the headers.
	slowBody(t, addr, 0, 20*time.Second)
	<-started

	c := dialFrom(t, "127.0.0.1", addr)
	io.WriteString(c, "POST /read HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nabc")
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	io.Copy(io.Discard, c)
	<-started
	var te *BodyTimeoutError
	if err := <-handled; !errors.As(err, &te) || te.Min != 1024 {
		t.Fatalf("the handler's read: %v, want a BodyTimeoutError", err)
	}

	// Without the rule the same client stays (the test can fail).
	plain := serve(t, nil, h)
	c = dialFrom(t, "127.0.0.1", plain)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.Copy(io.Discard, c); err == nil {
		t.Fatal("control: the server without the rule closed the slow client")
	}
}

// A body sent in full keeps its connection however long the handler then
// streams (the deadline is lifted at the end of the body), and a fast
// upload beyond one window is not cut.
func TestFullBodiesAreNotCut(t *testing.T) {
	b := BodyLimits{Timeout: 500 * time.Millisecond, MinRate: 1024}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
			return
		}
		for i := 0; i < 3; i++ { // stream for three windows
			fmt.Fprintf(w, "%d ", n)
			http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
		io.WriteString(w, "done")
	})
	addr := serve(t, nil, b.Handler(h))
	pr, pw := io.Pipe()
	go func() {
		// 8 KiB every 200 ms: 40 KiB/s, over several windows.
		for i := 0; i < 10; i++ {
			pw.Write(make([]byte, 8<<10))
			time.Sleep(200 * time.Millisecond)
		}
		pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/", pr)
	req.ContentLength = 80 << 10
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "81920 81920 81920 done" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
}

// Relax gives an authenticated upload the streaming allowance: a pause
// longer than the window is fine.
func TestRelax(t *testing.T) {
	b := BodyLimits{Timeout: 300 * time.Millisecond, MinRate: 1 << 20, StreamTimeout: 20 * time.Second}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Relax") != "" {
			Relax(r)
		}
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
			return
		}
		fmt.Fprint(w, n)
	})
	addr := serve(t, nil, b.Handler(h))
	send := func(relax bool) (int, error) {
		pr, pw := io.Pipe()
		go func() {
			pw.Write([]byte("a"))
			time.Sleep(1500 * time.Millisecond) // five windows without a byte
			pw.Write([]byte("b"))
			pw.Close()
		}()
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/", pr)
		if relax {
			req.Header.Set("X-Relax", "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if st, err := send(true); err != nil || st != 200 {
		t.Fatalf("relaxed: %d %v", st, err)
	}
	if st, err := send(false); err == nil && st == 200 {
		t.Fatal("not relaxed: a pause of five windows was accepted")
	}
}
