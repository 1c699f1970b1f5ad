package broker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/secrets"
)

const (
	secretV1 = "sk-live-REAL-SECRET-aaaaaaaaaaaaaaaa1111"
	secretV2 = "sk-live-ROTATED-SECRET-bbbbbbbbbbbbbb2222"
	apiHost  = "api.example.com"
)

// testCA is the upstreams' CA: the broker trusts it, the sandbox does not.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

func (ca *testCA) leaf(t *testing.T, names ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// seen is what an upstream received.
type seen struct {
	Host, URL, Auth string
	Header          http.Header
	Body            string
}

type recorder struct {
	mu   sync.Mutex
	reqs []seen
}

func (r *recorder) add(s seen) {
	r.mu.Lock()
	r.reqs = append(r.reqs, s)
	r.mu.Unlock()
}

func (r *recorder) all() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.reqs...)
}

func (r *recorder) last(t *testing.T) seen {
	t.Helper()
	all := r.all()
	if len(all) == 0 {
		t.Fatal("upstream received no request")
	}
	return all[len(all)-1]
}

// echo records each request and echoes its Authorization header back: in
// headers, in the body split over many chunks, base64-encoded (alone and
// inside Basic credentials), URL-encoded; and the request body.
func echo(rec *recorder) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		auth := r.Header.Get("Authorization")
		rec.add(seen{Host: r.Host, URL: r.URL.String(), Auth: auth, Header: r.Header.Clone(), Body: string(body)})
		token := strings.TrimPrefix(auth, "Bearer ")
		w.Header().Set("X-Echo-Auth", auth)
		w.Header().Set("X-Echo-B64", base64.StdEncoding.EncodeToString([]byte(auth)))
		if r.URL.Path == "/cl" {
			out := "auth=" + auth + "\n"
			w.Header().Set("Content-Length", fmt.Sprint(len(out)))
			io.WriteString(w, out)
			return
		}
		fl := w.(http.Flusher)
		io.WriteString(w, "auth=")
		for i := 0; i < len(auth); i += 3 { // the value split over chunks
			io.WriteString(w, auth[i:min(i+3, len(auth))])
			fl.Flush()
		}
		fmt.Fprintf(w, "\nb64=%s\nbasic=%s\nb64url=%s\nquery=%s\nbody=%s\n",
			base64.StdEncoding.EncodeToString([]byte(auth)),
			base64.StdEncoding.EncodeToString([]byte("user:"+token)),
			base64.RawURLEncoding.EncodeToString([]byte(token)),
			url.QueryEscape(auth), body)
	})
}

type env struct {
	t     *testing.T
	vault *secrets.Vault
	b     *Broker
	upCA  *testCA

	mu         sync.Mutex
	uses       []UseEvent
	mismatches []MismatchEvent
	handleErrs []error
}

func newEnv(t *testing.T) *env {
	t.Helper()
	v, err := secrets.New(bytes.Repeat([]byte{9}, secrets.KeySize), &secrets.MemStore{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, vault: v, upCA: newTestCA(t)}
	e.b, err = New(Config{
		Credentials: v,
		RootCAs:     e.upCA.pool,
		OnUse:       func(ev UseEvent) { e.mu.Lock(); e.uses = append(e.uses, ev); e.mu.Unlock() },
		OnMismatch:  func(ev MismatchEvent) { e.mu.Lock(); e.mismatches = append(e.mismatches, ev); e.mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) events() ([]UseEvent, []MismatchEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]UseEvent(nil), e.uses...), append([]MismatchEvent(nil), e.mismatches...)
}

// upstream starts an HTTPS server with a certificate from the test CA for
// names and returns its address.
func (e *env) upstream(h http.Handler, names ...string) (netip.AddrPort, *httptest.Server) {
	ts := httptest.NewUnstartedServer(h)
	ts.TLS = &tls.Config{Certificates: []tls.Certificate{e.upCA.leaf(e.t, names...)}}
	ts.StartTLS()
	e.t.Cleanup(ts.Close)
	return netip.MustParseAddrPort(ts.Listener.Addr().String()), ts
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := ln.Accept(); ch <- res{c, err} }()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return a, r.c
}

// sandboxRoots trusts only the sandbox's CA (plus extra).
func (e *env) sandboxRoots(sb string, extra ...*x509.Certificate) *x509.CertPool {
	pem, err := e.b.CA(sb)
	if err != nil {
		e.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		e.t.Fatal("bad CA PEM")
	}
	for _, c := range extra {
		pool.AddCert(c)
	}
	return pool
}

// client returns an HTTP client whose every connection goes through
// Broker.Handle for sandbox sb to target, as the egress path would hand it
// over, and a count of the connections it opened.
func (e *env) client(sb, principal string, target netip.AddrPort, names []string, roots *x509.CertPool) (*http.Client, *atomic.Int32) {
	var dials atomic.Int32
	tr := &http.Transport{
		// One connection at most: without it the client may open a second
		// one when the first is not back in its pool yet (a race under
		// load), and the tests count connections.
		MaxConnsPerHost: 1,
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			a, b := tcpPair(e.t)
			go func() {
				err := e.b.Handle(context.Background(), sb, principal, b, target, names)
				if err != nil {
					e.mu.Lock()
					e.handleErrs = append(e.handleErrs, err)
					e.mu.Unlock()
				}
			}()
			return a, nil
		},
	}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, &dials
}

