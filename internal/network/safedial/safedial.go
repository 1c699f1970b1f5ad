// Package safedial is wardend's one way of connecting to URLs that
// untrusted input names (MCP connector URLs first; OAuth and protected
// resource metadata, fetch and LLM upstreams later): an *http.Client whose
// every connection is checked against internal/network's always-denied
// classification (loopback, link-local and cloud metadata, private, CGNAT,
// unique-local, reserved ranges, the host's own addresses).
//
// A request is refused before any connection when its URL is not HTTPS
// (unless plain HTTP is allowed), carries credentials, or names an address
// (in any spelling resolvers accept: "2130706433", "0x7f.1",
// "[::ffff:127.0.0.1]") or localhost that is refused. Names are resolved by
// the dialer itself; every resolved address is checked (one refused address
// refuses the name) and the checked address is what is dialled, with the
// check repeated on the socket's own address just before it connects, so a
// name that rebinds between lookups cannot slip through. Redirects are
// followed only within the original origin (scheme, host and port), and
// each redirected request is checked again. Responses are capped in size
// (after decompression). The administrator's allow list (names, host:port
// pairs or address prefixes) is the only way to reach refused addresses.
// Proxy environment variables are ignored: a proxy would make the check see
// the proxy's address.
package safedial

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/warden-sandbox/warden/internal/network"
)

// Defaults for zero Options fields.
const (
	DefaultMaxResponseBytes = 16 << 20
	DefaultMaxRedirects     = 5
	DefaultDialTimeout      = 10 * time.Second
	maxHeaderBytes          = 64 << 10
)

// ErrResponseTooLarge is returned by reads of a response body that goes
// past Options.MaxResponseBytes.
var ErrResponseTooLarge = errors.New("response exceeds the size limit")

// Checker classifies addresses; internal/network's DestinationPolicy (the
// configured network.deny included) and network.CheckDial fit.
type Checker interface {
	// Denied returns why ip must not be connected to, or "" if it may.
	Denied(ip netip.Addr) string
}

// CheckerFunc adapts a function to Checker.
type CheckerFunc func(netip.Addr) string

// Denied calls f.
func (f CheckerFunc) Denied(ip netip.Addr) string { return f(ip) }

// Options configures a Dialer. The zero value is the secure default:
// HTTPS only, network.CheckDial, no exceptions.
type Options struct {
	// Dest classifies addresses; nil: network.CheckDial.
	Dest Checker
	// Allow lists the administrator's exceptions: "host" (a DNS name,
	// reachable whatever it resolves to, or an address), "host:port"
	// (the same on that port only; IPv6 in brackets) or an address prefix
	// "10.1.0.0/16" (its addresses may be dialled, whatever name led
	// there).
	Allow []string
	// AllowHTTP permits plain-HTTP URLs; otherwise only HTTPS is used.
	AllowHTTP bool
	// MaxResponseBytes caps each response body (after decompression):
	// 0 means DefaultMaxResponseBytes, a negative value no cap.
	MaxResponseBytes int64
	// MaxRedirects caps same-origin redirects per request: 0 means
	// DefaultMaxRedirects, a negative value none are followed.
	MaxRedirects int
	// DialTimeout bounds each connection attempt; 0: DefaultDialTimeout.
	DialTimeout time.Duration
	// Resolve looks names up; nil: net.DefaultResolver (tests replace it).
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Transport, when set, is a template whose TLS and timeout settings
	// are used (its Proxy and dialing functions are replaced).
	Transport *http.Transport
}

// DeniedError is a refused destination. Its message says what was refused
// and why, never anything the destination sent.
type DeniedError struct {
	Host   string // host or host:port as requested
	Reason string
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("connection to %s refused: %s", e.Host, e.Reason)
}

// Dialer makes the checked connections. It is safe for concurrent use.
type Dialer struct {
	dest      Checker
	hosts     map[string]bool // normalized "host" or "host:port"
	prefixes  []netip.Prefix
	allowHTTP bool
	maxBody   int64
	maxRedir  int
	timeout   time.Duration
	resolve   func(ctx context.Context, host string) ([]netip.Addr, error)
	tr        *http.Transport
}

