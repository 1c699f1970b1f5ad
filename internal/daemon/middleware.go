package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/mw"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/network/safedial"
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
			Disabled: c.Disabled}
		for _, k := range c.Kinds {
			m.Kinds = append(m.Kinds, govern.Kind(k))
		}
		mws = append(mws, m)
	}
	// Scripts run in a worker process (wardend mw-worker) with its own
	// memory limit, so a runaway script cannot take wardend down.
	var worker *mw.WorkerOptions
	if mwWorkerCommand != nil {
		argv, err := mwWorkerCommand()
		if err != nil {
			return nil, fmt.Errorf("middleware: find wardend for its worker: %w", err)
		}
		worker = &mw.WorkerOptions{Command: argv, Deny: deny}
	}
	// Secrets are not served to middleware yet (no grant).
	set, err := mw.New(mw.Options{Dial: safedial.Options{Dest: network.NewDestinationPolicy(deny)},
		Log: d.log.With("subsystem", "middleware"), Worker: worker})
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
