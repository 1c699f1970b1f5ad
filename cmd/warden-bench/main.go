// Command warden-bench measures Warden's sandbox start and exec latency on
// this machine, beside baselines measured in the same run: a bare fork/exec of
// /bin/true and a bubblewrap launch (bwrap --unshare-all ... /bin/true).
//
//	sudo warden-bench -n 200 -agent bin/warden-agent
//
// It first drives the native backend in-process (the backend's own cost,
// without the HTTP API). With -api URL it also drives a running wardend over
// HTTP with the Go SDK: create → first output → kill sequentially and with
// -burst creates in flight, exec round trips, and 1 MiB and -big MiB file
// upload and download; with -idle N the CPU time N idle sandboxes and wardend
// use over 10 s.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/native"
	"github.com/warden-sandbox/warden/internal/benchstat"
	"github.com/warden-sandbox/warden/internal/template"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

func main() {
	n := flag.Int("n", 100, "iterations per measurement")
	agentPath := flag.String("agent", "", "warden-agent binary (default: next to this binary, then PATH)")
	stateDir := flag.String("state", "/var/lib/warden/bench", "directory for templates and run state")
	jsonOut := flag.String("json", "", "also write the results as JSON to this file")
	apiURL := flag.String("api", "", "also drive a running wardend at this URL over its HTTP API (key from $WARDEN_API_KEY)")
	burst := flag.Int("burst", 100, "with -api: creates in flight at once")
	bigMiB := flag.Int64("big", 100, "with -api: size of the large upload/download in MiB")
	densityFlag := flag.String("density", "", "with -api: idle sandboxes to hold, in increasing steps, such as 100,250,500,1000\n(empty: skip)")
	chartOut := flag.String("chart", "", "also draw the latency distributions as a PNG to this file")
	netMiB := flag.Int64("net", 0, "with -api: also measure the create-path cost of each network mode and an N MiB\ndownload from a fake host (a test namespace) through a sandbox's network and directly\n(0: skip)")
	idleN := flag.Int("idle", 0, "with -api: hold N idle native sandboxes and measure the CPU time their cgroups and wardend\nuse over 10 s (0: skip)")
	wardendPID := flag.Int("wardend-pid", 0, "with -idle: wardend's pid (default: the process listening on -api's port)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: warden-bench [flags]\n\nMeasures native sandbox create→first output, exec round trip and teardown\nbeside bare fork/exec, bubblewrap and (when installed) runsc baselines (needs root).\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	var steps []int
	for _, f := range strings.Split(*densityFlag, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v <= 0 || (len(steps) > 0 && v <= steps[len(steps)-1]) {
			fmt.Fprintln(os.Stderr, "warden-bench: -density takes increasing positive counts, such as 100,250,500,1000")
			os.Exit(2)
		}
		steps = append(steps, v)
	}
	o := opts{n: *n, agent: *agentPath, state: *stateDir, json: *jsonOut, api: *apiURL, burst: *burst, big: *bigMiB << 20,
		density: steps, chart: *chartOut, net: *netMiB << 20, idle: *idleN, wardendPID: *wardendPID}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "warden-bench:", err)
		os.Exit(1)
	}
}

// opts are the benchmark's settings.
type opts struct {
	n           int
	agent       string
	state, json string
	api         string
	burst       int
	big         int64
	density     []int
	chart       string
	net         int64 // bytes of the network download; 0 skips the network part
	idle        int   // idle sandboxes whose CPU use to measure; 0 skips it
	wardendPID  int   // wardend's pid for the idle measurement; 0 finds it
}

// results is the JSON output.
type results struct {
	Host      string              `json:"host"`
	Time      time.Time           `json:"time"`
	N         int                 `json:"n"`
	Summaries []benchstat.Summary `json:"summaries"`
	Density   []densityStep       `json:"density,omitempty"`
	IdleCPU   *idleCPU            `json:"idle_cpu,omitempty"`
	Notes     []string            `json:"notes,omitempty"`
}