// New returns a Dialer for opts, or an error naming a malformed allow-list
// entry.
func New(opts Options) (*Dialer, error) {
	d := &Dialer{
		dest:      opts.Dest,
		hosts:     map[string]bool{},
		allowHTTP: opts.AllowHTTP,
		maxBody:   opts.MaxResponseBytes,
		maxRedir:  opts.MaxRedirects,
		timeout:   opts.DialTimeout,
		resolve:   opts.Resolve,
	}
	if d.dest == nil {
		d.dest = CheckerFunc(network.CheckDial)
	}
	if d.maxBody == 0 {
		d.maxBody = DefaultMaxResponseBytes
	}
	if d.maxRedir == 0 {
		d.maxRedir = DefaultMaxRedirects
	}
	if d.timeout <= 0 {
		d.timeout = DefaultDialTimeout
	}
	if d.resolve == nil {
		d.resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	for _, a := range opts.Allow {
		a = strings.TrimSpace(a)
		if strings.Contains(a, "/") {
			p, err := netip.ParsePrefix(a)
			if err != nil {
				return nil, fmt.Errorf("allow entry %q: %w", a, err)
			}
			d.prefixes = append(d.prefixes, p.Masked())
			continue
		}
		key, err := normalizeAllow(a)
		if err != nil {
			return nil, err
		}
		d.hosts[key] = true
	}
	var tr *http.Transport
	if opts.Transport != nil {
		tr = opts.Transport.Clone()
	} else {
		tr = &http.Transport{
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          64,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   15 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
	}
	tr.Proxy = nil
	tr.OnProxyConnectResponse = nil
	tr.DialContext = d.DialContext
	tr.DialTLSContext = nil
	tr.Dial = nil    //nolint:staticcheck // cleared so DialContext is the only dialer
	tr.DialTLS = nil //nolint:staticcheck
	if tr.MaxResponseHeaderBytes == 0 || tr.MaxResponseHeaderBytes > maxHeaderBytes {
		tr.MaxResponseHeaderBytes = maxHeaderBytes
	}
	d.tr = tr
	return d, nil
}

// NewClient is New(opts) followed by Client.
func NewClient(opts Options) (*http.Client, error) {
	d, err := New(opts)
	if err != nil {
		return nil, err
	}
	return d.Client(), nil
}

// Client returns an HTTP client whose requests go through d: URLs checked,
// connections checked, same-origin redirects only, bodies capped. It has
// no overall timeout (streams may be long); callers bound requests with
// their contexts.
func (d *Dialer) Client() *http.Client {
	return &http.Client{Transport: d.RoundTripper(), CheckRedirect: d.checkRedirect}
}

// RoundTripper returns the checked transport (without redirect handling),
// for clients that build their own http.Client.
func (d *Dialer) RoundTripper() http.RoundTripper { return &roundTripper{d: d} }

// CloseIdleConnections closes the pooled connections of d's transport.
func (d *Dialer) CloseIdleConnections() { d.tr.CloseIdleConnections() }

// CheckURL is the static check of a URL, without resolving names (for
// validating a connector's URL when it is registered): scheme, credentials,
// and a host that is an address or localhost refused by policy.
func (d *Dialer) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("parse url: %w", err)
	}
	return d.checkURL(u)
}

func (d *Dialer) checkURL(u *url.URL) error {
	switch u.Scheme {
	case "https":
	case "http":
		if !d.allowHTTP {
			return &DeniedError{Host: u.Host, Reason: "plain HTTP is not allowed (use https)"}
		}
	default:
		return &DeniedError{Host: u.Host, Reason: fmt.Sprintf("scheme %q is not https", u.Scheme)}
	}
	if u.User != nil {
		return &DeniedError{Host: u.Host, Reason: "credentials in the URL are refused"}
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return &DeniedError{Host: u.Host, Reason: "no host"}
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return &DeniedError{Host: u.Host, Reason: "bad port " + strconv.Quote(port)}
		}
	}
	if d.hostAllowed(host, port) {
		return nil
	}
	if why := d.denyName(host); why != "" {
		return &DeniedError{Host: u.Host, Reason: why}
	}
	return nil
}

// denyName judges a host by its spelling alone: an address in any form
// resolvers accept is checked as that address; localhost and names whose
// last label is numeric (which no DNS name has) are refused.
func (d *Dialer) denyName(host string) string {
	if ip, ok := network.ParseHostIP(host); ok {
		if why := d.denied(ip); why != "" {
			return "address " + ip.String() + " is " + why
		}
		return ""
	}
	if strings.HasPrefix(host, "[") || strings.Contains(host, "%") {
		return "malformed or zoned address"
	}
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return "localhost is loopback"
	}
	last := h[strings.LastIndexByte(h, '.')+1:]
	if last == "" || strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return "a numeric host that is not an address"
	}
	return ""
}

// denied checks one address: the allowed prefixes first, then Dest.
func (d *Dialer) denied(ip netip.Addr) string {
	ip = ip.WithZone("").Unmap()
	for _, p := range d.prefixes {
		if p.Contains(ip) {
			return ""
		}
	}
	return d.dest.Denied(ip)
}

// hostAllowed reports whether host (and port, "" for the scheme's) is on
// the allow list by name.
func (d *Dialer) hostAllowed(host, port string) bool {
	if len(d.hosts) == 0 {
		return false
	}
	h := strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if ip, err := netip.ParseAddr(h); err == nil {
		h = ip.String()
	}
	if port != "" && d.hosts[net.JoinHostPort(h, port)] {
		return true
	}
	return d.hosts[h]
}