func do(t *testing.T, c *http.Client, method, u, auth, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	var rb io.Reader
	if body != "" {
		rb = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, rb)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, string(b)
}

// assertNoSecret fails if s holds a value in any form the scrubber knows.
func assertNoSecret(t *testing.T, what, s string, values ...string) {
	t.Helper()
	for _, v := range values {
		for _, f := range valueForms([]byte(v)) {
			if strings.Contains(s, string(f)) {
				t.Fatalf("%s contains a form of the secret (%q):\n%s", what, f, s)
			}
		}
	}
}

func (e *env) grant(g secrets.Grant) secrets.Grant {
	e.t.Helper()
	g, err := e.vault.CreateGrant(g)
	if err != nil {
		e.t.Fatal(err)
	}
	return g
}

func (e *env) put(name, value string) secrets.Secret {
	e.t.Helper()
	s, err := e.vault.Put(name, "agent-1", []byte(value))
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// (a) the upstream receives the real secret, only in the granted header;
// (b) the client sees the placeholder wherever the upstream echoes it.
func TestSubstituteAndScrub(t *testing.T) {
	e := newEnv(t)
	sec := e.put("openai", secretV1)
	g := e.grant(secrets.Grant{SecretID: sec.ID, Sandbox: "sb-1", Hosts: []string{apiHost}, EnvName: "OPENAI_API_KEY"})
	ph := g.Placeholder
	rec := &recorder{}
	target, _ := e.upstream(echo(rec), apiHost)
	c, dials := e.client("sb-1", "agent-1", target, []string{apiHost}, e.sandboxRoots("sb-1"))

	resp, body := do(t, c, "POST", "https://"+apiHost+"/v1/chat?key="+ph, "Bearer "+ph, "payload "+ph, "X-Other", ph)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	got := rec.last(t)
	if got.Auth != "Bearer "+secretV1 {
		t.Fatalf("upstream Authorization = %q", got.Auth)
	}
	if got.Header.Get("X-Other") != ph || got.Body != "payload "+ph || !strings.Contains(got.URL, ph) {
		t.Fatalf("placeholder substituted outside the granted header: %+v", got)
	}
	if ae := got.Header.Values("Accept-Encoding"); len(ae) != 1 || ae[0] != "identity" {
		t.Fatalf("upstream Accept-Encoding = %q", ae)
	}
	// (b): headers and body scrubbed, every form.
	if h := resp.Header.Get("X-Echo-Auth"); h != "Bearer "+ph {
		t.Fatalf("X-Echo-Auth = %q", h)
	}
	var hdrs strings.Builder
	resp.Header.Write(&hdrs)
	assertNoSecret(t, "response headers", hdrs.String(), secretV1)
	assertNoSecret(t, "response body", body, secretV1)
	if !strings.Contains(body, "auth=Bearer "+ph+"\n") {
		t.Fatalf("body does not carry the placeholder where the secret was:\n%s", body)
	}
	uses, mism := e.events()
	if len(uses) != 1 || len(mism) != 0 {
		t.Fatalf("events: %+v %+v", uses, mism)
	}
	want := UseEvent{SandboxID: "sb-1", GrantID: g.ID, SecretID: sec.ID, Version: 1, Host: apiHost, Method: "POST", Path: "/v1/chat",
		Grantee: "sandbox:sb-1"}
	if uses[0] != want {
		t.Fatalf("use event %+v, want %+v", uses[0], want)
	}

	// Same connection: a Content-Length response and a chunked request
	// body.
	resp, body = do(t, c, "GET", "https://"+apiHost+"/cl", "Bearer "+ph, "")
	if body != "auth=Bearer "+ph+"\n" || resp.StatusCode != 200 {
		t.Fatalf("/cl body %q", body)
	}
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte("chunk-one "))
		pw.Write([]byte("chunk-two " + ph))
		pw.Close()
	}()
	req, _ := http.NewRequest("PUT", "https://"+apiHost+"/up", pr)
	req.Header.Set("Authorization", "Bearer "+ph)
	r2, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := io.ReadAll(r2.Body)
	r2.Body.Close()
	if got := rec.last(t); got.Body != "chunk-one chunk-two "+ph || got.Auth != "Bearer "+secretV1 {
		t.Fatalf("chunked request: %+v", got)
	}
	assertNoSecret(t, "chunked response", string(b2), secretV1)
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d connections, want 1 (keep-alive)", n)
	}
	// A principal-wide grant reaches every sandbox of the principal.
	g2 := e.grant(secrets.Grant{SecretID: sec.ID, Principal: "agent-1", Hosts: []string{"*.example.com"}})
	c3, _ := e.client("sb-9", "agent-1", target, []string{apiHost}, e.sandboxRoots("sb-9"))
	do(t, c3, "GET", "https://"+apiHost+"/", "Bearer "+g2.Placeholder, "")
	if got := rec.last(t).Auth; got != "Bearer "+secretV1 {
		t.Fatalf("principal grant: upstream got %q", got)
	}
}

