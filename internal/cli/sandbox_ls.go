package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func sandboxLsCmd() *command {
	var (
		state string
		meta  = kvFlag{check: checkMetadataFilter}
		limit int
		all   bool
		quiet bool
	)
	c := &command{
		name:    "ls",
		aliases: []string{"list"},
		short:   "List sandboxes",
		long: "List sandboxes, newest first: yours, or every principal's with an admin or\n" +
			"sandboxes:all key. Without --all only the first page (--limit, default 50) is shown.",
		examples: []string{
			"warden sandbox ls --state running",
			"warden sandbox ls --meta job=42 --all -q",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.String(&state, "state", "S", "only sandboxes in this state: starting, running, paused, stopping,\nstopped, failed or lost")
		fs.Var(&meta, "meta", "K=V", "only sandboxes whose metadata has this pair; repeatable")
		fs.Int(&limit, "limit", "N", "page size, 1 to 1000 (default: the daemon's, 50)")
		fs.Bool(&all, "all", "fetch every page, not only the first")
		fs.Bool(&quiet, "quiet", "print only the IDs", "q")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "unexpected argument %q", args[0])
		}
		if limit < 0 || limit > 1000 {
			return usageErr(c, "--limit must be between 1 and 1000")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		opts := warden.ListOptions{State: warden.SandboxState(state), Metadata: meta.m, Limit: limit}
		var list []warden.Sandbox
		more := false
		if all {
			for sb, err := range cl.AllSandboxes(ctx, opts) {
				if err != nil {
					return err
				}
				list = append(list, sb)
			}
		} else {
			page, err := cl.ListSandboxes(ctx, opts)
			if err != nil {
				return err
			}
			list, more = page.Sandboxes, page.NextPageToken != ""
		}
		switch {
		case r.g.json:
			if list == nil {
				list = []warden.Sandbox{}
			}
			err = printJSON(r.env.Stdout, list)
		case quiet:
			for _, sb := range list {
				fmt.Fprintln(r.env.Stdout, sb.ID)
			}
		default:
			err = writeSandboxTable(r.env.Stdout, list, r.env.Now())
		}
		if err == nil && more && !quiet && !r.g.json {
			fmt.Fprintln(r.env.Stderr, "(more sandboxes: pass --all to list every page)")
		}
		return err
	}
	return c
}

// writeSandboxTable writes sandboxes as a table with ages relative to now.
func writeSandboxTable(w io.Writer, list []warden.Sandbox, now time.Time) error {
	t := newTable(w, "ID", "TEMPLATE", "STATE", "AGE", "EXPIRES", "METADATA")
	for _, sb := range list {
		expires := "-"
		if !sb.State.Terminal() && !sb.ExpiresAt.IsZero() {
			expires = relative(sb.ExpiresAt, now)
		}
		t.row(sb.ID, orDash(sb.Template), string(sb.State), age(sb.CreatedAt, now), expires, truncate(kvList(sb.Metadata), 48))
	}
	return t.flush()
}