// DialContext connects to addr ("host:port") on network "tcp", "tcp4" or
// "tcp6": the host is resolved here, every address checked, and the
// checked addresses dialled in turn, each checked again at connect time.
func (d *Dialer) DialContext(ctx context.Context, netw, addr string) (net.Conn, error) {
	switch netw {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, &DeniedError{Host: addr, Reason: "network " + netw + " is not tcp"}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %q: %w", addr, err)
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil || pn == 0 {
		return nil, &DeniedError{Host: addr, Reason: "bad port " + strconv.Quote(port)}
	}
	allowed := d.hostAllowed(host, port)
	var ips []netip.Addr
	if ip, ok := network.ParseHostIP(host); ok {
		ips = []netip.Addr{ip.Unmap()}
	} else {
		if !allowed {
			if why := d.denyName(host); why != "" {
				return nil, &DeniedError{Host: addr, Reason: why}
			}
		}
		found, err := d.resolve(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		for _, ip := range found {
			if ip.IsValid() {
				ips = append(ips, ip.WithZone("").Unmap())
			}
		}
		if len(ips) == 0 {
			return nil, fmt.Errorf("resolve %s: no addresses", host)
		}
	}
	if !allowed {
		for _, ip := range ips {
			if why := d.denied(ip); why != "" {
				if ip.String() == host {
					return nil, &DeniedError{Host: addr, Reason: "address " + ip.String() + " is " + why}
				}
				return nil, &DeniedError{Host: addr, Reason: "it resolves to " + ip.String() + ", which is " + why}
			}
		}
	}
	// The socket-level check: the address the kernel is about to connect
	// to, whatever happened above.
	control := func(_, address string, _ syscall.RawConn) error {
		if allowed {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &DeniedError{Host: addr, Reason: "unparsable address " + address}
		}
		if why := d.denied(ap.Addr()); why != "" {
			return &DeniedError{Host: addr, Reason: "connecting to " + ap.Addr().String() + ", which is " + why}
		}
		return nil
	}
	nd := &net.Dialer{Timeout: d.timeout, KeepAlive: 30 * time.Second, Control: control}
	var errs []error
	for _, ip := range ips {
		if netw == "tcp4" && !ip.Is4() || netw == "tcp6" && !ip.Is6() {
			continue
		}
		c, err := nd.DialContext(ctx, "tcp", netip.AddrPortFrom(ip, uint16(pn)).String())
		if err == nil {
			return c, nil
		}
		var de *DeniedError
		if errors.As(err, &de) {
			return nil, de
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("dial %s: no %s address", addr, netw)
	}
	return nil, fmt.Errorf("dial %s: %w", addr, errors.Join(errs...))
}

// checkRedirect follows redirects within the first request's origin only.
func (d *Dialer) checkRedirect(req *http.Request, via []*http.Request) error {
	if d.maxRedir < 0 || len(via) > d.maxRedir {
		return &DeniedError{Host: req.URL.Host, Reason: "too many redirects"}
	}
	if o := via[0].URL; !sameOrigin(o, req.URL) {
		return &DeniedError{Host: req.URL.Host, Reason: "redirect from " + origin(o) + " to another origin"}
	}
	return nil
}

func origin(u *url.URL) string {
	return u.Scheme + "://" + strings.ToLower(hostPort(u))
}

func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "https":
			port = "443"
		case "http":
			port = "80"
		}
	}
	return net.JoinHostPort(strings.TrimSuffix(strings.ToLower(u.Hostname()), "."), port)
}

func sameOrigin(a, b *url.URL) bool {
	return a.Scheme == b.Scheme && hostPort(a) == hostPort(b)
}

// roundTripper checks each request's URL, then caps the response body.
type roundTripper struct{ d *Dialer }

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := rt.d.checkURL(req.URL); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	resp, err := rt.d.tr.RoundTrip(req)
	if err != nil || rt.d.maxBody < 0 {
		return resp, err
	}
	if resp.ContentLength > rt.d.maxBody {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %d bytes: %w", req.URL.Host, resp.ContentLength, ErrResponseTooLarge)
	}
	resp.Body = &capped{rc: resp.Body, left: rt.d.maxBody}
	return resp, nil
}

// capped fails reads past its limit instead of truncating silently.
type capped struct {
	rc   io.ReadCloser
	left int64
}

func (c *capped) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// One byte more tells a body of exactly the limit from a longer
		// one.
		var b [1]byte
		n, err := c.rc.Read(b[:])
		if n > 0 {
			return 0, ErrResponseTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.rc.Read(p)
	c.left -= int64(n)
	return n, err
}

func (c *capped) Close() error { return c.rc.Close() }

// normalizeAllow checks an allow-list entry ("host" or "host:port", IPv6
// in brackets) and returns its key.
func normalizeAllow(s string) (string, error) {
	host, port := s, ""
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return "", fmt.Errorf("allow entry %q: port %q is not a number from 1 to 65535", s, port)
		}
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
	} else if strings.Contains(s, ":") {
		return "", fmt.Errorf("allow entry %q: want host, host:port or a prefix (IPv6 in brackets)", s)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return "", fmt.Errorf("allow entry %q: zoned addresses are not allowed", s)
		}
		host = ip.String()
	} else if !dnsName(host) {
		return "", fmt.Errorf("allow entry %q: want host, host:port or a prefix", s)
	}
	if port == "" {
		return host, nil
	}
	return net.JoinHostPort(host, port), nil
}

func dnsName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