// The request goes upstream byte for byte, but for the granted header.
func TestRequestBytesPreserved(t *testing.T) {
	e := newEnv(t)
	sec := e.put("k", secretV1)
	g := e.grant(secrets.Grant{SecretID: sec.ID, Sandbox: "sb-1", Hosts: []string{apiHost}, Header: "X-Api-Key"})
	ph := g.Placeholder

	// A raw upstream that captures the bytes of one request.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{e.upCA.leaf(t, apiHost)}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	captured := make(chan []byte, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					var raw bytes.Buffer
					req, err := http.ReadRequest(bufio.NewReader(io.TeeReader(br, &raw)))
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					captured <- raw.Bytes()
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	target := netip.MustParseAddrPort(ln.Addr().String())

	send := func(reqText string, names []string) []byte {
		t.Helper()
		a, b := tcpPair(t)
		go e.b.Handle(context.Background(), "sb-1", "", b, target, names)
		tc := tls.Client(a, &tls.Config{ServerName: apiHost, RootCAs: e.sandboxRoots("sb-1")})
		defer tc.Close()
		if _, err := io.WriteString(tc, reqText); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		select {
		case got := <-captured:
			return got
		case <-time.After(5 * time.Second):
			t.Fatal("upstream got nothing")
			return nil
		}
	}
	body := "x=" + ph
	reqText := "POST /v1/a?q=" + ph + " HTTP/1.1\r\n" +
		"hOsT: " + apiHost + "\r\n" +
		"x-other:   " + ph + "  \r\n" +
		"x-api-key: " + ph + "\r\n" +
		"Content-Length: " + fmt.Sprint(len(body)) + "\r\n" +
		"Connection: close\r\n\r\n" + body
	got := send(reqText, []string{apiHost})
	want := strings.Replace(reqText, "x-api-key: "+ph, "x-api-key: "+secretV1, 1)
	// (The only other change: Accept-Encoding: identity, appended.)
	want = strings.Replace(want, "Connection: close\r\n\r\n", "Connection: close\r\nAccept-Encoding: identity\r\n\r\n", 1)
	if string(got) != want {
		t.Fatalf("upstream got\n%q\nwant\n%q", got, want)
	}
	// Without substitution (the target names lack the host): unchanged.
	got = send(reqText, []string{"other.example.com"})
	if string(got) != reqText {
		t.Fatalf("unsubstituted request changed:\n%q\nwant\n%q", got, reqText)
	}
	// A chunked request body is relayed as sent.
	chunked := "POST / HTTP/1.1\r\nHost: " + apiHost + "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
		"3;ext=1\r\nabc\r\n" + fmt.Sprintf("%x", len(ph)) + "\r\n" + ph + "\r\n0\r\nX-Trailer: t\r\n\r\n"
	if got = send(chunked, []string{apiHost}); string(got) != chunked {
		t.Fatalf("chunked request changed:\n%q\nwant\n%q", got, chunked)
	}
}

