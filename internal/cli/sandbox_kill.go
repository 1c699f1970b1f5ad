package cli

import (
	"context"
	"fmt"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func sandboxKillCmd() *command {
	var (
		all  bool
		meta = kvFlag{check: checkMetadataFilter}
	)
	c := &command{
		name:    "kill",
		aliases: []string{"rm"},
		args:    "[ID...]",
		short:   "Stop sandboxes and free their resources",
		long: "Stop each sandbox and free its resources, printing each ID once it is gone. Killing a\n" +
			"sandbox that has already stopped succeeds. --all kills every live sandbox you can\n" +
			"see (every principal's with an admin or sandboxes:all key), and --meta those with\n" +
			"the metadata pairs. When some fail, the others are still killed and the exit status\n" +
			"is 1.",
		examples: []string{
			"warden sandbox kill sb-01hzx3k9q2",
			"warden sandbox kill --meta job=42",
			"warden sandbox kill --all",
		},
	}
	c.flags = func(fs *flagSet) {
		fs.Bool(&all, "all", "kill every live sandbox", "a")
		fs.Var(&meta, "meta", "K=V", "kill the live sandboxes whose metadata has this pair; repeatable")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		bulk := all || len(meta.m) > 0
		switch {
		case bulk && len(args) > 0:
			return usageErr(c, "give sandbox IDs or --all/--meta, not both")
		case !bulk && len(args) == 0:
			return usageErr(c, "want at least one sandbox ID (or --all, or --meta K=V)")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		ids := args
		if bulk {
			for sb, err := range cl.AllSandboxes(ctx, warden.ListOptions{States: liveStates, Metadata: meta.m}) {
				if err != nil {
					return err
				}
				ids = append(ids, sb.ID)
			}
		}
		return eachID(ctx, r, ids, func(id string) (string, error) {
			return id, cl.KillSandbox(ctx, id)
		})
	}
	return c
}

// eachID runs f for every id, printing the line f returns (unless empty) for each that
// succeeds; when some
// fail, the others still run, each failure is printed, and the last is returned.
func eachID(ctx context.Context, r *runner, ids []string, f func(id string) (string, error)) error {
	var failed []error
	for _, id := range ids {
		line, err := f(id)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			failed = append(failed, err)
			continue
		}
		if line != "" {
			fmt.Fprintln(r.env.Stdout, line)
		}
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
