package cli

import (
	"context"
	"io"
	"strings"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func keysLsCmd() *command {
	c := &command{
		name:    "ls",
		aliases: []string{"list"},
		short:   "List API keys",
		long: "List API keys, revoked ones included (with keys:manage but not admin: your own\n" +
			"principal's only). Secrets are never shown.",
		json: true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "unexpected argument %q", args[0])
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		keys, err := cl.ListKeys(ctx)
		if err != nil {
			return err
		}
		if r.g.json {
			if keys == nil {
				keys = []warden.APIKey{}
			}
			return printJSON(r.env.Stdout, keys)
		}
		return writeKeyTable(r.env.Stdout, keys, r.env.Now())
	}
	return c
}

// writeKeyTable writes API keys as a table.
func writeKeyTable(w io.Writer, keys []warden.APIKey, now time.Time) error {
	t := newTable(w, "ID", "NAME", "PRINCIPAL", "SCOPES", "CREATED", "REVOKED")
	for _, k := range keys {
		revoked := "-"
		if k.RevokedAt != nil {
			revoked = age(*k.RevokedAt, now) + " ago"
		}
		t.row(k.ID, orDash(k.Name), k.PrincipalID, strings.Join(k.Scopes, ","), age(k.CreatedAt, now)+" ago", revoked)
	}
	return t.flush()
}
