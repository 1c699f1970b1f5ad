package cli

import (
	"context"
)

func fsMkdirCmd() *command {
	c := &command{
		name:  "mkdir",
		args:  "ID PATH",
		short: "Create a directory",
		long:  "Create a directory and any missing parents. It fails when the path exists.",
		json:  true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want a sandbox ID and a path, got %d arguments", len(args))
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		e, err := cl.Mkdir(ctx, args[0], args[1])
		if err != nil || !r.g.json {
			return err
		}
		return printJSON(r.env.Stdout, e)
	}
	return c
}
