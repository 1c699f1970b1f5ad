package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
)

// presignSig returns the hex HMAC-SHA256 of a presigned URL:
//
//	HMAC(key, method "|" sandbox "|" path "|" user "|" expires)
//
// Only the path may contain '|' (sandbox IDs, user names and the method
// cannot, and expires is digits), so the message is unambiguous.
func (s *Server) presignSig(method, sandboxID, p, user string, expires int64) string {
	m := hmac.New(sha256.New, s.presignKey)
	m.Write([]byte(method + "|" + sandboxID + "|" + p + "|" + user + "|" + strconv.FormatInt(expires, 10)))
	return hex.EncodeToString(m.Sum(nil))
}

// presignRequest is the PresignRequest schema.
type presignRequest struct {
	Path           *string `json:"path"`
	Op             *string `json:"op"`
	ExpiresSeconds *int64  `json:"expires_seconds"`
	User           string  `json:"user"`
}

func (s *Server) presign(w http.ResponseWriter, r *http.Request) error {
	var q presignRequest
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.Path == nil || q.Op == nil {
		return apierr.BadRequest("request body: path and op are required")
	}
	if err := checkPath("path", *q.Path); err != nil {
		return err
	}
	var method string
	var scope auth.Scope
	switch *q.Op {
	case "read":
		method, scope = http.MethodGet, auth.ScopeFilesRead
	case "write":
		method, scope = http.MethodPut, auth.ScopeFilesWrite
	default:
		return apierr.Validation("op: %q is not read or write", truncate(*q.Op, 16))
	}
	lifetime := int64(defaultPresignLifetime)
	if q.ExpiresSeconds != nil {
		lifetime = *q.ExpiresSeconds
		if lifetime < 1 || lifetime > maxPresignLifetime {
			return apierr.Validation("expires_seconds: must be between 1 and %d", maxPresignLifetime)
		}
	}
	if err := checkUser("user", q.User); err != nil {
		return err
	}
	st := stateOf(r)
	st.detail["op"] = *q.Op
	st.detail["path"] = truncate(*q.Path, 512)
	st.detail["expires_seconds"] = lifetime
	if q.User != "" {
		st.detail["user"] = q.User
	}
	if err := s.requireScope(r, scope); err != nil {
		return err
	}
	sb, err := s.sandboxFor(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	// The URL is decided when it is signed: reading or writing the file.
	kind := govern.KindFileRead
	if *q.Op == "write" {
		kind = govern.KindFileWrite
	}
	if err := s.decide(r, &govern.Action{Kind: kind, File: govern.NewFile(*q.Op, *q.Path, "", 0)}); err != nil {
		return err
	}
	id := sb.ID
	exp := s.now().Add(time.Duration(lifetime) * time.Second).Truncate(time.Second)
	v := url.Values{
		"sandbox": {id}, "path": {*q.Path}, "op": {*q.Op}, "user": {q.User},
		"expires": {strconv.FormatInt(exp.Unix(), 10)},
		"sig":     {s.presignSig(method, id, *q.Path, q.User, exp.Unix())},
	}
	return writeJSON(w, http.StatusOK, map[string]any{
		"url":        s.publicBase(r) + "/v1/presigned/files?" + v.Encode(),
		"expires_at": exp.UTC(),
	})
}

// publicBase is the scheme://host prefix of URLs handed to callers.
func (s *Server) publicBase(r *http.Request) string {
	if s.cfg.PublicURL != "" {
		return s.cfg.PublicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// checkPresigned verifies a presigned URL for method and returns its
// sandbox, path and user. A bad, tampered or expired signature is 403.
func (s *Server) checkPresigned(r *http.Request, method, op string) (id, p, user string, err error) {
	q := r.URL.Query()
	id, p, user = q.Get("sandbox"), q.Get("path"), q.Get("user")
	st := stateOf(r)
	st.target = id
	// Attempts with a bad signature are not audited: anyone can make them.
	st.done = true
	if id == "" || q.Get("expires") == "" || q.Get("sig") == "" {
		return "", "", "", apierr.Forbidden("presigned URL: missing sandbox, expires or sig")
	}
	if q.Get("op") != op {
		return "", "", "", apierr.Forbidden("presigned URL: op must be %s for %s", op, method)
	}
	if err := checkPath("path", p); err != nil {
		return "", "", "", err
	}
	if err := checkUser("user", user); err != nil {
		return "", "", "", err
	}
	expires, perr := strconv.ParseInt(q.Get("expires"), 10, 64)
	got, herr := hex.DecodeString(q.Get("sig"))
	want, _ := hex.DecodeString(s.presignSig(method, id, p, user, expires))
	if perr != nil || herr != nil || !hmac.Equal(got, want) || strings.ContainsRune(id, '|') {
		s.log.Warn("presigned URL with a bad signature", "request_id", st.id, "sandbox", truncate(id, 64), "remote", r.RemoteAddr)
		return "", "", "", apierr.Forbidden("presigned URL: bad signature")
	}
	if s.now().Unix() >= expires {
		return "", "", "", apierr.Forbidden("presigned URL: expired")
	}
	st.done = false
	st.detail["path"] = truncate(p, 512)
	if user != "" {
		st.detail["user"] = user
	}
	st.detail["presigned"] = true
	return id, p, user, nil
}

func (s *Server) presignedRead(w http.ResponseWriter, r *http.Request) error {
	id, p, user, err := s.checkPresigned(r, http.MethodGet, "read")
	if err != nil {
		return err
	}
	agent, err := s.mgr.Agent(r.Context(), id)
	if err != nil {
		return err
	}
	return serveFile(w, r, agent, p, user)
}

func (s *Server) presignedWrite(w http.ResponseWriter, r *http.Request) error {
	id, p, user, err := s.checkPresigned(r, http.MethodPut, "write")
	if err != nil {
		return err
	}
	agent, err := s.mgr.Agent(r.Context(), id)
	if err != nil {
		return err
	}
	if err := s.screenPresignedWrite(r, id, p); err != nil { // guard_writes.go
		return err
	}
	e, err := putFile(r, agent, p, user, 0)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, e)
}
