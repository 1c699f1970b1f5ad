// Package snapshot keeps filesystem snapshots of sandboxes: a named,
// principal-owned capture of a running or paused sandbox's files, taken
// without stopping it, that new sandboxes start from and that can be
// promoted to a template (docs/persistence.md).
//
// A snapshot is a template version in the template store: the captured
// writable layers (one per layer target that holds anything), stacked on
// the layers of the template the sandbox booted from, with that
// template's environment, and the sandbox's user and working directory
// (not the environment given at its create, whose values may be secrets). No tag names it; the snapshot's record (the
// store's snapshots table) does, and keeps it from template garbage
// collection (InUse). Sandboxes start from it as from any template (its
// template id); a promotion tags it.
//
// Creation writes the layers into the template store's temporary
// directory and publishes them by rename, then the manifest, then the
// record; a failure at any step leaves nothing that a collection does not
// remove (Collect runs after it).
package snapshot

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/template"
)

// Errors of the service. They carry their kind (internal/errkind); the
// detail written after them is shown to callers.
var (
	ErrNotFound    = errkind.Sentinel(errkind.NotFound, "snapshot not found", errkind.WithDetail)
	ErrInvalidName = errkind.Sentinel(errkind.Invalid, "invalid snapshot name", errkind.WithDetail)
	ErrNameTaken   = errkind.Sentinel(errkind.Conflict, "snapshot name in use", errkind.WithDetail)
	ErrInUse       = errkind.Sentinel(errkind.Conflict, "snapshot in use", errkind.WithDetail)
	// ErrUnsupported: the sandbox's backend cannot copy its files (gvisor),
	// or its writable layer is out of the host's reach (no disk images).
	ErrUnsupported = errkind.Sentinel(errkind.Invalid, "cannot snapshot this sandbox", errkind.WithDetail)
)

// Sandboxes is what the service needs of the sandbox manager.
type Sandboxes interface {
	CaptureFS(ctx context.Context, id string, dir func(target string) (string, error)) (store.Sandbox, error)
	TemplatesInUse(ctx context.Context) (map[string]bool, error)
}

// Service makes, lists, deletes and promotes snapshots.
type Service struct {
	st   store.SnapshotStore
	tmpl *template.Store
	sbx  Sandboxes
	log  *slog.Logger

	gcMu sync.Mutex // one collection at a time
}

// New returns the service.
func New(st store.SnapshotStore, tmpl *template.Store, sbx Sandboxes, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{st: st, tmpl: tmpl, sbx: sbx, log: log}
}

// nameRE: what a snapshot name may be (as volume names; no ':' or '/', so a
// name never reads as a template reference).
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// CheckName reports whether name may name a snapshot.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: %q: names are 1 to 63 of a-z 0-9 . _ -, starting with a letter or digit", ErrInvalidName, name)
	}
	return nil
}

// newID returns a fresh snapshot id: "snap-" and 16 lower-case base32
// characters (a valid template name, and E2B's templateID shape).
func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	b := make([]byte, 16)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[b[i]&31]
	}
	return "snap-" + string(b)
}

// Create captures sandbox sandboxID, running or paused, as owner's snapshot
// called name ("" names it by its id). The sandbox keeps running (it is
// frozen while its files are copied). The caller has checked that owner
// may act on the sandbox.
func (s *Service) Create(ctx context.Context, owner, sandboxID, name string) (store.Snapshot, error) {
	return s.create(ctx, owner, sandboxID, name, false)
}

// CreateWithMemory is Create that also keeps a memory image of the
// sandbox (memory.go), which must be running on a backend that can.
func (s *Service) CreateWithMemory(ctx context.Context, owner, sandboxID, name string) (store.Snapshot, error) {
	return s.create(ctx, owner, sandboxID, name, true)
}

