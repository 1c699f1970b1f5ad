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
		f.add("Processes", fmt.Sprint(u.PIDs))
		f.add("Disk", bytesIEC(u.DiskBytes))
		f.add("OOM events", fmt.Sprint(u.OOMEvents))
		return f.flush()
	}
	return c
}
