package api

// Ports and preview URLs: the daemon reverse-proxies HTTP and WebSocket
// traffic to a TCP port on a sandbox's loopback. A sandbox has no network
// interface but loopback, so the bytes go through its agent: the proxy's
// transport dials with agentclient.DialPort, one HTTP/2 stream of the agent
// connection per proxied connection (the agent's POST /port/connect).
//
// Two ways in:
//
//   - by path on the API listener: /v1/sandboxes/{id}/ports/{port}/proxy/{path...}
//     (the program sees /{path...});
//   - by host, when Config.PreviewDomain is set: {port}-{id}.{domain}, for
//     wildcard DNS pointing at the daemon (the program sees the whole path;
//     the API is not served on those hosts).
//
// A port is private unless published (POST /v1/sandboxes/{id}/ports/{port}
// {"public": true}). A request to a private port needs one of:
//
//   - an API key (Authorization: Bearer wdn_...) with sandboxes:exec that
//     may access the sandbox (its owner's, or one with sandboxes:all);
//   - a preview token made by POST /v1/sandboxes/{id}/ports/{port}/url,
//     in the query (warden_token=...) or in the warden_preview cookie that
//     the first request with the query parameter sets, so that the page's
//     own links and requests keep working. A token is
//     "<expires>.<base64url HMAC-SHA256(presign key, "preview|" id "|" port "|" expires)>".
//
// The credentials are the daemon's and never reach the program
// (stripCredentials): every Authorization value carrying a Warden API key
// (in any of its repetitions, whichever was used), Proxy-Authorization, the
// X-API-Key values carrying one and X-Access-Token (the E2B API's
// credentials), the token parameter and the cookie, however their names
// are spelled (case, "_" for "-"). The program's own Authorization (Basic,
// or a bearer token that is not a Warden key) passes through.
//
// Upgraded connections (WebSockets) held through the proxy are capped per
// sandbox port and per client address (upgradeSlots): over a cap the
// upgrade is refused before it reaches the program.
//
// Which ports are public is kept in memory (publicPorts), forgotten when
// the sandbox ends and when the daemon restarts: every port is private
// again after a restart.

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/connguard"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
)

// Preview URL names and limits.
const (
	// PreviewTokenParam is the query parameter carrying a preview token.
	PreviewTokenParam = "warden_token"
	// PreviewCookie is the cookie the proxy sets from a preview token.
	PreviewCookie = "warden_preview"
	// defaultPreviewLifetime and maxPreviewLifetime bound
	// PreviewURLRequest.expires_seconds.
	defaultPreviewLifetime = 3600
	maxPreviewLifetime     = 7 * 24 * 3600
)

// publicPorts is the set of published ports, by sandbox.
type publicPorts struct {
	mu sync.RWMutex
	m  map[string]map[int]bool
}

func (p *publicPorts) set(id string, port int, public bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !public {
		delete(p.m[id], port)
		if len(p.m[id]) == 0 {
			delete(p.m, id)
		}
		return
	}
	if p.m == nil {
		p.m = map[string]map[int]bool{}
	}
	if p.m[id] == nil {
		p.m[id] = map[int]bool{}
	}
	p.m[id][port] = true
}

func (p *publicPorts) public(id string, port int) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.m[id][port]
}

func (p *publicPorts) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, id)
}

// previewTarget is what a proxied request addresses.
type previewTarget struct {
	id     string
	port   int
	prefix string // the path prefix the daemon strips ("" by host)
	path   string // escaped path for the program, starting with "/"
	host   bool   // addressed by host
}

// parsePort parses a {port} path value: 1 to 65535, written canonically.
func parsePort(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != v {
		return 0, apierr.BadRequest("port: %q is not a port number (1 to 65535)", truncate(v, 16))
	}
	return n, nil
}

// proxyPrefix is the path prefix of a port's proxy by path.
func proxyPrefix(id string, port int) string {
	return "/v1/sandboxes/" + id + "/ports/" + strconv.Itoa(port) + "/proxy"
}

