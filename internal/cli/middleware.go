package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func middlewareCmd() *command {
	return &command{
		name:  "middleware",
		short: "Manage middleware: JavaScript hooks on the governed path",
		long: "Middleware are administrator-written JavaScript hooks that run after the rules on the\n" +
			"action kinds they name: pre(action) and post(action, result) return {allow: true},\n" +
			"{block: \"message\"} or {modify: value} (docs/guardrails.md). Those of the daemon's config\n" +
			"file are listed but read-only here. The key needs the admin scope (never an agent's).",
		subs: []*command{middlewareAddCmd(), middlewareLsCmd(), middlewareShowCmd(), middlewareRmCmd(), middlewareTestCmd()},
	}
}

func middlewareAddCmd() *command {
	var kinds, script, onError, domains, secrets string
	var timeoutMS, memoryMB int64
	var disabled bool
	c := &command{name: "add", args: "NAME", short: "Add a middleware, or replace the one of that name",
		long: "Add the middleware NAME running the script in FILE (\"-\": stdin) on the action kinds\n" +
			"given (mcp.call, exec, pty, code.run, ...), or replace an API-added one of that name. It\n" +
			"runs from the next governed action on and is kept across daemon restarts.",
		examples: []string{
			"warden middleware add no-shell --kinds mcp.call --script no-shell.js",
			"warden middleware add audit-exec --kinds exec,pty --script - --on-error open < hook.js",
		},
		json: true}
	c.flags = func(fs *flagSet) {
		fs.String(&kinds, "kinds", "LIST", "action kinds it runs for, comma-separated (required)")
		fs.String(&script, "script", "FILE", `the JavaScript file ("-": stdin; required)`)
		fs.String(&onError, "on-error", "closed|open", "what a failed call does to the action (default closed)")
		fs.Int64(&timeoutMS, "timeout-ms", "N", "time limit per call in ms (default 200, at most 5000)")
		fs.Int64(&memoryMB, "max-memory-mb", "N", "memory limit per call in MiB (default 64)")
		fs.String(&domains, "allow-domains", "LIST", "hosts fetch may reach: host or *.domain, comma-separated")
		fs.String(&secrets, "secrets", "LIST", "secret names the script may read, comma-separated")
		fs.Bool(&disabled, "disabled", "add it without running it")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one NAME")
		}
		if kinds == "" || script == "" {
			return usageErr(c, "--kinds and --script are required")
		}
		src, err := readGuardInput(r, script)
		if err != nil {
			return err
		}
		m := warden.Middleware{Name: args[0], Kinds: splitList(kinds), Script: string(src), OnError: onError,
			TimeoutMS: timeoutMS, MaxMemoryMB: memoryMB, AllowedDomains: splitList(domains),
			Secrets: splitList(secrets), Disabled: disabled}
		cl, err := r.client()
		if err != nil {
			return err
		}
		out, err := cl.PutMiddleware(ctx, m)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, out)
		}
		fmt.Fprintf(r.env.Stdout, "middleware %s: %s\n", out.Name, strings.Join(out.Kinds, ","))
		return nil
	}
	return c
}

func middlewareLsCmd() *command {
	c := &command{name: "ls", aliases: []string{"list"}, short: "List the installed middleware, in the order they run",
		long: "List the installed middleware in the order they run: the daemon config file's first\n" +
			"(SOURCE config, read-only here), then those added with 'warden middleware add' (api).",
		json: true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "takes no arguments")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		list, err := cl.ListMiddleware(ctx)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, list)
		}
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tKINDS\tON ERROR\tTIMEOUT\tSOURCE\tSTATE")
		for _, m := range list {
			state, timeout := "enabled", "200ms"
			if m.Disabled {
				state = "disabled"
			}
			if m.TimeoutMS > 0 {
				timeout = fmt.Sprintf("%dms", m.TimeoutMS)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, strings.Join(m.Kinds, ","), m.OnError, timeout, m.Source, state)
		}
		return tw.Flush()
	}
	return c
}

func middlewareRmCmd() *command {
	c := &command{name: "rm", args: "NAME", short: "Remove an API-added middleware",
		long: "Remove the middleware NAME added through the API; it stops running at once. Middleware of\n" +
			"the daemon's config file are removed there."}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one NAME")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		return cl.DeleteMiddleware(ctx, args[0])
	}
	return c
}

