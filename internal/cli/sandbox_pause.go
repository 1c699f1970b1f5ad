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
		args:     "ID...",
		short:    "Resume paused sandboxes",
		long:     "Resume each paused sandbox under the same ID: its processes continue where they stopped.",
		examples: []string{"warden sandbox resume sb-01hzx3k9q2"},
		json:     true,
	}
	if pause {
		c.name = "pause"
		c.short = "Pause running sandboxes"
		c.long = "Pause each running sandbox until 'warden sandbox resume'. On the native backend its\n" +
			"processes and memory stay resident and use no CPU; on gvisor it is checkpointed to disk\n" +
			"and its memory released. Exec and file commands are refused meanwhile (unless it was\n" +
			"created with --auto-resume), and its timeout stops counting; a resume gives back what was\n" +
			"left, or its whole timeout if less was ('sandbox ls' shows it: \"10m on resume\")."
		c.examples = []string{"warden sandbox pause sb-01hzx3k9q2"}
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) == 0 {
			return usageErr(c, "want at least one sandbox ID")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		var done []warden.Sandbox
		err = eachID(ctx, r, args, func(id string) (string, error) {
			var sb warden.Sandbox
			var err error
			if pause {
				sb, err = cl.PauseSandbox(ctx, id)
			} else {
				sb, err = cl.ResumeSandbox(ctx, id)
			}
			if err != nil || r.g.json {
				done = append(done, sb)
				return "", err
			}
			return fmt.Sprintf("%s %s", sb.ID, sb.State), nil
		})
		if r.g.json {
			// One object for one ID (as before), an array for several.
			var ok []warden.Sandbox
			for _, sb := range done {
				if sb.ID != "" {
					ok = append(ok, sb)
				}
			}
			switch {
			case len(args) == 1 && len(ok) == 1:
				_ = printJSON(r.env.Stdout, ok[0])
			case len(args) > 1:
				if ok == nil {
					ok = []warden.Sandbox{}
				}
				_ = printJSON(r.env.Stdout, ok)
			}
		}
		return err
	}
	return c
}
