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
		long:     "Thaw a paused sandbox: its processes continue where they stopped.",
		examples: []string{"warden sandbox resume sb-01hzx3k9q2"},
		json:     true,
	}
	if pause {
		c.name = "pause"
		c.short = "Pause a running sandbox"
		c.long = "Freeze every process of a running sandbox. Processes and memory stay resident and use\n" +
			"no CPU until 'warden sandbox resume'; exec and file commands are refused meanwhile.\n" +
			"The sandbox's timeout keeps counting."
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