// proxyByPath serves /v1/sandboxes/{id}/ports/{port}/proxy/{path...}.
func (s *Server) proxyByPath(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	port, err := parsePort(r.PathValue("port"))
	if err != nil {
		return err
	}
	// The program's path is the rest of the escaped path, after the seven
	// segments of the prefix ("", v1, sandboxes, id, ports, port, proxy).
	segs := strings.SplitN(r.URL.EscapedPath(), "/", 8)
	rest := "/"
	if len(segs) == 8 {
		rest += segs[7]
	}
	return s.proxyPort(w, r, previewTarget{id: id, port: port, prefix: proxyPrefix(id, port), path: rest})
}

// proxyRoot redirects .../proxy to .../proxy/, so that the program's
// relative links resolve under the prefix.
func (s *Server) proxyRoot(w http.ResponseWriter, r *http.Request) error {
	port, err := parsePort(r.PathValue("port"))
	if err != nil {
		return err
	}
	to := proxyPrefix(r.PathValue("id"), port) + "/"
	if r.URL.RawQuery != "" {
		to += "?" + r.URL.RawQuery
	}
	http.Redirect(w, r, to, http.StatusTemporaryRedirect)
	return nil
}

// previewHost parses {port}-{id}.{PreviewDomain}. ok is false for hosts
// outside the domain; under it, a host that is not one of a sandbox's
// ports is an error.
func (s *Server) previewHost(host string) (id string, port int, ok bool, err error) {
	if s.previewDomain == "" {
		return "", 0, false, nil
	}
	if h, _, e := net.SplitHostPort(host); e == nil {
		host = h
	}
	label, under := strings.CutSuffix(strings.ToLower(host), "."+s.previewDomain)
	if !under {
		return "", 0, false, nil
	}
	ps, id, cut := strings.Cut(label, "-")
	if !cut || id == "" || strings.Contains(label, ".") {
		return "", 0, true, notFoundf("no sandbox port at host %s", truncate(host, 256))
	}
	port, err = parsePort(ps)
	if err != nil {
		return "", 0, true, notFoundf("no sandbox port at host %s", truncate(host, 256))
	}
	return id, port, true, nil
}

