package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/sandbox"
)

// backends builds wardend's backends from the registry (package backend):
// every registered backend the configuration does not disable. A backend
// that cannot run here stops the daemon if it is the default or its
// registration is Required; one with a Retry is brought up later, without a
// restart, once it can run (see later); any other is left out with a
// warning.
type backends struct {
	cfg    config.Config
	log    *slog.Logger
	params backend.Params

	built   map[string]backend.Backend // by id
	pending map[string]*later          // may come up later
}

// preflight checks, before the daemon writes anything, that the default
// backend is registered and enabled and that it and every Required backend
// can run here.
func (bs *backends) preflight() error {
	if err := backend.CheckID(bs.cfg.Backend); err != nil {
		return fmt.Errorf("config: backend: %w", err)
	}
	for _, id := range backend.IDs() {
		reg, _ := backend.Lookup(id)
		if id != bs.cfg.Backend && (!reg.Required || bs.cfg.BackendDisabled(id)) || reg.Preflight == nil {
			continue
		}
		if err := reg.Preflight(); err != nil {
			return fmt.Errorf("backend %s cannot run here: %w", id, err)
		}
	}
	return nil
}

// build runs each backend's preflight and constructor.
func (bs *backends) build(ctx context.Context) error {
	if err := backend.CheckID(bs.cfg.Backend); err != nil {
		return fmt.Errorf("config: backend: %w", err)
	}
	bs.built, bs.pending = map[string]backend.Backend{}, map[string]*later{}
	for _, id := range backend.IDs() {
		if bs.cfg.BackendDisabled(id) {
			continue
		}
		reg, _ := backend.Lookup(id)
		b, err := bs.newBackend(reg)
		if err == nil {
			bs.built[id] = b
			continue
		}
		if id == bs.cfg.Backend || reg.Required || reg.Retry <= 0 {
			if id == bs.cfg.Backend || reg.Required {
				return fmt.Errorf("backend %s cannot run here: %w", id, err)
			}
			bs.log.Warn("backend "+id+" cannot run here; it is left out", "reason", err)
			continue
		}
		bs.pending[id] = &later{bs: bs, reg: reg, lastErr: err, last: time.Now(), lastPrint: fingerprint(reg)}
		bs.log.Warn("the "+id+" backend is unavailable for now; sandboxes use the others until it can run (checked again every "+
			reg.Retry.String()+" and at each create that asks for it)", "reason", err)
	}
	return nil
}

// newBackend preflights and builds one backend.
func (bs *backends) newBackend(reg backend.Registration) (backend.Backend, error) {
	if reg.Preflight != nil {
		if err := reg.Preflight(); err != nil {
			return nil, err
		}
	}
	return reg.New(bs.params, bs.cfg.BackendDecoder(reg.ID))
}

// close releases what the built backends hold on the host for the daemon
// itself (io.Closer; native: its sudo fs on kernels before 6.15), at
// shutdown. Sandboxes keep running.
func (bs *backends) close() {
	all := []backend.Backend{}
	for _, b := range bs.built {
		all = append(all, b)
	}
	for _, l := range bs.pending {
		l.mu.Lock()
		if l.b != nil {
			all = append(all, l.b)
		}
		l.mu.Unlock()
	}
	for _, b := range all {
		if c, ok := b.(io.Closer); ok {
			if err := c.Close(); err != nil {
				bs.log.Warn("close backend", "backend", b.ID(), "err", err)
			}
		}
	}
}

// probe is the manager's Probe: it tries to bring up backend id now, if it
// is one that may come up later.
func (bs *backends) probe(ctx context.Context, id string) bool {
	l, ok := bs.pending[id]
	return ok && l.try(ctx, true) == nil
}

// watch retries every pending backend at its interval until it is up or
// ctx ends; the manager must exist (a backend that comes up is added to it).
func (bs *backends) watch(ctx context.Context, mgr *sandbox.Manager) {
	for _, l := range bs.pending {
		l.attach(ctx, mgr)
	}
}

func fingerprint(reg backend.Registration) string {
	if reg.Fingerprint == nil {
		return ""
	}
	return reg.Fingerprint()
}

// later is a backend that could not run when the daemon started and may
// come up while it serves (gvisor when runsc appears).
type later struct {
	bs  *backends
	reg backend.Registration

	mu        sync.Mutex
	mgr       *sandbox.Manager // set by attach; the backend is added to it
	b         backend.Backend  // once up
	last      time.Time        // of the last failed try
	lastPrint string           // the fingerprint then
	lastErr   error
}

// try brings the backend up if it can run now. A create's try (rateLimit)
// of an unchanged fingerprint runs the preflight at most once a second.
func (l *later) try(ctx context.Context, rateLimit bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b != nil {
		return nil
	}
	fp := fingerprint(l.reg)
	if rateLimit && l.lastErr != nil && fp == l.lastPrint && time.Since(l.last) < time.Second {
		return l.lastErr
	}
	l.last, l.lastPrint = time.Now(), fp
	b, err := l.bs.newBackend(l.reg)
	if err != nil {
		l.lastErr = err
		return err
	}
	l.b, l.lastErr = b, nil
	if l.mgr != nil {
		// The daemon cleaned up at start only what it had.
		backend.CleanOrphans(ctx, b, l.bs.log)
		l.mgr.AddBackend(b)
		l.bs.log.Info("the "+l.reg.ID+" backend is ready; sandboxes may ask for it", "backends", l.mgr.Backends())
	}
	return nil
}

// attach hands the manager over and retries every Retry until the backend
// is up or ctx ends.
func (l *later) attach(ctx context.Context, mgr *sandbox.Manager) {
	l.mu.Lock()
	l.mgr = mgr
	b := l.b
	l.mu.Unlock()
	if b != nil { // came up before the manager existed: hand it over now
		backend.CleanOrphans(ctx, b, l.bs.log)
		mgr.AddBackend(b)
		return
	}
	go func() {
		t := time.NewTicker(l.reg.Retry)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if l.try(ctx, false) == nil {
					return
				}
			}
		}
	}()
}
