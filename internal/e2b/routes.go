package e2b

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/warden-sandbox/warden/internal/agentpb/filesystem/filesystempbconnect"
	"github.com/warden-sandbox/warden/internal/agentpb/process/processpbconnect"
)

// What the proxy forwards to a sandbox's agent, and how.
//
// Routes are allow-listed: on envd's port the proxy forwards only the routes
// envd serves to clients (the Connect services process.Process and
// filesystem.Filesystem, /files, /health, /envs; /metrics is answered by the
// proxy itself), on the code interpreter's port only the interpreter's
// routes. The match is on the decoded path exactly as sent (no cleaning:
// "//files", "/files/" and "/x/../files" match nothing), and the request
// goes out with that canonical path, so what the agent routes on is what was
// checked. Everything else is 404: the agent's other routes (/init, /tar,
// /port, /port/connect, and in gVisor sandboxes the host-only /warden/*
// routes, which moreover live on a socket the proxy never dials) are the
// daemon's own.
//
// Credentials never reach the agent. The client's Authorization, Cookie,
// access tokens, API key and routing headers are removed in every
// repetition and spelling (case, "_" for "-"); the acting user the proxy
// has decided on is then sent as one canonical "Authorization: Basic"
// header (token callers, who may act as any user, as with envd) or as the
// signed "username" query (signed URLs, which act exactly as the user they
// were signed for: the sandbox's default user when that was "").

// rpcProcedures are the Connect procedures envd serves.
var rpcProcedures = map[string]bool{
	processpbconnect.ProcessListProcedure:                   true,
	processpbconnect.ProcessConnectProcedure:                true,
	processpbconnect.ProcessStartProcedure:                  true,
	processpbconnect.ProcessUpdateProcedure:                 true,
	processpbconnect.ProcessStreamInputProcedure:            true,
	processpbconnect.ProcessSendInputProcedure:              true,
	processpbconnect.ProcessSendSignalProcedure:             true,
	processpbconnect.ProcessCloseStdinProcedure:             true,
	filesystempbconnect.FilesystemStatProcedure:             true,
	filesystempbconnect.FilesystemMakeDirProcedure:          true,
	filesystempbconnect.FilesystemMoveProcedure:             true,
	filesystempbconnect.FilesystemListDirProcedure:          true,
	filesystempbconnect.FilesystemRemoveProcedure:           true,
	filesystempbconnect.FilesystemWatchDirProcedure:         true,
	filesystempbconnect.FilesystemCreateWatcherProcedure:    true,
	filesystempbconnect.FilesystemGetWatcherEventsProcedure: true,
	filesystempbconnect.FilesystemRemoveWatcherProcedure:    true,
}

// envdRoute reports whether path is a route envd serves to clients.
func envdRoute(path string) bool {
	switch path {
	case "/files", "/health", "/metrics", "/envs":
		return true
	}
	return rpcProcedures[path]
}

// codeRoute reports whether path is a code-interpreter route: /execute,
// /contexts, /contexts/{id}, /contexts/{id}/restart|interrupt, /health.
func codeRoute(path string) bool {
	switch path {
	case "/execute", "/contexts", "/health":
		return true
	}
	rest, ok := strings.CutPrefix(path, "/contexts/")
	if !ok {
		return false
	}
	id, action, hasAction := strings.Cut(rest, "/")
	if !contextID(id) {
		return false
	}
	return !hasAction || action == "restart" || action == "interrupt"
}

// contextID reports whether s can be an interpreter context ID.
func contextID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// credentialHeaders are the request headers that carry a client's
// credentials or routing, by normalised name (see headerName).
var credentialHeaders = map[string]bool{
	"authorization": true, "proxy-authorization": true, "cookie": true, "cookie2": true,
	"x-access-token": true, "e2b-traffic-access-token": true, "x-api-key": true,
	"e2b-sandbox-id": true, "e2b-sandbox-port": true,
}

// headerName normalises a header name for comparison: lower case, "_" as "-".
func headerName(k string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(k)), "_", "-")
}

// stripCredentials removes every credential header from h, whatever its
// spelling.
func stripCredentials(h http.Header) {
	for k := range h {
		if credentialHeaders[headerName(k)] {
			delete(h, k)
		}
	}
}

var errBadUser = errors.New("invalid user")

// requestUser is the user a token-authenticated request asks to act as:
// the one named by its Authorization header ("Basic base64(user:)", as the
// SDKs send), "" (the sandbox's default) without one. More than one
// Authorization header, or one that is not Basic, is refused rather than
// guessed at.
func requestUser(h http.Header) (string, error) {
	var vals []string
	for k, v := range h {
		if headerName(k) == "authorization" {
			vals = append(vals, v...)
		}
	}
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", errBadUser
	}
	scheme, cred, ok := strings.Cut(strings.TrimSpace(vals[0]), " ")
	if !ok || !strings.EqualFold(scheme, "basic") {
		return "", errBadUser
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return "", errBadUser
	}
	name, _, _ := strings.Cut(string(raw), ":")
	if !validUserName(name) {
		return "", errBadUser
	}
	return name, nil
}

// validUserName accepts "" (the default user) and names of printable ASCII
// without separators; the agent looks the name up in the sandbox.
func validUserName(s string) bool {
	if len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f || s[i] == ':' || s[i] == '/' {
			return false
		}
	}
	return true
}

// canonicalQuery re-encodes q with one value per key (the first, which is
// what both the signature check and the agent read). For a signed request
// (signed true) the user is exactly the signed one: username is set to it,
// or removed when it is "", and the signature parameters are dropped.
func canonicalQuery(q url.Values, signed bool, user string) string {
	out := url.Values{}
	for k, v := range q {
		if len(v) > 0 {
			out.Set(k, v[0])
		}
	}
	if signed {
		out.Del("signature")
		out.Del("signature_expiration")
		out.Del("username")
		if user != "" {
			out.Set("username", user)
		}
	}
	return out.Encode()
}