// routePreviewHosts sends requests for {port}-{id}.{PreviewDomain} to the
// proxy, before the API's router: on those hosts every path is the
// program's.
func (s *Server) routePreviewHosts(next http.Handler) http.Handler {
	if s.previewDomain == "" {
		return next
	}
	byHost := s.serve(route{pattern: "preview-host", action: "port.proxy", public: true, kind: govern.KindPortPreview, h: s.proxyByHost})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok, _ := s.previewHost(r.Host); ok {
			byHost.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) proxyByHost(w http.ResponseWriter, r *http.Request) error {
	id, port, _, err := s.previewHost(r.Host)
	if err != nil {
		return err
	}
	p := r.URL.EscapedPath()
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	return s.proxyPort(w, r, previewTarget{id: id, port: port, path: p, host: true})
}

// previewSig is the HMAC of a preview token. The "preview|" label keeps it
// apart from presigned file URLs, which share the key but start with an
// HTTP method.
func (s *Server) previewSig(id string, port int, expires int64) []byte {
	m := hmac.New(sha256.New, s.presignKey)
	m.Write([]byte("preview|" + id + "|" + strconv.Itoa(port) + "|" + strconv.FormatInt(expires, 10)))
	return m.Sum(nil)
}

// previewToken makes the token of a sandbox port valid until expires.
func (s *Server) previewToken(id string, port int, expires int64) string {
	return strconv.FormatInt(expires, 10) + "." + base64.RawURLEncoding.EncodeToString(s.previewSig(id, port, expires))
}

// checkPreviewToken verifies tok for a sandbox port: 403 when it is
// malformed, made for another sandbox or port, tampered with, or expired.
func (s *Server) checkPreviewToken(tok, id string, port int) error {
	es, ss, ok := strings.Cut(tok, ".")
	exp, perr := strconv.ParseInt(es, 10, 64)
	sig, derr := base64.RawURLEncoding.DecodeString(ss)
	if !ok || perr != nil || derr != nil || !hmac.Equal(sig, s.previewSig(id, port, exp)) {
		return apierr.Forbidden("preview token: bad signature for port %d of sandbox %s", port, id)
	}
	if s.now().Unix() >= exp {
		return apierr.Forbidden("preview token: expired")
	}
	return nil
}

// isWardenKey reports whether an Authorization header carries a Warden API
// key (as opposed to the program's own credentials, which pass through).
func isWardenKey(h string) bool {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	return ok && strings.EqualFold(scheme, "Bearer") && strings.HasPrefix(strings.TrimLeft(tok, " "), auth.KeyPrefix)
}

// authorizePreview decides whether r may reach the target port and how:
// "public", "key", "token" (the query parameter; the cookie is then set)
// or "cookie".
func (s *Server) authorizePreview(r *http.Request, t previewTarget) (string, error) {
	st := stateOf(r)
	st.target = t.id
	st.detail["port"] = t.port
	if s.ports.public(t.id, t.port) {
		return "public", nil
	}
	if h := r.Header.Get("Authorization"); isWardenKey(h) {
		id, err := s.auth.Authenticate(r.Context(), h)
		if errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("%w: %w", auth.ErrInvalidKey, err)
		}
		if err != nil {
			return "", err
		}
		st.ident = &id
		st.principal = id.Principal.ID
		if err := s.requireScope(r, auth.ScopeSandboxesExec); err != nil {
			return "", err
		}
		if _, err := s.sandboxFor(r, t.id); err != nil {
			return "", err
		}
		connguard.Relax(r) // an authenticated upload may stream slowly
		return "key", nil
	}
	if tok := r.URL.Query().Get(PreviewTokenParam); tok != "" {
		return "token", s.checkPreviewToken(tok, t.id, t.port)
	}
	var cookieErr error
	for _, c := range r.CookiesNamed(PreviewCookie) {
		if cookieErr = s.checkPreviewToken(c.Value, t.id, t.port); cookieErr == nil {
			return "cookie", nil
		}
	}
	if cookieErr != nil {
		return "", cookieErr
	}
	return "", apierr.New(apierr.CodeUnauthenticated,
		"port "+strconv.Itoa(t.port)+" of the sandbox is private: send an API key or use a preview URL")
}

// proxyPort authorizes r and proxies it to the target port.
func (s *Server) proxyPort(w http.ResponseWriter, r *http.Request, t previewTarget) error {
	how, err := s.authorizePreview(r, t)
	if err != nil {
		return err
	}
	sb, err := s.mgr.Get(r.Context(), t.id)
	if errors.Is(err, sandbox.ErrNotFound) {
		return notFoundf("sandbox %s not found", t.id)
	}
	if err != nil {
		return err
	}
	if _, err := s.mgr.AgentFor(sb); err != nil {
		return err // not running: 409
	}
	// Each request is a port.preview action (a WebSocket: the request
	// that opens it), decided before it reaches the program.
	a := &govern.Action{SandboxID: sb.ID, Sandbox: sandboxInfo(sb), Port: govern.NewPreview(t.port, r.Method, programPath(t.path), how)}
	if err := s.decide(r, a); err != nil {
		return err
	}
	if how == "token" {
		tok := r.URL.Query().Get(PreviewTokenParam)
		exp, _ := strconv.ParseInt(tok[:strings.IndexByte(tok, '.')], 10, 64)
		path := t.prefix + "/"
		secure := r.TLS != nil || strings.HasPrefix(s.cfg.PublicURL, "https://")
		c := &http.Cookie{Name: PreviewCookie, Value: tok, Path: path, Expires: time.Unix(exp, 0),
			HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode}
		if secure {
			// Lets a page embed the preview in an iframe (cross-site
			// cookies need Secure).
			c.SameSite = http.SameSiteNoneMode
		}
		http.SetCookie(w, c)
	}

	if isUpgrade(r.Header) {
		release, err := s.upgrades.acquire(w, t.id+":"+strconv.Itoa(t.port), connguard.ClientBucket(r.RemoteAddr))
		if err != nil {
			return err
		}
		defer release() // the proxy returns when the upgraded connection ends
	}

	pw := &previewWriter{ResponseWriter: w}
	var perr error
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetXForwarded()
			out := pr.Out
			out.URL.Scheme = "http"
			out.URL.Host = t.id + ":" + strconv.Itoa(t.port) // the transport's dial key
			out.Host = pr.In.Host
			out.URL.RawPath = t.path
			if p, err := url.PathUnescape(t.path); err == nil {
				out.URL.Path = p
			} else {
				out.URL.Path, out.URL.RawPath = t.path, ""
			}
			out.URL.RawQuery = dropQueryParam(pr.In.URL.RawQuery, PreviewTokenParam)
			if t.prefix != "" {
				out.Header.Set("X-Forwarded-Prefix", t.prefix)
			}
			stripCredentials(out.Header)
		},
		Transport:     s.previewTr,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			perr = err
		},
	}
	rp.ServeHTTP(pw, r)
	if perr == nil {
		return nil
	}
	if pw.hijacked || responseStarted(w) {
		s.log.Debug("preview proxy", "request_id", stateOf(r).id, "sandbox", t.id, "port", t.port, "err", perr)
		return nil
	}
	return previewError(perr, t)
}

