package cli

import (
	"context"
	"fmt"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func sandboxForkCmd() *command {
	var (
		req     warden.ForkRequest
		timeout durationFlag
		meta    kvFlag
	)
	c := &command{
		name:  "fork",
		args:  "ID",
		short: "Fork a running sandbox",
		long: "Make new sandboxes from a running sandbox's memory and files (gvisor backend) and print\n" +
			"their IDs, one per line (the sandboxes with --json). Each runs what the source ran at that\n" +
			"moment with its own ID, writable layers and random numbers; the source keeps running.",
		examples: []string{
			"warden sandbox fork sb-01hzx3k9q2",
			"warden sandbox fork -n 4 --meta try=b sb-01hzx3k9q2",
			"warden sandbox fork --name web-b web",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.Int(&req.Count, "n", "N", "how many sandboxes to make, 1 to 16 (default 1)")
		fs.Var(&timeout, "timeout", "DURATION", "kill each fork after this long (default: the source's timeout)")
		fs.Var(&meta, "meta", "K=V", "metadata pair added to the source's; repeatable")
		fs.String(&req.Name, "name", "NAME", "name the fork (with -n 1 only; forks get no name otherwise)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one sandbox ID, got %d arguments", len(args))
		}
		req.TimeoutSeconds, req.Metadata = timeout.secs, meta.m
		cl, err := r.client()
		if err != nil {
			return err
		}
		forks, err := cl.ForkSandbox(ctx, args[0], req)
		if err != nil {
			return nameFlagWords(err, "--name")
		}
		if r.g.json {
			return printJSON(r.env.Stdout, forks)
		}
		for _, f := range forks {
			if _, err := fmt.Fprintln(r.env.Stdout, f.ID); err != nil {
				return err
			}
		}
		return nil
	}
	return c
}
