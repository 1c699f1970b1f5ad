package mw

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/warden-sandbox/warden/internal/govern"
)

func TestRegistry(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "middleware.json")
	set, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	conf := Middleware{Name: "conf", Kinds: []govern.Kind{govern.KindExec}, Script: `function pre(a){return {allow:true}}`}
	reg, err := OpenRegistry(set, file, []Middleware{conf})
	if err != nil {
		t.Fatal(err)
	}
	block := Middleware{Name: "no-rm", Kinds: []govern.Kind{govern.KindExec},
		Script: `function pre(a){ return a.exec.cmd === "rm" ? {block: "no rm"} : {allow: true}; }`}
	if created, err := reg.Put(block); err != nil || !created {
		t.Fatalf("put: %v %v", created, err)
	}
	rm := func() *govern.Action {
		return &govern.Action{Kind: govern.KindExec, Exec: govern.NewExec([]string{"rm", "x"}, "", "", nil)}
	}
	if _, blocked := set.Pre(context.Background(), rm()); !blocked {
		t.Fatal("the added middleware does not run")
	}
	// Config-file middleware are read-only; a bad script changes nothing.
	if _, err := reg.Put(Middleware{Name: "conf", Kinds: []govern.Kind{govern.KindExec}, Script: ""}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("replace config middleware: %v", err)
	}
	if err := reg.Delete("conf"); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("delete config middleware: %v", err)
	}
	if _, err := reg.Put(Middleware{Name: "bad", Kinds: []govern.Kind{govern.KindExec}, Script: "function ("}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad script: %v", err)
	}
	if got := reg.List(); len(got) != 2 || got[0].Source != SourceConfig || got[1].Name != "no-rm" || got[1].Source != SourceAPI {
		t.Fatalf("list: %+v", got)
	}
	// Replace in place; the file survives a reopen (a restart).
	block.Script = `function pre(a){ return {block: "all blocked"}; }`
	if created, err := reg.Put(block); err != nil || created {
		t.Fatalf("replace: %v %v", created, err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file: %v %v", fi, err)
	}
	set2, _ := New(Options{})
	reg2, err := OpenRegistry(set2, file, []Middleware{conf})
	if err != nil {
		t.Fatal(err)
	}
	if e, err := reg2.Get("no-rm"); err != nil || e.Script != block.Script {
		t.Fatalf("reopened: %+v %v", e, err)
	}
	if vs, blocked := set2.Pre(context.Background(), rm()); !blocked || vs[len(vs)-1].Message != "all blocked" {
		t.Fatalf("reopened set: %+v", vs)
	}
	if err := reg2.Delete("no-rm"); err != nil {
		t.Fatal(err)
	}
	if _, blocked := set2.Pre(context.Background(), rm()); blocked {
		t.Fatal("removed middleware still runs")
	}
	if err := reg2.Delete("no-rm"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
}
