package cgroup

import (
	"os"
	"path/filepath"
	"testing"
)

// The usage meter (internal/usage) bills CPU-seconds and memory from these
// readings; this host may have only one layout, so both parsers run here
// on fixtures in the kernel's formats.

func writeFixture(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStatsV2Fixture(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"cpu.stat": "usage_usec 2034567\nuser_usec 2000000\nsystem_usec 34567\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n" +
			"nr_bursts 0\nburst_usec 0\n",
		"memory.current": "134742016\n",
		"memory.peak":    "140000256\n",
		"memory.events":  "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n",
		"pids.current":   "4\n",
		"pids.events":    "max 2\n",
	}
	writeFixture(t, dir, files)
	s, err := (&v2Group{dir: dir}).stats()
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{CPUNanos: 2034567000, MemoryBytes: 134742016, MemoryPeak: 140000256, MemoryLimitHits: 3, OOMEvents: 1,
		Pids: 4, PidsLimitHits: 2}
	if s != want {
		t.Fatalf("v2 stats\n got %+v\nwant %+v", s, want)
	}
	// memory.peak is missing before Linux 5.19.
	os.Remove(filepath.Join(dir, "memory.peak"))
	if s, err = (&v2Group{dir: dir}).stats(); err != nil || s.MemoryPeak != 0 || s.CPUNanos != want.CPUNanos {
		t.Fatalf("v2 stats without memory.peak: %+v, %v", s, err)
	}
	// A cgroup without cpu.stat (removed under the reader) is an error, not zero.
	os.Remove(filepath.Join(dir, "cpu.stat"))
	if _, err := (&v2Group{dir: dir}).stats(); err == nil {
		t.Fatal("v2 stats without cpu.stat: no error")
	}
}

func TestStatsV1Fixture(t *testing.T) {
	root := t.TempDir()
	l := &v1Layout{root: root}
	g := &v1Group{layout: l, name: "sb-x"}
	writeFixture(t, g.dir("cpuacct"), map[string]string{"cpuacct.usage": "2034567123\n"})
	writeFixture(t, g.dir("memory"), map[string]string{
		"memory.usage_in_bytes":     "134742016\n",
		"memory.max_usage_in_bytes": "140000256\n",
		"memory.failcnt":            "3\n",
		"memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
	})
	writeFixture(t, g.dir("pids"), map[string]string{"pids.current": "4\n", "pids.events": "max 2\n"})
	s, err := g.stats()
	if err != nil {
		t.Fatal(err)
	}
	want := Stats{CPUNanos: 2034567123, MemoryBytes: 134742016, MemoryPeak: 140000256, MemoryLimitHits: 3, OOMEvents: 1,
		Pids: 4, PidsLimitHits: 2}
	if s != want {
		t.Fatalf("v1 stats\n got %+v\nwant %+v", s, want)
	}
}
