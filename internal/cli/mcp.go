package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// maxSpecFile bounds a connector or server spec file.
const maxSpecFile = 1 << 20

func mcpCmd() *command {
	return &command{
		name:  "mcp",
		short: "Manage the MCP gateway: connectors, virtual servers, grants and tool approvals",
		long: "Configure the MCP gateway (docs/mcp.md). Connectors are upstream MCP servers (remote URLs,\n" +
			"stdio servers hosted in a sandbox, or Warden's builtin sandbox tools); a virtual server\n" +
			"bundles their tools and is granted to principals, who reach it at its URL (`mcp server\n" +
			"url`) with an API key holding mcp:use. New or changed tool definitions are held until\n" +
			"approved (`mcp tools pending`). Changes need mcp:admin, which no agent's key can hold.",
		subs: []*command{mcpConnectorCmd(), mcpServerCmd(), mcpToolsCmd()},
	}
}

// readSpec reads a JSON or YAML spec: a file, "-" for stdin, or inline
// JSON (starting with "{").
func readSpec(r *runner, arg string) (json.RawMessage, error) {
	var b []byte
	switch {
	case strings.HasPrefix(strings.TrimSpace(arg), "{"):
		b = []byte(arg)
	default:
		var in io.Reader = r.env.Stdin
		if arg != "-" {
			f, err := os.Open(arg)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			in = f
		}
		var err error
		if b, err = io.ReadAll(io.LimitReader(in, maxSpecFile+1)); err != nil {
			return nil, fmt.Errorf("read %s: %w", arg, err)
		}
		if len(b) > maxSpecFile {
			return nil, fmt.Errorf("%s: larger than %d bytes", arg, maxSpecFile)
		}
	}
	var v any
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&v); err != nil {
		return nil, fmt.Errorf("spec %s: %w", arg, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("spec %s: %w", arg, err)
	}
	return out, nil
}

func mcpConnectorCmd() *command {
	return &command{
		name:    "connector",
		aliases: []string{"connectors"},
		short:   "Register, list and remove MCP connectors (upstream MCP servers)",
		long: "A connector is an upstream MCP server the gateway reaches: remote (a URL), hosted (a\n" +
			"stdio server run inside a Warden sandbox) or builtin (Warden's own sandbox tools).",
		subs: []*command{mcpConnectorAddCmd(), mcpConnectorLsCmd(), mcpConnectorRmCmd(), mcpConnectorToolsCmd(), mcpConnectorAuthCmd()},
	}
}

