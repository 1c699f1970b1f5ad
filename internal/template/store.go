package template

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/safefile"
)

// Errors of the store. They carry their kind (internal/errkind); the detail
// written after them (fmt.Errorf("%w: ...", ErrBuiltin)) is shown to callers.
var (
	ErrBuiltin     = errkind.Sentinel(errkind.Conflict, "built-in template", errkind.WithDetail)
	ErrInvalidName = errkind.Sentinel(errkind.Invalid, "invalid template name", errkind.WithDetail)
	// ErrNotOwner refuses a change to a tag the caller does not own: one
	// another principal created, or a shared one (owner none: built-in,
	// created by an admin, or older than tag ownership) that only admins
	// change.
	ErrNotOwner = errkind.Sentinel(errkind.Forbidden, "template tag is not yours", errkind.WithDetail)
)

// Actor is who changes a tag: the principal, and whether it holds the
// admin scope. Admins may change every tag but base; the tags they create
// are shared (no owner). Other principals own the tags they create and may
// change only those.
type Actor struct {
	Principal string
	Admin     bool
}

// canWrite reports whether by may re-point or remove a tag with owner.
func (by Actor) canWrite(owner string) bool {
	return by.Admin || (owner != "" && owner == by.Principal)
}

// tagEntry is one tag of tags.json: the manifest it points at and the
// principal that owns it ("" for a shared tag only admins change). The
// format before ownership mapped names to bare manifest ids; such entries
// read as shared.
type tagEntry struct {
	ID    string `json:"id"`
	Owner string `json:"owner,omitempty"`
}

func (e *tagEntry) UnmarshalJSON(b []byte) error {
	var id string
	if err := json.Unmarshal(b, &id); err == nil {
		*e = tagEntry{ID: id}
		return nil
	}
	type plain tagEntry
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*e = tagEntry(p)
	return nil
}

// Layout of the store under its root (mode 0700: layers hold image files,
// set-user-ID binaries included, that no host user may reach):
//
//	base/<version>/rootfs   the built-in base tree (see EnsureBase)
//	base/<version>/usr      its snapshot of the host /usr
//	layers/<hex>/           one layer tree per content id, in overlayfs form
//	layers/<hex>.json       its size, computed once when it is published
//	manifests/<hex>.json    one template version per content id
//	tags.json               "name:tag" -> {manifest id, owner principal}
//	cache/<hex>.json        the build cache: a step's key -> the layers it made
//	tmp/                    layers and build uppers being written
const (
	layersDir    = "layers"
	manifestsDir = "manifests"
	cacheDir     = "cache"
	tmpDir       = "tmp"
	tagsFile     = "tags.json"
)

// LayerRef names one layer of a template: a content id ("sha256:<hex>", in
// the store), the base tree ("base:<version>"), the base's /usr snapshot
// ("base-usr:<version>") or the host /usr used in place ("host:/usr", what
// templates built before base snapshots record), stacked at Target.
type LayerRef struct {
	Target string `json:"target"`
	ID     string `json:"id"`
}

// Start is a template's start command: a process started in every new
// sandbox, and the check that says the sandbox is ready.
type Start struct {
	Cmd   []string          `json:"cmd"`
	Env   map[string]string `json:"env,omitempty"`
	User  string            `json:"user,omitempty"`
	Dir   string            `json:"dir,omitempty"`
	Ready *Ready            `json:"ready,omitempty"`
}

// Ready is a readiness check: a command that exits 0, or a TCP port that
// accepts connections inside the sandbox. Timeout bounds the wait.
type Ready struct {
	Cmd       []string `json:"cmd,omitempty"`
	Port      int      `json:"port,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`
	// IntervalMS is the pause between checks (default 50 ms).
	IntervalMS int64 `json:"interval_ms,omitempty"`
}

