package cli

import (
	"context"
	"strings"
)

func whoamiCmd() *command {
	c := &command{
		name:  "whoami",
		short: "Show the principal and key you authenticate as",
		long:  "Show the principal and the API key that the daemon sees, with the key's scopes.",
		json:  true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "unexpected argument %q", args[0])
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		id, err := cl.Whoami(ctx)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, id)
		}
		f := newFields(r.env.Stdout)
		f.add("Principal", id.Principal.ID+" ("+id.Principal.Kind+" "+id.Principal.Name+")")
		key := id.Key.ID
		if id.Key.Name != "" {
			key += " (" + id.Key.Name + ")"
		}
		f.add("Key", key)
		f.add("Scopes", orDash(strings.Join(id.Key.Scopes, ",")))
		f.add("Daemon", r.baseURL)
		return f.flush()
	}
	return c
}
