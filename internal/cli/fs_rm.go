package cli

import (
	"context"
	"errors"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func fsRmCmd() *command {
	var recursive, force bool
	c := &command{
		name:  "rm",
		args:  "ID PATH",
		short: "Remove a file or directory",
		long: "Remove a file or symlink in the sandbox; a directory, with everything in it, only with\n" +
			"-r.",
	}
	c.flags = func(fs *flagSet) {
		fs.Bool(&recursive, "recursive", "remove directories and their contents", "r")
		fs.Bool(&force, "force", "succeed when the path does not exist", "f")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want a sandbox ID and a path, got %d arguments", len(args))
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		id, p := args[0], args[1]
		if !recursive {
			e, err := cl.Stat(ctx, id, p)
			switch {
			case warden.IsNotFound(err) && force:
				return nil
			case err != nil:
				return err
			case e.IsDir():
				return withHint(errors.New(p+" is a directory"), "pass -r to remove it with everything in it")
			}
		}
		err = cl.Remove(ctx, id, p)
		if warden.IsNotFound(err) && force {
			return nil
		}
		return err
	}
	return c
}
