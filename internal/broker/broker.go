// Package broker is Warden's credential broker: it terminates a sandbox's
// TLS connection to a host a secret is granted for, with a certificate from
// a CA only that sandbox trusts, replaces the grant's placeholder with the
// secret in the granted request header, forwards the request to the real
// upstream over TLS verified against the real roots, and replaces the
// secret with the placeholder again in what comes back. The sandbox never
// holds the secret.
//
// The egress path calls Handle for a sandbox TCP connection to port 443
// whose TLS server name is granted; everything else it splices itself.
package broker

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/secrets"
)

// Credentials is what the broker needs from the secret store;
// *secrets.Vault implements it. Both methods are called for every request,
// so a revoked grant or secret, or a rotation, takes effect on the next
// request of an open connection.
type Credentials interface {
	// GrantsFor returns the grants in force for a sandbox (revoked ones
	// left out).
	GrantsFor(sandboxID, principalID string) []secrets.Grant
	// Current returns the value and version a secret's requests use; an
	// error (revoked, unknown) means no substitution.
	Current(secretID string) (value []byte, version int, err error)
}

// UseEvent reports one substitution of a secret into a request, for the
// audit log. It never carries the value.
type UseEvent struct {
	SandboxID string
	GrantID   string
	SecretID  string
	Version   int
	Host      string
	Method    string
	Path      string // without the query
	// Grantee is whom the grant is to: "sandbox:ID" or "principal:ID".
	Grantee string
	// Govern is the action and the governed path's decision that let the
	// use through, when Config.Govern set one (a rule decided it): the
	// use's audit event records it (govern.AuditEvent.Governed).
	Govern *govern.Decided
}

// MismatchEvent reports a request on a brokered connection that got no
// substitution because its names do not line up (Host header, TLS server
// name and the names the sandbox's DNS resolved to the target), or because
// the secret is unavailable. It never carries a value.
type MismatchEvent struct {
	SandboxID string
	SNI       string
	Host      string // the Host header as sent
	Method    string
	Path      string
	Reason    string
}

// Config configures a Broker.
type Config struct {
	// Credentials supplies grants and values. Required.
	Credentials Credentials
	// RootCAs verifies upstream certificates; nil means the system roots.
	RootCAs *x509.CertPool
	// Dial connects to the upstream; nil means a net.Dialer. The daemon may
	// pass one that dials from the right namespace or source address.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// OnUse and OnMismatch receive events (may be nil). They are called
	// synchronously on the connection's goroutine.
	OnUse      func(UseEvent)
	OnMismatch func(MismatchEvent)
	// Govern, if set, decides each substitution before it is made: a
	// secret.use action through the governed path (SecretUseGovernor). An
	// error refuses the request: the broker answers it 403 with the error's
	// text, sends nothing of it upstream and closes the connection. It may
	// set the event's Govern record, which OnUse then receives. It runs on
	// the connection's goroutine and must not wait for an approval.
	Govern func(ctx context.Context, u *UseEvent) error
	// StateDir keeps each sandbox's CA (certificate and key, mode 0600)
	// across daemon restarts; "" keeps them in memory only.
	StateDir string
	// CALifetime is the validity of a sandbox CA (default 30 days).
	CALifetime time.Duration
	// SystemRoots is the PEM bundle TrustBundle starts with (default: the
	// first of the usual Linux locations that exists).
	SystemRoots string
	// HandshakeTimeout bounds the client and upstream TLS handshakes and
	// the upstream dial (default 10 s); IdleTimeout, the wait for the next
	// request on a kept-alive connection (default 2 min).
	HandshakeTimeout time.Duration
	IdleTimeout      time.Duration
	// Now is the clock (tests).
	Now func() time.Time
	// LLM, if set, meters model calls to known LLM providers (llm.go).
	LLM LLMMeter
}

// Broker brokers credentials for sandbox connections. It is safe for
// concurrent use.
type Broker struct {
	cfg Config

	mu  sync.Mutex
	cas map[string]*sandboxCA
}

