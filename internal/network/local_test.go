package network

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// TestStackLocal: with Config.Local, a sandbox whose policy allows nothing
// resolves LocalName to the gateway and reaches Local on LocalPort, which
// learns the sandbox; nothing is dialled, and every other destination
// stays denied. Without Local, the name is NXDOMAIN and the port closed.
func TestStackLocal(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from warden %s", r.URL.Path)
	})}
	conns := make(chan net.Conn)
	ln := &chanListener{c: conns, done: make(chan struct{})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	local := func(sb string, c net.Conn) {
		mu.Lock()
		seen = append(seen, sb)
		mu.Unlock()
		w := &closeNotify{Conn: c, done: make(chan struct{})}
		conns <- w
		<-w.done
	}
	h := newHarness(t, Policy{Mode: ModeAllowlist}, func(c *Config) { c.Local = local })

	m, err := h.lookup(LocalName, dns.TypeA, false, "")
	if err != nil || !slices.Equal(answers(m), []string{Gateway4.String()}) {
		t.Fatalf("A %s: %v %v", LocalName, m, err)
	}
	m, err = h.lookup(LocalName, dns.TypeAAAA, true, "")
	if err != nil || !slices.Equal(answers(m), []string{Gateway6.String()}) {
		t.Fatalf("AAAA %s: %v %v", LocalName, m, err)
	}
	body, err := h.get("10.254.0.1:80", LocalName)
	mustAllow(t, "local over IPv4", body, err, "hello from warden /")
	body, err = h.get("[fd7a:7761:7264::1]:80", LocalName)
	mustAllow(t, "local over IPv6", body, err, "hello from warden /")
	mu.Lock()
	if len(seen) != 2 || seen[0] != "sb-test" {
		t.Errorf("Local saw sandboxes %v, want sb-test twice", seen)
	}
	mu.Unlock()
	h.noDials("local")
	// The rest stays denied: another port of the gateway, the fake internet.
	body, err = h.get("10.254.0.1:8080", LocalName)
	mustDeny(t, "gateway:8080", body, err)
	body, err = h.get("198.51.100.10:80", "allowed.test")
	mustDeny(t, "internet", body, err)
	if m, err := h.lookup("allowed.test", dns.TypeA, false, ""); err != nil || m.Rcode != dns.RcodeNameError {
		t.Fatalf("allowed.test with no rules: %v %v", m, err)
	}
	h.noDials("denied")

	// Without Local there is no such name and nothing listens.
	h2 := newHarness(t, Policy{Mode: ModeAllowlist}, nil)
	if m, err := h2.lookup(LocalName, dns.TypeA, false, ""); err != nil || m.Rcode != dns.RcodeNameError {
		t.Fatalf("no Local: %s: %v %v", LocalName, m, err)
	}
	body, err = h2.get("10.254.0.1:80", LocalName)
	mustDeny(t, "no Local: gateway:80", body, err)
}

type chanListener struct {
	c    chan net.Conn
	done chan struct{}
	once sync.Once
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.c:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *chanListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{} }

type closeNotify struct {
	net.Conn
	done chan struct{}
	once sync.Once
}

func (c *closeNotify) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.Conn.Close()
}
