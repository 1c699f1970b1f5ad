package e2b

import (
	"errors"
	"net/http"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/sandbox"
)

// forkJSON is E2B's SandboxForkResult: exactly one of sandbox or error.
type forkJSON struct {
	Sandbox *sandboxJSON `json:"sandbox,omitempty"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// fork is E2B's POST /sandboxes/{id}/fork ({timeout?, count?}): Warden's
// fork (gvisor; a backend that cannot fork answers 409, as Warden's own
// API does). The forks run what the source runs now, each with its own
// files; they get forked_from=<source id> in their metadata. Warden makes
// all of them or none, so a failure is the whole call's error (E2B's
// per-fork error entries never appear); 201 with one Sandbox per fork.
func (s *Server) fork(w http.ResponseWriter, c *call) error {
	var q struct {
		Timeout *int64 `json:"timeout"`
		Count   *int   `json:"count"`
	}
	if err := decode(c.r, &q); err != nil {
		return err
	}
	n := 1
	if q.Count != nil {
		n = *q.Count
	}
	var timeout time.Duration
	if q.Timeout != nil {
		// As on create: an explicit 0 is refused by the manager, not
		// read as its default.
		timeout = time.Duration(*q.Timeout) * time.Second
		if *q.Timeout == 0 {
			timeout = -time.Second
		}
		c.detail["timeout_seconds"] = *q.Timeout
	}
	id := c.r.PathValue("id")
	src, err := s.sandboxFor(c, id)
	if err != nil {
		return err
	}
	c.detail["count"] = n
	if sandbox.State(src.State) != sandbox.StateRunning {
		return errf(http.StatusConflict, "sandbox %q is %s: only a running sandbox can be forked", id, src.State)
	}
	// A fork is sandbox.lifecycle op fork, as through Warden's own API
	// (the source's template is sandbox.template).
	var timeoutSeconds int64
	if q.Timeout != nil {
		timeoutSeconds = *q.Timeout
	}
	if err := s.governLifecycle(c, src, govern.NewLifecycle(govern.OpFork, timeoutSeconds, int64(n), false)); err != nil {
		return err
	}
	forks, err := s.cfg.Manager.Fork(c.r.Context(), src.ID, sandbox.ForkRequest{Owner: c.ident.Principal.ID, N: n, Timeout: timeout})
	if errors.Is(err, backend.ErrUnsupported) {
		return &apiError{status: http.StatusConflict, message: "this sandbox's Warden backend cannot fork sandboxes (gvisor can): " + err.Error(), cause: err}
	}
	if err != nil {
		return err
	}
	out := make([]forkJSON, 0, len(forks))
	ids := make([]string, 0, len(forks))
	for _, f := range forks {
		sbj, err := s.toSandbox(c, f)
		if err != nil {
			return err
		}
		out = append(out, forkJSON{Sandbox: &sbj})
		ids = append(ids, f.ID)
	}
	c.target = src.ID
	c.detail["forks"] = ids
	writeJSON(w, http.StatusCreated, out)
	return nil
}
