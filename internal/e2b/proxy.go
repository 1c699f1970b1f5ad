package e2b

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
)

// Routing headers of E2B's sandbox traffic.
const (
	hdrSandboxID   = "E2b-Sandbox-Id"
	hdrSandboxPort = "E2b-Sandbox-Port"
	hdrAccessToken = "X-Access-Token"
	hdrTraffic     = "E2b-Traffic-Access-Token"
)

// internalRoutes are envd routes the orchestrator calls; never from outside.
var internalRoutes = map[string]bool{
	"/init": true, "/freeze": true, "/unfreeze": true, "/collapse": true,
	"/fsfreeze": true, "/fsthaw": true, "/upgrade": true,
}

// isSandboxTraffic reports whether r names a sandbox: routing headers, a
// {port}-{id}.{domain} Host, or the bare /files path (presigned URLs).
func (s *Server) isSandboxTraffic(r *http.Request) bool {
	if r.Header.Get(hdrSandboxID) != "" || r.Header.Get(hdrSandboxPort) != "" {
		return true
	}
	if _, _, ok := s.hostRoute(r.Host); ok {
		return true
	}
	return r.URL.Path == "/files"
}

// hostRoute parses {port}-{id}.{domain} when a domain is configured.
func (s *Server) hostRoute(host string) (id string, port int, ok bool) {
	if s.cfg.Domain == "" {
		return "", 0, false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, ok := strings.CutSuffix(strings.ToLower(host), "."+strings.ToLower(s.cfg.Domain))
	if !ok || strings.Contains(label, ".") {
		return "", 0, false
	}
	ps, id, ok := strings.Cut(label, "-")
	p, err := strconv.Atoi(ps)
	if !ok || err != nil || id == "" {
		return "", 0, false
	}
	return id, p, true
}

func notFound502(w http.ResponseWriter, id string) {
	writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox was not found", "code": 502})
}

func portClosed502(w http.ResponseWriter, id string, port int) {
	writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox is running but port is not open", "port": port, "code": 502})
}

func unauthorized(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusUnauthorized, map[string]any{"code": 401, "message": msg})
}

