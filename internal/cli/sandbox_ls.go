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
		long: "List live sandboxes (starting, running or paused), newest first: yours, or every\n" +
			"principal's with an admin or sandboxes:all key. -a lists every state, stopped and\n" +
			"failed ones too. With --limit only that many (one page) are shown.",
		examples: []string{
			"warden sandbox ls",
			"warden sandbox ls -a --state stopped",
			"warden sandbox ls --meta job=42 -q",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.Bool(&all, "all", "list sandboxes in every state, not only live ones", "a")
		fs.String(&state, "state", "S", "only sandboxes in this state: starting, running, paused, stopping,\nstopped, failed or lost; comma-separated for several")
		fs.Var(&meta, "meta", "K=V", "only sandboxes whose metadata has this pair; repeatable")
		fs.Int(&limit, "limit", "N", "show only the first N, 1 to 1000 (default: all)")
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
		opts := warden.ListOptions{Metadata: meta.m, Limit: limit}
		switch {
		case state != "":
			for _, st := range splitList(state) {
				opts.States = append(opts.States, warden.SandboxState(st))
			}
		case !all:
			opts.States = liveStates
		}
		var list []warden.Sandbox
		more := false
		if limit == 0 {
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
			fmt.Fprintf(r.env.Stderr, "(more sandboxes: raise --limit or leave it out to list them all)\n")
		}
		return err
	}
	return c
}

// liveStates are the states 'sandbox ls' and 'sandbox kill --all' mean by default.
var liveStates = []warden.SandboxState{"starting", "running", "paused"}

// writeSandboxTable writes sandboxes as a table with ages relative to now.
func writeSandboxTable(w io.Writer, list []warden.Sandbox, now time.Time) error {
	t := newTable(w, "ID", "NAME", "TEMPLATE", "STATE", "AGE", "EXPIRES", "METADATA")
	for _, sb := range list {
		expires := "-"
		if !sb.State.Terminal() {
			expires = expiry(sb, now, false)
		}
		t.row(sb.ID, orDash(sb.Name), orDash(sb.Template), string(sb.State), age(sb.CreatedAt, now), expires, truncate(kvList(sb.Metadata), 48))
	}
	return t.flush()
}

// expiry says when a live sandbox times out. A paused sandbox's countdown
// does not run: it shows the timeout it gets when resumed, never a time
// (long, for inspect: the full form).
func expiry(sb warden.Sandbox, now time.Time, long bool) string {
	if sb.State == "paused" {
		if sb.ResumeTimeoutSeconds <= 0 {
			return "paused"
		}
		left := shortDuration(time.Duration(sb.ResumeTimeoutSeconds) * time.Second)
		if long {
			return "not while paused (" + left + " left when resumed)"
		}
		return left + " on resume"
	}
	if long {
		return timestamp(sb.ExpiresAt, now)
	}
	return relative(sb.ExpiresAt, now)
}
