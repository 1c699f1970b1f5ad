package image

import (
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
)

const secretBody = "TOP-SECRET-INTERNAL-BODY-9f3c"

// secretServer is a host-local service that must never be reached: it
// counts requests and answers with a secret.
func secretServer(t testing.TB) (host string, hits *atomic.Int64) {
	t.Helper()
	hits = &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, secretBody)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), hits
}

func wantDenied(t testing.TB, err error) {
	t.Helper()
	var de *DeniedError
	if !errors.Is(err, ErrRegistryDenied) || !errors.As(err, &de) {
		t.Fatalf("err = %v, want a refused registry", err)
	}
	if strings.Contains(err.Error(), secretBody) {
		t.Errorf("error quotes the service's response: %v", err)
	}
}

func TestRegistryPolicyRefusesInternal(t *testing.T) {
	ctx := context.Background()
	host, hits := secretServer(t)
	_, port, _ := net.SplitHostPort(host)
	for _, ref := range []string{
		host + "/x:y",
		"localhost:" + port + "/x:y",
		"127.1:" + port + "/x:y",
		"[::1]:" + port + "/x:y",
		"169.254.169.254/latest:meta",
		"10.1.2.3:5000/x:y",
		"192.168.1.1/x:y",
	} {
		for _, insecure := range []bool{false, true} {
			_, err := (*Policy)(nil).FromRegistry(ctx, ref, RegistryOptions{Insecure: insecure})
			wantDenied(t, err)
			t.Logf("%s insecure=%v: %v", ref, insecure, err)
		}
	}
	// Allowing another port of the same host changes nothing.
	p, err := NewPolicy([]Registry{{Host: "127.0.0.1:1", Insecure: true}, {Host: "127.0.0.1"}}, nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.FromRegistry(ctx, host+"/x:y", RegistryOptions{Insecure: true})
	wantDenied(t, err)
	if n := hits.Load(); n != 0 {
		t.Errorf("the internal service got %d requests", n)
	}
}

// TestRegistryDialCheck: the check is made on the address connected to,
// after resolution, whatever the request's URL said (DNS rebinding).
func TestRegistryDialCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	p := (*Policy)(nil).orDefault()
	for _, addr := range []string{"127.0.0.1:" + port, "localhost:" + port} {
		c, err := p.dial(context.Background(), "tcp", addr)
		if err == nil {
			c.Close()
			t.Fatalf("dial %s succeeded", addr)
		}
		wantDenied(t, err)
	}
	// The policy's checker decides.
	deny, err := NewPolicy(nil, denyPrefix(netip.MustParsePrefix("127.0.0.0/8")), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := deny.dial(context.Background(), "tcp", "127.0.0.1:"+port); err == nil {
		c.Close()
		t.Fatal("dial succeeded")
	}
	// An allowed registry connects.
	allow, err := NewPolicy([]Registry{{Host: "127.0.0.1:" + port}}, nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := allow.dial(context.Background(), "tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatalf("allowed registry: %v", err)
	}
	c.Close()
	if n := accepted.Load(); n > 1 {
		t.Errorf("%d connections accepted, want only the allowed one", n)
	}
}

// TestRegistryRedirectRefused: an allowed registry that redirects a
// manifest, a blob or a token realm to an internal service does not get
// wardend to call it.
func TestRegistryRedirectRefused(t *testing.T) {
	requireRoot(t) // imports layers
	ctx := context.Background()
	target, hits := secretServer(t)
	redirect := func(match, scheme string) func(http.Handler) http.Handler {
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && strings.Contains(r.URL.Path, match) {
					http.Redirect(w, r, scheme+"://"+target+"/steal", http.StatusTemporaryRedirect)
					return
				}
				next.ServeHTTP(w, r)
			})
		}
	}
	img := testImage(t)
	for _, c := range []struct{ name, match, scheme string }{
		{"manifest http", "/manifests/", "http"}, {"blob http", "/blobs/", "http"},
		{"manifest https", "/manifests/", "https"}, {"blob https", "/blobs/", "https"},
	} {
		t.Run(c.name, func(t *testing.T) {
			host := newRegistry(t, redirect(c.match, c.scheme))
			push(t, host+"/r/app:v1", img)
			got, err := local(t).FromRegistry(ctx, host+"/r/app:v1", RegistryOptions{})
			if err == nil {
				_, err = local(t).Import(ctx, got, newDirStore(t), nil)
			}
			wantDenied(t, err)
			t.Log(err)
		})
	}
	t.Run("token realm", func(t *testing.T) {
		// (ggcr itself refuses realms on address literals other than
		// the registry's; a name is up to the policy.)
		_, port, _ := net.SplitHostPort(target)
		host := newRegistry(t, requireAuth(`Bearer realm="https://localhost:`+port+`/token",service="x"`, func(*http.Request) bool { return false }, nil))
		_, err := local(t).FromRegistry(ctx, host+"/r/app:v1", RegistryOptions{})
		wantDenied(t, err)
	})
	if n := hits.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests", n)
	}
}