// programPath is the path the program sees, unescaped where it can be.
func programPath(raw string) string {
	if p, err := url.PathUnescape(raw); err == nil {
		return p
	}
	return raw
}

// previewError classifies a failure to reach the program.
func previewError(err error, t previewTarget) error {
	var pe *agentclient.PortError
	switch {
	case errors.As(err, &pe) && pe.Closed():
		return apierr.Wrap(apierr.CodeBadGateway, fmt.Sprintf("nothing accepts connections on port %d of sandbox %s", t.port, t.id), err)
	case errors.As(err, &pe) && pe.Status == http.StatusForbidden:
		return apierr.Wrap(apierr.CodeForbidden, fmt.Sprintf("port %d of sandbox %s is the agent's own", t.port, t.id), err)
	case errors.As(err, &pe):
		return apierr.Wrap(apierr.CodeBadRequest, pe.Message, err)
	case errors.Is(err, context.Canceled):
		return apierr.Wrap(apierr.CodeUnavailable, "request canceled", err)
	case errors.Is(err, sandbox.ErrNotFound), errors.As(err, new(*sandbox.StateError)):
		return err
	case errors.Is(err, sandbox.ErrAgentDial):
		return apierr.Unavailable("sandbox agent unavailable", err)
	}
	return apierr.Wrap(apierr.CodeBadGateway, fmt.Sprintf("port %d of sandbox %s did not answer with HTTP", t.port, t.id), err)
}

// dropQueryParam removes name (however its key is escaped or its letters
// cased) from a raw query without re-encoding the rest.
func dropQueryParam(raw, name string) string {
	if raw == "" {
		return raw
	}
	parts := strings.Split(raw, "&")
	kept := parts[:0]
	for _, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if uk, err := url.QueryUnescape(k); err == nil && strings.EqualFold(uk, name) {
			continue
		}
		kept = append(kept, p)
	}
	return strings.Join(kept, "&")
}

// dropCookie removes the cookie called name (in any case, with spaces
// around it) from the Cookie headers, leaving the others byte for byte.
func dropCookie(h http.Header, name string) {
	var out []string
	for _, line := range h.Values("Cookie") {
		var kept []string
		for _, c := range strings.Split(line, ";") {
			if k, _, _ := strings.Cut(strings.TrimSpace(c), "="); strings.EqualFold(strings.TrimSpace(k), name) {
				continue
			}
			kept = append(kept, strings.TrimSpace(c))
		}
		if len(kept) > 0 {
			out = append(out, strings.Join(kept, "; "))
		}
	}
	h.Del("Cookie")
	for _, v := range out {
		h.Add("Cookie", v)
	}
}

