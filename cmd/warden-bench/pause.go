package main

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/warden-sandbox/warden/internal/benchstat"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// backendBench measures, over the API, per backend: pause and resume of an
// idle sandbox (a shell sleeping in it), resume → first output, and for
// gvisor create → first output (no pool) and a fork.
func backendBench(ctx context.Context, c *warden.Client, n int) ([]*benchstat.Series, []string, error) {
	var series []*benchstat.Series
	var notes []string
	echo := func(id string) error {
		var out bytes.Buffer
		if _, err := c.Exec(ctx, id, warden.ExecRequest{Cmd: []string{"echo", "hi"}}, warden.ExecIO{Stdout: &out}); err != nil || out.String() != "hi\n" {
			return fmt.Errorf("first command: %q %w", out.String(), err)
		}
		return nil
	}
	for _, iso := range []string{"native", "gvisor"} {
		sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Isolation: iso, TimeoutSeconds: 600})
		if warden.IsValidationFailed(err) && iso != "native" {
			notes = append(notes, iso+": not available on this daemon ("+err.Error()+"); no figures")
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("create %s: %w", iso, err)
		}
		if _, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Command: "sleep 100000 >/dev/null 2>&1 &"}, warden.ExecIO{}); err != nil {
			c.KillSandbox(ctx, sb.ID)
			return nil, nil, err
		}
		pause := &benchstat.Series{Name: fmt.Sprintf("api: pause, idle sandbox (%s)", iso)}
		resume := &benchstat.Series{Name: fmt.Sprintf("api: resume, idle sandbox (%s)", iso)}
		first := &benchstat.Series{Name: fmt.Sprintf("api: resume → first output (%s)", iso)}
		reps := n
		if iso == "gvisor" {
			reps = min(n, 30)
		}
		for i := 0; i < reps; i++ {
			t0 := time.Now()
			if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
				c.KillSandbox(ctx, sb.ID)
				return nil, nil, fmt.Errorf("pause %s: %w", iso, err)
			}
			pause.Add(time.Since(t0))
			t0 = time.Now()
			if _, err := c.ResumeSandbox(ctx, sb.ID); err != nil {
				c.KillSandbox(ctx, sb.ID)
				return nil, nil, fmt.Errorf("resume %s: %w", iso, err)
			}
			resume.Add(time.Since(t0))
			if err := echo(sb.ID); err != nil {
				c.KillSandbox(ctx, sb.ID)
				return nil, nil, err
			}
			first.Add(time.Since(t0))
		}
		series = append(series, pause, resume, first)
		if iso == "gvisor" {
			fork := &benchstat.Series{Name: "api: fork 1 → first output (gvisor)"}
			for i := 0; i < min(n, 10); i++ {
				t0 := time.Now()
				forks, err := c.ForkSandbox(ctx, sb.ID, warden.ForkRequest{Count: 1})
				if err != nil {
					c.KillSandbox(ctx, sb.ID)
					return nil, nil, fmt.Errorf("fork: %w", err)
				}
				err = echo(forks[0].ID)
				fork.Add(time.Since(t0))
				c.KillSandbox(ctx, forks[0].ID)
				if err != nil {
					c.KillSandbox(ctx, sb.ID)
					return nil, nil, err
				}
			}
			series = append(series, fork)
		}
		c.KillSandbox(ctx, sb.ID)
		if iso == "gvisor" {
			create := &benchstat.Series{Name: "api: create → first output (gvisor, no pool)"}
			for i := 0; i < min(n, 30); i++ {
				t0 := time.Now()
				sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Isolation: iso, TimeoutSeconds: 120})
				if err != nil {
					return nil, nil, fmt.Errorf("create gvisor: %w", err)
				}
				err = echo(sb.ID)
				create.Add(time.Since(t0))
				c.KillSandbox(ctx, sb.ID)
				if err != nil {
					return nil, nil, err
				}
			}
			series = append(series, create)
		}
	}
	return series, notes, nil
}
