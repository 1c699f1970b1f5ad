package daemon

import (
	"context"
	"fmt"
	"sync"

	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/usage"
)

// The sandbox usage meter (internal/usage, docs/usage.md): built before
// the manager, whose hook it is, and run once the manager has re-attached
// the sandboxes of before a restart.

// buildUsageMeter builds the meter over the store's sandbox usage tables.
func (d *daemon) buildUsageMeter(ctx context.Context) error {
	if d.cfg.Usage.SampleInterval < 0 {
		return fmt.Errorf("usage.sample_interval %v: want a positive duration", d.cfg.Usage.SampleInterval)
	}
	us, ok := d.st.(store.SandboxUsageStore)
	if !ok {
		return fmt.Errorf("usage meter: the store cannot keep sandbox usage")
	}
	m, err := usage.New(ctx, usage.Config{Store: us, Principals: d.st, Interval: d.cfg.Usage.SampleInterval,
		Log: d.log.With("subsystem", "usage")})
	if err != nil {
		return fmt.Errorf("usage meter: %w", err)
	}
	d.meter = m
	return nil
}

// usageHook is the manager's Config.Usage (nil without a meter).
func (d *daemon) usageHook() sandbox.UsageHook {
	if d.meter != nil {
		return d.meter
	}
	return nil
}

// startUsageMeter registers the meter's metrics and runs it; the function
// it returns stops it after a last reading.
func (d *daemon) startUsageMeter(ctx context.Context) (stop func()) {
	m := d.meter
	if m == nil {
		return func() {}
	}
	m.SetSource(d.mgr)
	if err := d.srv.RegisterCollector(m); err != nil {
		d.log.Warn("usage meter metrics", "err", err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { m.Run(rctx) })
	return func() {
		cancel()
		wg.Wait()
	}
}