// stripCredentials removes from h, before it goes to a sandbox's program,
// the credentials the daemon consumes, in all their repetitions and
// spellings: header names compare case-insensitively and with "_" as "-"
// (CGI-style servers read X_API_KEY as X-API-Key).
func stripCredentials(h http.Header) {
	for name, vs := range h {
		switch strings.ReplaceAll(strings.ToLower(name), "_", "-") {
		case "authorization", "x-api-key":
			kept := slices.DeleteFunc(slices.Clone(vs), carriesWardenKey)
			if len(kept) == 0 {
				delete(h, name)
			} else {
				h[name] = kept
			}
		case "proxy-authorization", "x-access-token":
			delete(h, name)
		}
	}
	dropCookie(h, PreviewCookie)
}

// carriesWardenKey reports whether a header value holds a Warden API key,
// whatever the scheme or spacing around it.
func carriesWardenKey(v string) bool { return strings.Contains(v, auth.KeyPrefix) }

// isUpgrade reports whether a request asks to switch protocols (as
// httputil.ReverseProxy decides it: Connection has the token "upgrade").
func isUpgrade(h http.Header) bool {
	for _, v := range h.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return h.Get("Upgrade") != ""
			}
		}
	}
	return false
}

// upgradeSlots counts the upgraded connections held through the preview
// proxy, per sandbox port and per client address.
type upgradeSlots struct {
	perPort, perClient int // 0: no cap

	mu       sync.Mutex
	byPort   map[string]int
	byClient map[string]int
}

// acquire takes a slot for an upgrade to port from client, or refuses it:
// 429 rate_limited over the client's cap, 503 unavailable over the port's.
func (u *upgradeSlots) acquire(w http.ResponseWriter, port, client string) (func(), error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.perClient > 0 && u.byClient[client] >= u.perClient:
		w.Header().Set("Retry-After", "1")
		return nil, apierr.New(apierr.CodeRateLimited, fmt.Sprintf("too many upgraded connections from your address (the limit is %d); close some and retry", u.perClient))
	case u.perPort > 0 && u.byPort[port] >= u.perPort:
		w.Header().Set("Retry-After", "1")
		return nil, apierr.New(apierr.CodeUnavailable, fmt.Sprintf("too many upgraded connections to this port (the limit is %d); retry later", u.perPort))
	}
	if u.byPort == nil {
		u.byPort, u.byClient = map[string]int{}, map[string]int{}
	}
	u.byPort[port]++
	u.byClient[client]++
	var once sync.Once
	return func() {
		once.Do(func() {
			u.mu.Lock()
			defer u.mu.Unlock()
			if u.byPort[port]--; u.byPort[port] <= 0 {
				delete(u.byPort, port)
			}
			if u.byClient[client]--; u.byClient[client] <= 0 {
				delete(u.byClient, client)
			}
		})
	}, nil
}

// previewWriter notes a hijack (a WebSocket or other upgrade taking over
// the connection), after which no error response can be written, and
// records status 101 for the access log.
type previewWriter struct {
	http.ResponseWriter
	hijacked bool
}

func (p *previewWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, b, err := http.NewResponseController(p.ResponseWriter).Hijack()
	if err == nil {
		p.hijacked = true
		markStatus(p.ResponseWriter, http.StatusSwitchingProtocols)
	}
	return c, b, err
}

func (p *previewWriter) Flush() { http.NewResponseController(p.ResponseWriter).Flush() }