// Manifest is one immutable template version. Its id is the SHA-256 of its
// JSON encoding.
type Manifest struct {
	Layers  []LayerRef        `json:"layers"` // top-first per target
	Env     map[string]string `json:"env"`
	User    string            `json:"user"`
	Workdir string            `json:"workdir"`
	Start   *Start            `json:"start,omitempty"`
	Limits  backend.Limits    `json:"limits"` // resource defaults (zero: the daemon's)
	Expose  []string          `json:"expose,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Source  string            `json:"source"` // "import docker.io/library/python:3.12", "build", ...
	Created time.Time         `json:"created"`
}

// Info describes a tagged template for listings.
type Info struct {
	Name     string    `json:"name"` // "name:tag"
	ID       string    `json:"id"`
	Source   string    `json:"source"`
	Created  time.Time `json:"created"`
	Layers   int       `json:"layers"`
	Size     int64     `json:"size"` // bytes of all its layers in the store
	Builtin  bool      `json:"builtin,omitempty"`
	Owner    string    `json:"owner,omitempty"`    // the principal that owns the tag; "" for a shared tag only admins change
	Manifest *Manifest `json:"manifest,omitempty"` // set by Inspect
}

var (
	nameRE  = regexp.MustCompile(`^[a-z0-9]+(?:[._/-][a-z0-9]+)*$`)
	tagRE   = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)
	layerRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// ParseName splits "name[:tag]" and checks both parts; the tag defaults to
// "latest".
func ParseName(s string) (name, tag string, err error) {
	name, tag = s, "latest"
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		name, tag = s[:i], s[i+1:]
	}
	if len(name) == 0 || len(name) > 128 || !nameRE.MatchString(name) {
		return "", "", fmt.Errorf("%w: %q: names are lower-case letters, digits and . _ / - separators, at most 128 bytes", ErrInvalidName, s)
	}
	if !tagRE.MatchString(tag) {
		return "", "", fmt.Errorf("%w: %q: tags are letters, digits, . _ -, at most 128 bytes", ErrInvalidName, s)
	}
	return name, tag, nil
}

// Store keeps imported and built templates: content-addressed layers shared
// between templates, immutable manifests, and tags. It is safe for
// concurrent use by one process; Pin holds off garbage collection while a
// build or import writes layers that no tag references yet.
type Store struct {
	root string

	// Pins hold off GC: imports and builds while they write layers no
	// manifest references yet, sandbox creation until its record names its
	// template. GC waits for pins to drain but does not block new pins
	// while it waits (creates must not stall behind a long build), only
	// while it deletes.
	pinMu     sync.Mutex
	pinCond   *sync.Cond
	pins      int
	gcRunning bool

	mu        sync.Mutex
	tags      map[string]tagEntry // "name:tag" -> manifest id and owner
	manifests map[string]*Manifest
	putting   map[string]*sync.Mutex
	base      *Template
}

// OpenStore opens (creating if needed) the store under root and builds the
// base template there when missing.
func OpenStore(root string) (*Store, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("template root %q is not an absolute path", root)
	}
	for _, d := range []string{"", layersDir, manifestsDir, cacheDir, tmpDir} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			return nil, fmt.Errorf("create template store: %w", err)
		}
	}
	if err := os.Chmod(root, 0o700); err != nil {
		return nil, fmt.Errorf("template store: %w", err)
	}
	s := &Store{root: root, tags: map[string]tagEntry{}, manifests: map[string]*Manifest{}, putting: map[string]*sync.Mutex{}}
	s.pinCond = sync.NewCond(&s.pinMu)
	b, err := os.ReadFile(filepath.Join(root, tagsFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read tags: %w", err)
	default:
		if err := json.Unmarshal(b, &s.tags); err != nil {
			return nil, fmt.Errorf("read tags: %w", err)
		}
		if s.tags == nil {
			s.tags = map[string]tagEntry{}
		}
	}
	// Leftovers of a crash: nothing can be writing yet.
	if ents, err := os.ReadDir(filepath.Join(root, tmpDir)); err == nil {
		for _, e := range ents {
			os.RemoveAll(filepath.Join(root, tmpDir, e.Name()))
		}
	}
	if _, err := s.Base(); err != nil {
		return nil, err
	}
	return s, nil
}

// Root returns the store's directory.
func (s *Store) Root() string { return s.root }

// Base returns the built-in base template, building it on first use.
func (s *Store) Base() (*Template, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.base == nil {
		t, err := EnsureBase(s.root)
		if err != nil {
			return nil, err
		}
		s.base = t
	}
	return s.base, nil
}

// Pin holds off garbage collection until the returned function is called.
// Imports and builds pin the store while they write layers.
func (s *Store) Pin() func() {
	s.pinMu.Lock()
	for s.gcRunning {
		s.pinCond.Wait()
	}
	s.pins++
	s.pinMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.pinMu.Lock()
			s.pins--
			s.pinCond.Broadcast()
			s.pinMu.Unlock()
		})
	}
}

func hexOf(id string) string { return strings.TrimPrefix(id, "sha256:") }

// LayerPath returns the directory of a stored layer.
func (s *Store) LayerPath(id string) string { return filepath.Join(s.root, layersDir, hexOf(id)) }

// Has reports whether layer id is stored.
func (s *Store) Has(id string) bool {
	if !layerRE.MatchString(id) {
		return false
	}
	fi, err := os.Lstat(s.LayerPath(id))
	return err == nil && fi.IsDir()
}

// Put stores layer id: it makes a fresh empty directory, calls fill to write
// the layer into it, and publishes it atomically under id. A layer already
// stored is kept and fill is not called. Concurrent Puts of one id write it
// once.
func (s *Store) Put(id string, fill func(dir string) error) error {
	if !layerRE.MatchString(id) {
		return fmt.Errorf("layer id %q is not sha256:<64 hex>", id)
	}
	s.mu.Lock()
	m, ok := s.putting[id]
	if !ok {
		m = &sync.Mutex{}
		s.putting[id] = m
	}
	s.mu.Unlock()
	m.Lock()
	defer m.Unlock()
	if s.Has(id) {
		return nil
	}
	dir, err := s.TempDir("layer-")
	if err != nil {
		return err
	}
	if err := fill(dir); err != nil {
		os.RemoveAll(dir)
		return err
	}
	return s.publish(id, dir)
}

// TempDir makes an empty directory (mode 0755) under the store's tmp/, on
// the same filesystem as the layers, for a layer being written.
func (s *Store) TempDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp(filepath.Join(s.root, tmpDir), prefix)
	if err != nil {
		return "", fmt.Errorf("layer directory: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("layer directory: %w", err)
	}
	return dir, nil
}

// publish moves a finished layer tree into place under id, after flushing it
// to disk, and records its size.
func (s *Store) publish(id, dir string) error {
	size, err := diskUsage(dir)
	if err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("layer %s: %w", id, err)
	}
	if err := syncfs(dir); err != nil {
		os.RemoveAll(dir)
		return err
	}
	info, _ := json.Marshal(map[string]int64{"size": size})
	if err := safefile.WriteAtomic(s.LayerPath(id)+".json", info); err != nil {
		os.RemoveAll(dir)
		return err
	}
	if err := os.Rename(dir, s.LayerPath(id)); err != nil {
		os.RemoveAll(dir)
		if s.Has(id) {
			return nil
		}
		return fmt.Errorf("publish layer %s: %w", id, err)
	}
	return syncDir(filepath.Join(s.root, layersDir))
}

// PutDir publishes an already written directory (a captured build upper)
// as layer id; the directory is moved, or removed when id is stored already.
func (s *Store) PutDir(id, dir string) error {
	if !layerRE.MatchString(id) {
		return fmt.Errorf("layer id %q is not sha256:<64 hex>", id)
	}
	if s.Has(id) {
		return os.RemoveAll(dir)
	}
	return s.publish(id, dir)
}

// layerSize returns the recorded size of a stored layer (0 if unknown).
func (s *Store) layerSize(id string) int64 {
	b, err := os.ReadFile(s.LayerPath(id) + ".json")
	if err != nil {
		return 0
	}
	var v struct{ Size int64 }
	json.Unmarshal(b, &v)
	return v.Size
}

// PutManifest stores m and returns its id.
func (s *Store) PutManifest(m *Manifest) (string, error) {
	for _, l := range m.Layers {
		if _, err := s.layerPath(l.ID); err != nil {
			return "", err
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode manifest: %w", err)
	}
	sum := sha256.Sum256(b)
	id := "sha256:" + hex.EncodeToString(sum[:])
	if err := safefile.WriteAtomic(filepath.Join(s.root, manifestsDir, hexOf(id)+".json"), b); err != nil {
		return "", err
	}
	return id, nil
}

// Manifest returns the manifest with id.
func (s *Store) Manifest(id string) (*Manifest, error) {
	if !layerRE.MatchString(id) {
		return nil, fmt.Errorf("template id %q: %w", id, ErrUnknown)
	}
	s.mu.Lock()
	m, ok := s.manifests[id]
	s.mu.Unlock()
	if ok {
		return m, nil
	}
	b, err := os.ReadFile(filepath.Join(s.root, manifestsDir, hexOf(id)+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("template id %s: %w", id, ErrUnknown)
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	m = &Manifest{}
	if err := json.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", id, err)
	}
	s.mu.Lock()
	s.manifests[id] = m
	s.mu.Unlock()
	return m, nil
}

// CheckTag reports whether by may point name at a template: nil when the
// tag is new or by may change it, else an error wrapping ErrNotOwner (or
// ErrBuiltin, ErrInvalidName). Imports and builds call it before they
// start; Tag checks again when it writes.
func (s *Store) CheckTag(name string, by Actor) error {
	key, err := tagKey(name, "replaced")
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return checkOwner(key, s.tags, by)
}

// tagKey returns "name:tag" for a name that may be written.
func tagKey(name, verb string) (string, error) {
	n, tag, err := ParseName(name)
	if err != nil {
		return "", err
	}
	if n == BaseName {
		return "", fmt.Errorf("%w: %q cannot be %s", ErrBuiltin, BaseName, verb)
	}
	return n + ":" + tag, nil
}

// checkOwner refuses a change by `by` to an existing tag it may not write.
func checkOwner(key string, tags map[string]tagEntry, by Actor) error {
	e, ok := tags[key]
	if !ok || by.canWrite(e.Owner) {
		return nil
	}
	if e.Owner == "" {
		return fmt.Errorf("%w: %s is shared: only an admin may change it", ErrNotOwner, key)
	}
	return fmt.Errorf("%w: %s is owned by principal %s", ErrNotOwner, key, e.Owner)
}

// Tag points name (as "name" or "name:tag") at manifest id on behalf of by
// and returns the manifest id it pointed at before ("" for a new tag). A
// new tag is owned by by.Principal, or shared when by is an admin; an
// existing tag keeps its owner, and only its owner or an admin may
// re-point it (ErrNotOwner, and nothing changes, for anyone else).
func (s *Store) Tag(name, id string, by Actor) (old string, err error) {
	key, err := tagKey(name, "replaced")
	if err != nil {
		return "", err
	}
	if _, err := s.Manifest(id); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := checkOwner(key, s.tags, by); err != nil {
		return "", err
	}
	e, ok := s.tags[key]
	if !ok && !by.Admin {
		if by.Principal == "" {
			return "", fmt.Errorf("%w: %s: no principal to own it", ErrNotOwner, key)
		}
		e.Owner = by.Principal
	}
	old, e.ID = e.ID, id
	tags := maps.Clone(s.tags)
	tags[key] = e
	if err := s.saveTags(tags); err != nil {
		return "", err
	}
	s.tags = tags
	return old, nil
}

func (s *Store) saveTags(tags map[string]tagEntry) error {
	b, err := json.MarshalIndent(tags, "", "  ")
	if err != nil {
		return fmt.Errorf("encode tags: %w", err)
	}
	return safefile.WriteAtomic(filepath.Join(s.root, tagsFile), b)
}

// Resolve returns the manifest id name points at ("name", "name:tag" or a
// template id).
func (s *Store) Resolve(name string) (string, error) {
	if layerRE.MatchString(name) {
		if _, err := s.Manifest(name); err != nil {
			return "", err
		}
		return name, nil
	}
	n, tag, err := ParseName(name)
	if err != nil {
		return "", fmt.Errorf("template %q: %w", name, ErrUnknown)
	}
	s.mu.Lock()
	e, ok := s.tags[n+":"+tag]
	s.mu.Unlock()
	if !ok {
		return "", fmt.Errorf("template %q: %w", name, ErrUnknown)
	}
	return e.ID, nil
}

// Get returns the template called name: "base", a tagged name, or a
// template id.
func (s *Store) Get(name string) (*Template, error) {
	if name == BaseName || name == BaseName+":latest" {
		return s.Base()
	}
	id, err := s.Resolve(name)
	if err != nil {
		return nil, err
	}
	m, err := s.Manifest(id)
	if err != nil {
		return nil, err
	}
	return s.template(name, id, m)
}

// template turns a manifest into a bootable template.
func (s *Store) template(name, id string, m *Manifest) (*Template, error) {
	t := &Template{
		Name: name, Version: id, ID: id,
		Env: maps.Clone(m.Env), User: m.User, Workdir: m.Workdir,
		Start: m.Start, Limits: m.Limits,
	}
	if t.Env == nil {
		t.Env = map[string]string{}
	}
	for _, l := range m.Layers {
		p, err := s.layerPath(l.ID)
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", name, err)
		}
		t.Layers = append(t.Layers, backend.Layer{Target: l.Target, Path: p})
	}
	return t, nil
}

// layerPath maps a layer reference to its directory.
func (s *Store) layerPath(id string) (string, error) {
	switch {
	case layerRE.MatchString(id):
		if !s.Has(id) {
			return "", fmt.Errorf("layer %s is missing from the store", id)
		}
		return s.LayerPath(id), nil
	case strings.HasPrefix(id, "base:"):
		v := strings.TrimPrefix(id, "base:")
		dir := filepath.Join(s.root, BaseName, v)
		if strings.ContainsAny(v, "/\x00") || v == "" || v == "." || v == ".." || !complete(dir) {
			return "", fmt.Errorf("base tree %q is missing", v)
		}
		return filepath.Join(dir, rootfsName), nil
	case strings.HasPrefix(id, "base-usr:"):
		v := strings.TrimPrefix(id, "base-usr:")
		dir := filepath.Join(s.root, BaseName, v)
		if strings.ContainsAny(v, "/\x00") || v == "" || v == "." || v == ".." || !complete(dir) {
			return "", fmt.Errorf("base /usr snapshot %q is missing", v)
		}
		return filepath.Join(dir, usrName), nil
	case id == hostUsrRef:
		return hostUsr, nil
	}
	return "", fmt.Errorf("unknown layer reference %q", id)
}

// BaseLayers returns the layer references of the base template, for
// templates built on top of it.
func (s *Store) BaseLayers() ([]LayerRef, error) {
	b, err := s.Base()
	if err != nil {
		return nil, err
	}
	_, usr := usrLayer(filepath.Join(s.root, BaseName, b.Version), b.Version)
	return []LayerRef{{Target: "/", ID: "base:" + b.Version}, {Target: "/usr", ID: usr}}, nil
}

// basePackages returns the number of packages of a base version, for
// Inspect.
func (s *Store) basePackages(version string) int {
	b, err := os.ReadFile(filepath.Join(s.root, BaseName, version, rootfsName, "etc", packagesFile))
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

// List returns every tagged template and the built-in base, by name.
func (s *Store) List() ([]Info, error) {
	out := []Info{{Name: BaseName + ":latest", ID: "base", Source: "built-in: host userland", Builtin: true, Layers: 2}}
	if b, err := s.Base(); err == nil {
		out[0].ID = "base:" + b.Version
	}
	s.mu.Lock()
	tags := maps.Clone(s.tags)
	s.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(tags)) {
		in, err := s.info(name, tags[name].ID)
		if err != nil {
			return nil, err
		}
		in.Owner = tags[name].Owner
		out = append(out, in)
	}
	return out, nil
}

// Inspect returns one template with its manifest.
func (s *Store) Inspect(name string) (Info, error) {
	if name == BaseName || name == BaseName+":latest" {
		b, err := s.Base()
		if err != nil {
			return Info{}, err
		}
		refs, _ := s.BaseLayers()
		labels := map[string]string{
			"warden.base.packages": fmt.Sprintf("%d installed (name=version in /etc/%s)", s.basePackages(b.Version), packagesFile),
			"warden.base.usr":      "pinned snapshot of the host /usr",
		}
		if b.Warning != "" {
			labels["warden.base.usr"] = "host /usr in place (not pinned)"
		}
		return Info{Name: BaseName + ":latest", ID: "base:" + b.Version, Source: "built-in: host userland", Builtin: true, Layers: 2,
			Manifest: &Manifest{Layers: refs, Env: b.Env, User: b.User, Workdir: b.Workdir, Labels: labels, Source: "built-in"}}, nil
	}
	id, err := s.Resolve(name)
	if err != nil {
		return Info{}, err
	}
	if !strings.Contains(name, ":") && !layerRE.MatchString(name) {
		name += ":latest"
	}
	in, err := s.info(name, id)
	if err != nil {
		return Info{}, err
	}
	if n, tag, err := ParseName(name); err == nil {
		s.mu.Lock()
		if e, ok := s.tags[n+":"+tag]; ok && e.ID == id {
			in.Owner = e.Owner
		}
		s.mu.Unlock()
	}
	in.Manifest, err = s.Manifest(id)
	return in, err
}

func (s *Store) info(name, id string) (Info, error) {
	m, err := s.Manifest(id)
	if err != nil {
		return Info{}, err
	}
	in := Info{Name: name, ID: id, Source: m.Source, Created: m.Created, Layers: len(m.Layers)}
	for _, l := range m.Layers {
		in.Size += s.layerSize(l.ID)
	}
	return in, nil
}

// Remove deletes the tag name on behalf of by and returns the manifest id
// it pointed at. Only the tag's owner or an admin may remove it
// (ErrNotOwner). The layers stay until GC finds them unused.
func (s *Store) Remove(name string, by Actor) (string, error) {
	n, tag, err := ParseName(name)
	if err != nil {
		return "", fmt.Errorf("template %q: %w", name, ErrUnknown)
	}
	if n == BaseName {
		return "", fmt.Errorf("%w: %q cannot be removed", ErrBuiltin, BaseName)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := n + ":" + tag
	e, ok := s.tags[key]
	if !ok {
		return "", fmt.Errorf("template %q: %w", name, ErrUnknown)
	}
	if err := checkOwner(key, s.tags, by); err != nil {
		return "", err
	}
	id := e.ID
	tags := maps.Clone(s.tags)
	delete(tags, key)
	if err := s.saveTags(tags); err != nil {
		return "", err
	}
	s.tags = tags
	return id, nil
}

// GCReport says what a garbage collection removed and kept.
type GCReport struct {
	Manifests  int   `json:"manifests_removed"`
	Layers     int   `json:"layers_removed"`
	CacheItems int   `json:"cache_entries_removed"`
	Bytes      int64 `json:"bytes_freed"`
	KeptLayers int   `json:"layers_kept"`
	// RemovedManifests are the ids of the template versions removed, for
	// the audit log.
	RemovedManifests []string `json:"-"`
}

// GC removes manifests that no tag names and inUse does not return (the
// template ids of sandboxes that may still run; called once GC holds the
// store, so no sandbox can start from a template between the call and the
// removal), then layers and build cache entries no remaining manifest
// uses. It waits for running imports and builds to finish.
func (s *Store) GC(inUse func() (map[string]bool, error)) (GCReport, error) {
	s.pinMu.Lock()
	for s.pins > 0 || s.gcRunning {
		s.pinCond.Wait()
	}
	s.gcRunning = true
	s.pinMu.Unlock()
	defer func() {
		s.pinMu.Lock()
		s.gcRunning = false
		s.pinCond.Broadcast()
		s.pinMu.Unlock()
	}()
	var rep GCReport
	live, err := inUse()
	if err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	s.mu.Lock()
	keep := map[string]bool{}
	for _, e := range s.tags {
		keep[e.ID] = true
	}
	s.mu.Unlock()
	for id := range live {
		keep[id] = true
	}
	liveLayers := map[string]bool{}
	ents, err := os.ReadDir(filepath.Join(s.root, manifestsDir))
	if err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	for _, e := range ents {
		id := "sha256:" + strings.TrimSuffix(e.Name(), ".json")
		if !strings.HasSuffix(e.Name(), ".json") || !layerRE.MatchString(id) {
			continue
		}
		if !keep[id] {
			if err := os.Remove(filepath.Join(s.root, manifestsDir, e.Name())); err != nil {
				return rep, fmt.Errorf("gc: %w", err)
			}
			s.mu.Lock()
			delete(s.manifests, id)
			s.mu.Unlock()
			rep.Manifests++
			rep.RemovedManifests = append(rep.RemovedManifests, id)
			continue
		}
		m, err := s.Manifest(id)
		if err != nil {
			return rep, fmt.Errorf("gc: %w", err)
		}
		for _, l := range m.Layers {
			liveLayers[l.ID] = true
		}
	}
	ents, err = os.ReadDir(filepath.Join(s.root, layersDir))
	if err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	for _, e := range ents {
		id := "sha256:" + e.Name()
		if !e.IsDir() || !layerRE.MatchString(id) {
			continue
		}
		if liveLayers[id] {
			rep.KeptLayers++
			continue
		}
		rep.Bytes += s.layerSize(id)
		// Unpublish first (a rename), so a crash mid-removal leaves no
		// half layer under its id.
		dead := filepath.Join(s.root, tmpDir, "dead-"+e.Name())
		if err := os.Rename(s.LayerPath(id), dead); err != nil {
			return rep, fmt.Errorf("gc: %w", err)
		}
		os.Remove(s.LayerPath(id) + ".json")
		if err := os.RemoveAll(dead); err != nil {
			return rep, fmt.Errorf("gc: %w", err)
		}
		rep.Layers++
	}
	if err := s.gcBase(live, liveLayers); err != nil {
		return rep, fmt.Errorf("gc: %w", err)
	}
	ents, _ = os.ReadDir(filepath.Join(s.root, cacheDir))
	for _, e := range ents {
		var c CacheEntry
		b, err := os.ReadFile(filepath.Join(s.root, cacheDir, e.Name()))
		if err == nil && json.Unmarshal(b, &c) == nil && s.cacheValid(c) {
			continue
		}
		os.Remove(filepath.Join(s.root, cacheDir, e.Name()))
		rep.CacheItems++
	}
	return rep, nil
}

// gcBase removes the base versions other than the current one that no
// kept manifest (liveLayers) and no sandbox that may run (live) uses: the
// trees, and the /usr snapshots that keep replaced host files on disk.
func (s *Store) gcBase(live, liveLayers map[string]bool) error {
	s.mu.Lock()
	cur := ""
	if s.base != nil {
		cur = s.base.Version
	}
	s.mu.Unlock()
	baseDir := filepath.Join(s.root, BaseName)
	ents, err := os.ReadDir(baseDir)
	if err != nil || cur == "" {
		return nil // no base built yet: nothing to collect
	}
	unlock, err := lock(filepath.Join(baseDir, lockName))
	if err != nil {
		return err
	}
	defer unlock()
	for _, e := range ents {
		v := e.Name()
		if !e.IsDir() || strings.HasPrefix(v, ".") || v == cur ||
			live["base:"+v] || liveLayers["base:"+v] || liveLayers["base-usr:"+v] {
			continue
		}
		// Unpublish first: a crash leaves a temporary directory the next
		// base build clears, never a half tree under its version.
		dead := filepath.Join(baseDir, tmpPrefix+"gc-"+v)
		if err := os.Rename(filepath.Join(baseDir, v), dead); err != nil {
			return err
		}
		if err := os.RemoveAll(dead); err != nil {
			return err
		}
	}
	return nil
}

// Usage is the store's disk use.
type Usage struct {
	Layers    int             `json:"layers"`
	Bytes     int64           `json:"bytes"`       // all stored layers
	Reclaim   int64           `json:"reclaimable"` // layers no tagged template uses
	Templates []TemplateUsage `json:"templates"`
}

// TemplateUsage is one template's share of the store.
type TemplateUsage struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`  // all its layers
	Unique int64  `json:"unique"` // layers no other tagged template uses
}

