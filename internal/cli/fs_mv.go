package cli

import (
	"context"
)

func fsMvCmd() *command {
	c := &command{
		name:  "mv",
		args:  "ID SRC DST",
		short: "Move or rename a file or directory",
		long:  "Rename SRC to DST in the sandbox.",
		json:  true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 3 {
			return usageErr(c, "want a sandbox ID, a source and a destination, got %d arguments", len(args))
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		e, err := cl.Move(ctx, args[0], args[1], args[2])
		if err != nil || !r.g.json {
			return err
		}
		return printJSON(r.env.Stdout, e)
	}
	return c
}
