package cli

import (
	"context"
	"fmt"
	"time"
)

func sandboxUsageCmd() *command {
	c := &command{
		name:  "usage",
		args:  "ID",
		short: "Show a sandbox's resource usage",
		long:  "Show the sandbox's CPU time, memory, processes, disk and out-of-memory events.",
		json:  true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one sandbox ID, got %d arguments", len(args))
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		u, err := cl.Usage(ctx, args[0])
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, u)
		}
		f := newFields(r.env.Stdout)
		f.add("CPU time", time.Duration(u.CPUNanos).Round(time.Millisecond).String())
		f.add("Memory", fmt.Sprintf("%s (peak %s)", bytesIEC(u.MemoryBytes), bytesIEC(u.MemoryPeak)))
		// -1: the backend cannot observe it (gvisor: pids live in gVisor's
		// kernel, the writable layer in its memory).
		f.add("Processes", notReported(u.PIDs, fmt.Sprint(u.PIDs)))
		f.add("Disk", notReported(u.DiskBytes, bytesIEC(u.DiskBytes)))
		f.add("OOM events", fmt.Sprint(u.OOMEvents))
		return f.flush()
	}
	return c
}

// notReported is s, or "not reported" for a figure the backend gives as -1.
func notReported(n int64, s string) string {
	if n < 0 {
		return "not reported"
	}
	return s
}
