package cli

import (
	"context"
	"fmt"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func principalsCreateCmd() *command {
	var kind string
	c := &command{
		name:  "create",
		args:  "NAME",
		short: "Create a principal",
		long:  "Create a user or agent principal and print its ID (the principal with --json).",
		examples: []string{
			"warden principals create --kind agent ci-bot",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.String(&kind, "kind", "KIND", "agent or user (required)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one name, got %d arguments", len(args))
		}
		if kind != warden.KindAgent && kind != warden.KindUser {
			return usageErr(c, "--kind must be agent or user")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		p, err := cl.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: kind, Name: args[0]})
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, p)
		}
		_, err = fmt.Fprintln(r.env.Stdout, p.ID)
		return err
	}
	return c
}
