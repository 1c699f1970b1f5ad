package image

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
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/warden-sandbox/warden/internal/errkind"
)

// ErrRegistryDenied is wrapped by the errors of registry requests that the
// destination policy refuses: a registry (or a redirect, or a token realm)
// on a loopback, link-local, private or otherwise internal address, or on
// one of the host's own addresses, that the administrator has not allowed;
// or plain HTTP to a registry not allowed to use it.
//
// It and DeniedError are of kind Forbidden (internal/errkind).
var ErrRegistryDenied = errkind.Sentinel(errkind.Forbidden, "registry access denied", errkind.WithDetail)

// DeniedError is a refused registry request. It wraps [ErrRegistryDenied].
type DeniedError struct {
	Host   string // the host[:port] that was refused
	Reason string // why
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("registry %s is not allowed: %s; an administrator can allow it in registries.allow", e.Host, e.Reason)
}

// Is makes a DeniedError match [ErrRegistryDenied].
func (e *DeniedError) Is(target error) bool { return target == ErrRegistryDenied }

// Kind makes a DeniedError forbidden (errkind.Kinded).
func (e *DeniedError) Kind() errkind.Kind { return errkind.Forbidden }

// Public returns the message callers see: all of it (it never quotes what a
// registry answered).
func (e *DeniedError) Public() string { return e.Error() }

// Registry is a registry an administrator allows although the destination
// policy would refuse it (registries.allow in wardend's configuration).
type Registry struct {
	// Host is "host" or "host:port" as written in image references
	// ("registry.internal", "127.0.0.1:5000", "[::1]:5000"). Without a
	// port it matches ports 443 and 80 only.
	Host string
	// Insecure allows plain HTTP to this registry. It is the only way
	// wardend speaks plain HTTP to a registry.
	Insecure bool
}

// Policy is what image imports may do: the registries they may contact and
// the limits of what they may write. A nil *Policy is the default: no
// registry on an internal address, no plain HTTP, [DefaultLimits].
//
// A registry request is allowed when its host[:port] is listed in
// registries.allow, or else when every address it connects to passes the
// policy's [DestinationChecker] (in wardend, the sandbox egress path's
// classification: loopback, link-local and cloud metadata, private and
// shared ranges, multicast and reserved ranges, the host's own addresses and
// network.deny are refused). The check is made on the URL of every request,
// redirects and token realms included, and again on the address each
// connection is actually made to (so a name that resolves, or rebinds, to an
// internal address is refused). Plain HTTP is used only for registries listed
// with Insecure. Proxy environment variables are not used for registry
// requests.
type Policy struct {
	limits Limits
	allow  map[string]Registry // normalized "host" or "host:port"
	dest   DestinationChecker
	trOnce sync.Once
	tr     *http.Transport
}

// DestinationChecker classifies the addresses registry requests connect
// to. wardend passes internal/network's DestinationPolicy, the sandbox
// egress path's classification (which also knows the host's own addresses
// and network.deny); without one, [BuiltinDenied] is used.
type DestinationChecker interface {
	// Denied returns why ip must not be connected to, or "" if it may.
	Denied(ip netip.Addr) string
}

// NewPolicy returns a Policy allowing the registries in allow, refusing the
// addresses dest refuses (nil: [BuiltinDenied]), with limits lim (zero
// fields take the defaults of [DefaultLimits]).
func NewPolicy(allow []Registry, dest DestinationChecker, lim Limits) (*Policy, error) {
	if dest == nil {
		dest = builtinChecker{}
	}
	p := &Policy{limits: lim.withDefaults(), allow: map[string]Registry{}, dest: dest}
	if err := p.limits.validate(); err != nil {
		return nil, err
	}
	for _, r := range allow {
		key, err := NormalizeRegistryHost(r.Host)
		if err != nil {
			return nil, err
		}
		r.Host = key
		p.allow[key] = r
	}
	return p, nil
}

var (
	defaultPolicyOnce sync.Once
	defaultPolicy     *Policy
)

// orDefault returns p, or the default policy for a nil p.
func (p *Policy) orDefault() *Policy {
	if p != nil {
		return p
	}
	defaultPolicyOnce.Do(func() {
		defaultPolicy, _ = NewPolicy(nil, nil, Limits{})
	})
	return defaultPolicy
}

// Limits returns the import limits of p.
func (p *Policy) Limits() Limits { return p.orDefault().limits }

