package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

func fsWatchCmd() *command {
	var recursive bool
	c := &command{
		name:  "watch",
		args:  "ID PATH",
		short: "Print changes in a directory",
		long: "Watch a directory in the sandbox and print one line per change (EVENT NAME, with NAME\n" +
			"relative to PATH; one JSON object per line with --json) until interrupted. Events are\n" +
			"create, write, remove, rename and chmod.",
		examples: []string{"warden fs watch -r sb-01hzx3k9q2 /home/user"},
		json:     true,
	}
	c.flags = func(fs *flagSet) {
		fs.Bool(&recursive, "recursive", "also watch every directory below PATH", "r")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want a sandbox ID and a path, got %d arguments", len(args))
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		w, err := cl.Watch(ctx, args[0], args[1], recursive)
		if err != nil {
			return err
		}
		defer w.Close()
		enc := json.NewEncoder(r.env.Stdout)
		for {
			ev, err := w.Next()
			switch {
			case errors.Is(err, io.EOF):
				return nil
			case err != nil && ctx.Err() != nil:
				return nil // interrupted: the normal way to stop watching
			case err != nil:
				return err
			}
			if r.g.json {
				err = enc.Encode(ev)
			} else {
				_, err = fmt.Fprintf(r.env.Stdout, "%-6s %s\n", ev.Event, ev.Name)
			}
			if err != nil {
				return err
			}
		}
	}
	return c
}
