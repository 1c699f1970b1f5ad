package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"os"

	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/mw"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/network/safedial"
)

// buildMiddleware compiles the configured middleware (governance.middleware)
// into a govern stage run after the rules; nil when none is configured. An
// unreadable or invalid script stops the daemon rather than leaving the
// path ungoverned.
func (d *daemon) buildMiddleware() (govern.Stage, error) {
	list := d.cfg.Governance.Middleware
	if len(list) == 0 {
		return nil, nil
	}
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
	// Secrets are not served to config-file middleware yet (no grant).
	set, err := mw.New(mw.Options{Dial: safedial.Options{Dest: network.NewDestinationPolicy(deny)},
		Log: d.log.With("subsystem", "middleware")}, mws...)
	if err != nil {
		return nil, fmt.Errorf("middleware: %w", err)
	}
	d.mw = set // the MCP gateway runs its post hooks on tool results
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
