package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
)

// The code interpreter: the agent's E2B-shaped routes (POST /execute,
// /contexts), behind the API's authentication, ownership checks and audit.

// maxCodeTimeout bounds timeout_seconds of a run.
const maxCodeTimeout = 24 * 60 * 60

var codeLanguages = map[string]string{
	"": "python", "python": "python", "py": "python", "python3": "python",
	"javascript": "javascript", "js": "javascript", "node": "javascript",
	"typescript": "typescript", "ts": "typescript",
	"bash": "bash", "sh": "bash",
	"r": "r", "java": "java",
}

// contextIDRE is what a context id may look like (the agent makes 16 hex
// digits; E2B ids are UUIDs).
var contextIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

type codeRunRequest struct {
	Code           string            `json:"code"`
	Language       string            `json:"language,omitempty"`
	ContextID      string            `json:"context_id,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty"`
	User           string            `json:"user,omitempty"`
}

type codeContextRequest struct {
	Language string `json:"language,omitempty"`
	Cwd      string `json:"cwd,omitempty"`
	User     string `json:"user,omitempty"`
}

type codeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// codeHash is the audit log's trace of a cell: never the code itself.
func codeHash(code string) string {
	h := sha256.Sum256([]byte(code))
	return hex.EncodeToString(h[:8])
}

func normalizeLanguage(lang string) (string, error) {
	l, ok := codeLanguages[strings.ToLower(strings.TrimSpace(lang))]
	if !ok {
		return "", apierr.Validation("language: unsupported %q (python, javascript, typescript, bash, r, java)", truncate(lang, 32))
	}
	return l, nil
}

// agentCode sends one request to the agent's code-interpreter routes and
// returns the response when it is 2xx; other answers become API errors
// (the agent answers them in plain text, as E2B's server does).
func agentCode(ctx context.Context, agent *agentclient.Client, method, path, user string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, agentBase+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if user != "" {
		req.Header.Set("Authorization", sysuser.BasicAuth(user))
	} else {
		// Warden's API runs interpreters as the sandbox's user by default
		// (E2B's clients, which name none, get root as in E2B's template);
		// the header is interp.ActingUserHeader.
		req.Header.Set("X-Warden-Acting-User", "1")
	}
	resp, err := agent.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	msg := strings.TrimSpace(string(b))
	switch resp.StatusCode {
	case http.StatusBadRequest:
		return nil, apierr.BadRequest("%s", orMessage(msg, "bad request"))
	case http.StatusNotFound:
		if msg == "404 page not found" { // an agent without the code interpreter
			return nil, apierr.Conflict("the sandbox's agent has no code interpreter (an older agent)")
		}
		return nil, apierr.NotFound("%s", orMessage(msg, "context not found"))
	}
	return nil, &agentclient.HTTPError{Status: resp.StatusCode, Message: msg}
}

func orMessage(msg, def string) string {
	if msg == "" {
		return def
	}
	return truncate(msg, 512)
}