// NormalizeRegistryHost checks a registries.allow entry ("host" or
// "host:port", IPv6 addresses in brackets) and returns it lower-cased, as
// the key it is matched by ("host", or "host:port" with IPv6 in brackets).
// Hosts are DNS names (labels of letters, digits, '-' and '_') or IP
// addresses without a zone.
func NormalizeRegistryHost(s string) (string, error) {
	host, port := s, ""
	if h, p, err := net.SplitHostPort(s); err == nil {
		host, port = h, p
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return "", fmt.Errorf("registry %q: port %q is not a number from 1 to 65535", s, port)
		}
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
		if ip, err := netip.ParseAddr(host); err != nil || !ip.Is6() {
			return "", fmt.Errorf("registry %q: not an IPv6 address in brackets", s)
		}
	} else if strings.Contains(s, ":") {
		return "", fmt.Errorf("registry %q: want host or host:port (IPv6 addresses in brackets)", s)
	}
	host = strings.ToLower(host)
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return "", fmt.Errorf("registry %q: zoned addresses are not allowed", s)
		}
		if ip.Is6() && port == "" && !strings.HasPrefix(s, "[") {
			return "", fmt.Errorf("registry %q: IPv6 addresses go in brackets", s)
		}
		host = ip.String()
	} else if !dnsName(strings.TrimSuffix(host, ".")) {
		return "", fmt.Errorf("registry %q: want host or host:port", s)
	} else {
		host = strings.TrimSuffix(host, ".")
	}
	if port == "" {
		return host, nil
	}
	return net.JoinHostPort(host, port), nil
}

// dnsName reports whether s is a DNS name of labels of letters, digits,
// '-' and '_'.
func dnsName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// allowed returns the registries.allow entry matching host and port (port
// "" for none).
func (p *Policy) allowed(host, port string) (Registry, bool) {
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.String()
	}
	if port != "" {
		if r, ok := p.allow[net.JoinHostPort(host, port)]; ok {
			return r, true
		}
	}
	if port == "" || port == "443" || port == "80" {
		r, ok := p.allow[host]
		return r, ok
	}
	return Registry{}, false
}

// denyHost returns why a request to host (not allowed explicitly) is
// refused before any connection, judging by the name alone: an address
// literal in a refused range, or localhost. Names are judged again by the
// addresses they resolve to when connecting.
func (p *Policy) denyHost(host string) string {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return "localhost is loopback"
	}
	if ip, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		if ip.Zone() != "" {
			return "zoned addresses are refused"
		}
		if why := p.dest.Denied(ip); why != "" {
			return "address " + ip.String() + " is " + why
		}
		return ""
	}
	// Other numeric spellings of IPv4 addresses ("127.1", "2130706433",
	// "0x7f.1"), which some resolvers accept: no DNS name ends in an
	// all-numeric label.
	last := h[strings.LastIndexByte(h, '.')+1:]
	if last != "" && (strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x")) {
		return "a numeric host that is not a dotted-quad IPv4 address"
	}
	return ""
}

// builtinChecker is BuiltinDenied as a DestinationChecker.
type builtinChecker struct{}

func (builtinChecker) Denied(ip netip.Addr) string { return BuiltinDenied(ip) }

var builtinDeniedPrefixes = []struct {
	p      netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network range"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (CGNAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking range"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved range"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible IPv6"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("2001::/32"), "Teredo"},
	{netip.MustParsePrefix("fec0::/10"), "site-local IPv6"},
}

// BuiltinDenied is the destination check of policies made without a
// DestinationChecker: loopback, link-local (cloud metadata included),
// private, multicast and special-purpose ranges are refused. Unlike
// internal/network's classification it does not know the host's own
// public addresses.
func BuiltinDenied(ip netip.Addr) string {
	ip = ip.WithZone("").Unmap()
	switch {
	case !ip.IsValid():
		return "invalid address"
	case ip.IsUnspecified():
		return "unspecified address"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "link-local"
	case ip.IsPrivate():
		return "private range"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	}
	for _, r := range builtinDeniedPrefixes {
		if r.p.Contains(ip) {
			return r.reason
		}
	}
	if !ip.IsGlobalUnicast() {
		return "not a global unicast address"
	}
	return ""
}

// checkURL is the per-request check: every request of a pull, redirects
// and token fetches included, goes through it.
func (p *Policy) checkURL(u *url.URL) error {
	host, port := u.Hostname(), u.Port()
	hostPort := u.Host
	reg, ok := p.allowed(host, port)
	switch u.Scheme {
	case "https":
	case "http":
		if !ok || !reg.Insecure {
			return &DeniedError{Host: hostPort, Reason: "plain HTTP is used only for registries listed in registries.allow with insecure: true"}
		}
	default:
		return &DeniedError{Host: hostPort, Reason: fmt.Sprintf("scheme %q is not http or https", u.Scheme)}
	}
	if ok {
		return nil
	}
	if why := p.denyHost(host); why != "" {
		return &DeniedError{Host: hostPort, Reason: why}
	}
	return nil
}