// TestRegistryErrorsQuoteNoBody: whatever a registry answers, errors give
// its status, not its body.
func TestRegistryErrorsQuoteNoBody(t *testing.T) {
	ctx := context.Background()
	for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusInternalServerError, http.StatusTeapot} {
		host := newRegistry(t, func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v2/" {
					w.WriteHeader(http.StatusOK)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				io.WriteString(w, `{"errors":[{"code":"DENIED","message":"`+secretBody+`"}]}`)
			})
		})
		_, err := local(t).FromRegistry(ctx, host+"/x/y:z", RegistryOptions{})
		if err == nil {
			t.Fatalf("status %d: pull succeeded", status)
		}
		if strings.Contains(err.Error(), secretBody) {
			t.Errorf("status %d: error quotes the body: %v", status, err)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("answered %d %s", status, http.StatusText(status))) {
			t.Errorf("status %d: error does not give the status: %v", status, err)
		}
		t.Log(err)
	}
}

// TestRegistryPlainHTTP: plain HTTP only for registries allowed with
// insecure; insecure asked for any other registry is refused.
func TestRegistryPlainHTTP(t *testing.T) {
	ctx := context.Background()
	var hits atomic.Int64
	host := newRegistry(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); next.ServeHTTP(w, r) })
	})
	push(t, host+"/p/app:v1", randomImage(t, "linux", "amd64"))
	hits.Store(0)
	tlsOnly, err := NewPolicy([]Registry{{Host: host}}, nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tlsOnly.FromRegistry(ctx, host+"/p/app:v1", RegistryOptions{Insecure: true})
	wantDenied(t, err)
	if _, err := tlsOnly.FromRegistry(ctx, host+"/p/app:v1", RegistryOptions{}); err == nil {
		t.Fatal("plain HTTP used for a registry allowed without insecure")
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("registry allowed without insecure got %d plain HTTP requests", n)
	}
	// Allowed with insecure: plain HTTP with or without opts.Insecure.
	for _, insecure := range []bool{false, true} {
		if _, err := local(t).FromRegistry(ctx, host+"/p/app:v1", RegistryOptions{Insecure: insecure}); err != nil {
			t.Fatalf("insecure=%v: %v", insecure, err)
		}
	}
	// Public registries are not refused by name, but insecure for them is.
	_, err = (*Policy)(nil).FromRegistry(ctx, "registry.example.com/app:v1", RegistryOptions{Insecure: true})
	wantDenied(t, err)
}

func TestNormalizeRegistryHost(t *testing.T) {
	for in, want := range map[string]string{
		"Registry.Example.com":  "registry.example.com",
		"registry.example.com.": "registry.example.com",
		"127.0.0.1:5000":        "127.0.0.1:5000",
		"[::1]:5000":            "[::1]:5000",
		"[::1]":                 "::1",
		"LOCALHOST:80":          "localhost:80",
	} {
		got, err := NormalizeRegistryHost(in)
		if err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "http://x", "x/y", "x:0", "x:65536", "x:abc", "::1", "x:05000", "a b", "[::1%eth0]", ":5000"} {
		if got, err := NormalizeRegistryHost(in); err == nil {
			t.Errorf("%q accepted as %q", in, got)
		}
	}
	p, err := NewPolicy([]Registry{{Host: "reg.local"}, {Host: "[::1]:5000"}, {Host: "10.0.0.5:5000", Insecure: true}}, nil, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host, port string
		ok         bool
	}{
		{"reg.local", "", true}, {"REG.local.", "443", true}, {"reg.local", "80", true}, {"reg.local", "5000", false},
		{"::1", "5000", true}, {"[::1]", "5000", true}, {"::1", "5001", false},
		{"10.0.0.5", "5000", true}, {"10.0.0.5", "", false},
	} {
		if _, ok := p.allowed(c.host, c.port); ok != c.ok {
			t.Errorf("allowed(%q, %q) = %v", c.host, c.port, ok)
		}
	}
}

// denyPrefix is a DestinationChecker refusing one prefix only.
type denyPrefix netip.Prefix

func (d denyPrefix) Denied(ip netip.Addr) string {
	if netip.Prefix(d).Contains(ip) {
		return "denied by the test"
	}
	return ""
}

func TestBuiltinDenied(t *testing.T) {
	for _, s := range []string{"127.0.0.1", "::1", "10.0.0.1", "172.16.0.1", "192.168.0.1", "169.254.169.254", "fe80::1",
		"100.64.0.1", "0.0.0.0", "::", "::ffff:127.0.0.1", "fd00::1", "224.0.0.1", "255.255.255.255", "64:ff9b::7f00:1", "2002:7f00:1::"} {
		if BuiltinDenied(netip.MustParseAddr(s)) == "" {
			t.Errorf("%s allowed", s)
		}
	}
	for _, s := range []string{"8.8.8.8", "2606:4700::1111", "104.16.0.1"} {
		if why := BuiltinDenied(netip.MustParseAddr(s)); why != "" {
			t.Errorf("%s denied: %s", s, why)
		}
	}
}
