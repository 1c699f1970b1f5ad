package safedial

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/warden-sandbox/warden/internal/network"
)

// public treats the test servers' 127.0.0.1 as a public address and
// classifies everything else as wardend does.
var public = CheckerFunc(func(ip netip.Addr) string {
	if ip == netip.MustParseAddr("127.0.0.1") {
		return ""
	}
	return network.CheckDial(ip)
})

func fakeResolver(m map[string][]string) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		ss, ok := m[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out, nil
	}
}

func okServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv
}

func get(c *http.Client, u string) (string, error) {
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func wantDenied(t *testing.T, what string, err error) {
	t.Helper()
	var de *DeniedError
	if !errors.As(err, &de) {
		t.Errorf("%s: err = %v, want a DeniedError", what, err)
		return
	}
	t.Logf("%s: %v", what, err)
}

// TestSSRFAttackList is governance.md §4's SSRF row: each refused before
// or at connection, while the same client reaches a public server.
func TestSSRFAttackList(t *testing.T) {
	srv := okServer(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	var hits atomic.Int32
	inner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer inner.Close()
	_, innerPort, _ := net.SplitHostPort(strings.TrimPrefix(inner.URL, "http://"))
	d, err := New(Options{Dest: public, AllowHTTP: true, Resolve: fakeResolver(map[string][]string{
		"public.test": {"127.0.0.1"},
		"inward.test": {"10.0.0.5"},
		"mixed.test":  {"127.0.0.1", "169.254.169.254"},
		"meta.test":   {"::ffff:169.254.169.254"},
	})})
	if err != nil {
		t.Fatal(err)
	}
	c := d.Client()
	if body, err := get(c, "http://public.test:"+port+"/"); err != nil || body != "ok" {
		t.Fatalf("public server: %q, %v", body, err)
	}
	for _, u := range []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://127.0.0.2:" + innerPort + "/",
		"http://[::ffff:127.0.0.2]:" + innerPort + "/",
		"http://[::1]:" + innerPort + "/",
		"http://2130706434:" + innerPort + "/",
		"http://0x7f.2:" + innerPort + "/",
		"http://0177.0.0.2:" + innerPort + "/",
		"http://127.2:" + innerPort + "/",
		"http://inward.test:" + innerPort + "/",
		"http://mixed.test:" + innerPort + "/",
		"http://meta.test/",
		"http://localhost:" + innerPort + "/",
		"http://sub.localhost:" + innerPort + "/",
		"http://0:" + innerPort + "/",
		"http://[fd7a:7761:7264::1]/",
		"http://10.254.0.1/",
	} {
		_, err := get(c, u)
		wantDenied(t, u, err)
		if err := d.CheckURL(u); err == nil && !strings.Contains(u, ".test") {
			t.Errorf("CheckURL(%s) passed", u)
		}
	}
	if hits.Load() != 0 {
		t.Errorf("an inward server was reached %d times", hits.Load())
	}
}

// TestRealClassifier checks the default (no Dest): the loopback test server
// is refused; an allow-list entry opens it.
func TestRealClassifier(t *testing.T) {
	srv := okServer(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	_, port, _ := net.SplitHostPort(host)
	c, err := NewClient(Options{AllowHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = get(c, srv.URL)
	wantDenied(t, "loopback", err)

	for _, allow := range []string{"127.0.0.1", host, "127.0.0.0/8", "localhost:" + port} {
		d, err := New(Options{AllowHTTP: true, Allow: []string{allow},
			Resolve: fakeResolver(map[string][]string{"localhost": {"127.0.0.1"}})})
		if err != nil {
			t.Fatal(err)
		}
		u := srv.URL
		if strings.HasPrefix(allow, "localhost") {
			u = "http://localhost:" + port + "/"
		}
		if body, err := get(d.Client(), u); err != nil || body != "ok" {
			t.Errorf("allow %q: %q, %v", allow, body, err)
		}
	}
	// host:port allows that port only.
	d, err := New(Options{AllowHTTP: true, Allow: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = get(d.Client(), srv.URL)
	wantDenied(t, "other port", err)

	for _, bad := range []string{"a b", "host:0", "[fe80::1%eth0]", "10.0.0.0/99", "::1"} {
		if _, err := New(Options{Allow: []string{bad}}); err == nil {
			t.Errorf("allow entry %q accepted", bad)
		}
	}
}

// TestDNSRebinding: a name answering a public address first and an inner
// one next is refused on the second connection.
func TestDNSRebinding(t *testing.T) {
	srv := okServer(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	var n atomic.Int32
	d, err := New(Options{Dest: public, AllowHTTP: true, Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
		if n.Add(1) == 1 {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	c := d.Client()
	u := "http://rebind.test:" + port + "/"
	if body, err := get(c, u); err != nil || body != "ok" {
		t.Fatalf("first: %q, %v", body, err)
	}
	d.CloseIdleConnections()
	_, err = get(c, u)
	wantDenied(t, "rebound", err)
}

// TestConnectTimeRecheck: the socket-level check refuses even when the
// classification changes between the lookup check and the connect.
func TestConnectTimeRecheck(t *testing.T) {
	srv := okServer(t)
	var calls atomic.Int32
	d, err := New(Options{AllowHTTP: true, Dest: CheckerFunc(func(ip netip.Addr) string {
		if calls.Add(1) == 1 {
			return ""
		}
		return "changed its mind"
	})})
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.DialContext(context.Background(), "tcp", strings.TrimPrefix(srv.URL, "http://"))
	wantDenied(t, "recheck", err)
	if err != nil && !strings.Contains(err.Error(), "connecting to") {
		t.Errorf("refused by the wrong check: %v", err)
	}
	if _, err := d.DialContext(context.Background(), "udp", "8.8.8.8:53"); err == nil {
		t.Error("udp dial allowed")
	}
}

// TestRedirects: same-origin redirects are followed; cross-origin and
// inward ones refused.
func TestRedirects(t *testing.T) {
	var innerHits atomic.Int32
	inner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { innerHits.Add(1) }))
	defer inner.Close()
	_, innerPort, _ := net.SplitHostPort(strings.TrimPrefix(inner.URL, "http://"))
	other := okServer(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, "/final", http.StatusFound)
		case "/final":
			io.WriteString(w, "final")
		case "/inward":
			http.Redirect(w, r, "http://127.0.0.2:"+innerPort+"/", http.StatusFound)
		case "/meta":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		case "/cross":
			http.Redirect(w, r, other.URL+"/", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		}
	}))
	defer srv.Close()
	c, err := NewClient(Options{Dest: public, AllowHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	if body, err := get(c, srv.URL+"/same"); err != nil || body != "final" {
		t.Errorf("same-origin redirect: %q, %v", body, err)
	}
	for _, p := range []string{"/inward", "/meta", "/cross", "/loop"} {
		_, err := get(c, srv.URL+p)
		wantDenied(t, p, err)
	}
	if innerHits.Load() != 0 {
		t.Error("the inward server was reached")
	}
}

// TestHTTPSOnly: plain HTTP and other schemes are refused by default;
// HTTPS works; credentials in URLs are refused.
func TestHTTPSOnly(t *testing.T) {
	plain := okServer(t)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tls") }))
	defer tlsSrv.Close()
	tmpl := tlsSrv.Client().Transport.(*http.Transport)
	c, err := NewClient(Options{Dest: public, Transport: tmpl})
	if err != nil {
		t.Fatal(err)
	}
	_, err = get(c, plain.URL)
	wantDenied(t, "plain http", err)
	if body, err := get(c, tlsSrv.URL); err != nil || body != "tls" {
		t.Errorf("https: %q, %v", body, err)
	}
	u := strings.Replace(tlsSrv.URL, "https://", "https://user:pw@", 1)
	_, err = get(c, u)
	wantDenied(t, "userinfo", err)
	d, _ := New(Options{})
	for _, u := range []string{"ftp://example.com/", "file:///etc/passwd", "http://example.com/", "https://user@example.com/", "https:///x", "https://example.123/"} {
		if err := d.CheckURL(u); err == nil {
			t.Errorf("CheckURL(%s) passed", u)
		}
	}
	if err := d.CheckURL("https://mcp.example.com/mcp"); err != nil {
		t.Errorf("CheckURL(public) = %v", err)
	}
}

// TestResponseCap: bodies past the cap fail rather than truncate,
// decompressed size included; a body of exactly the cap passes.
func TestResponseCap(t *testing.T) {
	const limit = 1 << 20
	big := bytes.Repeat([]byte("x"), limit+1)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(bytes.Repeat([]byte("x"), 8*limit))
	zw.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/exact":
			w.Write(big[:limit])
		case "/length":
			w.Write(big) // Content-Length set by the server
		case "/chunked":
			w.(http.Flusher).Flush()
			w.Write(big)
		case "/gzip":
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gz.Bytes())
		}
	}))
	defer srv.Close()
	c, err := NewClient(Options{Dest: public, AllowHTTP: true, MaxResponseBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	if body, err := get(c, srv.URL+"/exact"); err != nil || len(body) != limit {
		t.Errorf("exact: %d bytes, %v", len(body), err)
	}
	for _, p := range []string{"/length", "/chunked", "/gzip"} {
		_, err := get(c, srv.URL+p)
		if !errors.Is(err, ErrResponseTooLarge) {
			t.Errorf("%s: err = %v, want ErrResponseTooLarge", p, err)
		}
	}
}

// TestProxyEnvIgnored: a proxy in the environment is not used.
func TestProxyEnvIgnored(t *testing.T) {
	srv := okServer(t)
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("http_proxy", "http://127.0.0.1:1")
	c, err := NewClient(Options{Dest: public, AllowHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	if body, err := get(c, srv.URL); err != nil || body != "ok" {
		t.Errorf("%q, %v", body, err)
	}
}

func ExampleDeniedError() {
	d, _ := New(Options{})
	fmt.Println(d.CheckURL("https://169.254.169.254/"))
	// Output: connection to 169.254.169.254 refused: address 169.254.169.254 is link-local (cloud metadata service)
}