// Signature computes envd's v1 signature of a /files URL.
func Signature(path, op, username, token string, expiration int64) string {
	raw := path + ":" + op + ":" + username + ":" + token
	if expiration != 0 {
		raw += ":" + strconv.FormatInt(expiration, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

func eq(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// tokenOK reports whether a presented token is the expected one; a sandbox
// without a token (want "") accepts none.
func tokenOK(got, want string) bool { return got != "" && want != "" && eq(got, want) }

// keyIdentity checks that the API key sb's tokens are bound to is still
// valid (not revoked, its principal not gone), answering 401 when it is
// not, and returns its identity: the actor of a request made with the
// sandbox's tokens. The key is read from the store on every request, as
// API keys are: a revocation cuts the tokens from the next request on,
// with no cache.
func (s *Server) keyIdentity(w http.ResponseWriter, r *http.Request, sb store.Sandbox) (auth.Identity, bool) {
	ident, err := s.cfg.Auth.KeyIdentity(r.Context(), sb.EnvdKey)
	switch {
	case err == nil:
		return ident, true
	case errors.Is(err, auth.ErrUnauthenticated):
		s.log.Warn("e2b: envd token of a revoked api key", "sandbox", sb.ID, "key", sb.EnvdKey, "remote", r.RemoteAddr)
		unauthorized(w, "the API key this access token was issued through is no longer valid; connect to the sandbox again with a valid key")
	default:
		s.log.Error("e2b: check envd key", "sandbox", sb.ID, "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]any{"code": 500, "message": "internal error"})
	}
	return auth.Identity{}, false
}

// checkSignature checks a signed /files request against token: "" when
// good, else envd's message.
func checkSignature(r *http.Request, token string) string {
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return "missing signature query parameter"
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	} else if r.Method != http.MethodGet {
		return "invalid signature"
	}
	var exp int64
	if v := q.Get("signature_expiration"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return "invalid signature expiration"
		}
		exp = n
	}
	if !eq(sig, Signature(q.Get("path"), op, q.Get("username"), token, exp)) {
		return "invalid signature"
	}
	if exp != 0 && exp < time.Now().Unix() {
		return "signature is already expired"
	}
	return ""
}

// findBySignature routes a header-less signed /files request: the live
// sandbox whose token produced the signature.
//
// A signature names no sandbox, so the lookup tries each running sandbox's
// token: linear in running sandboxes, and reachable without a key. Two
// things bound it: a hit is remembered (signature -> sandbox; a URL is
// usually fetched more than once), and scans are rate limited daemon-wide
// (signedScanRate per second); beyond that the request gets 429. Host
// routing (e2b_domain) puts the sandbox id in the URL and needs no scan.
func (s *Server) findBySignature(r *http.Request) (id string, ok bool, limited bool) {
	sig := r.URL.Query().Get("signature")
	if sig == "" {
		return "", false, false
	}
	if v, hit := s.signed.Load(sig); hit {
		id := v.(string)
		if sb, err := s.cfg.Manager.Get(r.Context(), id); err == nil && checkSignature(r, s.EnvdToken(sb)) == "" {
			return id, true, false
		}
	}
	if !s.scans.Allow() {
		return "", false, true
	}
	id, ok = s.scanSignature(r)
	if ok {
		if s.signedCount.Add(1) > signedCacheMax {
			s.signed.Clear()
			s.signedCount.Store(0)
		}
		s.signed.Store(sig, id)
	}
	return id, ok, false
}

// Bounds of the signed-URL lookup.
const (
	signedScanRate  = 50 // scans per second, daemon-wide
	signedScanBurst = 100
	signedCacheMax  = 4096 // remembered signatures before the cache is reset
)

func (s *Server) scanSignature(r *http.Request) (string, bool) {
	f := store.SandboxFilter{States: []string{string(sandbox.StateRunning)}, Limit: store.MaxPageSize}
	for {
		page, next, err := s.cfg.Manager.List(r.Context(), f)
		if err != nil {
			s.log.Error("e2b: list sandboxes for a signed url", "err", err)
			return "", false
		}
		for _, sb := range page {
			token := s.EnvdToken(sb)
			if token == "" {
				continue
			}
			if msg := checkSignature(r, token); msg == "" || msg == "signature is already expired" {
				return sb.ID, true
			}
		}
		if next == "" {
			return "", false
		}
		f.PageToken = next
	}
}

// proxy serves sandbox traffic: route, authenticate with the sandbox's
// token, reverse-proxy to its agent, audit.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request) {
	idH, portH := r.Header.Get(hdrSandboxID), r.Header.Get(hdrSandboxPort)
	var id string
	var port int
	switch {
	case idH != "" || portH != "":
		if idH == "" || portH == "" {
			http.Error(w, "missing header", http.StatusBadRequest)
			return
		}
		p, err := strconv.Atoi(portH)
		if err != nil || p <= 0 || p > 65535 {
			http.Error(w, "invalid sandbox port", http.StatusBadRequest)
			return
		}
		id, port = idH, p
	default:
		if hid, hp, ok := s.hostRoute(r.Host); ok {
			id, port = hid, hp
		} else if sid, ok, limited := s.findBySignature(r); ok {
			id, port = sid, PortEnvd
		} else if limited {
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusTooManyRequests, map[string]any{"code": 429, "message": "too many signed URL lookups; retry, or use host routing"})
			return
		} else {
			notFound502(w, "")
			return
		}
	}
	sb, err := s.cfg.Manager.Get(r.Context(), id)
	if err == nil && sandbox.State(sb.State) == sandbox.StatePaused {
		// autoResume: traffic to a paused sandbox resumes it (E2B).
		if woken, werr := s.cfg.Manager.Wake(r.Context(), sb); werr == nil {
			sb = woken
		} else {
			s.log.Warn("e2b: auto-resume", "sandbox", id, "err", werr)
		}
	}
	if err != nil || sandbox.State(sb.State) != sandbox.StateRunning {
		if err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			s.log.Error("e2b: look up sandbox", "sandbox", id, "err", err)
		}
		notFound502(w, id)
		return
	}
	traceProxy(r, sb.ID, port) // telemetry.go
	if port != PortEnvd && port != PortCode {
		s.userPort(w, r, sb, port)
		return
	}
	path := r.URL.Path
	authBy := "token"
	token := s.EnvdToken(sb)
	switch {
	case port == PortEnvd && internalRoutes[path]:
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "This endpoint is reserved for internal use and cannot be called from outside the sandbox.", "path": path, "code": 404})
		return
	case port == PortEnvd && !envdRoute(path), port == PortCode && !codeRoute(path):
		writeJSON(w, http.StatusNotFound, map[string]any{"message": "not found", "path": path, "code": 404})
		return
	case path == "/health" && r.Method == http.MethodGet:
		authBy = "none"
	case port == PortEnvd && path == "/files":
		if h := r.Header.Get(hdrAccessToken); h != "" {
			if !tokenOK(h, token) {
				unauthorized(w, "access token present in header but does not match")
				return
			}
		} else {
			if msg := checkSignature(r, token); msg != "" || token == "" {
				if msg == "" {
					msg = "invalid signature"
				}
				unauthorized(w, msg)
				return
			}
			authBy = "signature"
		}
	case port == PortEnvd:
		if !tokenOK(r.Header.Get(hdrAccessToken), token) {
			unauthorized(w, "unauthorized access, please provide a valid access token or method signing if supported")
			return
		}
	default: // code interpreter
		if !tokenOK(r.Header.Get(hdrAccessToken), token) && !tokenOK(r.Header.Get(hdrTraffic), s.TrafficToken(sb)) {
			writeJSON(w, http.StatusForbidden, map[string]any{"sandboxId": id, "code": 403,
				"message": "Sandbox is secured with traffic access token. Provide the envd or traffic access token."})
			return
		}
	}
	// A token, or a URL signed with one, works only while the API key it is
	// bound to is valid.
	var ident auth.Identity
	if authBy != "none" {
		var ok bool
		if ident, ok = s.keyIdentity(w, r, sb); !ok {
			return
		}
	}
	// The acting user: the signed one for a signed URL, else the one the
	// token holder names (any user, as with envd).
	user := ""
	if authBy == "signature" {
		user = r.URL.Query().Get("username")
	} else if authBy == "token" {
		u, err := requestUser(r.Header)
		if err != nil {
			unauthorized(w, "invalid user: the Authorization header must be one \"Basic base64(user:)\"")
			return
		}
		user = u
	}
	if port == PortEnvd && path == "/metrics" && r.Method == http.MethodGet {
		s.envdMetrics(w, r, sb)
		return
	}
	// The governed path: describe the request's actions (reading, bounded,
	// the body that names them and forwarding the same bytes) and decide
	// each before anything reaches the agent.
	var (
		govDetail  map[string]any
		govDecided []govern.Decided
	)
	if authBy != "none" && s.cfg.Govern != nil {
		var ok bool
		if govDetail, govDecided, ok = s.governProxied(w, r, sb, ident, path, port, user, authBy); !ok {
			return
		}
	}
	agent, err := s.cfg.Manager.Agent(r.Context(), id)
	if err != nil {
		notFound502(w, id)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "agent"
			pr.Out.Host = "agent"
			// Exactly the path the allow-list matched, and one value per
			// query key; no client credential, only the decided user.
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
			pr.Out.URL.RawQuery = canonicalQuery(r.URL.Query(), authBy == "signature", user)
			stripCredentials(pr.Out.Header)
			stripCredentials(pr.Out.Trailer)
			if user != "" && authBy == "token" {
				pr.Out.Header.Set("Authorization", sysuser.BasicAuth(user))
			}
		},
		Transport:     agent.HTTP.Transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.log.Warn("e2b: proxy to agent", "sandbox", id, "path", r.URL.Path, "err", err)
			if !sw.started() {
				portClosed502(w, id, port)
			}
		},
	}
	if authBy != "none" { // health probes are not audited
		// Deferred: a stream cut mid-way (the client went away, the
		// sandbox died) ends in ReverseProxy's panic(http.ErrAbortHandler),
		// and is audited all the same.
		defer func() {
			v := recover()
			s.auditProxied(r, sw, sb, path, port, authBy, v != nil, govDetail, govDecided)
			if v != nil {
				panic(v)
			}
		}()
	}
	rp.ServeHTTP(sw, r)
}