// (c) no substitution when Host differs from SNI or the sandbox's DNS did
// not resolve the name to the target; a mismatch event is recorded.
func TestNoSubstitutionOnNameMismatch(t *testing.T) {
	e := newEnv(t)
	sec := e.put("k", secretV1)
	g := e.grant(secrets.Grant{SecretID: sec.ID, Sandbox: "sb-1", Hosts: []string{apiHost, "other.example.com"}})
	ph := g.Placeholder
	rec := &recorder{}
	target, _ := e.upstream(echo(rec), apiHost, "other.example.com")

	// Host header differs from SNI (both granted).
	c, _ := e.client("sb-1", "", target, []string{apiHost, "other.example.com"}, e.sandboxRoots("sb-1"))
	_, body := do(t, c, "GET", "https://"+apiHost+"/", "Bearer "+ph, "", "Host", "other.example.com")
	if got := rec.last(t); got.Auth != "Bearer "+ph || got.Host != "other.example.com" {
		t.Fatalf("Host≠SNI: upstream got %+v", got)
	}
	assertNoSecret(t, "body", body, secretV1)
	// Host with another port.
	do(t, c, "GET", "https://"+apiHost+"/", "Bearer "+ph, "", "Host", apiHost+":8443")
	if got := rec.last(t); got.Auth != "Bearer "+ph {
		t.Fatalf("Host port: upstream got %q", got.Auth)
	}
	// Target names do not include the host.
	c2, _ := e.client("sb-1", "", target, []string{"other.example.com"}, e.sandboxRoots("sb-1"))
	do(t, c2, "GET", "https://"+apiHost+"/", "Bearer "+ph, "")
	if got := rec.last(t); got.Auth != "Bearer "+ph {
		t.Fatalf("target names: upstream got %q", got.Auth)
	}
	uses, mism := e.events()
	if len(uses) != 0 || len(mism) != 3 {
		t.Fatalf("events: uses %+v mismatches %+v", uses, mism)
	}
	for _, m := range mism {
		if m.SandboxID != "sb-1" || m.SNI != apiHost || m.Reason == "" {
			t.Fatalf("mismatch event %+v", m)
		}
	}
	// A grant with a path prefix does not cover other paths.
	g2 := e.grant(secrets.Grant{SecretID: sec.ID, Sandbox: "sb-2", Hosts: []string{apiHost}, PathPrefix: "/v1"})
	c3, _ := e.client("sb-2", "", target, []string{apiHost}, e.sandboxRoots("sb-2"))
	do(t, c3, "GET", "https://"+apiHost+"/v2/x", "Bearer "+g2.Placeholder, "")
	if got := rec.last(t); got.Auth != "Bearer "+g2.Placeholder {
		t.Fatalf("outside the path prefix: upstream got %q", got.Auth)
	}
	do(t, c3, "GET", "https://"+apiHost+"/v1/x", "Bearer "+g2.Placeholder, "")
	if got := rec.last(t); got.Auth != "Bearer "+secretV1 {
		t.Fatalf("inside the path prefix: upstream got %q", got.Auth)
	}
	// Another sandbox's placeholder is not substituted.
	do(t, c3, "GET", "https://"+apiHost+"/v1/x", "Bearer "+ph, "")
	if got := rec.last(t); got.Auth != "Bearer "+ph {
		t.Fatalf("other sandbox's placeholder: upstream got %q", got.Auth)
	}
}

