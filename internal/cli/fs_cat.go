package cli

import (
	"context"
	"io"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func fsCatCmd() *command {
	var user string
	c := &command{
		name:  "cat",
		args:  "ID PATH",
		short: "Print a file",
		long:  "Write the content of a file in the sandbox to stdout.",
	}
	c.flags = func(fs *flagSet) {
		fs.String(&user, "user", "U", "sandbox user whose permissions apply (default: the sandbox's)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want a sandbox ID and a path, got %d arguments", len(args))
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		rc, err := cl.ReadFile(ctx, args[0], args[1], warden.ReadOptions{User: user})
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.Copy(r.env.Stdout, rc)
		return err
	}
	return c
}