func (p *previewWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// markStatus records status in the access log's statusWriter under w.
func markStatus(w http.ResponseWriter, status int) {
	for {
		switch t := w.(type) {
		case *statusWriter:
			if t.status == 0 {
				t.status = status
			}
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return
		}
	}
}

// The port routes.

// portURLs returns the base URLs of a port: by path, and by host when a
// preview domain is set.
func (s *Server) portURLs(r *http.Request, id string, port int) (byPath, byHost string) {
	base := s.publicBase(r)
	byPath = base + proxyPrefix(id, port) + "/"
	if s.previewDomain != "" {
		scheme, hostport, _ := strings.Cut(base, "://")
		hp := ""
		if _, p, err := net.SplitHostPort(hostport); err == nil {
			hp = ":" + p
		}
		byHost = scheme + "://" + strconv.Itoa(port) + "-" + id + "." + s.previewDomain + hp + "/"
	}
	return byPath, byHost
}

// portFor checks the caller's access to the sandbox of a port route and
// that the sandbox has not ended.
func (s *Server) portFor(r *http.Request) (store.Sandbox, int, error) {
	id := r.PathValue("id")
	stateOf(r).target = id
	port, err := parsePort(r.PathValue("port"))
	if err != nil {
		return store.Sandbox{}, 0, err
	}
	stateOf(r).detail["port"] = port
	sb, err := s.sandboxFor(r, id)
	if err != nil {
		return store.Sandbox{}, 0, err
	}
	if sandbox.State(sb.State).Terminal() {
		return store.Sandbox{}, 0, apierr.Conflict("sandbox %s is %s", id, sb.State)
	}
	return sb, port, nil
}

// portResponse is the Port schema.
type portResponse struct {
	SandboxID string `json:"sandbox_id"`
	Port      int    `json:"port"`
	Public    bool   `json:"public"`
	URL       string `json:"url"`
	HostURL   string `json:"host_url,omitempty"`
}

func (s *Server) publishPort(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		Public *bool `json:"public"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.Public == nil {
		return apierr.BadRequest("request body: public is required")
	}
	stateOf(r).detail["public"] = *q.Public
	return s.setPublic(w, r, *q.Public)
}

func (s *Server) unpublishPort(w http.ResponseWriter, r *http.Request) error {
	stateOf(r).detail["public"] = false
	return s.setPublic(w, r, false)
}

func (s *Server) setPublic(w http.ResponseWriter, r *http.Request, public bool) error {
	sb, port, err := s.portFor(r)
	if err != nil {
		return err
	}
	// Publishing is governed; closing a port (DELETE, public false) takes
	// access away and is not.
	if r.Method != http.MethodDelete {
		if err := s.decide(r, &govern.Action{Port: &govern.Port{Port: int64(port), Public: public}}); err != nil {
			return err
		}
	}
	s.ports.set(sb.ID, port, public)
	if public {
		// The sandbox may have ended meanwhile (SandboxEnded forgets its
		// ports): do not keep an entry for it.
		if now, err := s.mgr.Get(context.WithoutCancel(r.Context()), sb.ID); err == nil && sandbox.State(now.State).Terminal() {
			s.ports.forget(sb.ID)
			return apierr.Conflict("sandbox %s is %s", sb.ID, now.State)
		}
	}
	if r.Method == http.MethodDelete {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	byPath, byHost := s.portURLs(r, sb.ID, port)
	return writeJSON(w, http.StatusOK, portResponse{SandboxID: sb.ID, Port: port, Public: public, URL: byPath, HostURL: byHost})
}

// previewURL is POST /v1/sandboxes/{id}/ports/{port}/url.
func (s *Server) previewURL(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		ExpiresSeconds *int64 `json:"expires_seconds"`
	}
	if err := decodeJSON(r, &q, false); err != nil {
		return err
	}
	lifetime := int64(defaultPreviewLifetime)
	if q.ExpiresSeconds != nil {
		lifetime = *q.ExpiresSeconds
		if lifetime < 1 || lifetime > maxPreviewLifetime {
			return apierr.Validation("expires_seconds: must be between 1 and %d", maxPreviewLifetime)
		}
	}
	stateOf(r).detail["expires_seconds"] = lifetime
	sb, port, err := s.portFor(r)
	if err != nil {
		return err
	}
	if err := s.decide(r, &govern.Action{Port: &govern.Port{Port: int64(port)}}); err != nil {
		return err
	}
	exp := s.now().Add(time.Duration(lifetime) * time.Second).Truncate(time.Second)
	tok := url.Values{PreviewTokenParam: {s.previewToken(sb.ID, port, exp.Unix())}}.Encode()
	byPath, byHost := s.portURLs(r, sb.ID, port)
	resp := map[string]any{"url": byPath + "?" + tok, "expires_at": exp.UTC(), "public": s.ports.public(sb.ID, port)}
	if byHost != "" {
		resp["host_url"] = byHost + "?" + tok
	}
	return writeJSON(w, http.StatusOK, resp)
}