// New returns a Broker.
func New(cfg Config) (*Broker, error) {
	if cfg.Credentials == nil {
		return nil, errors.New("broker: no credentials")
	}
	if cfg.Dial == nil {
		d := &net.Dialer{}
		cfg.Dial = d.DialContext
	}
	if cfg.CALifetime <= 0 {
		cfg.CALifetime = DefaultCALifetime
	}
	if cfg.CALifetime < 2*leafRenewBefore {
		return nil, errors.New("broker: CA lifetime too short")
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 10 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Broker{cfg: cfg, cas: map[string]*sandboxCA{}}, nil
}

func (b *Broker) now() time.Time { return b.cfg.Now() }

var errPassthrough = errors.New("server name not granted")

// Handle serves one sandbox TCP connection to target (port 443). client
// must deliver the stream from its first byte, the TLS ClientHello (see
// WithPrefix if the caller has read it already). targetNames are the names
// the sandbox's DNS resolved to target's address. Handle takes ownership
// of client and closes it; it returns when the connection ends, nil on an
// orderly end.
//
// If no grant in force for the sandbox (sandboxID, or its principal
// principalID) covers the ClientHello's server name, the connection is
// spliced to target unchanged, TLS included. Otherwise TLS is terminated
// with a leaf certificate for the name from the sandbox's CA, offering
// http/1.1 only, and each HTTP/1.x request is relayed over one TLS
// connection to target that verifies the upstream's certificate for the
// name. A request gets substitution only if its Host header (port aside,
// which must be target's if given) equals the server name, the server name
// is one of targetNames, and the request target is a path; then, for each
// grant covering the name and path, the grant's placeholder is replaced
// with the secret's current value in the grant's header, and nowhere else.
// Every response is relayed with each value granted to the sandbox (and
// any value substituted on this connection), in its raw, URL, JSON and
// base64 forms, replaced by its placeholder, in headers and body.
func (b *Broker) Handle(ctx context.Context, sandboxID, principalID string, client net.Conn, target netip.AddrPort, targetNames []string) error {
	c := &conn{
		b: b, sandboxID: sandboxID, principalID: principalID, target: target,
		used: map[string]string{},
	}
	c.track(client)
	defer c.closeAll()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.ctx = ctx
	stop := context.AfterFunc(ctx, c.closeAll)
	defer stop()
	for _, n := range targetNames {
		if h, ok := secrets.NormalizeHost(n); ok {
			c.targetNames = append(c.targetNames, h)
		}
	}

	client.SetDeadline(b.now().Add(b.cfg.HandshakeTimeout))
	sc := &sniffConn{Conn: client, sniffing: true}
	var ca *sandboxCA
	srv := tls.Server(sc, &tls.Config{
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			name, ok := secrets.NormalizeHost(hello.ServerName)
			if !ok || !c.granted(name) {
				return nil, errPassthrough
			}
			var err error
			if ca, err = b.ca(sandboxID); err != nil {
				return nil, err
			}
			c.sni = name
			sc.commit()
			return &tls.Config{
				MinVersion: tls.VersionTLS12,
				NextProtos: []string{"http/1.1"},
				GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
					return ca.leaf(name, b.now())
				},
			}, nil
		},
	})
	err := srv.HandshakeContext(ctx)
	if sc.sniffing {
		if !errors.Is(err, errPassthrough) {
			if err == nil {
				err = errors.New("handshake ended without a decision")
			}
			return fmt.Errorf("broker: client hello: %w", err)
		}
		client.SetDeadline(time.Time{})
		return c.passthrough(client, sc.recorded)
	}
	if err != nil {
		return fmt.Errorf("broker: client handshake for %s: %w", c.sni, err)
	}
	client.SetDeadline(time.Time{})
	c.client = srv
	c.cr = bufio.NewReaderSize(srv, maxHeadBytes)
	c.cw = bufio.NewWriterSize(srv, 32<<10)
	return c.serve()
}

// WithPrefix returns a net.Conn that reads prefix, then from c: for a
// caller that has read the start of a stream (to sniff the server name) and
// hands the connection to Handle.
func WithPrefix(c net.Conn, prefix []byte) net.Conn {
	if len(prefix) == 0 {
		return c
	}
	return &prefixConn{Conn: c, prefix: slices.Clone(prefix)}
}

type prefixConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// sniffConn records what the TLS server reads and swallows what it writes
// until commit: if the server name is not granted, the recorded bytes go
// upstream and the sandbox has seen nothing of the broker.
type sniffConn struct {
	net.Conn
	sniffing bool
	recorded []byte
}

const maxSniff = 128 << 10

func (s *sniffConn) Read(p []byte) (int, error) {
	n, err := s.Conn.Read(p)
	if s.sniffing {
		s.recorded = append(s.recorded, p[:n]...)
		if len(s.recorded) > maxSniff {
			return n, errors.New("client hello too long")
		}
	}
	return n, err
}

func (s *sniffConn) Write(p []byte) (int, error) {
	if s.sniffing {
		return len(p), nil
	}
	return s.Conn.Write(p)
}

func (s *sniffConn) commit() {
	s.sniffing = false
	s.recorded = nil
}

// conn is one brokered connection.
type conn struct {
	b                      *Broker
	ctx                    context.Context
	sandboxID, principalID string
	target                 netip.AddrPort
	targetNames            []string
	sni                    string

	client *tls.Conn
	cr     *bufio.Reader
	cw     *bufio.Writer

	up *tls.Conn
	ur *bufio.Reader

	// used maps each value substituted on this connection to its
	// placeholder: responses are scrubbed of it even after a revocation.
	used map[string]string

	// llm meters the request being relayed, when it is a model call to a
	// known provider (llm.go); nil otherwise.
	llm *llmExchange

	mu      sync.Mutex
	closers []io.Closer
	closed  bool
}

func (c *conn) track(cl io.Closer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		cl.Close()
		return
	}
	c.closers = append(c.closers, cl)
}

func (c *conn) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, cl := range c.closers {
		cl.Close()
	}
	c.closers = nil
}

func (c *conn) granted(host string) bool {
	for _, g := range c.b.cfg.Credentials.GrantsFor(c.sandboxID, c.principalID) {
		if g.CoversHost(host) {
			return true
		}
	}
	return false
}

func (c *conn) dialTarget(ctx context.Context) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.b.cfg.HandshakeTimeout)
	defer cancel()
	raw, err := c.b.cfg.Dial(ctx, "tcp", c.target.String())
	if err != nil {
		return nil, err
	}
	c.track(raw)
	return raw, nil
}