func run(o opts) error {
	n := o.n
	ctx := context.Background()
	tm, err := template.EnsureBase(filepath.Join(o.state, "templates"))
	if err != nil {
		return err
	}
	b, err := native.New(native.Config{RunDir: filepath.Join(o.state, "run"), AgentPath: o.agent})
	if err != nil {
		return err
	}

	fork := &benchstat.Series{Name: "baseline: fork/exec /bin/true"}
	if err := fork.Time(n, func() error { return exec.Command("/bin/true").Run() }); err != nil {
		return err
	}
	bwrap := &benchstat.Series{Name: "baseline: bwrap --unshare-all /bin/true"}
	bwrapPath, err := exec.LookPath("bwrap")
	if err != nil {
		return fmt.Errorf("bubblewrap not installed (apt-get install bubblewrap): %w", err)
	}
	bwrapArgs := []string{"--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
		"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev", "/bin/true"}
	if err := bwrap.Time(n, func() error { return exec.Command(bwrapPath, bwrapArgs...).Run() }); err != nil {
		return err
	}
	baselines := []*benchstat.Series{fork, bwrap}
	if o.api != "" && o.burst > 1 {
		// The burst's floor on this machine: as many bubblewrap launches
		// at once as the API burst has creates, each timed from the common
		// start to its exit.
		bb := &benchstat.Series{Name: fmt.Sprintf("baseline: %d bwrap launches at once", o.burst)}
		var mu sync.Mutex
		var wg sync.WaitGroup
		errs := make(chan error, o.burst)
		start := time.Now()
		for i := 0; i < o.burst; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := exec.Command(bwrapPath, bwrapArgs...).Run(); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				bb.Add(time.Since(start))
				mu.Unlock()
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return fmt.Errorf("bwrap burst: %w", err)
		}
		baselines = append(baselines, bb)
	}
	var notes []string
	if runsc, err := exec.LookPath("runsc"); err == nil {
		rs := &benchstat.Series{Name: "baseline: runsc do true (systrap)"}
		runscArgs := []string{"--network=none", "--platform=systrap", "--ignore-cgroups", "--root", filepath.Join(o.state, "runsc"), "do", "true"}
		if err := rs.Time(min(n, 50), func() error {
			if out, err := exec.Command(runsc, runscArgs...).CombinedOutput(); err != nil {
				return fmt.Errorf("runsc do true: %w: %s", err, out)
			}
			return nil
		}); err != nil {
			notes = append(notes, "runsc baseline skipped: "+err.Error())
		} else {
			baselines = append(baselines, rs)
		}
	} else {
		notes = append(notes, "runsc is not installed: no gVisor baseline (scripts/install-runsc.sh builds it)")
	}

	seq := 0
	newSpec := func() backend.Spec {
		seq++
		return tm.Spec(fmt.Sprintf("bench-%d-%d", os.Getpid(), seq))
	}
	create := &benchstat.Series{Name: "native: create → first output (echo)"}
	teardown := &benchstat.Series{Name: "native: teardown (delete)"}
	for i := 0; i < n; i++ {
		spec := newSpec()
		t0 := time.Now()
		h, err := b.Create(ctx, spec)
		if err != nil {
			return err
		}
		if h, err = b.Start(ctx, h); err != nil {
			b.Delete(ctx, h)
			return err
		}
		c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return b.DialAgent(ctx, h) })
		var out bytes.Buffer
		if _, err := c.Run(ctx, agentclient.Cmd{Args: []string{"echo", "hi"}, Stdout: &out}); err != nil || out.String() != "hi\n" {
			b.Delete(ctx, h)
			return fmt.Errorf("first command: %q %v", out.String(), err)
		}
		create.Add(time.Since(t0))
		c.Close()
		t1 := time.Now()
		if err := b.Delete(ctx, h); err != nil {
			return err
		}
		teardown.Add(time.Since(t1))
	}

	spec := newSpec()
	h, err := b.Create(ctx, spec)
	if err != nil {
		return err
	}
	defer b.Delete(ctx, h)
	if h, err = b.Start(ctx, h); err != nil {
		return err
	}
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return b.DialAgent(ctx, h) })
	defer c.Close()
	rtTrue := &benchstat.Series{Name: "native: exec round trip (true)"}
	if err := rtTrue.Time(n, func() error {
		_, err := c.Run(ctx, agentclient.Cmd{Args: []string{"true"}})
		return err
	}); err != nil {
		return err
	}
	rtEcho := &benchstat.Series{Name: "native: exec round trip (echo, output read)"}
	if err := rtEcho.Time(n, func() error {
		var out bytes.Buffer
		_, err := c.Run(ctx, agentclient.Cmd{Args: []string{"echo", "hi"}, Stdout: &out})
		return err
	}); err != nil {
		return err
	}

	all := append(slices.Clone(baselines), create, rtTrue, rtEcho, teardown)
	var steps []densityStep
	var idle *idleCPU
	if o.api != "" {
		c, err := warden.New(warden.WithBaseURL(o.api))
		if err != nil {
			return err
		}
		series, ns, err := apiBench(ctx, c, n, o.burst, o.big)
		if err != nil {
			return fmt.Errorf("api benchmark: %w", err)
		}
		all = append(all, series...)
		notes = append(notes, ns...)
		bs, bn, err := backendBench(ctx, c, n)
		if err != nil {
			return fmt.Errorf("pause/resume benchmark: %w", err)
		}
		all = append(all, bs...)
		notes = append(notes, bn...)
		if o.net > 0 {
			ns, nn, err := networkBench(ctx, c, n, o.net)
			if err != nil {
				return fmt.Errorf("network benchmark: %w", err)
			}
			all = append(all, ns...)
			notes = append(notes, nn...)
		}
		if o.idle > 0 {
			r, err := idleBench(ctx, c, o.idle, o.api, o.wardendPID)
			if err != nil {
				return fmt.Errorf("idle CPU: %w", err)
			}
			idle = &r
			notes = append(notes, r.String())
		}
		if len(o.density) > 0 {
			var ds []*benchstat.Series
			steps, ds, err = density(ctx, c, o.density)
			all = append(all, ds...)
			if err != nil {
				return fmt.Errorf("density: %w", err)
			}
		}
	}
	var sums []benchstat.Summary
	for _, s := range all {
		sums = append(sums, s.Summarize(bwrap))
	}
	host, _ := os.Hostname()
	now := time.Now().UTC()
	fmt.Printf("warden-bench: n=%d, host %s, %s\n\n", n, host, now.Format(time.RFC3339))
	benchstat.Print(os.Stdout, "bwrap", sums)
	if len(steps) > 0 {
		printDensity(steps)
	}
	for _, note := range notes {
		fmt.Println("\n" + note)
	}
	if o.json != "" {
		raw, _ := json.MarshalIndent(results{Host: host, Time: now, N: n, Summaries: sums, Density: steps, IdleCPU: idle, Notes: notes}, "", "  ")
		if err := os.WriteFile(o.json, raw, 0o644); err != nil {
			return err
		}
	}
	if o.chart != "" {
		var keep []*benchstat.Series
		for _, s := range all {
			// The chart shows latencies of one kind: starts and round trips,
			// not the large transfers or the density steps.
			if !strings.Contains(s.Name, "MiB") && !strings.Contains(s.Name, "idle sandboxes") && !strings.Contains(s.Name, "kill") && !strings.Contains(s.Name, "network") {
				keep = append(keep, s)
			}
		}
		f, err := os.Create(o.chart)
		if err != nil {
			return err
		}
		err = benchstat.Chart(f, fmt.Sprintf("warden-bench %s, %s: latency distributions", host, now.Format("2006-01-02")), keep)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
