package e2b

import (
	"errors"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
)

// User ports (getHost(port)): any port other than envd's and the code
// interpreter's is reverse-proxied to 127.0.0.1:port inside the sandbox,
// through the agent (agentclient.DialPort), HTTP and WebSocket.
//
// Warden is secure by default where E2B is not: a user port needs the
// sandbox's traffic access token (header e2b-traffic-access-token, or the
// envd access token) unless the sandbox was created with
// network.allowPublicTraffic: true. E2B's default is public; the token is in
// every create response, so clients that send it work either way.

// publicSandboxes remembers which sandboxes asked for public user ports.
// In memory: after a daemon restart every sandbox's ports are private
// again (the safe direction).
type publicSandboxes struct {
	mu sync.Mutex
	m  map[string]bool
}

func (p *publicSandboxes) set(id string, public bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]bool{}
	}
	if public {
		p.m[id] = true
	} else {
		delete(p.m, id)
	}
}

func (p *publicSandboxes) is(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[id]
}

// userPort serves traffic to a user port of a running sandbox.
func (s *Server) userPort(w http.ResponseWriter, r *http.Request, sb store.Sandbox, port int) {
	id := sb.ID
	var ident auth.Identity
	via := "public"
	if !s.public.is(id) {
		if !tokenOK(r.Header.Get(hdrTraffic), s.TrafficToken(sb)) && !tokenOK(r.Header.Get(hdrAccessToken), s.EnvdToken(sb)) {
			writeJSON(w, http.StatusForbidden, map[string]any{"sandboxId": id, "code": 403,
				"message": "Sandbox is secured with traffic access token. Provide the envd or traffic access token."})
			return
		}
		var ok bool
		if ident, ok = s.keyIdentity(w, r, sb); !ok {
			return
		}
		via = "token"
	}
	// The governed path: each request (a WebSocket: the one that opens
	// it) is a port.preview action, as through Warden's own API.
	if !s.governPort(w, r, sb, ident, port, via) {
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = id + ":" + strconv.Itoa(port)
			pr.Out.Host = r.Host
			pr.SetXForwarded()
			for _, h := range []string{hdrSandboxID, hdrSandboxPort, hdrAccessToken, hdrTraffic, "X-Api-Key"} {
				pr.Out.Header.Del(h)
			}
		},
		Transport:     s.cfg.Manager.PortTransport(),
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var pe *agentclient.PortError
			if !errors.As(err, &pe) {
				s.log.Debug("e2b: proxy to user port", "sandbox", id, "port", port, "err", err)
			}
			if !sw.started() {
				portClosed502(w, id, port)
			}
		},
	}
	rp.ServeHTTP(sw, r)
	if sw.status >= 400 || sw.status == 0 {
		return
	}
	// Connections to user ports are audited once per request that opened a
	// connection upgrade (WebSocket), not per HTTP request (a web app makes
	// many); denials above are answered without an audit event, as envd's.
	if sw.status == http.StatusSwitchingProtocols {
		s.cfg.Audit.Write(r.Context(), govern.AuditEvent{
			Principal: "system", Name: "e2b.port.upgrade", Target: id, Outcome: govern.AuditSuccess,
			Detail: map[string]any{"port": port},
		})
	}
}