func (s *Service) create(ctx context.Context, owner, sandboxID, name string, memory bool) (store.Snapshot, error) {
	id := newID()
	if name == "" {
		name = id
	}
	if err := CheckName(name); err != nil {
		return store.Snapshot{}, err
	}
	if _, err := s.st.GetSnapshotByName(ctx, owner, name); err == nil {
		return store.Snapshot{}, fmt.Errorf("%w: you have a snapshot called %q", ErrNameTaken, name)
	} else if !errors.Is(err, store.ErrNotFound) {
		return store.Snapshot{}, err
	}
	// Hold off template GC from the first layer until the record names
	// the manifest; a failure leaves garbage that Collect then removes.
	unpin := s.tmpl.Pin()
	pinned := true
	defer func() {
		if pinned {
			unpin()
		}
	}()
	made := map[string]string{} // target -> temporary directory
	failed, published := true, false
	defer func() {
		for _, d := range made {
			os.RemoveAll(d)
		}
		if failed {
			unpin()
			pinned = false
			if published {
				s.collectLater()
			}
		}
	}()
	var mem memoryImage
	if memory {
		var err error
		if mem, err = s.keepMemory(ctx, sandboxID); err != nil {
			return store.Snapshot{}, err
		}
		defer func() {
			if failed {
				s.dropMemory(mem)
			}
		}()
	}
	sb, err := s.sbx.CaptureFS(ctx, sandboxID, func(target string) (string, error) {
		d, err := s.tmpl.TempDir("snapshot-")
		if err != nil {
			return "", err
		}
		made[target] = d
		return d, nil
	})
	if errors.Is(err, backend.ErrUnsupported) {
		return store.Snapshot{}, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("snapshot of %s: %w", sandboxID, err)
	}
	m, err := s.tmpl.ManifestOf(sb.TemplateID)
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("template of %s: %w", sandboxID, err)
	}
	var added []template.LayerRef
	var size int64
	for _, t := range sortedTargets(made) {
		sum := sha256.Sum256([]byte("warden snapshot\x00" + id + "\x00" + t))
		lid := "sha256:" + hex.EncodeToString(sum[:])
		n, err := du(made[t])
		if err != nil {
			return store.Snapshot{}, err
		}
		published = true
		if err := s.tmpl.PutDir(lid, made[t]); err != nil {
			return store.Snapshot{}, fmt.Errorf("store captured layer: %w", err)
		}
		delete(made, t)
		size += n
		added = append(added, template.LayerRef{Target: t, ID: lid})
	}
	m.Layers = append(added, m.Layers...)
	// The sandbox's own environment stays out: its values may be secrets,
	// and a manifest is shown to whoever may read the template.
	if sb.User != "" {
		m.User = sb.User
	}
	if sb.Workdir != "" {
		m.Workdir = sb.Workdir
	}
	m.Source = "snapshot " + id + " of sandbox " + sb.ID
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels["warden.snapshot"] = id
	m.Created = time.Now().UTC()
	published = true
	mid, err := s.tmpl.PutManifest(m)
	if err != nil {
		return store.Snapshot{}, err
	}
	snap := store.Snapshot{ID: id, Name: name, Owner: owner, SandboxID: sb.ID, Template: sb.Template,
		TemplateID: mid, SizeBytes: size, CreatedAt: m.Created, MemoryBackend: mem.backend, MemoryRef: mem.ref}
	if err := s.st.CreateSnapshot(ctx, snap); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return store.Snapshot{}, fmt.Errorf("%w: you have a snapshot called %q", ErrNameTaken, name)
		}
		return store.Snapshot{}, err
	}
	failed = false
	return snap, nil
}

func sortedTargets(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for t := range m {
		out = append(out, t)
	}
	// "/" first, then by name: a stable manifest for the same capture.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && less(out[j], out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func less(a, b string) bool {
	if a == "/" || b == "/" {
		return a == "/" && b != "/"
	}
	return a < b
}

// Get returns owner's snapshot named ref, by name or by id.
func (s *Service) Get(ctx context.Context, owner, ref string) (store.Snapshot, error) {
	sn, err := s.st.GetSnapshotByName(ctx, owner, ref)
	if errors.Is(err, store.ErrNotFound) {
		sn, err = s.st.GetSnapshot(ctx, ref)
		if err == nil && sn.Owner != owner {
			err = store.ErrNotFound
		}
	}
	if errors.Is(err, store.ErrNotFound) {
		return store.Snapshot{}, fmt.Errorf("%w: %q", ErrNotFound, ref)
	}
	return sn, err
}

