package mw

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/govern"
)

// The test binary serves as the worker process when this is set.
const testWorkerEnv = "WARDEN_MW_TEST_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(testWorkerEnv) == "1" {
		if err := ServeWorker(os.Stdin, os.Stdout); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestWorker: scripts run in the worker process. A script that allocates
// without bound kills the worker (its address space is capped), not this
// process, and fails with a clear error; one that loops forever is cut off
// at its time limit; the next call works, in a restarted worker.
func TestWorker(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	set, err := New(Options{Worker: &WorkerOptions{Command: []string{exe, "-test.run=^$"},
		Env: []string{testWorkerEnv + "=1"}, MemoryBytes: 512 << 20}},
		Middleware{Name: "hog", Kinds: []govern.Kind{govern.KindCodeRun}, MaxMemoryMB: 1024, TimeoutMS: 5000,
			Script: `function pre(a) { if (a.code.code !== "hog") return {allow: true}; var b = []; for (;;) b.push(new ArrayBuffer(64 * 1024 * 1024)); }`},
		Middleware{Name: "spin", Kinds: []govern.Kind{govern.KindCodeRun}, TimeoutMS: 100,
			Script: `function pre(a) { if (a.code.code === "spin") { while (true) {} } return {allow: true}; }`},
		Middleware{Name: "mod", Kinds: []govern.Kind{govern.KindCodeRun},
			Script: `function pre(a) { return a.code.code === "x" ? {modify: "y"} : {allow: true}; }`},
	)
	if err != nil {
		t.Fatal(err)
	}
	run := func(code string) ([]Verdict, bool, *govern.Action) {
		a := &govern.Action{Kind: govern.KindCodeRun, Code: govern.NewCode("python", code)}
		vs, blocked := set.Pre(context.Background(), a)
		return vs, blocked, a
	}
	// A call through the worker, modify applied here.
	if vs, blocked, a := run("x"); blocked || a.Code.Code != "y" || len(vs) != 3 {
		t.Fatalf("modify through the worker: %+v %v %+v", vs, blocked, a.Code)
	}
	pid := set.worker.proc.cmd.Process.Pid

	vs, blocked, _ := run("hog")
	if !blocked || vs[0].Action != "error" || !strings.Contains(vs[0].Error, ErrWorkerDied.Error()) {
		t.Fatalf("hog: %+v %v", vs, blocked)
	}
	if set.worker.proc.cmd.Process.Pid != pid || !set.worker.proc.dead {
		t.Fatalf("the worker %d is not marked dead", pid)
	}

	vs, blocked, _ = run("spin")
	if !blocked || vs[len(vs)-1].Middleware != "spin" || !strings.Contains(vs[len(vs)-1].Error, "time limit exceeded") {
		t.Fatalf("spin: %+v %v", vs, blocked)
	}
	if vs, blocked, a := run("x"); blocked || a.Code.Code != "y" {
		t.Fatalf("after the failures: %+v %v", vs, blocked)
	}
	if set.worker.started != 2 {
		t.Fatalf("workers started: %d, want 2 (one restart after the hog)", set.worker.started)
	}
}