func middlewareTestCmd() *command {
	var script, kinds, action, result, phase string
	var draft warden.Middleware
	var domains, secrets string
	c := &command{name: "test", args: "[NAME]", short: "Run a middleware on a sample action and show its verdict",
		long: "Run the installed middleware NAME, or the script in --script FILE (on --kinds, default\n" +
			"the action's kind), on the governed action in --action FILE (JSON as rules see it:\n" +
			"{\"kind\": \"exec\", \"exec\": {...}}; \"-\": stdin) and, for --phase post, the result in\n" +
			"--result FILE. Nothing is applied. The verdict is allow, block, modify or error.\n" +
			"A --script draft takes the definition flags of 'warden middleware add' and runs with\n" +
			"those limits; with --name it reads the secrets granted to that name. Secret values\n" +
			"the script read show as [secret NAME] in the verdict.",
		examples: []string{
			"warden middleware test no-shell --action call.json",
			"warden middleware test --script hook.js --phase post --action call.json --result res.json",
			"warden middleware test --script scan.js --name scan --secrets scanner_key --allow-domains \\\n" +
				"    api.scanner.example --action call.json",
		},
		json: true}
	c.flags = func(fs *flagSet) {
		fs.String(&script, "script", "FILE", "test this script instead of an installed middleware")
		fs.String(&kinds, "kinds", "LIST", "with --script: the kinds it runs for (default: the action's)")
		fs.String(&draft.Name, "name", "NAME", "with --script: its name (default test)")
		fs.String(&draft.OnError, "on-error", "closed|open", "with --script: what a failed call does (default closed)")
		fs.Int64(&draft.TimeoutMS, "timeout-ms", "N", "with --script: time limit per call in ms (default 200)")
		fs.Int64(&draft.MaxMemoryMB, "max-memory-mb", "N", "with --script: memory limit per call in MiB (default 64)")
		fs.String(&domains, "allow-domains", "LIST", "with --script: hosts fetch may reach, comma-separated")
		fs.String(&secrets, "secrets", "LIST", "with --script: secret names the script may read, comma-separated")
		fs.String(&action, "action", "FILE", `the governed action as JSON ("-": stdin; required)`)
		fs.String(&result, "result", "FILE", "the call's result as JSON, for --phase post")
		fs.String(&phase, "phase", "pre|post", "the hook to run (default pre)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		q := warden.MiddlewareTestRequest{Phase: phase}
		switch {
		case script != "" && len(args) != 0:
			return usageErr(c, "give NAME or --script FILE, not both")
		case len(args) == 1:
			q.Name = args[0]
		case script != "" && len(args) == 0:
		default:
			return usageErr(c, "want one NAME (or --script FILE)")
		}
		if script == "" && (draft.Name != "" || draft.OnError != "" || draft.TimeoutMS != 0 || draft.MaxMemoryMB != 0 ||
			domains != "" || secrets != "" || kinds != "") {
			return usageErr(c, "the definition flags go with --script (an installed middleware runs as installed)")
		}
		if action == "" {
			return usageErr(c, "--action FILE is required")
		}
		if script == "-" && action == "-" {
			return usageErr(c, "only one of --script and --action can be stdin")
		}
		b, err := readGuardInput(r, action)
		if err != nil {
			return err
		}
		var a struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(b, &a); err != nil || a.Kind == "" {
			return fmt.Errorf("%s: want a JSON object with a kind", action)
		}
		q.Action = b
		if result != "" {
			rb, err := os.ReadFile(result)
			if err != nil {
				return err
			}
			if !json.Valid(rb) {
				return fmt.Errorf("%s: not a JSON document", result)
			}
			q.Result = rb
		}
		if script != "" {
			src, err := readGuardInput(r, script)
			if err != nil {
				return err
			}
			ks := splitList(kinds)
			if len(ks) == 0 {
				ks = []string{a.Kind}
			}
			m := draft
			if m.Name == "" {
				m.Name = "test"
			}
			m.Kinds, m.Script = ks, string(src)
			m.AllowedDomains, m.Secrets = splitList(domains), splitList(secrets)
			q.Middleware = &m
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		v, err := cl.TestMiddleware(ctx, q)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, v)
		}
		switch v.Action {
		case "block":
			fmt.Fprintf(r.env.Stdout, "block: %s\n", v.Message)
		case "modify":
			fmt.Fprintf(r.env.Stdout, "modify: %s\n", v.Modified)
		case "error":
			fmt.Fprintf(r.env.Stdout, "error (on_error %s): %s\n", v.OnError, v.Error)
		default:
			fmt.Fprintln(r.env.Stdout, v.Action)
		}
		return nil
	}
	return c
}

func middlewareShowCmd() *command {
	c := &command{name: "show", args: "NAME", short: "Show an installed middleware with its script",
		long: "Show the installed middleware NAME: its definition (kinds, limits, allowed domains, the\n" +
			"secret names it reads, where it comes from) and its script. Never secret values.",
		json: true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one NAME")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		m, err := cl.GetMiddleware(ctx, args[0])
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, m)
		}
		w := r.env.Stdout
		fmt.Fprintf(w, "name: %s\nkinds: %s\nsource: %s\non_error: %s\n", m.Name, strings.Join(m.Kinds, ","), m.Source, m.OnError)
		if m.TimeoutMS > 0 {
			fmt.Fprintf(w, "timeout_ms: %d\n", m.TimeoutMS)
		}
		if m.MaxMemoryMB > 0 {
			fmt.Fprintf(w, "max_memory_mb: %d\n", m.MaxMemoryMB)
		}
		if len(m.AllowedDomains) > 0 {
			fmt.Fprintf(w, "allowed_domains: %s\n", strings.Join(m.AllowedDomains, ","))
		}
		if len(m.Secrets) > 0 {
			fmt.Fprintf(w, "secrets: %s\n", strings.Join(m.Secrets, ","))
		}
		if m.Disabled {
			fmt.Fprintln(w, "disabled: true")
		}
		fmt.Fprintf(w, "\n%s", m.Script)
		if !strings.HasSuffix(m.Script, "\n") {
			fmt.Fprintln(w)
		}
		return nil
	}
	return c
}
