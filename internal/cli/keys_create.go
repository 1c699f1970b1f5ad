package cli

import (
	"context"
	"fmt"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func keysCreateCmd() *command {
	var (
		req    warden.CreateKeyRequest
		scopes listFlag
	)
	c := &command{
		name:  "create",
		short: "Create an API key",
		long: "Create an API key for a principal (yourself by default) and print its secret, which is\n" +
			"shown only this once (the key and its record with --json). Scopes: sandboxes:create,\n" +
			"sandboxes:read, sandboxes:exec, sandboxes:delete, sandboxes:all, files:read,\n" +
			"files:write, keys:manage, audit:read, templates:read, templates:write,\n" +
			"secrets:read, secrets:write, metrics:read, policies:read, policies:write,\n" +
			"approvals:decide, mcp:admin, mcp:use, llm:use, admin (an agent's key never gets\n" +
			"policies:write, approvals:decide or mcp:admin).",
		examples: []string{
			"warden keys create --principal ci-bot --name ci --scope sandboxes:create --scope files:read",
			"warden keys create --name reader --scope sandboxes:read,files:read",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.String(&req.PrincipalID, "principal", "P", "principal (ID or name) the key belongs to (default: yourself)")
		fs.String(&req.Name, "name", "N", "name to recognise the key by")
		fs.Var(&scopes, "scope", "S", "scope the key grants; repeatable or comma-separated; at least one")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "unexpected argument %q", args[0])
		}
		if len(scopes) == 0 {
			return usageErr(c, "want at least one --scope")
		}
		req.Scopes = scopes
		cl, err := r.client()
		if err != nil {
			return err
		}
		if req.PrincipalID, err = resolvePrincipal(ctx, cl, req.PrincipalID); err != nil {
			return err
		}
		k, err := cl.CreateKey(ctx, req)
		if err != nil {
			return err
		}
		fmt.Fprintln(r.env.Stderr, "warden: this is the only time the key's secret is shown; store it now")
		if r.g.json {
			return printJSON(r.env.Stdout, k)
		}
		_, err = fmt.Fprintln(r.env.Stdout, k.Key)
		return err
	}
	return c
}