// (d) a host without a grant is not intercepted at all: the TLS session is
// the upstream's own and the placeholder arrives unchanged.
func TestNonGrantedHostPassthrough(t *testing.T) {
	e := newEnv(t)
	sec := e.put("k", secretV1)
	g := e.grant(secrets.Grant{SecretID: sec.ID, Sandbox: "sb-1", Hosts: []string{apiHost}})
	rec := &recorder{}
	target, _ := e.upstream(echo(rec), "plain.example.org")
	// The client trusts the upstream CA only, not the sandbox CA: the
	// handshake succeeds only if the broker stays out of the way.
	c, _ := e.client("sb-1", "", target, []string{"plain.example.org"}, e.upCA.pool)
	resp, body := do(t, c, "GET", "https://plain.example.org/x", "Bearer "+g.Placeholder, "")
	if resp.StatusCode != 200 || rec.last(t).Auth != "Bearer "+g.Placeholder {
		t.Fatalf("passthrough: %d %q", resp.StatusCode, rec.last(t).Auth)
	}
	if !strings.Contains(body, g.Placeholder) {
		t.Fatalf("body %q", body)
	}
	if resp.TLS.PeerCertificates[0].Issuer.CommonName != "test upstream CA" {
		t.Fatalf("intercepted: issuer %q", resp.TLS.PeerCertificates[0].Issuer.CommonName)
	}
	if uses, mism := e.events(); len(uses)+len(mism) != 0 {
		t.Fatalf("events %+v %+v", uses, mism)
	}
}

// (e) revocation and rotation take effect on the next request of an open
// connection.
func TestRevocationAndRotationOnOpenConnection(t *testing.T) {
	e := newEnv(t)
	sec := e.put("k", secretV1)
	g := e.grant(secrets.Grant{SecretID: sec.ID, Sandbox: "sb-1", Hosts: []string{apiHost}})
	ph := g.Placeholder
	rec := &recorder{}
	target, _ := e.upstream(echo(rec), apiHost)
	c, dials := e.client("sb-1", "", target, []string{apiHost}, e.sandboxRoots("sb-1"))
	get := func() string {
		t.Helper()
		_, body := do(t, c, "GET", "https://"+apiHost+"/", "Bearer "+ph, "")
		assertNoSecret(t, "body", body, secretV1, secretV2)
		return rec.last(t).Auth
	}
	if a := get(); a != "Bearer "+secretV1 {
		t.Fatalf("1st: %q", a)
	}
	e.put("k", secretV2) // rotation
	if a := get(); a != "Bearer "+secretV2 {
		t.Fatalf("after rotation: %q", a)
	}
	if err := e.vault.RevokeGrant(g.ID); err != nil {
		t.Fatal(err)
	}
	if a := get(); a != "Bearer "+ph {
		t.Fatalf("after grant revocation: %q", a)
	}
	// Revoking the secret (with a fresh grant in force) also stops it.
	g2 := e.grant(secrets.Grant{SecretID: sec.ID, Sandbox: "sb-1", Hosts: []string{apiHost}})
	ph = g2.Placeholder
	if a := get(); a != "Bearer "+secretV2 {
		t.Fatalf("new grant: %q", a)
	}
	e.vault.Revoke(sec.ID)
	if a := get(); a != "Bearer "+ph {
		t.Fatalf("after secret revocation: %q", a)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d connections, want all requests on one", n)
	}
	uses, _ := e.events()
	if len(uses) != 3 || uses[0].Version != 1 || uses[1].Version != 2 || uses[2].Version != 2 {
		t.Fatalf("use events %+v", uses)
	}
}

