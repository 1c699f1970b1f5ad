package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/benchstat"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// apiBench drives a running wardend over its HTTP API with the Go SDK.
func apiBench(ctx context.Context, c *warden.Client, n, burst int, big int64) ([]*benchstat.Series, []string, error) {
	var notes []string
	create := &benchstat.Series{Name: "api: create → first output (sequential, warm pool)"}
	kill := &benchstat.Series{Name: "api: kill"}
	for i := 0; i < n; i++ {
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 120})
		if err != nil {
			return nil, nil, fmt.Errorf("create: %w", err)
		}
		var out bytes.Buffer
		if _, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"echo", "hi"}}, warden.ExecIO{Stdout: &out}); err != nil || out.String() != "hi\n" {
			c.KillSandbox(ctx, sb.ID)
			return nil, nil, fmt.Errorf("first command: %q %w", out.String(), err)
		}
		create.Add(time.Since(t0))
		t1 := time.Now()
		if err := c.KillSandbox(ctx, sb.ID); err != nil {
			return nil, nil, fmt.Errorf("kill: %w", err)
		}
		kill.Add(time.Since(t1))
		// Let the warm pool refill, as between an agent's real requests.
		time.Sleep(20 * time.Millisecond)
	}

	// The cold path: a request the warm pool cannot serve (other memory
	// limit) boots a sandbox on the spot.
	cold := &benchstat.Series{Name: "api: create → first output (cold, no pool)"}
	for i := 0; i < n; i++ {
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 120, MemoryMB: 384})
		if err != nil {
			return nil, nil, fmt.Errorf("create (cold): %w", err)
		}
		var out bytes.Buffer
		if _, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"echo", "hi"}}, warden.ExecIO{Stdout: &out}); err != nil || out.String() != "hi\n" {
			c.KillSandbox(ctx, sb.ID)
			return nil, nil, fmt.Errorf("first command (cold): %q %w", out.String(), err)
		}
		cold.Add(time.Since(t0))
		if err := c.KillSandbox(ctx, sb.ID); err != nil {
			return nil, nil, fmt.Errorf("kill: %w", err)
		}
	}
	time.Sleep(time.Second) // the pool refills before the burst

	burstS := &benchstat.Series{Name: fmt.Sprintf("api: create → first output (%d in flight)", burst)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var burstIDs []string
	errs := make(chan error, burst)
	for i := 0; i < burst; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 120})
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			burstIDs = append(burstIDs, sb.ID)
			mu.Unlock()
			if _, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{}); err != nil {
				errs <- err
				return
			}
			mu.Lock()
			burstS.Add(time.Since(t0))
			mu.Unlock()
		}()
	}
	wg.Wait()
	// Killed after the burst, not by each create as it finishes: the
	// kills would otherwise load the machine under the creates still in
	// flight, which is not what a burst of creates costs.
	for _, id := range burstIDs {
		c.KillSandbox(context.WithoutCancel(ctx), id)
	}
	close(errs)
	failed := 0
	var firstErr error
	for err := range errs {
		failed++
		if firstErr == nil {
			firstErr = err
		}
	}
	if failed > 0 {
		notes = append(notes, fmt.Sprintf("burst: %d of %d failed (first: %v)", failed, burst, firstErr))
	}

	sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 600, DiskMB: int(2*big>>20) + 64, MemoryMB: int(2*big>>20) + 256})
	if err != nil {
		return nil, nil, err
	}
	defer c.KillSandbox(context.WithoutCancel(ctx), sb.ID)
	rt := &benchstat.Series{Name: "api: exec round trip (true)"}
	if err := rt.Time(n, func() error {
		_, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{})
		return err
	}); err != nil {
		return nil, nil, err
	}
	series := []*benchstat.Series{create, cold, kill, burstS, rt}
	for _, size := range []int64{1 << 20, big} {
		data := make([]byte, size)
		rand.Read(data)
		up := &benchstat.Series{Name: fmt.Sprintf("api: upload %d MiB", size>>20)}
		down := &benchstat.Series{Name: fmt.Sprintf("api: download %d MiB", size>>20)}
		reps := 5
		for i := 0; i < reps; i++ {
			t0 := time.Now()
			if _, err := c.WriteFile(ctx, sb.ID, "/tmp/blob", bytes.NewReader(data), warden.WriteOptions{}); err != nil {
				return nil, nil, fmt.Errorf("upload: %w", err)
			}
			up.Add(time.Since(t0))
			t0 = time.Now()
			r, err := c.ReadFile(ctx, sb.ID, "/tmp/blob", warden.ReadOptions{})
			if err != nil {
				return nil, nil, fmt.Errorf("download: %w", err)
			}
			got, err := io.Copy(io.Discard, r)
			r.Close()
			if err != nil || got != size {
				return nil, nil, fmt.Errorf("download: %d bytes, %v", got, err)
			}
			down.Add(time.Since(t0))
		}
		mbps := func(s *benchstat.Series) float64 {
			return float64(size) / 1e6 / s.Quantile(0.5).Seconds()
		}
		notes = append(notes, fmt.Sprintf("%d MiB: upload %.0f MB/s, download %.0f MB/s (medians of %d)", size>>20, mbps(up), mbps(down), reps))
		series = append(series, up, down)
	}
	return series, notes, nil
}
