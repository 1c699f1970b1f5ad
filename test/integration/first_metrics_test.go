package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// series is one sample of a /metrics scrape.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

// scrapeMetrics reads /metrics (with the admin key: the endpoint may need
// the metrics:read scope) and parses the text format's samples.
func scrapeMetrics(t *testing.T, d *daemon) []series {
	t.Helper()
	req, _ := http.NewRequest("GET", d.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+d.adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	var out []series
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		s := series{name: line[:sp], labels: map[string]string{}, value: v}
		if i := strings.IndexByte(s.name, '{'); i >= 0 {
			for _, kv := range strings.Split(strings.TrimSuffix(s.name[i+1:], "}"), ",") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					s.labels[k] = strings.Trim(v, `"`)
				}
			}
			s.name = s.name[:i]
		}
		out = append(out, s)
	}
	return out
}

// sum adds the samples of name whose labels include want (k=v pairs), and
// reports whether there was any.
func sum(ss []series, name string, want ...string) (float64, bool) {
	var total float64
	found := false
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for _, kv := range want {
			k, v, _ := strings.Cut(kv, "=")
			if s.labels[k] != v {
				continue next
			}
		}
		total += s.value
		found = true
	}
	return total, found
}

// TestFirstMetrics: after a day's work on one daemon (a pooled create, a CPU
// burn, memory held, pause and resume, an OOM kill, a gVisor sandbox and its
// fork, a template import and build, a kill), /metrics reports each of it:
// per-sandbox CPU, memory and OOM kills, the OOM total, operation and
// template durations, and the warm pool's size and hits.
func TestFirstMetrics(t *testing.T) {
	state, run := newDirs(t)
	// runsc keeps its null-netns mount past its sandboxes (see unmountUnder).
	t.Cleanup(func() { unmountUnder(filepath.Join(run, "gvisor")) })
	// Per-sandbox series carry their sandbox label only when the operator
	// asks (metrics.per_sandbox_labels); by default they are summed.
	cfg := lnWriteConfig(t, "metrics:\n  per_sandbox_labels: true\n")
	d := startDaemon(t, state, run, "--pool-size", "1", "--config", cfg)
	c := d.client(t, d.adminKey)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\ndaemon log:\n%s", append(args, d.log)...)
	}
	// waitFor scrapes until ok holds of a scrape, or fails with what.
	waitFor := func(what string, ok func([]series) bool) []series {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			ss := scrapeMetrics(t, d)
			if ok(ss) {
				return ss
			}
			if time.Now().After(deadline) {
				fail("metrics never showed %s", what)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	sbSeries := func(ss []series, name, id string) float64 {
		v, ok := sum(ss, name, "sandbox="+id)
		if !ok {
			return -1
		}
		return v
	}

	// The pool fills; a default create takes its sandbox: a hit.
	waitFor("a full warm pool", func(ss []series) bool {
		v, _ := sum(ss, "warden_pool_size", "template=base")
		return v == 1
	})
	a, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	ss := scrapeMetrics(t, d)
	if v, _ := sum(ss, "warden_pool_hits_total"); v < 1 {
		fail("warden_pool_hits_total %v after a create from a full pool", v)
	}
	if v, ok := sum(ss, "warden_pool_target", "template=base"); !ok || v != 1 {
		fail("warden_pool_target %v %v, want 1", v, ok)
	}
	if _, ok := sum(ss, "warden_pool_misses_total"); !ok {
		fail("no warden_pool_misses_total")
	}

	// CPU: a burn of a few hundred milliseconds shows in the sandbox's
	// counter, labelled with its template and backend.
	cpu0 := sbSeries(ss, "warden_sandbox_cpu_seconds_total", a.ID)
	if cpu0 < 0 {
		fail("no CPU series for %s", a.ID)
	}
	burn := "x = 0\nfor i in range(3000000):\n    x += i * i\n"
	if res, err := c.Exec(ctx, a.ID, warden.ExecRequest{Cmd: []string{"python3", "-c", burn}}, warden.ExecIO{}); err != nil || res.ExitCode != 0 {
		fail("cpu burn: %+v %v", res, err)
	}
	ss = scrapeMetrics(t, d)
	if cpu := sbSeries(ss, "warden_sandbox_cpu_seconds_total", a.ID); cpu-cpu0 < 0.1 {
		fail("CPU seconds of %s went from %v to %v over a burn", a.ID, cpu0, cpu)
	}
	if _, ok := sum(ss, "warden_sandbox_cpu_seconds_total", "sandbox="+a.ID, "template=base", "isolation=native"); !ok {
		fail("the CPU series of %s lacks template=base isolation=native", a.ID)
	}

	// Memory: a process holding 48 MiB (written, so resident) shows.
	hctx, hcancel := context.WithCancel(ctx)
	hold := "import time\nb = bytes(range(256)) * (192 << 10)\ntime.sleep(120)\n"
	held := make(chan struct{})
	go func() {
		defer close(held)
		c.Exec(hctx, a.ID, warden.ExecRequest{Cmd: []string{"python3", "-c", hold}, TimeoutSeconds: 150}, warden.ExecIO{})
	}()
	waitFor("48 MiB held in "+a.ID, func(ss []series) bool {
		return sbSeries(ss, "warden_sandbox_memory_bytes", a.ID) >= 40<<20
	})

	// Pause and resume, through the CLI; a paused sandbox is still reported.
	for _, verb := range []string{"pause", "resume"} {
		if out, errb, code := d.cli(t, "", "sandbox", verb, a.ID); code != 0 {
			fail("warden sandbox %s: %d %s %s", verb, code, out, errb)
		}
		if verb == "pause" {
			if sbSeries(scrapeMetrics(t, d), "warden_sandbox_memory_bytes", a.ID) < 40<<20 {
				fail("the paused sandbox's held memory is not reported")
			}
		}
	}
	hcancel()
	<-held

	// OOM: a small sandbox's memory bomb is killed; the total and the
	// sandbox's own counter show it.
	o, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{MemoryMB: 64})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.Exec(ctx, o.ID, warden.ExecRequest{Cmd: []string{"python3", "-c", "b = bytearray(300 << 20)"}}, warden.ExecIO{}); err != nil || res.Signal != 9 {
		fail("memory bomb: %+v %v, want killed by SIGKILL", res, err)
	}
	waitFor("the OOM kill", func(ss []series) bool {
		total, _ := sum(ss, "warden_oom_kills_total", "isolation=native")
		return total >= 1 && sbSeries(ss, "warden_sandbox_oom_kills_total", o.ID) >= 1
	})

	// gVisor: a sandbox and a fork of it.
	g, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Isolation: "gvisor", TimeoutSeconds: 600})
	if err != nil {
		fail("create a gvisor sandbox: %v", err)
	}
	forks, err := c.ForkSandbox(ctx, g.ID, warden.ForkRequest{Count: 1})
	if err != nil || len(forks) != 1 {
		fail("fork: %v %v", forks, err)
	}

	// Templates: an image archive imported and a Dockerfile built, through
	// the CLI.
	dir := t.TempDir()
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	tw.WriteHeader(&tar.Header{Name: "hello.txt", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg})
	tw.Write([]byte("hi\n"))
	tw.Close()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "img.tar")
	if err := tarball.WriteToFile(archive, name.MustParseReference("example.com/metrics:1"), img); err != nil {
		t.Fatal(err)
	}
	if out, errb, code := d.cli(t, "", "template", "import", archive, "-t", "metrics-imp:1"); code != 0 {
		fail("warden template import: %d %s %s", code, out, errb)
	}
	ctxDir := filepath.Join(dir, "ctx")
	os.MkdirAll(ctxDir, 0o755)
	os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte("FROM base\nRUN echo built > /home/user/built\n"), 0o644)
	if out, errb, code := d.cli(t, "", "template", "build", "-t", "metrics-build:1", ctxDir); code != 0 {
		fail("warden template build: %d %s %s", code, out, errb)
	}

	// A kill, through the CLI.
	if out, errb, code := d.cli(t, "", "sandbox", "kill", o.ID); code != 0 {
		fail("warden sandbox kill: %d %s %s", code, out, errb)
	}

	// Ten live sandboxes: every one has its series (and the scrape's time
	// goes to the log, for the record; it is not asserted).
	ids := []string{a.ID, g.ID, forks[0].ID}
	for len(ids) < 10 {
		sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	for range 3 {
		start := time.Now()
		ss = scrapeMetrics(t, d)
		t.Logf("a scrape with %d live sandboxes took %v", len(ids), time.Since(start))
	}
	for _, id := range ids {
		if sbSeries(ss, "warden_sandbox_cpu_seconds_total", id) < 0 || sbSeries(ss, "warden_sandbox_memory_bytes", id) <= 0 {
			fail("live sandbox %s lacks its CPU or memory series", id)
		}
	}
	count := func(name string, labels ...string) float64 {
		v, _ := sum(ss, name+"_count", labels...)
		return v
	}
	for _, w := range []struct {
		metric string
		labels []string
		min    float64
	}{
		{"warden_sandbox_operation_duration_seconds", []string{"op=create", "isolation=native", "outcome=success"}, 2},
		{"warden_sandbox_operation_duration_seconds", []string{"op=create", "isolation=gvisor", "outcome=success"}, 1},
		{"warden_sandbox_operation_duration_seconds", []string{"op=pause", "isolation=native", "outcome=success"}, 1},
		{"warden_sandbox_operation_duration_seconds", []string{"op=resume", "isolation=native", "outcome=success"}, 1},
		{"warden_sandbox_operation_duration_seconds", []string{"op=fork", "isolation=gvisor", "outcome=success"}, 1},
		{"warden_sandbox_operation_duration_seconds", []string{"op=kill", "isolation=native", "outcome=success"}, 1},
		{"warden_template_operation_duration_seconds", []string{"op=import", "outcome=success"}, 1},
		{"warden_template_operation_duration_seconds", []string{"op=build", "outcome=success"}, 1},
	} {
		if got := count(w.metric, w.labels...); got < w.min {
			fail("%s_count{%s} = %v, want at least %v", w.metric, strings.Join(w.labels, ","), got, w.min)
		}
		if v, _ := sum(ss, w.metric+"_sum", w.labels...); v <= 0 {
			fail("%s_sum{%s} = %v, want > 0", w.metric, strings.Join(w.labels, ","), v)
		}
	}
	for _, id := range []string{g.ID, forks[0].ID} {
		if _, ok := sum(ss, "warden_sandbox_cpu_seconds_total", "sandbox="+id, "isolation=gvisor"); !ok {
			fail("no CPU series for gvisor sandbox %s", id)
		}
		if v := sbSeries(ss, "warden_sandbox_memory_bytes", id); v <= 0 {
			fail("memory of gvisor sandbox %s: %v", id, v)
		}
	}
	// The killed sandbox is no longer reported; the total keeps its kill.
	if v := sbSeries(ss, "warden_sandbox_cpu_seconds_total", o.ID); v >= 0 {
		fail("killed sandbox %s still has a CPU series", o.ID)
	}
	if v, _ := sum(ss, "warden_oom_kills_total"); v < 1 {
		fail("warden_oom_kills_total %v after the kill of its sandbox", v)
	}
	// Only the per-sandbox series name sandboxes (the sandbox usage meter's
	// warden_usage_* among them: its sandbox label follows the same switch).
	for _, s := range ss {
		if _, ok := s.labels["sandbox"]; ok && !strings.HasPrefix(s.name, "warden_sandbox_") && !strings.HasPrefix(s.name, "warden_network_") &&
			!strings.HasPrefix(s.name, "warden_usage_") {
			fail("series %s has a sandbox label", s.name)
		}
	}
}
