package cli

import (
	"context"
	"io"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func principalsLsCmd() *command {
	c := &command{
		name:    "ls",
		aliases: []string{"list"},
		short:   "List principals",
		long:    "List every principal.",
		json:    true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "unexpected argument %q", args[0])
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		ps, err := cl.ListPrincipals(ctx)
		if err != nil {
			return err
		}
		if r.g.json {
			if ps == nil {
				ps = []warden.Principal{}
			}
			return printJSON(r.env.Stdout, ps)
		}
		return writePrincipalTable(r.env.Stdout, ps, r.env.Now())
	}
	return c
}

// writePrincipalTable writes principals as a table.
func writePrincipalTable(w io.Writer, ps []warden.Principal, now time.Time) error {
	t := newTable(w, "ID", "KIND", "NAME", "CREATED BY", "CREATED")
	for _, p := range ps {
		t.row(p.ID, p.Kind, p.Name, orDash(p.CreatedBy), age(p.CreatedAt, now)+" ago")
	}
	return t.flush()
}