// (f) an upstream whose certificate is not valid for the name gets no
// request, and the client a 502.
func TestUpstreamCertificateVerified(t *testing.T) {
	e := newEnv(t)
	sec := e.put("k", secretV1)
	g := e.grant(secrets.Grant{SecretID: sec.ID, Sandbox: "sb-1", Hosts: []string{apiHost}})
	for _, tc := range []struct {
		name  string
		start func(h http.Handler) netip.AddrPort
	}{
		{"wrong name", func(h http.Handler) netip.AddrPort {
			a, _ := e.upstream(h, "impostor.example.net")
			return a
		}},
		{"untrusted issuer", func(h http.Handler) netip.AddrPort {
			ts := httptest.NewTLSServer(h) // its own CA, unknown to the broker
			t.Cleanup(ts.Close)
			return netip.MustParseAddrPort(ts.Listener.Addr().String())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			target := tc.start(echo(rec))
			c, _ := e.client("sb-1", "", target, []string{apiHost}, e.sandboxRoots("sb-1"))
			resp, body := do(t, c, "GET", "https://"+apiHost+"/", "Bearer "+g.Placeholder, "")
			if resp.StatusCode != 502 {
				t.Fatalf("status %d, want 502: %s", resp.StatusCode, body)
			}
			if n := len(rec.all()); n != 0 {
				t.Fatalf("upstream received %d requests", n)
			}
			if uses, _ := e.events(); len(uses) != 0 {
				t.Fatalf("use reported for a request never sent: %+v", uses)
			}
		})
	}
}

// An upstream closing its idle connection is noticed; the next request
// goes out on a fresh one, the client's connection stays up.
func TestUpstreamIdleClose(t *testing.T) {
	e := newEnv(t)
	sec := e.put("k", secretV1)
	g := e.grant(secrets.Grant{SecretID: sec.ID, Sandbox: "sb-1", Hosts: []string{apiHost}})
	rec := &recorder{}
	target, ts := e.upstream(echo(rec), apiHost)
	c, dials := e.client("sb-1", "", target, []string{apiHost}, e.sandboxRoots("sb-1"))
	do(t, c, "GET", "https://"+apiHost+"/", "Bearer "+g.Placeholder, "")
	ts.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	resp, _ := do(t, c, "POST", "https://"+apiHost+"/", "Bearer "+g.Placeholder, "not idempotent")
	if resp.StatusCode != 200 || dials.Load() != 1 || len(rec.all()) != 2 {
		t.Fatalf("status %d, %d client connections, %d upstream requests", resp.StatusCode, dials.Load(), len(rec.all()))
	}
}

// Malformed or ambiguous requests are refused, not relayed.
func TestAmbiguousRequestsRefused(t *testing.T) {
	e := newEnv(t)
	sec := e.put("k", secretV1)
	e.grant(secrets.Grant{SecretID: sec.ID, Sandbox: "sb-1", Hosts: []string{apiHost}})
	rec := &recorder{}
	target, _ := e.upstream(echo(rec), apiHost)
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost: " + apiHost + "\r\nHost: evil.example\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: " + apiHost + "\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc",
		"POST / HTTP/1.1\r\nHost: " + apiHost + "\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
		"POST / HTTP/1.1\r\nHost: " + apiHost + "\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: " + apiHost + "\r\nX-A: a\r\n folded\r\n\r\n",
		"GET / HTTP/1.1\nHost: " + apiHost + "\n\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	} {
		a, b := tcpPair(t)
		go e.b.Handle(context.Background(), "sb-1", "", b, target, []string{apiHost})
		tc := tls.Client(a, &tls.Config{ServerName: apiHost, RootCAs: e.sandboxRoots("sb-1")})
		io.WriteString(tc, raw)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil || resp.StatusCode != 400 {
			t.Errorf("%q: %v %v", raw, resp, err)
		}
		tc.Close()
	}
	if n := len(rec.all()); n != 0 {
		t.Fatalf("upstream received %d requests", n)
	}
}

