package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/sandbox"
)

// The daemon package links no real backend (cmd/wardend imports
// internal/backend/all): the only ones registered in its tests are these
// stubs, which show that a backend is one package that registers itself
// and nothing else.

type stubConfig struct {
	Color string `yaml:"color"`
}

// stub is a backend that only has a name and a config; the daemon's
// wiring calls nothing else of it.
type stub struct {
	backend.Backend
	id  string
	cfg stubConfig
	p   backend.Params
}

func (s *stub) ID() string                         { return s.id }
func (s *stub) Capabilities() backend.Capabilities { return backend.Capabilities{} }

// laterReady makes "stublater" pass its preflight; laterGen is its
// fingerprint (what its preflight looks at changed).
var (
	laterReady atomic.Bool
	laterGen   atomic.Int64
)

func newStub(id string) func(backend.Params, func(any) error) (backend.Backend, error) {
	return func(p backend.Params, decode func(any) error) (backend.Backend, error) {
		c := stubConfig{Color: "grey"}
		if err := decode(&c); err != nil {
			return nil, err
		}
		return &stub{id: id, cfg: c, p: p}, nil
	}
}

func init() {
	backend.Register(backend.Registration{ID: "stub", New: newStub("stub")})
	backend.Register(backend.Registration{ID: "stublater", New: newStub("stublater"),
		Preflight: func() error {
			if !laterReady.Load() {
				return errors.New("stub runtime not installed")
			}
			return nil
		},
		Retry:       3600e9, // an hour: the test drives it through probe, not the ticker
		Fingerprint: func() string { return strconv.FormatInt(laterGen.Load(), 10) },
	})
}

func testConfig(t *testing.T, doc string) config.Config {
	t.Helper()
	c := config.Default()
	c.StateDir, c.RunDir = t.TempDir(), t.TempDir()
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

func testBackends(cfg config.Config) *backends {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return &backends{cfg: cfg, log: log,
		params: backend.Params{RunDir: cfg.RunDir, StateDir: cfg.StateDir, Log: log}}
}

func TestRegistryBuildsRegisteredBackends(t *testing.T) {
	laterReady.Store(false)
	cfg := testConfig(t, "backend: stub\nbackends:\n  stub:\n    color: blue\n")
	bs := testBackends(cfg)
	if err := bs.preflight(); err != nil {
		t.Fatal(err)
	}
	if err := bs.build(context.Background()); err != nil {
		t.Fatal(err)
	}
	sb, ok := bs.built["stub"].(*stub)
	if !ok {
		t.Fatalf("stub not built: %v", bs.built)
	}
	if sb.cfg.Color != "blue" || sb.p.RunDir != cfg.RunDir || sb.p.StateDir != cfg.StateDir {
		t.Fatalf("stub built with config %+v, params %+v", sb.cfg, sb.p)
	}
	if _, ok := bs.pending["stublater"]; !ok {
		t.Fatalf("stublater, which cannot run yet, is not waited for: pending %v", bs.pending)
	}

	// The manager lists what was built; a create asking for stublater
	// brings it up once it can run, without a restart.
	mgr := sandbox.New(sandbox.Config{Probe: func(id string) bool { return bs.probe(context.Background(), id) }},
		nil, bs.built[cfg.Backend], nil, bs.log)
	bs.watch(t.Context(), mgr)
	if got := mgr.Backends(); !slices.Equal(got, []string{"stub"}) {
		t.Fatalf("backends before = %v", got)
	}
	if bs.probe(context.Background(), "stublater") {
		t.Fatal("probe brought up a backend whose preflight fails")
	}
	if bs.probe(context.Background(), "nosuch") {
		t.Fatal("probe of an unregistered backend succeeded")
	}
	laterReady.Store(true)
	laterGen.Add(1)
	if !bs.probe(context.Background(), "stublater") {
		t.Fatal("probe did not bring up stublater once it could run")
	}
	if got := mgr.Backends(); !slices.Equal(got, []string{"stub", "stublater"}) {
		t.Fatalf("backends after = %v", got)
	}
}

func TestRegistryConfigSections(t *testing.T) {
	laterReady.Store(false)
	// A disabled backend is not built or waited for.
	cfg := testConfig(t, "backend: stub\nbackends:\n  stublater:\n    disabled: true\n")
	bs := testBackends(cfg)
	if err := bs.build(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := bs.pending["stublater"]; ok {
		t.Fatal("a disabled backend is waited for")
	}
	// A key the backend does not have is refused.
	bs = testBackends(testConfig(t, "backend: stub\nbackends:\n  stub:\n    colour: blue\n"))
	if err := bs.build(context.Background()); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Fatalf("unknown key: err = %v", err)
	}
	// A default backend this build does not have is refused, with the
	// registered ones named.
	bs = testBackends(testConfig(t, "backend: microvm\n"))
	if err := bs.preflight(); err == nil || !strings.Contains(err.Error(), "stub") {
		t.Fatalf("unknown default: err = %v", err)
	}
	// A default backend that cannot run stops the daemon.
	bs = testBackends(testConfig(t, "backend: stublater\n"))
	if err := bs.preflight(); err == nil || !strings.Contains(err.Error(), "not installed") {
		t.Fatalf("default that cannot run: err = %v", err)
	}
}
