package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/store"
)

// retentionInterval is how often audit and usage retention run (and once
// at start).
const retentionInterval = time.Hour

// runAuditRetention deletes audit events older than audit.retention, at
// start and hourly until ctx ends (docs/security.md, "Audit retention"):
// the publisher checks what it deletes against the signed checkpoints
// and leaves an anchor that keeps the rest verifiable.
func (d *daemon) runAuditRetention(ctx context.Context, pub *audit.Publisher) {
	r := d.cfg.Audit.Retention
	if r <= 0 {
		return
	}
	log := d.log.With("subsystem", "audit")
	for {
		res, err := pub.Prune(ctx, d.alog, time.Now().Add(-r), 0)
		switch {
		case errors.Is(err, context.Canceled):
			return
		case err != nil:
			log.Error("audit retention", "err", err)
		case res.Deleted > 0:
			log.Info("audit retention", "deleted", res.Deleted, "anchor", res.Size)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retentionInterval):
		}
	}
}

// startUsageRetention deletes usage rows older than usage.retention, at
// start and hourly, until stop.
func (d *daemon) startUsageRetention(ctx context.Context) (stop func()) {
	r := d.cfg.Usage.Retention
	us, ok := d.st.(store.UsageRetentionStore)
	if r <= 0 || !ok {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			llm, sb, err := us.PruneUsage(ctx, time.Now().Add(-r))
			switch {
			case errors.Is(err, context.Canceled):
				return
			case err != nil:
				d.log.Error("usage retention", "err", err)
			case llm+sb > 0:
				d.log.Info("usage rows past retention deleted", "llm_usage", llm, "sandbox_usage", sb)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(retentionInterval):
			}
		}
	}()
	return func() { cancel(); <-done }
}
