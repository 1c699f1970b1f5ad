package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/govern"
)

func TestBuildMiddlewareFromConfig(t *testing.T) {
	defer func(f func() ([]string, error)) { mwWorkerCommand = f }(mwWorkerCommand)
	mwWorkerCommand = nil // this test binary is no wardend: run scripts in-process
	dir := t.TempDir()
	script := filepath.Join(dir, "no-rm.js")
	if err := os.WriteFile(script, []byte(`function pre(a) { return a.exec.cmd === "rm" ? {block: "no rm"} : {allow: true}; }`), 0o600); err != nil {
		t.Fatal(err)
	}
	d := &daemon{log: slog.New(slog.DiscardHandler)}
	d.cfg.StateDir = dir
	d.cfg.Governance.Middleware = []config.MiddlewareConfig{{Name: "no-rm", Kinds: []string{"exec"}, ScriptFile: script}}
	st, err := d.buildMiddleware()
	if err != nil || st == nil {
		t.Fatalf("buildMiddleware: %v %v", st, err)
	}
	eng := govern.New(govern.Config{After: []govern.Stage{st}})
	dec, err := eng.Decide(context.Background(), &govern.Action{Kind: govern.KindExec, Exec: govern.NewExec([]string{"rm", "x"}, "", "", nil)})
	if err != nil || dec.Outcome != govern.Deny || !strings.Contains(dec.Message, "no rm") {
		t.Fatalf("decision %+v %v", dec, err)
	}

	// A bad script or a missing file stops the daemon.
	d.cfg.Governance.Middleware[0].Kinds = []string{"nope"}
	if _, err := d.buildMiddleware(); err == nil {
		t.Fatal("unknown kind accepted")
	}
	d.cfg.Governance.Middleware[0].Kinds = []string{"exec"}
	d.cfg.Governance.Middleware[0].ScriptFile = filepath.Join(dir, "missing.js")
	if _, err := d.buildMiddleware(); err == nil {
		t.Fatal("missing script accepted")
	}
	// None configured: the stage is there (middleware may be added through
	// the API) and allows.
	d.cfg.Governance.Middleware = nil
	st, err = d.buildMiddleware()
	if st == nil || err != nil || d.mwReg == nil {
		t.Fatalf("empty: %v %v", st, err)
	}
	eng = govern.New(govern.Config{After: []govern.Stage{st}})
	if dec, err := eng.Decide(context.Background(), &govern.Action{Kind: govern.KindExec, Exec: govern.NewExec([]string{"rm", "x"}, "", "", nil)}); err != nil || dec.Outcome != govern.Allow {
		t.Fatalf("empty: decision %+v %v", dec, err)
	}
}