// auditProxied appends the e2b.envd event of a proxied request. An aborted
// response (its body cut after the status was sent) records who ended it:
// "client" when the client went away (the request's context is done),
// else "sandbox" (the agent's side broke: the sandbox died or was
// stopped), which is an error.
func (s *Server) auditProxied(r *http.Request, sw *statusWriter, sb store.Sandbox, path string, port int, authBy string, aborted bool,
	extra map[string]any, governed []govern.Decided) {
	status := sw.status
	if status == 0 {
		status = http.StatusOK
	}
	outcome := govern.AuditSuccess
	if status >= 400 {
		outcome = govern.AuditError
	}
	detail := map[string]any{"method": r.Method, "path": path, "port": port, "status": status, "auth": authBy}
	for k, v := range extra {
		detail[k] = v
	}
	if aborted {
		if r.Context().Err() != nil {
			detail["aborted"] = "client"
		} else {
			detail["aborted"] = "sandbox"
			outcome = govern.AuditError
		}
	}
	principal := sb.Owner
	if p, ok := extra["principal"].(string); ok {
		principal = p
		delete(detail, "principal")
	}
	s.appendAudit(r.Context(), sw.Header().Get("X-Request-Id"), principal, "e2b.envd", sb.ID, outcome, detail, governed)
}

// statusWriter records the response status; it passes Flush on.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (sw *statusWriter) WriteHeader(code int) {
	if sw.status == 0 {
		sw.status = code
	}
	sw.ResponseWriter.WriteHeader(code)
}

func (sw *statusWriter) Write(b []byte) (int, error) {
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
	return sw.ResponseWriter.Write(b)
}

func (sw *statusWriter) Flush() {
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
	http.NewResponseController(sw.ResponseWriter).Flush()
}

func (sw *statusWriter) Unwrap() http.ResponseWriter { return sw.ResponseWriter }

func (sw *statusWriter) started() bool { return sw.status != 0 }
