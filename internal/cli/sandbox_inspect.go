package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func sandboxInspectCmd() *command {
	c := &command{
		name:  "inspect",
		args:  "ID",
		short: "Show a sandbox's details",
		long:  "Show everything the daemon knows about a sandbox (the Sandbox object with --json).",
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
		sb, err := cl.GetSandbox(ctx, args[0])
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, sb)
		}
		return writeSandbox(r.env.Stdout, sb, r.env.Now())
	}
	return c
}

// writeSandbox writes one sandbox as "NAME: value" lines.
func writeSandbox(w io.Writer, sb warden.Sandbox, now time.Time) error {
	f := newFields(w)
	f.add("ID", sb.ID)
	f.add("Name", orDash(sb.Name))
	f.add("Template", orDash(sb.Template))
	f.add("State", string(sb.State))
	f.add("Backend", orDash(sb.Backend))
	f.add("Owner", orDash(sb.Owner))
	f.add("CPU", fmt.Sprintf("%dm", sb.CPUMillis))
	f.add("Memory", fmt.Sprintf("%d MiB", sb.MemoryMB))
	f.add("Disk", fmt.Sprintf("%d MiB", sb.DiskMB))
	f.add("User", orDash(sb.User))
	f.add("Workdir", orDash(sb.Workdir))
	f.add("Env keys", orDash(strings.Join(sb.EnvKeys, ",")))
	f.add("Metadata", kvList(sb.Metadata))
	f.add("Created", timestamp(sb.CreatedAt, now))
	f.add("Started", timestamp(sb.StartedAt, now))
	if sb.State.Terminal() {
		ended := "-"
		if sb.EndedAt != nil {
			ended = timestamp(*sb.EndedAt, now)
		}
		f.add("Ended", ended)
		f.add("End reason", orDash(sb.EndReason))
	} else {
		f.add("Expires", expiry(sb, now, true))
	}
	return f.flush()
}