func mcpConnectorAddCmd() *command {
	var (
		w                warden.MCPConnectorWrite
		rawURL, specArg  string
		header, scheme   string
		hostedCmd        listFlag
		template         string
		builtinToolNames listFlag
		oauth            bool
	)
	c := &command{
		name:  "add",
		args:  "ID [URL]",
		short: "Register a connector",
		long: "Register an upstream MCP server as connector ID (1-63 of a-z0-9-). --kind remote (the\n" +
			"default) takes the upstream's streamable-HTTP URL, and optionally --header/--scheme for\n" +
			"the credential bound with the API; hosted runs --command in a sandbox of --template;\n" +
			"builtin offers Warden's sandbox tools. --spec gives the whole spec instead (JSON or YAML\n" +
			"file, - for stdin, or inline JSON; docs/mcp.md). The gateway refuses private and\n" +
			"loopback addresses unless an admin allows them.",
		examples: []string{
			"warden mcp connector add github https://api.githubcopilot.com/mcp/",
			"warden mcp connector add fs --kind hosted --command npx,-y,@acme/mcp-files,/tmp",
			"warden mcp connector add sandboxes --kind builtin",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.String(&w.Kind, "kind", "KIND", "remote, hosted or builtin (default remote)")
		fs.String(&w.Description, "description", "TEXT", "what the connector is for")
		fs.String(&header, "header", "NAME", "remote: the header that carries the credential (Authorization)")
		fs.String(&scheme, "scheme", "WORD", "remote: the credential's scheme (Bearer for Authorization)")
		fs.Bool(&oauth, "oauth", "remote: get the credential with OAuth (then: warden mcp connector auth ID)")
		fs.Var(&hostedCmd, "command", "ARGV", "hosted: the stdio server's command line, comma-separated")
		fs.String(&template, "template", "NAME", "hosted: the sandbox template (default base)")
		fs.Var(&builtinToolNames, "tool", "NAME", "builtin: offer only these tools; repeatable")
		fs.String(&specArg, "spec", "FILE", "the whole spec: a JSON or YAML file, - for stdin, or inline JSON")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) < 1 || len(args) > 2 {
			return usageErr(c, "want the connector's ID, and a remote one's URL")
		}
		w.ID = args[0]
		if len(args) == 2 {
			rawURL = args[1]
		}
		if w.Kind == "" {
			w.Kind = warden.MCPConnectorRemote
		}
		shortcut := rawURL != "" || header != "" || scheme != "" || oauth || len(hostedCmd) > 0 || template != "" || len(builtinToolNames) > 0
		switch {
		case specArg != "" && shortcut:
			return usageErr(c, "--spec does not go with a URL, --header, --scheme, --oauth, --command, --template or --tool")
		case specArg != "":
			spec, err := readSpec(r, specArg)
			if err != nil {
				return err
			}
			w.Spec = spec
		default:
			spec := map[string]any{}
			switch w.Kind {
			case warden.MCPConnectorRemote:
				if rawURL == "" {
					return usageErr(c, "a remote connector needs its URL (or --spec)")
				}
				spec["url"] = rawURL
				if header != "" || scheme != "" {
					spec["auth"] = map[string]string{"header": header, "scheme": scheme}
				}
				if oauth {
					spec["oauth"] = map[string]any{}
				}
			case warden.MCPConnectorHosted:
				if len(hostedCmd) == 0 {
					return usageErr(c, "a hosted connector needs --command (or --spec)")
				}
				spec["command"] = []string(hostedCmd)
				if template != "" {
					spec["template"] = template
				}
			case warden.MCPConnectorBuiltin:
				if len(builtinToolNames) > 0 {
					spec["tools"] = []string(builtinToolNames)
				}
			default:
				return usageErr(c, "--kind: want remote, hosted or builtin")
			}
			b, err := json.Marshal(spec)
			if err != nil {
				return err
			}
			w.Spec = b
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		out, err := cl.CreateMCPConnector(ctx, w)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, out)
		}
		_, err = fmt.Fprintln(r.env.Stdout, out.ID)
		return err
	}
	return c
}

func mcpConnectorLsCmd() *command {
	c := &command{name: "ls", aliases: []string{"list"}, short: "List connectors",
		long: "List the connectors, ordered by ID, with what each reaches (URL or command).", json: true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "takes no arguments")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		list, err := cl.ListMCPConnectors(ctx)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, list)
		}
		now := r.env.Now()
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tKIND\tTARGET\tOWNER\tAGE\tDESCRIPTION")
		for _, x := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", x.ID, x.Kind, connectorTarget(x), x.OwnerID, age(x.CreatedAt, now), x.Description)
		}
		return tw.Flush()
	}
	return c
}

// connectorTarget is what a connector reaches: a remote's URL, a hosted
// one's command.
func connectorTarget(x warden.MCPConnector) string {
	var s struct {
		URL     string   `json:"url"`
		Command []string `json:"command"`
	}
	_ = json.Unmarshal(x.Spec, &s)
	switch {
	case s.URL != "":
		return s.URL
	case len(s.Command) > 0:
		return strings.Join(s.Command, " ")
	}
	return "-"
}

func mcpConnectorRmCmd() *command {
	c := &command{name: "rm", aliases: []string{"remove"}, args: "ID...",
		short: "Remove connectors (with their pinned tools and credential bindings)",
		long: "Remove connectors with their pinned tool definitions and credential bindings. A connector\n" +
			"a virtual server uses is refused until the server no longer names it."}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) == 0 {
			return usageErr(c, "want at least one connector ID")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		for _, id := range args {
			if err := cl.DeleteMCPConnector(ctx, id); err != nil {
				return err
			}
			fmt.Fprintln(r.env.Stdout, id)
		}
		return nil
	}
	return c
}

