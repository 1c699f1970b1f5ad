package cli

import (
	"context"
	"fmt"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func mcpConnectorAuthCmd() *command {
	var q warden.MCPOAuthRequest
	c := &command{name: "auth", args: "ID", short: "Authorize Warden with OAuth for a remote connector",
		long: "Start the OAuth 2.1 flow (authorization code with PKCE) of remote connector ID, which must\n" +
			"have oauth settings: prints the URL to open in a browser. After you approve there, the\n" +
			"authorization server sends the browser back to wardend, which keeps the tokens in the\n" +
			"secrets store and refreshes them; they never reach MCP clients or sandboxes. The URL is\n" +
			"good for ten minutes, once.",
		examples: []string{
			"warden mcp connector auth linear",
			"warden mcp connector auth linear --shared",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.String(&q.PrincipalID, "for", "PRINCIPAL", "authorize for another principal (mcp:admin)")
		fs.Bool(&q.Shared, "shared", "make the tokens the connector's shared credential (mcp:admin)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want the connector's ID")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		out, err := cl.StartMCPOAuth(ctx, args[0], q)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, out)
		}
		_, err = fmt.Fprintf(r.env.Stdout, "Open this URL to authorize Warden (valid until %s):\n%s\n",
			out.ExpiresAt.Local().Format("15:04:05"), out.AuthorizeURL)
		return err
	}
	return c
}
