package interp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
)

// ExecuteRequest is the body of POST /execute (E2B's, plus timeout_ms).
type ExecuteRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id,omitempty"`
	Language  string            `json:"language,omitempty"`
	EnvVars   map[string]string `json:"env_vars,omitempty"`
	TimeoutMS int64             `json:"timeout_ms,omitempty"`
}

// CreateRequest is the body of POST /contexts.
type CreateRequest struct {
	Language string `json:"language,omitempty"`
	Cwd      string `json:"cwd,omitempty"`
}

const maxBody = 16 << 20

func plain(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	io.WriteString(w, msg)
}

func fail(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		plain(w, http.StatusNotFound, trimSentinel(err, ErrNotFound))
	case errors.Is(err, ErrBadRequest), errors.Is(err, sysuser.ErrUnknownUser):
		plain(w, http.StatusBadRequest, trimSentinel(err, ErrBadRequest))
	default:
		plain(w, http.StatusInternalServerError, err.Error())
	}
}

// trimSentinel drops the "sentinel: " prefix, so a 404 reads "Context X not
// found" as E2B's does.
func trimSentinel(err, sentinel error) string {
	s, p := err.Error(), sentinel.Error()+": "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// ActingUserHeader, sent with "1" by Warden's own API, asks for the
// sandbox's default user when the request names none. Without it and
// without an Authorization header (E2B's code-interpreter clients send
// neither), interpreters run as root, as in E2B's template.
const ActingUserHeader = "X-Warden-Acting-User"

// user returns the acting user of r and whether the interpreter runs as that
// user (explicit) or as root with that user's home as its default cwd.
func (s *Service) user(r *http.Request) (*sysuser.User, bool, error) {
	u, err := sysuser.FromRequest(r.Header, s.cfg.DefaultUser)
	if err != nil && !errors.Is(err, sysuser.ErrUnknownUser) {
		return nil, false, err
	}
	explicit := r.Header.Get("Authorization") != "" || r.Header.Get(ActingUserHeader) == "1"
	return u, explicit, err
}

func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: invalid JSON body: %v", ErrBadRequest, err)
	}
	return nil
}

func (s *Service) serveExecute(w http.ResponseWriter, r *http.Request) {
	var q ExecuteRequest
	if err := decode(r, &q); err != nil {
		fail(w, err)
		return
	}
	if q.ContextID != "" && q.Language != "" {
		plain(w, http.StatusBadRequest, "You can only specify either context_id or language, not both")
		return
	}
	if q.TimeoutMS < 0 {
		plain(w, http.StatusBadRequest, "timeout_ms must not be negative")
		return
	}
	s.startDefaults(r)
	var c *Context
	var err error
	if q.ContextID != "" {
		c, err = s.Get(q.ContextID)
	} else {
		var u *sysuser.User
		var explicit bool
		if u, explicit, err = s.user(r); err == nil {
			c, err = s.Default(u, explicit, q.Language)
		}
	}
	var un *UnavailableError
	if errors.As(err, &un) {
		// As a missing TypeScript compiler is: the run's error, which
		// E2B's SDK shows as execution.error (a status would lose the
		// message).
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		enc.Encode(Event{Type: "error", Name: un.Name(), Value: un.Message, Traceback: un.Name() + ": " + un.Message})
		enc.Encode(Event{Type: "end_of_execution"})
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	fl, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	started := false
	emit := func(ev Event) {
		if !started {
			started = true
			w.WriteHeader(http.StatusOK)
		}
		enc.Encode(ev) // a failure means the client went away: the run is interrupted
		if fl != nil {
			fl.Flush()
		}
	}
	err = c.Run(r.Context(), RunRequest{Code: q.Code, Env: q.EnvVars, Timeout: time.Duration(q.TimeoutMS) * time.Millisecond}, emit)
	if err != nil && !started {
		fail(w, err)
	}
}

func (s *Service) serveList(w http.ResponseWriter, r *http.Request) {
	s.startDefaults(r)
	writeJSON(w, s.List())
}

// startDefaults creates the default contexts on the first request, with the
// acting user's home as their cwd.
func (s *Service) startDefaults(r *http.Request) {
	if u, _, err := s.user(r); err == nil {
		s.StartDefaults(u)
	}
}

func (s *Service) serveCreate(w http.ResponseWriter, r *http.Request) {
	var q CreateRequest
	if err := decode(r, &q); err != nil {
		fail(w, err)
		return
	}
	u, explicit, err := s.user(r)
	if err != nil {
		fail(w, err)
		return
	}
	s.StartDefaults(u)
	c, err := s.Create(u, explicit, q.Language, q.Cwd)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, c.Info())
}

func (s *Service) serveRestart(w http.ResponseWriter, r *http.Request) {
	c, err := s.Get(r.PathValue("id"))
	if err == nil {
		err = c.Restart()
	}
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, c.Info())
}

func (s *Service) serveInterrupt(w http.ResponseWriter, r *http.Request) {
	c, err := s.Get(r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	c.Interrupt()
	writeJSON(w, c.Info())
}

func (s *Service) serveRemove(w http.ResponseWriter, r *http.Request) {
	if err := s.Remove(r.PathValue("id")); err != nil {
		fail(w, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}
