package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func secretCmd() *command {
	return &command{
		name:    "secret",
		aliases: []string{"secrets"},
		short:   "Store secrets and grant them to sandboxes without the sandbox seeing them",
		long: "Manage brokered credentials. A sandbox granted a secret sees only a placeholder (in an\n" +
			"environment variable); the daemon's egress path swaps it for the secret in one header of\n" +
			"TLS requests to the granted hosts, and scrubs the secret from responses.",
		subs: []*command{secretPutCmd(), secretLsCmd(), secretGrantCmd(), secretRevokeCmd(), secretRmCmd()},
	}
}

func secretPutCmd() *command {
	c := &command{
		name:  "put",
		args:  "NAME",
		short: "Store a secret read from stdin (a second put rotates it)",
		long:  "Store the secret NAME with the value read from stdin (a trailing newline is dropped). If\nNAME exists, the value becomes its new version and requests use it from then on.",
		examples: []string{
			"printf %s \"$OPENAI_API_KEY\" | warden secret put openai",
		},
		json: true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want the secret's name")
		}
		b, err := io.ReadAll(io.LimitReader(r.env.Stdin, 64<<10))
		if err != nil {
			return err
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		s, err := cl.PutSecret(ctx, args[0], strings.TrimRight(string(b), "\r\n"))
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, s)
		}
		fmt.Fprintf(r.env.Stdout, "%s %s version %d\n", s.ID, s.Name, s.Current)
		return nil
	}
	return c
}

func secretLsCmd() *command {
	c := &command{name: "ls", aliases: []string{"list"}, short: "List secrets (never their values)", long: "List your secrets: names, versions and fingerprints, never values.", json: true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		cl, err := r.client()
		if err != nil {
			return err
		}
		list, err := cl.ListSecrets(ctx)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, list)
		}
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tVERSION\tREVOKED")
		for _, s := range list {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%v\n", s.ID, s.Name, s.Current, s.Revoked)
		}
		return tw.Flush()
	}
	return c
}

func secretGrantCmd() *command {
	var g warden.Grant
	var hosts string
	c := &command{
		name:  "grant",
		args:  "SECRET-ID",
		short: "Let a sandbox or a principal use a secret on hosts",
		long: "Grant a secret to a sandbox (--sandbox) or to every sandbox of a principal (--principal)\n" +
			"for requests to --host names. The sandbox gets the placeholder in the --env variable.\n" +
			"Or let a middleware's script read it as secrets.NAME (--middleware; admin only; --host,\n" +
			"optional, bounds where its fetch may send the value).",
		examples: []string{
			"warden secret grant sec-123 --sandbox sb-01hzx3k9q2 --host api.openai.com --env OPENAI_API_KEY",
			"warden secret grant sec-123 --middleware check-urls --host api.scanner.example",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.String(&g.Sandbox, "sandbox", "ID", "the sandbox that may use the secret")
		fs.String(&g.Principal, "principal", "P", "or: every sandbox of this principal (ID or name)")
		fs.String(&g.Middleware, "middleware", "NAME", "or: the middleware whose script may read it")
		fs.String(&hosts, "host", "LIST", "hosts (or *.example.com) the secret may be sent to, comma-separated")
		fs.String(&g.Header, "header", "NAME", "the request header that carries it (default Authorization)")
		fs.String(&g.PathPrefix, "path", "PREFIX", "only requests under this path")
		fs.String(&g.EnvName, "env", "NAME", "environment variable that holds the placeholder in the sandbox")
		fs.String(&g.Format, "format", "F", "basic: the placeholder is inside the base64 of 'Authorization: Basic ...'")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want the secret's ID")
		}
		for _, h := range strings.Split(hosts, ",") {
			if h = strings.TrimSpace(h); h != "" {
				g.Hosts = append(g.Hosts, h)
			}
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		if g.Principal, err = resolvePrincipal(ctx, cl, g.Principal); err != nil {
			return err
		}
		out, err := cl.CreateGrant(ctx, args[0], g)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, out)
		}
		if out.Middleware != "" {
			fmt.Fprintln(r.env.Stdout, out.ID)
			return nil
		}
		fmt.Fprintf(r.env.Stdout, "%s %s\n", out.ID, out.Placeholder)
		return nil
	}
	return c
}

func secretRevokeCmd() *command {
	var grant bool
	c := &command{name: "revoke", args: "ID", short: "Revoke a secret, or with --grant a grant",
		long: "Revoke a secret (every version) or, with --grant, one grant. The next request is no longer\nsent the secret."}
	c.flags = func(fs *flagSet) { fs.Bool(&grant, "grant", "ID is a grant") }
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one ID")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		if grant {
			return cl.RevokeGrant(ctx, args[0])
		}
		return cl.RevokeSecret(ctx, args[0])
	}
	return c
}

func secretRmCmd() *command {
	c := &command{name: "rm", args: "ID", short: "Delete a secret and its grants", long: "Delete a secret, all its versions and its grants."}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one ID")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		return cl.DeleteSecret(ctx, args[0])
	}
	return c
}
