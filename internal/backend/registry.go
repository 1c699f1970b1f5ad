package backend

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// Params is what wardend gives every backend it builds. RunDir and StateDir
// are the daemon's own directories: a backend keeps its files under names of
// its own in them (by convention RunDir/<id> and StateDir/disks/<id>), so
// that sandboxes a previous daemon left behind are found again.
type Params struct {
	RunDir    string // per-boot runtime state (/run/warden)
	StateDir  string // persistent state (/var/lib/warden)
	AgentPath string // the warden-agent binary; empty: next to wardend, then $PATH
	Log       *slog.Logger
}

// Registration is how a backend makes itself known. Its package calls
// Register from init; wardend builds every registered backend that its
// configuration does not disable, so adding a backend is its package plus
// one import line in internal/backend/all (see docs/architecture.md).
type Registration struct {
	ID string
	// New builds the backend. decode fills the backend's own configuration
	// struct from its section of wardend's configuration (backends.<ID>, in
	// YAML, unknown keys refused); it leaves the struct untouched when the
	// section is absent. The backend's defaults go in before decode.
	New func(p Params, decode func(v any) error) (Backend, error)
	// Preflight reports why the host cannot run this backend, or nil. The
	// daemon calls it before New.
	Preflight func() error
	// Required makes wardend refuse to start where this backend cannot
	// run, even when it is not the default one.
	Required bool
	// Retry, when positive, says the backend may become runnable while the
	// daemon runs (a runtime installed afterwards, such as gvisor's runsc):
	// wardend serves without it and tries Preflight and New again at this
	// interval, and at once when a create asks for it, until it succeeds.
	Retry time.Duration
	// Fingerprint, optional with Retry, identifies what Preflight looks at
	// (a binary's path, size and mtime): an unchanged fingerprint is
	// preflighted at most once a second on creates, a new one at once.
	Fingerprint func() string
}

// OrphanCleaner is implemented by backends that keep sandboxes on the host
// where a crash between backend create and the store's write can leave one
// that no store record owns. After restart recovery the daemon lists the
// orphans, re-attaches and deletes those with a readable handle, and purges
// the rest (see CleanOrphans).
type OrphanCleaner interface {
	// Orphans lists sandboxes the backend finds on the host but does not
	// hold (Recover was not called for them).
	Orphans() ([]string, error)
	// ReadHandle reads the handle the backend recorded for sandbox id.
	ReadHandle(id string) (Handle, error)
	// Purge frees whatever is left of sandbox id when no handle works.
	Purge(ctx context.Context, id string) error
}

// Sweeper is implemented by backends that keep host resources apart from
// sandboxes' directories (disk images, snapshots) that a crash can leave
// without an owner. The daemon calls Sweep after restart recovery and
// orphan cleanup; it frees what no live sandbox owns.
type Sweeper interface {
	Sweep(ctx context.Context) error
}

// CleanOrphans frees b's orphaned sandboxes and swept resources, if b
// implements OrphanCleaner or Sweeper; it logs what it removes and what it
// cannot.
func CleanOrphans(ctx context.Context, b Backend, log *slog.Logger) {
	if oc, ok := b.(OrphanCleaner); ok {
		ids, err := oc.Orphans()
		if err != nil {
			log.Warn("look for orphaned sandboxes", "backend", b.ID(), "err", err)
		}
		for _, id := range ids {
			h, err := oc.ReadHandle(id)
			if err == nil && b.Recover(ctx, h) == nil {
				if err := b.Delete(ctx, h); err != nil {
					log.Warn("remove orphaned sandbox", "backend", b.ID(), "sandbox", id, "err", err)
					continue
				}
			} else if err := oc.Purge(ctx, id); err != nil {
				log.Warn("remove orphaned sandbox", "backend", b.ID(), "sandbox", id, "err", err)
				continue
			}
			log.Info("removed orphaned sandbox", "backend", b.ID(), "sandbox", id)
		}
	}
	if sw, ok := b.(Sweeper); ok {
		if err := sw.Sweep(ctx); err != nil {
			log.Warn("remove leftover backend resources", "backend", b.ID(), "err", err)
		}
	}
}

var (
	regMu sync.Mutex
	reg   = map[string]Registration{}
)

// Register adds a backend. Call it from init; a duplicate or incomplete
// registration is a programming error and panics at program start.
func Register(r Registration) {
	regMu.Lock()
	defer regMu.Unlock()
	if r.ID == "" || r.New == nil {
		panic("backend: registration without an id or New")
	}
	if _, dup := reg[r.ID]; dup {
		panic("backend: duplicate registration of " + r.ID)
	}
	reg[r.ID] = r
}

// Lookup returns the registration for id.
func Lookup(id string) (Registration, bool) {
	regMu.Lock()
	defer regMu.Unlock()
	r, ok := reg[id]
	return r, ok
}

// IDs lists registered backends in order.
func IDs() []string {
	regMu.Lock()
	defer regMu.Unlock()
	ids := make([]string, 0, len(reg))
	for id := range reg {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// CheckID reports whether id names a registered backend, with an error that
// lists the registered ones.
func CheckID(id string) error {
	if _, ok := Lookup(id); ok {
		return nil
	}
	return fmt.Errorf("unknown backend %q (this build has: %v)", id, IDs())
}
