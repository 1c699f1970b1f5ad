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
// upload and download.
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
	jsonOut := flag.String("json", "", "also write the summaries as JSON to this file")
	apiURL := flag.String("api", "", "also drive a running wardend at this URL over its HTTP API (key from $WARDEN_API_KEY)")
	burst := flag.Int("burst", 100, "with -api: creates in flight at once")
	bigMiB := flag.Int64("big", 100, "with -api: size of the large upload/download in MiB")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: warden-bench [flags]\n\nMeasures native sandbox create→first output, exec round trip and teardown\nbeside bare fork/exec and bubblewrap baselines (needs root).\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(*n, *agentPath, *stateDir, *jsonOut, *apiURL, *burst, *bigMiB<<20); err != nil {
		fmt.Fprintln(os.Stderr, "warden-bench:", err)
		os.Exit(1)
	}
}

func run(n int, agentPath, stateDir, jsonOut, apiURL string, burst int, big int64) error {
	ctx := context.Background()
	tm, err := template.EnsureBase(filepath.Join(stateDir, "templates"))
	if err != nil {
		return err
	}
	b, err := native.New(native.Config{RunDir: filepath.Join(stateDir, "run"), AgentPath: agentPath})
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

	sums := []benchstat.Summary{fork.Summarize(bwrap), bwrap.Summarize(bwrap), create.Summarize(bwrap),
		rtTrue.Summarize(bwrap), rtEcho.Summarize(bwrap), teardown.Summarize(bwrap)}
	var notes []string
	if apiURL != "" {
		c, err := warden.New(warden.WithBaseURL(apiURL))
		if err != nil {
			return err
		}
		series, ns, err := apiBench(ctx, c, n, burst, big)
		if err != nil {
			return fmt.Errorf("api benchmark: %w", err)
		}
		for _, s := range series {
			sums = append(sums, s.Summarize(bwrap))
		}
		notes = ns
	}
	host, _ := os.Hostname()
	fmt.Printf("warden-bench: n=%d, host %s, %s\n\n", n, host, time.Now().UTC().Format(time.RFC3339))
	benchstat.Print(os.Stdout, "bwrap", sums)
	for _, note := range notes {
		fmt.Println("\n" + note)
	}
	if jsonOut != "" {
		raw, _ := json.MarshalIndent(sums, "", "  ")
		if err := os.WriteFile(jsonOut, raw, 0o644); err != nil {
			return err
		}
	}
	return nil
}
