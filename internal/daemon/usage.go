package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/store"
)

// Files of the signed audit checkpoints in the state directory.
const (
	CheckpointKeyFile   = "audit-checkpoint.key"  // Ed25519 seed, root-only
	CheckpointPubFile   = "audit-checkpoint.pub"  // the verifier key, public
	CheckpointNotesFile = "audit-checkpoints.txt" // every signed checkpoint
)

// DefaultCheckpointInterval is how often a signed checkpoint is made.
const DefaultCheckpointInterval = time.Hour

// startCheckpoints starts the publisher of signed audit checkpoints
// (docs/security.md): one at start when the log grew, then every
// usage.checkpoint_interval, and a last one at shutdown (stop).
func (d *daemon) startCheckpoints(ctx context.Context) (stop func(), err error) {
	cfg := d.cfg
	interval := cfg.Usage.CheckpointInterval
	if interval < 0 {
		return func() {}, nil
	}
	if interval == 0 {
		interval = DefaultCheckpointInterval
	}
	cps, ok := d.st.(audit.CheckpointStore)
	if !ok {
		return nil, fmt.Errorf("audit checkpoints: the store cannot keep them")
	}
	seed, err := audit.LoadOrCreateKey(filepath.Join(cfg.StateDir, CheckpointKeyFile))
	if err != nil {
		return nil, fmt.Errorf("audit checkpoints: %w", err)
	}
	host, _ := os.Hostname()
	pub, err := audit.NewPublisher(ctx, audit.PublisherConfig{Store: d.st, Checkpoints: cps, Seed: seed,
		Origin: "warden-audit/" + host, File: filepath.Join(cfg.StateDir, CheckpointNotesFile),
		PublicKeyFile: filepath.Join(cfg.StateDir, CheckpointPubFile), URL: cfg.Usage.CheckpointURL,
		Interval: interval, Log: d.log.With("subsystem", "audit")})
	if err != nil {
		return nil, err
	}
	if _, _, err := pub.Checkpoint(ctx); err != nil {
		d.log.Error("audit checkpoint", "err", err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { pub.Run(rctx) })
	wg.Go(func() { d.runAuditRetention(rctx, pub) }) // auditretention.go
	return func() { cancel(); wg.Wait() }, nil
}

// llmAdmin is the API's view of the LLM gateway (/v1/llm, /v1/usage);
// the gateway is built after the API.
type llmAdmin struct{ d *daemon }

var errNoLLM = errors.New("the LLM gateway is not running")

func (a llmAdmin) Prices() ([]config.LLMPrice, string) {
	if a.d.llm == nil {
		return nil, "config"
	}
	return a.d.llm.Prices()
}

func (a llmAdmin) Budgets() ([]config.LLMBudget, string) {
	if a.d.llm == nil {
		return nil, "config"
	}
	return a.d.llm.Budgets()
}

func (a llmAdmin) SetPrices(ctx context.Context, p []config.LLMPrice, by string) error {
	if a.d.llm == nil {
		return errNoLLM
	}
	return a.d.llm.SetPrices(ctx, p, by)
}

func (a llmAdmin) SetBudgets(ctx context.Context, b []config.LLMBudget, by string) error {
	if a.d.llm == nil {
		return errNoLLM
	}
	return a.d.llm.SetBudgets(ctx, b, by)
}

func (a llmAdmin) ListUsage(ctx context.Context, f store.LLMUsageFilter) ([]store.LLMUsage, error) {
	if a.d.llm == nil {
		return nil, errNoLLM
	}
	return a.d.llm.ListUsage(ctx, f)
}
