package cli

import (
	"context"
	"fmt"
)

func keysRevokeCmd() *command {
	c := &command{
		name:  "revoke",
		args:  "ID",
		short: "Revoke an API key",
		long:  "Revoke an API key at once: requests made with it fail from now on.",
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one key ID, got %d arguments", len(args))
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		if err := cl.RevokeKey(ctx, args[0]); err != nil {
			return err
		}
		_, err = fmt.Fprintln(r.env.Stdout, args[0])
		return err
	}
	return c
}
