package cli

import (
	"context"
	"fmt"
)

func sandboxKillCmd() *command {
	c := &command{
		name:    "kill",
		aliases: []string{"rm"},
		args:    "ID...",
		short:   "Stop sandboxes and free their resources",
		long: "Stop each sandbox and free its resources, printing each ID once it is gone. Killing a\n" +
			"sandbox that has already stopped succeeds. When some fail, the others are still killed\n" +
			"and the exit status is 1.",
		examples: []string{
			"warden sandbox kill sb-01hzx3k9q2",
			"warden sandbox kill $(warden sandbox ls --meta job=42 --all -q)",
		},
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) == 0 {
			return usageErr(c, "want at least one sandbox ID")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		var failed []error
		for _, id := range args {
			if err := cl.KillSandbox(ctx, id); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				failed = append(failed, err)
				continue
			}
			fmt.Fprintln(r.env.Stdout, id)
		}
		switch len(failed) {
		case 0:
			return nil
		case 1:
			return failed[0]
		}
		for _, err := range failed[:len(failed)-1] {
			fmt.Fprintf(r.env.Stderr, "warden: %s\n", oneLine(err.Error()))
		}
		return failed[len(failed)-1]
	}
	return c
}
