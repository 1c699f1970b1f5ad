package cli

import (
	"context"
	"fmt"
	"time"
)

func sandboxTimeoutCmd() *command {
	c := &command{
		name:  "timeout",
		args:  "ID DURATION",
		short: "Set when a sandbox expires",
		long: "Make the sandbox expire DURATION from now (a number of seconds, or a duration such as\n" +
			"90s, 30m, 2h; at most 24h), and print the new expiry time (the sandbox with --json).\n" +
			"A paused sandbox's countdown does not run: it gets DURATION when it is resumed.",
		examples: []string{"warden sandbox timeout sb-01hzx3k9q2 1h"},
		json:     true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want a sandbox ID and a duration, got %d arguments", len(args))
		}
		secs, err := durationSeconds(args[1])
		if err != nil {
			return usageErr(c, "%v", err)
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		sb, err := cl.SetTimeout(ctx, args[0], secs)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, sb)
		}
		if sb.State == "paused" {
			_, err = fmt.Fprintf(r.env.Stdout, "%s is paused: it expires %s after it is resumed\n", sb.ID,
				shortDuration(time.Duration(sb.ResumeTimeoutSeconds)*time.Second))
			return err
		}
		_, err = fmt.Fprintf(r.env.Stdout, "%s expires at %s\n", sb.ID, timestamp(sb.ExpiresAt, r.env.Now()))
		return err
	}
	return c
}