func mcpConnectorToolsCmd() *command {
	var state string
	c := &command{name: "tools", args: "ID", short: "List a connector's tool definitions and their approval",
		long: "List the tool definitions the gateway has seen from connector ID, each pinned by the hash\n" +
			"of its definition: pending ones are served to nobody until approved (`mcp tools approve`).",
		json: true}
	c.flags = func(fs *flagSet) {
		fs.String(&state, "state", "STATE", "only pending, approved or rejected ones")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want the connector's ID")
		}
		q := warden.MCPToolQuery{Connector: args[0]}
		if state != "" {
			q.States = []string{state}
		}
		return listMCPTools(ctx, r, c, q)
	}
	return c
}

func listMCPTools(ctx context.Context, r *runner, c *command, q warden.MCPToolQuery) error {
	for _, s := range q.States {
		switch s {
		case warden.MCPToolPending, warden.MCPToolApproved, warden.MCPToolRejected:
		default:
			return usageErr(c, "--state: want pending, approved or rejected")
		}
	}
	cl, err := r.client()
	if err != nil {
		return err
	}
	list, err := cl.ListMCPTools(ctx, q)
	if err != nil {
		return err
	}
	if r.g.json {
		return printJSON(r.env.Stdout, list)
	}
	now := r.env.Now()
	tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONNECTOR\tTOOL\tHASH\tSTATE\tSEEN\tDESCRIPTION")
	for _, t := range list {
		var d struct {
			Description string `json:"description"`
		}
		_ = json.Unmarshal(t.Definition, &d)
		desc := strings.Join(strings.Fields(d.Description), " ")
		if len(desc) > 60 {
			desc = desc[:57] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Connector, t.Tool, t.Hash, t.State, age(t.FirstSeen, now), desc)
	}
	return tw.Flush()
}

func mcpServerCmd() *command {
	return &command{
		name:    "server",
		aliases: []string{"servers"},
		short:   "Create, list and grant virtual MCP servers",
		long: "A virtual server bundles the tools of one or more connectors; the principals it is\n" +
			"granted to reach it at its URL (`mcp server url`) with a key holding mcp:use.",
		subs: []*command{mcpServerCreateCmd(), mcpServerLsCmd(), mcpServerGrantCmd(true), mcpServerGrantCmd(false), mcpServerURLCmd()},
	}
}

func mcpServerCreateCmd() *command {
	var (
		w          warden.MCPServerWrite
		connectors listFlag
		specArg    string
		readOnly   bool
	)
	c := &command{
		name:  "create",
		args:  "ID",
		short: "Create a virtual server",
		long: "Create virtual server ID bundling the tools of the --connector(s): with one connector its\n" +
			"tools keep their names, with several each is prefixed CONNECTOR__. --read-only offers\n" +
			"only tools annotated read-only. --spec gives the whole spec instead (allow lists,\n" +
			"renames, prefixes; docs/mcp.md): a JSON or YAML file, - for stdin, or inline JSON.",
		examples: []string{
			"warden mcp server create dev --connector github --connector sandboxes",
			"warden mcp server create readers --connector github --read-only",
			"warden mcp server create custom --spec server.yaml",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.Var(&connectors, "connector", "ID", "a connector whose tools it offers; repeatable")
		fs.Bool(&readOnly, "read-only", "offer only tools annotated read-only")
		fs.String(&w.Description, "description", "TEXT", "what the server is for")
		fs.String(&specArg, "spec", "FILE", "the whole spec: a JSON or YAML file, - for stdin, or inline JSON")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want the server's ID")
		}
		w.ID = args[0]
		switch {
		case specArg != "" && (len(connectors) > 0 || readOnly):
			return usageErr(c, "--spec does not go with --connector or --read-only")
		case specArg != "":
			spec, err := readSpec(r, specArg)
			if err != nil {
				return err
			}
			w.Spec = spec
		case len(connectors) == 0:
			return usageErr(c, "want at least one --connector (or --spec)")
		default:
			var conns []map[string]string
			for _, id := range connectors {
				e := map[string]string{"connector": id}
				if readOnly {
					e["preset"] = "read-only"
				}
				conns = append(conns, e)
			}
			b, err := json.Marshal(map[string]any{"connectors": conns})
			if err != nil {
				return err
			}
			w.Spec = b
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		out, err := cl.CreateMCPServer(ctx, w)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, out)
		}
		_, err = fmt.Fprintln(r.env.Stdout, out.ID)
		return err
	}
	return c
}

