package cli

import (
	"context"
	"fmt"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func sandboxPauseCmd() *command { return sandboxFreezeCmd(true) }

func sandboxResumeCmd() *command { return sandboxFreezeCmd(false) }

// sandboxFreezeCmd builds `sandbox pause` and `sandbox resume`.
func sandboxFreezeCmd(pause bool) *command {
	c := &command{
		name:     "resume",
		args:     "ID",
		short:    "Resume a paused sandbox",
		long:     "Resume a paused sandbox under the same ID: its processes continue where they stopped.",
		examples: []string{"warden sandbox resume sb-01hzx3k9q2"},
		json:     true,
	}
	if pause {
		c.name = "pause"
		c.short = "Pause a running sandbox"
		c.long = "Pause a running sandbox until 'warden sandbox resume'. On the native backend its\n" +
			"processes and memory stay resident and use no CPU; on gvisor it is checkpointed to disk\n" +
			"and its memory released. Exec and file commands are refused meanwhile (unless it was\n" +
			"created with --auto-resume), and it does not time out; a resume grants its timeout anew."
		c.examples = []string{"warden sandbox pause sb-01hzx3k9q2"}
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one sandbox ID, got %d arguments", len(args))
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		var sb warden.Sandbox
		if pause {
			sb, err = cl.PauseSandbox(ctx, args[0])
		} else {
			sb, err = cl.ResumeSandbox(ctx, args[0])
		}
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, sb)
		}
		_, err = fmt.Fprintf(r.env.Stdout, "%s %s\n", sb.ID, sb.State)
		return err
	}
	return c
}
