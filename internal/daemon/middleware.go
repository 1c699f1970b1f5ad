package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/mw"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/network/safedial"
	"github.com/warden-sandbox/warden/internal/secrets"
)

// MiddlewareFile is the file under the state directory that keeps the
// middleware added through /v1/middleware.
const MiddlewareFile = "middleware.json"

// mwWorkerCommand is the argv of the middleware worker process: wardend
// itself with the hidden mw-worker subcommand. Unit tests, whose binary is
// no wardend, set it to nil: scripts then run in-process.
var mwWorkerCommand = func() ([]string, error) {
	exe, err := os.Executable()
	return []string{exe, mw.WorkerCommand}, err
}

// buildMiddleware compiles the configured middleware (governance.middleware)
// and those added through the API (MiddlewareFile) into the govern stage
// run after the rules; the stage is there even with none, so middleware
// added later runs at once. An unreadable or invalid script stops the
// daemon rather than leaving the path ungoverned.
func (d *daemon) buildMiddleware() (govern.Stage, error) {
	list := d.cfg.Governance.Middleware
	var deny []netip.Prefix
	for _, c := range d.cfg.Network.Deny {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("network.deny %q: %w", c, err)
		}
		deny = append(deny, p)
	}
	mws := make([]mw.Middleware, 0, len(list))
	for _, c := range list {
		script, err := os.ReadFile(c.ScriptFile)
		if err != nil {
			return nil, fmt.Errorf("middleware %s: read script: %w", c.Name, err)
		}
		m := mw.Middleware{Name: c.Name, Script: string(script), OnError: mw.OnError(c.OnError),
			TimeoutMS: c.TimeoutMS, MaxMemoryMB: c.MaxMemoryMB, AllowedDomains: c.AllowedDomains,
			Secrets: c.Secrets, Disabled: c.Disabled}
		for _, k := range c.Kinds {
			m.Kinds = append(m.Kinds, govern.Kind(k))
		}
		mws = append(mws, m)
	}
	// Scripts run in a worker process (wardend mw-worker) with its own
	// memory limit and CPU quota, so a runaway script cannot take wardend
	// down nor a whole core.
	var worker *mw.WorkerOptions
	if mwWorkerCommand != nil {
		argv, err := mwWorkerCommand()
		if err != nil {
			return nil, fmt.Errorf("middleware: find wardend for its worker: %w", err)
		}
		worker = &mw.WorkerOptions{Command: argv, Deny: deny}
	}
	// Secrets: those granted to each middleware in the vault.
	set, err := mw.New(mw.Options{Dial: safedial.Options{Dest: network.NewDestinationPolicy(deny)},
		Log: d.log.With("subsystem", "middleware"), Worker: worker, Secrets: mwSecrets{d}})
	if err != nil {
		return nil, fmt.Errorf("middleware: %w", err)
	}
	reg, err := mw.OpenRegistry(set, filepath.Join(d.cfg.StateDir, MiddlewareFile), mws)
	if err != nil {
		return nil, fmt.Errorf("middleware: %w", err)
	}
	d.mw = set // the MCP gateway runs its post hooks on tool results
	d.mwReg = reg
	return mw.Stage(set), nil
}

// mwPost is the MCP gateway's post hook on tool results: the middleware's
// post hooks for mcp.call; nil without middleware.
func (d *daemon) mwPost() func(context.Context, *govern.Action, []byte) ([]byte, bool, string) {
	if d.mw == nil {
		return nil
	}
	return d.mw.PostJSON
}

// closeMiddleware stops the middleware worker and removes its cgroup.
func (d *daemon) closeMiddleware() {
	if d.mw != nil {
		d.mw.Close()
	}
}

// mwSecrets serves middleware the secrets granted to them in the vault
// (a grant with "middleware"). The vault is opened after the middleware are
// built, before anything runs: it is read at call time.
type mwSecrets struct{ d *daemon }

func (m mwSecrets) MiddlewareSecret(_ context.Context, name, secret string) (string, []string, error) {
	v := m.d.vault
	if v == nil {
		return "", nil, errors.New("this daemon has no secret store")
	}
	val, hosts, err := v.ForMiddleware(name, secret)
	switch {
	case errors.Is(err, secrets.ErrNotGranted):
		return "", nil, fmt.Errorf("not granted to middleware %s (an admin grants one: warden secret grant SECRET-ID --middleware %s)", name, name)
	case errors.Is(err, secrets.ErrRevoked):
		return "", nil, errors.New("revoked")
	case err != nil:
		m.d.log.Warn("middleware secret unreadable", "middleware", name, "secret", secret, "err", err)
		return "", nil, errors.New("cannot be read")
	}
	return string(val), hosts, nil
}