// A protocol switch (101, as for WebSocket) is relayed both ways and the
// upstream's bytes are scrubbed as they stream, without waiting for more.
func TestUpgradeTunnel(t *testing.T) {
	e := newEnv(t)
	sec := e.put("k", secretV1)
	g := e.grant(secrets.Grant{SecretID: sec.ID, Sandbox: "sb-1", Hosts: []string{apiHost}})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{e.upCA.leaf(t, apiHost)}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	gotAuth := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		gotAuth <- req.Header.Get("Authorization")
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		io.WriteString(c, "hello "+req.Header.Get("Authorization")+"\n")
		io.Copy(c, br) // echo
	}()
	a, b := tcpPair(t)
	go e.b.Handle(context.Background(), "sb-1", "", b, netip.MustParseAddrPort(ln.Addr().String()), []string{apiHost})
	tc := tls.Client(a, &tls.Config{ServerName: apiHost, RootCAs: e.sandboxRoots("sb-1")})
	defer tc.Close()
	io.WriteString(tc, "GET /ws HTTP/1.1\r\nHost: "+apiHost+"\r\nUpgrade: echo\r\nConnection: Upgrade\r\nAuthorization: Bearer "+g.Placeholder+"\r\n\r\n")
	br := bufio.NewReader(tc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("%v %v", resp, err)
	}
	if a := <-gotAuth; a != "Bearer "+secretV1 {
		t.Fatalf("upstream got %q", a)
	}
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil || line != "hello Bearer "+g.Placeholder+"\n" {
		t.Fatalf("tunnel line %q %v", line, err)
	}
	io.WriteString(tc, "ping\n")
	if line, err = br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo %q %v", line, err)
	}
}

// An upstream that puts the secret into header names and trailer names
// (not only values): the sandbox sees the placeholder there, or no such
// field at all, never the value.
func TestScrubHeaderAndTrailerNames(t *testing.T) {
	e := newEnv(t)
	sec := e.put("k", secretV1)
	g := e.grant(secrets.Grant{SecretID: sec.ID, Sandbox: "sb-1", Hosts: []string{apiHost}})
	ph := g.Placeholder
	rec := &recorder{}
	target, _ := e.upstream(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(seen{Auth: r.Header.Get("Authorization")})
		token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		w.Header().Set("X-Leak-"+token, "1")
		w.Header().Set("Trailer", "X-Trail-"+token)
		w.WriteHeader(200)
		io.WriteString(w, "body")
		w.(http.Flusher).Flush()
		w.Header().Set("X-Trail-"+token, "t")
	}), apiHost)
	c, _ := e.client("sb-1", "", target, []string{apiHost}, e.sandboxRoots("sb-1"))
	resp, body := do(t, c, "GET", "https://"+apiHost+"/", "Bearer "+ph, "")
	if rec.last(t).Auth != "Bearer "+secretV1 {
		t.Fatalf("upstream got %q, want the secret", rec.last(t).Auth)
	}
	var hdrs strings.Builder
	resp.Header.Write(&hdrs)
	resp.Trailer.Write(&hdrs)
	// Names are case-insensitive (Go's server canonicalizes them): no form
	// of the secret in any case.
	assertNoSecret(t, "response header and trailer names", strings.ToLower(hdrs.String()), strings.ToLower(secretV1))
	if resp.Header.Get("X-Leak-"+ph) != "1" || body != "body" {
		t.Fatalf("want the header renamed to the placeholder: %q %q", hdrs.String(), body)
	}
	if resp.Trailer.Get("X-Trail-"+ph) != "t" {
		t.Fatalf("want the trailer renamed to the placeholder: %q", hdrs.String())
	}
}

// scrubField: names match in any case; a field whose wire line
// "name: value" spells a value (with a ": " in it, or in another case) is
// dropped.
func TestScrubField(t *testing.T) {
	set := newScrubSet([]scrubPattern{
		{pat: []byte("user: hunter22"), rep: []byte("warden-ph-a")},
		{pat: []byte("tok-abcdef"), rep: []byte("warden-ph-b")},
	})
	for _, c := range []struct{ name, value, wantName, wantValue string }{
		{"X-User", "hunter22", "", ""},                  // the line spells the first value
		{"X-Tok-ABCDEF-x", "v", "X-warden-ph-b-x", "v"}, // any case in a name
		{"X-A", "tok-abcdef", "X-A", "warden-ph-b"},     // the value, as before
		{"X-A", "TOK-ABCDEF", "", ""},                   // a value in another case: dropped
		{"Plain", "value", "Plain", "value"},            // untouched
		{"X-user: hunter22", "v", "X-warden-ph-a", "v"}, // a name holding the whole value
	} {
		n, v, ok := scrubField(set, c.name, c.value)
		if ok != (c.wantName != "") || n != c.wantName || v != c.wantValue {
			t.Errorf("scrubField(%q, %q) = %q, %q, %v; want %q, %q", c.name, c.value, n, v, ok, c.wantName, c.wantValue)
		}
	}
}