// transport is the HTTP transport of all registry requests under p.
func (p *Policy) transport() *http.Transport {
	p.trOnce.Do(func() {
		p.tr = &http.Transport{
			// No proxy: a proxy would make the connection-time check
			// see the proxy's address, not the registry's.
			Proxy:                 nil,
			DialContext:           p.dial,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          64,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   15 * time.Second,
			ExpectContinueTimeout: time.Second,
			ResponseHeaderTimeout: 2 * time.Minute,
		}
	})
	return p.tr
}

// dial connects to addr ("host:port" of a request URL), refusing any
// address the destination policy refuses unless host:port is an allowed
// registry. The check runs on the address the socket is about to connect
// to, after name resolution, for every address tried.
func (p *Policy) dial(ctx context.Context, netw, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("registry address %q: %w", addr, err)
	}
	_, allowed := p.allowed(host, port)
	control := func(_, address string, _ syscall.RawConn) error {
		if allowed {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &DeniedError{Host: addr, Reason: "unparsable address " + address}
		}
		if why := p.dest.Denied(ap.Addr()); why != "" {
			return &DeniedError{Host: addr, Reason: "it resolves to " + ap.Addr().String() + ", which is " + why}
		}
		return nil
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: control}
	return d.DialContext(ctx, netw, addr)
}

// guard is the transport of one pull: it checks every request URL before
// handing it to the shared transport.
type guard struct {
	p    *Policy
	base http.RoundTripper
}

func (g *guard) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := g.p.checkURL(req.URL); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	return g.base.RoundTrip(req)
}

// registryError turns an error of a registry request into one that says
// what happened without quoting the registry's response: a refused
// destination, or the HTTP status the registry answered with.
func registryError(r name.Reference, auth authn.Authenticator, err error) error {
	if err == nil {
		return nil
	}
	var de *DeniedError
	if errors.As(err, &de) {
		return de
	}
	var terr *transport.Error
	if errors.As(err, &terr) {
		return describeRegistryError(r, auth, terr)
	}
	return err
}

// describeRegistryError describes the status a registry answered with,
// never its response body (it may come from any service).
func describeRegistryError(r name.Reference, auth authn.Authenticator, terr *transport.Error) error {
	registry := r.Context().RegistryStr()
	status := fmt.Sprintf("%d %s", terr.StatusCode, http.StatusText(terr.StatusCode))
	var what string
	switch terr.StatusCode {
	case http.StatusUnauthorized:
		if auth == authn.Anonymous {
			what = ": it requires authentication (no credentials given)"
		} else {
			what = ": it rejected the credentials"
		}
	case http.StatusForbidden:
		what = ": access denied"
	case http.StatusNotFound:
		what = ": image not found"
	}
	return fmt.Errorf("registry %s answered %s for %s%s", registry, status, r, what)
}

// registryImage is an image pulled through a Policy: errors of its lazy
// fetches (config, layers) are described like those of the pull.
type registryImage struct {
	v1.Image
	ref  name.Reference
	auth authn.Authenticator
}

func (i *registryImage) fix(err error) error { return registryError(i.ref, i.auth, err) }

func (i *registryImage) ConfigFile() (*v1.ConfigFile, error) {
	cf, err := i.Image.ConfigFile()
	return cf, i.fix(err)
}

func (i *registryImage) RawConfigFile() ([]byte, error) {
	b, err := i.Image.RawConfigFile()
	return b, i.fix(err)
}

func (i *registryImage) Layers() ([]v1.Layer, error) {
	ls, err := i.Image.Layers()
	if err != nil {
		return nil, i.fix(err)
	}
	out := make([]v1.Layer, len(ls))
	for k, l := range ls {
		out[k] = &registryLayer{Layer: l, img: i}
	}
	return out, nil
}

func (i *registryImage) LayerByDigest(h v1.Hash) (v1.Layer, error) {
	l, err := i.Image.LayerByDigest(h)
	if err != nil {
		return nil, i.fix(err)
	}
	return &registryLayer{Layer: l, img: i}, nil
}

func (i *registryImage) LayerByDiffID(h v1.Hash) (v1.Layer, error) {
	l, err := i.Image.LayerByDiffID(h)
	if err != nil {
		return nil, i.fix(err)
	}
	return &registryLayer{Layer: l, img: i}, nil
}

type registryLayer struct {
	v1.Layer
	img *registryImage
}

func (l *registryLayer) Compressed() (io.ReadCloser, error) {
	rc, err := l.Layer.Compressed()
	return rc, l.img.fix(err)
}

func (l *registryLayer) Uncompressed() (io.ReadCloser, error) {
	rc, err := l.Layer.Uncompressed()
	return rc, l.img.fix(err)
}