// DiskUsage reports the store's disk use per template, counting shared
// layers once in the total.
func (s *Store) DiskUsage() (Usage, error) {
	var u Usage
	s.mu.Lock()
	tags := maps.Clone(s.tags)
	s.mu.Unlock()
	users := map[string]int{}
	layersOf := map[string][]string{}
	for name, e := range tags {
		m, err := s.Manifest(e.ID)
		if err != nil {
			return u, err
		}
		seen := map[string]bool{}
		for _, l := range m.Layers {
			if layerRE.MatchString(l.ID) && !seen[l.ID] {
				seen[l.ID] = true
				users[l.ID]++
				layersOf[name] = append(layersOf[name], l.ID)
			}
		}
	}
	ents, err := os.ReadDir(filepath.Join(s.root, layersDir))
	if err != nil {
		return u, fmt.Errorf("usage: %w", err)
	}
	for _, e := range ents {
		id := "sha256:" + e.Name()
		if !e.IsDir() || !layerRE.MatchString(id) {
			continue
		}
		sz := s.layerSize(id)
		u.Layers++
		u.Bytes += sz
		if users[id] == 0 {
			u.Reclaim += sz
		}
	}
	for _, name := range slices.Sorted(maps.Keys(layersOf)) {
		tu := TemplateUsage{Name: name}
		for _, id := range layersOf[name] {
			sz := s.layerSize(id)
			tu.Bytes += sz
			if users[id] == 1 {
				tu.Unique += sz
			}
		}
		u.Templates = append(u.Templates, tu)
	}
	sort.SliceStable(u.Templates, func(i, j int) bool { return u.Templates[i].Bytes > u.Templates[j].Bytes })
	return u, nil
}

