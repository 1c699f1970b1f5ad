package cli

import (
	"context"
	"io"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func fsCatCmd() *command {
	c := &command{
		name:  "cat",
		args:  "ID PATH",
		short: "Print a file",
		long:  "Write the content of a file in the sandbox to stdout.",
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want a sandbox ID and a path, got %d arguments", len(args))
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		rc, err := cl.ReadFile(ctx, args[0], args[1], warden.ReadOptions{})
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.Copy(r.env.Stdout, rc)
		return err
	}
	return c
}
