package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/backend/gvisor"
	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/sandbox"
)

// gvisorRetry is how often the daemon looks for runsc again while the
// gvisor backend is unavailable (scripts/run.sh builds runsc in the
// background while the daemon already serves native sandboxes).
const gvisorRetry = 10 * time.Second

// gvisorProber brings the gvisor backend up once runsc is usable: at
// start, every gvisorRetry, and when a create asks for gvisor. No restart
// is needed when runsc appears.
type gvisorProber struct {
	cfg config.Config
	log *slog.Logger

	mu      sync.Mutex
	mgr     *sandbox.Manager // set once the manager exists; backends are added to it
	gb      *gvisor.Backend
	last    time.Time // of the last failed preflight, which runs runsc
	lastBin string    // the runsc it found: path, size and mtime
	lastErr error
}

// runscID identifies the runsc on PATH (path, size, mtime), "" if none: a
// new or rebuilt runsc is looked at at once, not after the rate limit.
func runscID() string {
	p, err := exec.LookPath("runsc")
	if err != nil {
		return ""
	}
	fi, err := os.Stat(p)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s %d %d", p, fi.Size(), fi.ModTime().UnixNano())
}

// probe returns the gvisor backend, setting it up if runsc has become
// usable since the last look; nil with the reason when it cannot run yet.
// Preflights of an unchanged runsc run at most once a second (each execs
// runsc --version).
func (p *gvisorProber) probe(ctx context.Context) (*gvisor.Backend, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gb != nil {
		return p.gb, nil
	}
	bin := runscID()
	if p.lastErr != nil && bin == p.lastBin && time.Since(p.last) < time.Second {
		return nil, p.lastErr
	}
	p.last, p.lastBin = time.Now(), bin
	if p.lastErr = gvisor.Preflight(); p.lastErr != nil {
		return nil, p.lastErr
	}
	gb, err := gvisor.New(gvisor.Config{RunDir: filepath.Join(p.cfg.RunDir, "gvisor"), AgentPath: p.cfg.AgentPath,
		DirectFS: p.cfg.GVisor.DirectFS, CheckpointDir: filepath.Join(p.cfg.StateDir, "gvisor-checkpoints"),
		DiskDir: filepath.Join(p.cfg.StateDir, "disks", "gvisor")})
	if err != nil {
		p.lastErr = err
		return nil, err
	}
	if medium, why := gb.WritableLayer(); medium == "memory" {
		p.log.Error("SANDBOX DISK IS MEMORY: gvisor sandboxes' writable layers cannot go on disk here and stay in gVisor's memory, charged to their memory limit (a large upload can end a sandbox)", "reason", why)
	}
	p.gb = gb
	if p.mgr != nil { // a late start: Run cleaned up before serving only what it had
		cleanOrphans(ctx, gb, p.log)
		if err := gb.PurgeDisks(); err != nil {
			p.log.Warn("remove leftover gvisor disk images", "err", err)
		}
		if err := gb.PurgeSnapshots(); err != nil {
			p.log.Warn("remove leftover fork snapshots", "err", err)
		}
		p.mgr.AddBackend(gb)
		p.log.Info("the gvisor backend is ready: runsc is installed; sandboxes may ask for isolation gvisor", "backends", p.mgr.Backends())
	}
	return gb, nil
}

// attach hands the prober the manager: a backend found from now on is
// added to it, by a create asking for gvisor or by the retry loop that
// runs until ctx ends or gvisor is ready.
func (p *gvisorProber) attach(ctx context.Context, mgr *sandbox.Manager) {
	p.mu.Lock()
	p.mgr = mgr
	ready := p.gb != nil
	p.mu.Unlock()
	if ready {
		return
	}
	mgr.Probe = func(id string) bool {
		if id != gvisor.ID {
			return false
		}
		gb, _ := p.probe(context.WithoutCancel(ctx))
		return gb != nil
	}
	go func() {
		t := time.NewTicker(gvisorRetry)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if gb, _ := p.probe(ctx); gb != nil {
					return
				}
			}
		}
	}()
}