// CacheEntry is what one build step produced: its new layers (top-first
// per target), recorded under the hash of everything the step depends on.
type CacheEntry struct {
	Layers []LayerRef `json:"layers"`
}

func (s *Store) cacheValid(c CacheEntry) bool {
	for _, l := range c.Layers {
		if !s.Has(l.ID) {
			return false
		}
	}
	return true
}

// CacheGet returns the cached result of the step with key, if its layers
// are all still stored.
func (s *Store) CacheGet(key string) (CacheEntry, bool) {
	var c CacheEntry
	b, err := os.ReadFile(filepath.Join(s.root, cacheDir, hexOf(key)+".json"))
	if err != nil || json.Unmarshal(b, &c) != nil || !s.cacheValid(c) {
		return CacheEntry{}, false
	}
	return c, true
}

// CachePut records the result of the step with key.
func (s *Store) CachePut(key string, c CacheEntry) error {
	if !layerRE.MatchString(key) {
		return fmt.Errorf("cache key %q is not sha256:<64 hex>", key)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode cache entry: %w", err)
	}
	return safefile.WriteAtomic(filepath.Join(s.root, cacheDir, hexOf(key)+".json"), b)
}

// diskUsage sums the allocated size of every entry below dir, counting
// hardlinked files once.
func diskUsage(dir string) (int64, error) {
	var total int64
	seen := map[uint64]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if st.Nlink > 1 && !fi.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}