func mcpServerLsCmd() *command {
	c := &command{name: "ls", aliases: []string{"list"}, short: "List virtual servers",
		long: "List the virtual servers, ordered by ID; with mcp:use alone, those granted to you.", json: true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "takes no arguments")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		list, err := cl.ListMCPServers(ctx)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, list)
		}
		now := r.env.Now()
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tCONNECTORS\tPATH\tAGE\tDESCRIPTION")
		for _, x := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", x.ID, strings.Join(x.Connectors, ","), x.Path, age(x.CreatedAt, now), x.Description)
		}
		return tw.Flush()
	}
	return c
}

func mcpServerGrantCmd(grant bool) *command {
	name, short := "grant", "Grant a virtual server to principals"
	if !grant {
		name, short = "revoke", "Revoke a virtual server from principals"
	}
	c := &command{name: name, args: "ID PRINCIPAL...", short: short,
		long: short + " (IDs or names). A principal's keys with mcp:use call\n" +
			"the servers granted to it."}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) < 2 {
			return usageErr(c, "want the server's ID and at least one principal")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		for _, p := range args[1:] {
			pid, err := resolvePrincipal(ctx, cl, p)
			if err != nil {
				return err
			}
			if grant {
				_, err = cl.GrantMCPServer(ctx, args[0], pid)
			} else {
				err = cl.RevokeMCPServer(ctx, args[0], pid)
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(r.env.Stdout, pid)
		}
		return nil
	}
	return c
}

func mcpServerURLCmd() *command {
	c := &command{name: "url", args: "ID", short: "Print the URL MCP clients connect to",
		long: "Print the streamable-HTTP URL of virtual server ID: the daemon's address and /mcp/v/ID.\n" +
			"Clients authenticate with an API key holding mcp:use (Authorization: Bearer KEY)."}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want the server's ID")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		if _, err := cl.GetMCPServer(ctx, args[0]); err != nil {
			return err
		}
		if strings.HasPrefix(r.baseURL, "unix://") {
			fmt.Fprintln(r.env.Stderr, "warden: the daemon is reached through a unix socket here; "+
				"remote MCP clients need its TCP address (--url)")
		}
		_, err = fmt.Fprintln(r.env.Stdout, cl.MCPServerURL(args[0]))
		return err
	}
	return c
}

func mcpToolsCmd() *command {
	return &command{
		name:  "tools",
		short: "Review tool definitions held for approval",
		long: "A new or changed upstream tool definition is served to no client until approved. List\n" +
			"the pending ones, then approve or reject each by connector, tool and hash.",
		subs: []*command{mcpToolsPendingCmd(), mcpToolsDecideCmd(true), mcpToolsDecideCmd(false)},
	}
}

func mcpToolsPendingCmd() *command {
	var connector string
	c := &command{name: "pending", short: "List tool definitions awaiting approval",
		long: "List the new or changed tool definitions that no client is served until approved.", json: true}
	c.flags = func(fs *flagSet) {
		fs.String(&connector, "connector", "ID", "only this connector's")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "takes no arguments")
		}
		return listMCPTools(ctx, r, c, warden.MCPToolQuery{States: []string{warden.MCPToolPending}, Connector: connector})
	}
	return c
}

func mcpToolsDecideCmd(approve bool) *command {
	name, short := "approve", "Approve a tool definition: clients are served it"
	if !approve {
		name, short = "reject", "Reject a tool definition: it is never served"
	}
	c := &command{name: name, args: "CONNECTOR TOOL HASH", short: short,
		long:     short + ".\nCONNECTOR, TOOL and HASH as `mcp tools pending` lists them.",
		examples: []string{"warden mcp tools " + name + " github search_code 3f2a9c"},
		json:     true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 3 {
			return usageErr(c, "want the connector, the tool and the definition's hash")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		decide := cl.ApproveMCPTool
		if !approve {
			decide = cl.RejectMCPTool
		}
		t, err := decide(ctx, args[0], args[1], args[2])
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, t)
		}
		_, err = fmt.Fprintf(r.env.Stdout, "%s/%s %s %s\n", t.Connector, t.Tool, t.Hash, t.State)
		return err
	}
	return c
}