func (s *Server) runCode(w http.ResponseWriter, r *http.Request) error {
	var q codeRunRequest
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.ContextID != "" && q.Language != "" {
		return apierr.Validation("give either context_id or language, not both")
	}
	if q.ContextID != "" && !contextIDRE.MatchString(q.ContextID) {
		return apierr.Validation("context_id: invalid")
	}
	lang := ""
	if q.ContextID == "" {
		var err error
		if lang, err = normalizeLanguage(q.Language); err != nil {
			return err
		}
	}
	if q.TimeoutSeconds < 0 || q.TimeoutSeconds > maxCodeTimeout {
		return apierr.Validation("timeout_seconds: must be between 0 and %d", maxCodeTimeout)
	}
	for k, v := range q.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return apierr.Validation("env: invalid variable %q", truncate(k, 64))
		}
	}
	st := stateOf(r)
	st.target = r.PathValue("id")
	if lang != "" {
		st.detail["language"] = lang
	}
	if q.ContextID != "" {
		st.detail["context_id"] = q.ContextID
	}
	st.detail["code_sha256"] = codeHash(q.Code)
	st.detail["code_bytes"] = len(q.Code)
	if q.User != "" {
		st.detail["user"] = truncate(q.User, 64)
	}
	if q.TimeoutSeconds > 0 {
		st.detail["timeout_seconds"] = q.TimeoutSeconds
	}
	agent, err := s.agentFor(r)
	if err != nil {
		return err
	}
	// A cell run in a code context has language "": the context's is
	// the agent's to know.
	if err := s.decide(r, &govern.Action{Code: &govern.Code{Language: lang, Code: q.Code}}); err != nil {
		return err
	}
	body := map[string]any{"code": q.Code}
	if q.ContextID != "" {
		body["context_id"] = q.ContextID
	} else {
		body["language"] = lang
	}
	if len(q.Env) > 0 {
		body["env_vars"] = q.Env
	}
	if q.TimeoutSeconds > 0 {
		body["timeout_ms"] = q.TimeoutSeconds * 1000
	}
	// The client's context bounds the run: when it goes away the agent
	// interrupts the cell.
	resp, err := agentCode(r.Context(), agent, http.MethodPost, "/execute", q.User, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out := startNDJSON(w)
	s.commitAudit(r, govern.AuditSuccess)
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	ended := false
	for {
		line, rerr := br.ReadBytes('\n')
		if line = bytes.TrimSpace(line); len(line) > 0 {
			var ev map[string]json.RawMessage
			if json.Unmarshal(line, &ev) != nil {
				continue
			}
			if string(ev["type"]) == `"end_of_execution"` {
				ended = true
			}
			if out.send(json.RawMessage(line)) != nil {
				return nil // the client left: the agent interrupts the run
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) && ended {
				return nil
			}
			if r.Context().Err() != nil {
				return nil
			}
			// The agent's stream broke off: say so in the stream's own words.
			out.send(map[string]any{"type": "error", "name": "SandboxError", "value": "the sandbox's agent ended the stream early", "traceback": ""})
			out.send(map[string]any{"type": "unexpected_end_of_execution"})
			return nil
		}
	}
}

func (s *Server) listCodeContexts(w http.ResponseWriter, r *http.Request) error {
	agent, err := s.agentFor(r)
	if err != nil {
		return err
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	resp, err := agentCode(ctx, agent, http.MethodGet, "/contexts", "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var list []codeContext
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return fmt.Errorf("decode agent contexts: %w", err)
	}
	if list == nil {
		list = []codeContext{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"contexts": list})
}

func (s *Server) createCodeContext(w http.ResponseWriter, r *http.Request) error {
	var q codeContextRequest
	if err := decodeJSON(r, &q, false); err != nil {
		return err
	}
	lang, err := normalizeLanguage(q.Language)
	if err != nil {
		return err
	}
	st := stateOf(r)
	st.target = r.PathValue("id")
	st.detail["language"] = lang
	if q.Cwd != "" {
		st.detail["cwd"] = truncate(q.Cwd, 256)
	}
	if q.User != "" {
		st.detail["user"] = truncate(q.User, 64)
	}
	agent, err := s.agentFor(r)
	if err != nil {
		return err
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	resp, err := agentCode(ctx, agent, http.MethodPost, "/contexts", q.User, map[string]string{"language": lang, "cwd": q.Cwd})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var c codeContext
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return fmt.Errorf("decode agent context: %w", err)
	}
	st.detail["context_id"] = c.ID
	return writeJSON(w, http.StatusCreated, c)
}

// codeContextOp runs restart, interrupt or delete on one context.
func (s *Server) codeContextOp(method, op string) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		cid := r.PathValue("ctx")
		st := stateOf(r)
		st.target = r.PathValue("id")
		st.detail["context_id"] = truncate(cid, 128)
		if !contextIDRE.MatchString(cid) {
			return notFoundf("context %s not found", truncate(cid, 128))
		}
		agent, err := s.agentFor(r)
		if err != nil {
			return err
		}
		ctx, cancel := callCtx(r)
		defer cancel()
		path := "/contexts/" + url.PathEscape(cid) + op
		resp, err := agentCode(ctx, agent, method, path, "", nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if method == http.MethodDelete {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
		var c codeContext
		if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
			return fmt.Errorf("decode agent context: %w", err)
		}
		return writeJSON(w, http.StatusOK, c)
	}
}