// GetAny returns the snapshot with id or name ref of owner, or, when
// owner is "", anyone's snapshot with id ref (admins).
func (s *Service) GetAny(ctx context.Context, owner, ref string) (store.Snapshot, error) {
	if owner != "" {
		return s.Get(ctx, owner, ref)
	}
	sn, err := s.st.GetSnapshot(ctx, ref)
	if errors.Is(err, store.ErrNotFound) {
		return store.Snapshot{}, fmt.Errorf("%w: %q", ErrNotFound, ref)
	}
	return sn, err
}

// List returns owner's snapshots ("" for everyone's), only those of
// sandboxID when it is not "".
func (s *Service) List(ctx context.Context, owner, sandboxID string) ([]store.Snapshot, error) {
	return s.st.ListSnapshots(ctx, owner, sandboxID)
}

// OwnerOfTemplate reports who owns the snapshot whose template version is
// templateID, and whether one does: a sandbox may start from a snapshot
// only for its owner.
func (s *Service) OwnerOfTemplate(ctx context.Context, templateID string) (string, bool, error) {
	l, err := s.st.SnapshotsOfTemplate(ctx, templateID)
	if err != nil || len(l) == 0 {
		return "", false, err
	}
	return l[0].Owner, true, nil
}

// Delete removes a snapshot (refused while a sandbox runs from it) and
// then, in the background, its files unless a promoted template or
// another snapshot still uses them.
func (s *Service) Delete(ctx context.Context, sn store.Snapshot) error {
	err := s.st.DeleteSnapshot(ctx, sn.ID)
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("%w: %q: sandboxes run from it; kill them first", ErrInUse, sn.Name)
	}
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %q", ErrNotFound, sn.Name)
	}
	if err != nil {
		return err
	}
	s.dropMemory(memoryImage{backend: sn.MemoryBackend, ref: sn.MemoryRef})
	s.collectLater()
	return nil
}

// Promote points template name ("name[:tag]") at the snapshot's files on
// behalf of by; the template stays when the snapshot is deleted.
func (s *Service) Promote(ctx context.Context, sn store.Snapshot, name string, by template.Actor) (template.Info, error) {
	if _, err := s.tmpl.Tag(name, sn.TemplateID, by); err != nil {
		return template.Info{}, err
	}
	return s.tmpl.Inspect(name)
}

// InUse returns the template versions of every snapshot: template garbage
// collection keeps them (with TemplatesInUse's).
func (s *Service) InUse(ctx context.Context) (map[string]bool, error) {
	l, err := s.st.ListSnapshots(ctx, "", "")
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(l))
	for _, sn := range l {
		out[sn.TemplateID] = true
	}
	return out, nil
}

// KeepAlive returns what template garbage collection must keep: the
// template ids of sandboxes that may run and of every snapshot.
func (s *Service) KeepAlive(ctx context.Context) (map[string]bool, error) {
	live, err := s.sbx.TemplatesInUse(ctx)
	if err != nil {
		return nil, err
	}
	snaps, err := s.InUse(ctx)
	if err != nil {
		return nil, err
	}
	maps.Copy(live, snaps)
	return live, nil
}

// Collect runs a template garbage collection that keeps what KeepAlive
// returns: the files of deleted snapshots (and of failed captures) go,
// unless a tag or a live sandbox uses them.
func (s *Service) Collect(ctx context.Context) (template.GCReport, error) {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	return s.tmpl.GC(func() (map[string]bool, error) { return s.KeepAlive(ctx) })
}

// collectLater runs Collect in the background: it waits for template
// builds and imports in progress, which a delete need not.
func (s *Service) collectLater() {
	go func() {
		rep, err := s.Collect(context.Background())
		if err != nil {
			s.log.Warn("snapshot files: collection failed", "err", err)
			return
		}
		if rep.Manifests > 0 || rep.Layers > 0 {
			s.log.Info("snapshot files collected", "manifests", rep.Manifests, "layers", rep.Layers, "bytes", rep.Bytes)
		}
	}()
}

// du returns the bytes dir's files take.
func du(dir string) (int64, error) {
	var n int64
	err := walkSize(dir, &n)
	if err != nil {
		return 0, fmt.Errorf("size of captured layer: %w", err)
	}
	return n, nil
}