// passthrough splices the connection to target unchanged.
func (c *conn) passthrough(client net.Conn, hello []byte) error {
	up, err := c.dialTarget(c.ctx)
	if err != nil {
		return fmt.Errorf("broker: dial %s: %w", c.target, err)
	}
	if _, err := up.Write(hello); err != nil {
		return err
	}
	done := make(chan error, 2)
	go func() { _, err := io.Copy(up, client); done <- err }()
	go func() { _, err := io.Copy(client, up); done <- err }()
	err = <-done
	c.closeAll()
	<-done
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// dialUpstream opens the TLS connection to target, verifying the
// certificate for the server name.
func (c *conn) dialUpstream() error {
	raw, err := c.dialTarget(c.ctx)
	if err != nil {
		return err
	}
	tc := tls.Client(raw, &tls.Config{
		ServerName: c.sni,
		RootCAs:    c.b.cfg.RootCAs,
		NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12,
	})
	ctx, cancel := context.WithTimeout(c.ctx, c.b.cfg.HandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return err
	}
	c.up = tc
	c.ur = bufio.NewReaderSize(tc, maxHeadBytes)
	return nil
}

func (c *conn) dropUpstream() {
	if c.up != nil {
		c.up.Close()
		c.up, c.ur = nil, nil
	}
}

// watchUpstream notices an upstream that closes its idle kept-alive
// connection while the client is quiet. The returned function stops the
// watch and reports whether the upstream is still usable.
func (c *conn) watchUpstream() func() bool {
	up, ur := c.up, c.ur
	done := make(chan error, 1)
	go func() {
		_, err := ur.Peek(1)
		done <- err
	}()
	return func() bool {
		up.SetReadDeadline(time.Unix(1, 0))
		err := <-done
		up.SetReadDeadline(time.Time{})
		// A timeout means it was quiet; data or an error means it is not
		// usable (an upstream may not speak first).
		return errors.Is(err, os.ErrDeadlineExceeded)
	}
}

func (c *conn) serve() error {
	for {
		var stopWatch func() bool
		if c.up != nil {
			stopWatch = c.watchUpstream()
		}
		c.client.SetReadDeadline(c.b.now().Add(c.b.cfg.IdleTimeout))
		req, err := readRequest(c.cr)
		if stopWatch != nil && !stopWatch() {
			c.dropUpstream()
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if errors.Is(err, errMalformed) || errors.Is(err, errTooLarge) {
				c.writeError(400, "malformed request")
			}
			return fmt.Errorf("broker: read request: %w", err)
		}
		c.client.SetReadDeadline(time.Time{})
		keep, err := c.roundTrip(req)
		if err != nil || !keep {
			return err
		}
	}
}

func (c *conn) writeError(code int, msg string) {
	status := map[int]string{400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed", 502: "Bad Gateway"}[code]
	body := "warden broker: " + msg + "\n"
	fmt.Fprintf(c.cw, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, status, len(body), body)
	c.cw.Flush()
}

func requestPath(target string) string {
	p := target
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if len(p) > 512 {
		p = p[:512]
	}
	return p
}

// eligible says why a request may not get substitution ("" if it may).
func (c *conn) eligible(req *request) string {
	if !strings.HasPrefix(req.target, "/") {
		return "request target is not a path"
	}
	if req.host == "" {
		return "no Host header"
	}
	host, port := req.host, ""
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.HasSuffix(host, "]") {
		host, port = host[:i], host[i+1:]
	}
	h, ok := secrets.NormalizeHost(host)
	if !ok || h != c.sni {
		return "Host header differs from the TLS server name"
	}
	if port != "" && port != strconv.Itoa(int(c.target.Port())) {
		return "Host header names another port"
	}
	if !slices.Contains(c.targetNames, c.sni) {
		return "the TLS server name is not a name the sandbox resolved to this address"
	}
	return ""
}

// grantee is whom a grant is to, as the governed path names it.
func grantee(g secrets.Grant) string {
	if g.Sandbox != "" {
		return "sandbox:" + g.Sandbox
	}
	return "principal:" + g.Principal
}

// prepare returns the request head to send upstream, with placeholders
// substituted where a grant allows, and the use events to report once it
// is sent; an error is a use the governed path refused (nothing is sent).
func (c *conn) prepare(req *request) ([]byte, []UseEvent, error) {
	creds := c.b.cfg.Credentials
	path := requestPath(req.target)
	if why := c.eligible(req); why != "" {
		if c.b.cfg.OnMismatch != nil {
			c.b.cfg.OnMismatch(MismatchEvent{SandboxID: c.sandboxID, SNI: c.sni, Host: req.host, Method: req.method, Path: path, Reason: why})
		}
		return req.head.bytes(), nil, nil
	}
	var uses []UseEvent
	for _, g := range creds.GrantsFor(c.sandboxID, c.principalID) {
		if !g.CoversHost(c.sni) || !g.CoversPath(req.target) {
			continue
		}
		var lines []*headerLine
		for _, l := range req.head.lines {
			if strings.EqualFold(l.name, g.Header) && g.Carries(l.value) {
				lines = append(lines, l)
			}
		}
		if len(lines) == 0 {
			continue
		}
		val, ver, err := creds.Current(g.SecretID)
		if err == nil && !validHeaderValue(val) {
			err = errors.New("value cannot go in a header")
		}
		if err != nil {
			if c.b.cfg.OnMismatch != nil {
				c.b.cfg.OnMismatch(MismatchEvent{SandboxID: c.sandboxID, SNI: c.sni, Host: req.host, Method: req.method, Path: path,
					Reason: "secret " + g.SecretID + " unavailable: " + err.Error()})
			}
			continue
		}
		u := UseEvent{SandboxID: c.sandboxID, GrantID: g.ID, SecretID: g.SecretID, Version: ver,
			Host: c.sni, Method: req.method, Path: path, Grantee: grantee(g)}
		if c.b.cfg.Govern != nil {
			if err := c.b.cfg.Govern(c.ctx, &u); err != nil {
				return nil, nil, err
			}
		}
		for _, l := range lines {
			// A Basic grant (secrets.FormatBasic) substitutes inside the
			// base64 credentials; an echo of them is scrubbed back.
			var sent, shown string
			l.value, sent, shown = g.Substitute(l.value, val)
			l.modified = true
			if sent != "" {
				c.used[sent] = shown
			}
		}
		c.used[string(val)] = g.Placeholder
		uses = append(uses, u)
	}
	if len(uses) > 0 {
		// A compressed response would hide an echoed secret from the
		// scrubber: ask for an uncompressed one.
		req.head.drop("Accept-Encoding")
		req.head.add("Accept-Encoding", "identity")
	}
	return req.head.bytes(), uses, nil
}

// validHeaderValue refuses what would break out of a header line (the
// vault refuses such values already; Credentials may be another store).
func validHeaderValue(v []byte) bool {
	for _, c := range v {
		if c == '\r' || c == '\n' || c == 0 {
			return false
		}
	}
	return true
}

// scrubPatterns returns what responses are scrubbed of: every form of the
// current value of each secret granted to the sandbox, and of each value
// substituted on this connection, mapped to a placeholder.
func (c *conn) scrubPatterns() []scrubPattern {
	creds := c.b.cfg.Credentials
	var pats []scrubPattern
	add := func(val []byte, ph string) {
		for _, f := range valueForms(val) {
			pats = append(pats, scrubPattern{pat: f, rep: []byte(ph)})
		}
	}
	seen := map[string]bool{}
	for _, g := range creds.GrantsFor(c.sandboxID, c.principalID) {
		if seen[g.SecretID] {
			continue
		}
		seen[g.SecretID] = true
		if val, _, err := creds.Current(g.SecretID); err == nil {
			add(val, g.Placeholder)
		}
	}
	vals := make([]string, 0, len(c.used))
	for v := range c.used {
		vals = append(vals, v)
	}
	slices.Sort(vals)
	for _, v := range vals {
		add([]byte(v), c.used[v])
	}
	return pats
}

// bodyGrace is how long a finished response waits for its request body's
// copy to report before the connection is given up for keep-alive.
const bodyGrace = time.Second

// roundTrip relays one request and its response; keep reports whether the
// connection can carry another.
func (c *conn) roundTrip(req *request) (keep bool, err error) {
	if req.method == "CONNECT" {
		c.writeError(405, "CONNECT is not relayed")
		return false, nil
	}
	// A model call to a known provider is metered; a spent budget is
	// refused before anything goes upstream (llm.go).
	llm, ok := c.beginLLM(req)
	if !ok {
		return false, nil
	}
	c.llm = llm
	defer func() { c.llm = nil }()
	head, uses, err := c.prepare(req)
	if err != nil {
		c.writeError(403, err.Error())
		llm.end(true, err)
		return false, nil
	}
	if c.up == nil {
		if err := c.dialUpstream(); err != nil {
			c.writeError(502, "upstream connection failed")
			err = fmt.Errorf("broker: upstream %s (%s): %w", c.sni, c.target, err)
			llm.end(true, err)
			return false, err
		}
	}
	up := c.up
	if _, err := up.Write(head); err != nil {
		c.writeError(502, "upstream write failed")
		llm.end(true, err)
		return false, fmt.Errorf("broker: upstream write: %w", err)
	}
	if c.b.cfg.OnUse != nil {
		for _, u := range uses {
			c.b.cfg.OnUse(u)
		}
	}
	bodyDone := make(chan error, 1)
	if req.hasBody() {
		var tap io.Writer // a metered call's copy of the body's start (llm.go)
		if llm != nil {
			tap = llm.req
		}
		go func() { bodyDone <- c.copyRequestBody(req, up, tap) }()
	} else {
		bodyDone <- nil
	}
	keep, err = c.relayResponse(req)
	// The copy of a request body that was sent whole finishes as the
	// response does, but its goroutine may report a moment later: give it
	// a short grace before deciding (a non-blocking check here closed
	// kept-alive connections at random).
	grace := time.NewTimer(bodyGrace)
	defer grace.Stop()
	reqDone := true
	select {
	case berr := <-bodyDone:
		if berr != nil {
			keep = false
			if err == nil {
				err = fmt.Errorf("broker: request body: %w", berr)
			}
		}
	case <-grace.C:
		// The response is complete but the request body is not (the
		// upstream answered early): the connection cannot carry another
		// request.
		keep = false
		reqDone = false
	}
	llm.end(reqDone, err)
	return keep, err
}

// copyRequestBody relays the request body byte for byte, and writes it
// to tap as well when tap is not nil.
func (c *conn) copyRequestBody(req *request, up, tap io.Writer) error {
	bw := bufio.NewWriterSize(up, 32<<10)
	if req.chunked {
		write := func(b []byte) error { _, err := bw.Write(b); return err }
		flush := func(b []byte) error {
			if err := write(b); err != nil {
				return err
			}
			if tap != nil {
				tap.Write(b)
			}
			return bw.Flush()
		}
		if err := readChunked(c.cr, true, write, flush, write); err != nil {
			return err
		}
		return bw.Flush()
	}
	var dst io.Writer = bw
	if tap != nil {
		dst = io.MultiWriter(bw, tap)
	}
	n, err := io.CopyN(dst, c.cr, req.contentLength)
	if err == nil {
		err = bw.Flush()
	} else if n < req.contentLength && errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// scrubHead scrubs the reason phrase and header lines, names included.
func scrubHead(h *msgHead, set *scrubSet) {
	if proto, rest, ok := strings.Cut(string(h.first), " "); ok {
		if code, reason, ok := strings.Cut(rest, " "); ok {
			h.first = []byte(proto + " " + code + " " + string(set.scrub([]byte(reason))))
		}
	}
	for _, l := range h.lines {
		if l.dropped || strings.EqualFold(l.name, "Content-Length") || strings.EqualFold(l.name, "Transfer-Encoding") {
			continue // framing, not content (and dropped where a body follows)
		}
		name, value, ok := scrubField(set, l.name, l.value)
		switch {
		case !ok:
			l.dropped = true
		case name != l.name || value != l.value:
			l.name, l.value, l.modified = name, value, true
		}
	}
}

// scrubFold replaces the patterns in a field name, ignoring ASCII case:
// names are case-insensitive, and servers and clients rewrite their case
// (Go canonicalizes "x-sk-live-abc" to "X-Sk-Live-Abc"), so a value with
// its case changed must not pass.
func (set *scrubSet) scrubFold(name string) string {
	for range 64 { // bounded: each round replaces one occurrence
		lower := strings.ToLower(name)
		at, pi := -1, -1
		for i, p := range set.pats {
			j := strings.Index(lower, strings.ToLower(string(p.pat)))
			if j >= 0 && (at < 0 || j < at || j == at && len(p.pat) > len(set.pats[pi].pat)) {
				at, pi = j, i
			}
		}
		if at < 0 {
			return name
		}
		name = name[:at] + string(set.pats[pi].rep) + name[at+len(set.pats[pi].pat):]
	}
	return "" // not a token: the field is dropped
}

// scrubField scrubs a header or trailer field, its name (in any case) as
// well as its value. A field is kept (ok) only if what goes on the wire,
// "name: value", holds no pattern in any case and the name is still a
// token: a value that spans the separator, or one sent back in another
// case (hex keys read the same), drops the field.
func scrubField(set *scrubSet, name, value string) (string, string, bool) {
	if set.maxLen == 0 {
		return name, value, true
	}
	n := set.scrubFold(name)
	v := string(set.scrub([]byte(value)))
	if !isToken([]byte(n)) {
		return "", "", false
	}
	line := n + ": " + v
	if string(set.scrub([]byte(line))) != line || set.scrubFold(line) != line {
		return "", "", false
	}
	return n, v, true
}

func (c *conn) relayResponse(req *request) (keep bool, err error) {
	pats := newScrubSet(c.scrubPatterns())
	wrote := false
	for {
		resp, err := readResponse(c.ur, req)
		if err != nil {
			if !wrote {
				c.writeError(502, "bad upstream response")
			}
			return false, fmt.Errorf("broker: upstream response: %w", err)
		}
		scrubHead(resp.head, pats)
		if resp.code == 101 {
			if _, err := c.cw.Write(resp.head.bytes()); err != nil {
				return false, err
			}
			return false, c.tunnel(pats)
		}
		if resp.code < 200 {
			if _, err := c.cw.Write(resp.head.bytes()); err != nil {
				return false, err
			}
			if err := c.cw.Flush(); err != nil {
				return false, err
			}
			wrote = true
			continue
		}
		keep := !req.close && !resp.close
		c.llm.response(resp)
		if resp.body != bodyNone {
			// The scrubbed body may differ in length: send it chunked (or
			// delimited by the close, to an HTTP/1.0 client).
			resp.head.drop("Content-Length")
			resp.head.drop("Transfer-Encoding")
			if req.proto == "HTTP/1.1" {
				resp.head.add("Transfer-Encoding", "chunked")
			} else {
				resp.head.drop("Connection")
				resp.head.add("Connection", "close")
				keep = false
			}
		}
		if _, err := c.cw.Write(resp.head.bytes()); err != nil {
			return false, err
		}
		if resp.body == bodyNone {
			return keep, c.cw.Flush()
		}
		if err := c.relayBody(req, resp, pats); err != nil {
			return false, err
		}
		return keep, nil
	}
}

// chunkWriter writes each Write as one chunk.
type chunkWriter struct{ w *bufio.Writer }

func (cw chunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	fmt.Fprintf(cw.w, "%x\r\n", len(p))
	cw.w.Write(p)
	_, err := cw.w.WriteString("\r\n")
	return len(p), err
}

func (c *conn) relayBody(req *request, resp *response, pats *scrubSet) error {
	chunked := req.proto == "HTTP/1.1"
	var out io.Writer = c.cw
	if chunked {
		out = chunkWriter{c.cw}
	}
	if c.llm != nil && c.llm.resp != nil {
		// A metered call reads its usage from a copy of what the
		// sandbox is sent (bounded; it never fails or blocks).
		out = io.MultiWriter(out, c.llm.resp)
	}
	sc := pats.writer(out)
	data := func(b []byte) error {
		if _, err := sc.Write(b); err != nil {
			return err
		}
		return c.cw.Flush()
	}
	var trailers []*headerLine
	var err error
	switch resp.body {
	case bodyLength:
		err = copyChunks(io.LimitReader(c.ur, resp.length), data)
	case bodyChunked:
		err = readChunked(c.ur, false,
			func([]byte) error { return nil },
			data,
			func(line []byte) error {
				if b := trimEOL(line); len(b) > 0 {
					name, value, _ := strings.Cut(string(b), ":")
					trailers = append(trailers, &headerLine{name: name, value: strings.Trim(value, " \t"), modified: true})
				}
				return nil
			})
	case bodyUntilClose:
		err = copyChunks(c.ur, data)
	}
	if err != nil {
		return err
	}
	if err := sc.Close(); err != nil {
		return err
	}
	if chunked {
		c.cw.WriteString("0\r\n")
		for _, t := range trailers {
			if name, value, ok := scrubField(pats, t.name, t.value); ok {
				fmt.Fprintf(c.cw, "%s: %s\r\n", name, value)
			}
		}
		c.cw.WriteString("\r\n")
	}
	return c.cw.Flush()
}

// copyChunks reads r to its end, passing what it reads to data. A
// LimitReader's short read (the upstream closed early) is an error.
func copyChunks(r io.Reader, data func([]byte) error) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if werr := data(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			if lr, ok := r.(*io.LimitedReader); ok && lr.N > 0 {
				return io.ErrUnexpectedEOF
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// tunnel relays a switched protocol (101) both ways until either side
// ends, scrubbing what comes from the upstream.
func (c *conn) tunnel(pats *scrubSet) error {
	if err := c.cw.Flush(); err != nil {
		return err
	}
	go func() {
		io.Copy(c.up, c.cr)
		c.closeAll()
	}()
	sc := pats.writer(c.cw)
	err := copyChunks(c.ur, func(b []byte) error {
		if _, err := sc.Write(b); err != nil {
			return err
		}
		return c.cw.Flush()
	})
	if err == nil {
		if err = sc.Close(); err == nil {
			err = c.cw.Flush()
		}
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
