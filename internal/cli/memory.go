package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func memoryCmd() *command {
	return &command{
		name:  "memory",
		short: "Review agents' memory: list, show, history, diff, redact, export",
		long: "Review what hosted agents remember (docs/memory.md). Agents write their own memory\n" +
			"through the MCP gateway's memory tools; people read it here with memory:read and\n" +
			"redact it with memory:review. AGENT is the agent's name.",
		subs: []*command{memoryLsCmd(), memoryShowCmd(), memoryHistoryCmd(), memoryDiffCmd(), memoryRedactCmd(), memoryExportCmd()},
	}
}

// memoryLine shortens a text to one line of at most n characters.
func memoryLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-3]) + "..."
	}
	return s
}

func memoryLsCmd() *command {
	var q warden.MemoryQuery
	c := &command{name: "ls", args: "AGENT", short: "List an agent's memory (latest versions)",
		long: "List the keys of AGENT's memory with their latest version, by key, or the best\n" +
			"matches of --search.",
		examples: []string{"warden memory ls support-bot", "warden memory ls support-bot --search 'deploy canary'"},
		json:     true}
	c.flags = func(fs *flagSet) {
		fs.String(&q.Prefix, "prefix", "P", "only keys starting with P")
		fs.String(&q.Tag, "tag", "T", "only entries tagged T")
		fs.String(&q.Search, "search", "WORDS", "search the text, keys and tags for any of WORDS")
		fs.Int(&q.Limit, "limit", "N", "at most N entries (default 100)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one AGENT")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		es, err := cl.ListMemory(ctx, args[0], q)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, es)
		}
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tVERSION\tTAGS\tWRITTEN\tTEXT")
		for _, e := range es {
			text := memoryLine(e.Text, 60)
			if e.Redacted != nil {
				text = "(redacted)"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", e.Key, e.Version, strings.Join(e.Tags, ","),
				e.CreatedAt.Local().Format(time.DateTime), text)
		}
		return tw.Flush()
	}
	return c
}

func memoryShowCmd() *command {
	c := &command{name: "show", args: "AGENT KEY", short: "Show a key's latest version",
		long:     "Print the latest version of KEY in AGENT's memory: who wrote it, when, and its text.",
		examples: []string{"warden memory show support-bot runbook/deploy"},
		json:     true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want AGENT KEY")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		k, err := cl.GetMemory(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		if k.Entry == nil {
			return fmt.Errorf("%s was forgotten (see warden memory history)", args[1])
		}
		if r.g.json {
			return printJSON(r.env.Stdout, k.Entry)
		}
		e := k.Entry
		fmt.Fprintf(r.env.Stdout, "key:      %s\nversion:  %d\ntags:     %s\nwritten:  %s by %s", e.Key, e.Version,
			strings.Join(e.Tags, ","), e.CreatedAt.Local().Format(time.DateTime), e.PrincipalID)
		if e.RunID != "" {
			fmt.Fprintf(r.env.Stdout, " (run %s)", e.RunID)
		}
		fmt.Fprintln(r.env.Stdout)
		if e.Redacted != nil {
			fmt.Fprintf(r.env.Stdout, "redacted: %s by %s: %s\n", e.Redacted.At.Local().Format(time.DateTime), e.Redacted.By, e.Redacted.Reason)
			return nil
		}
		fmt.Fprintf(r.env.Stdout, "\n%s\n", strings.TrimSuffix(e.Text, "\n"))
		return nil
	}
	return c
}

func memoryHistoryCmd() *command {
	c := &command{name: "history", args: "AGENT KEY", short: "List every version of a key",
		long:     "List every version of KEY in AGENT's memory, oldest first: who wrote it, in which run.",
		examples: []string{"warden memory history support-bot runbook/deploy"},
		json:     true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want AGENT KEY")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		k, err := cl.GetMemory(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, k.Versions)
		}
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tWRITTEN\tPRINCIPAL\tRUN\tTEXT")
		for _, e := range k.Versions {
			text := memoryLine(e.Text, 50)
			switch {
			case e.Forgotten:
				text = "(forgotten)"
			case e.Redacted != nil:
				text = "(redacted by " + e.Redacted.By + ")"
			}
			run := e.RunID
			if run == "" {
				run = "-"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", e.Version, e.CreatedAt.Local().Format(time.DateTime), e.PrincipalID, run, text)
		}
		return tw.Flush()
	}
	return c
}

func memoryDiffCmd() *command {
	var from, to int64
	c := &command{name: "diff", args: "AGENT KEY", short: "Show what changed between two versions of a key",
		long:     "Print a unified diff of KEY between --from and --to (default: the latest version and\nthe one before it).",
		examples: []string{"warden memory diff support-bot runbook/deploy", "warden memory diff support-bot runbook/deploy --from 1 --to 3"},
		json:     true}
	c.flags = func(fs *flagSet) {
		fs.Int64(&from, "from", "N", "the older version (default: the one before --to)")
		fs.Int64(&to, "to", "N", "the newer version (default: the latest)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want AGENT KEY")
		}
		if from < 0 || to < 0 {
			return usageErr(c, "--from and --to must not be negative")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		d, err := cl.DiffMemory(ctx, args[0], args[1], from, to)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, d)
		}
		if d.Unified == "" {
			fmt.Fprintf(r.env.Stdout, "versions %d and %d are the same\n", d.From, d.To)
			return nil
		}
		_, err = io.WriteString(r.env.Stdout, d.Unified)
		return err
	}
	return c
}

func memoryRedactCmd() *command {
	var version int64
	var reason string
	c := &command{name: "redact", args: "AGENT KEY", short: "Remove a key's text from the memory and its history",
		long: "Remove the text of KEY (every version, or only --version N) from AGENT's memory and its\n" +
			"history. The key, who wrote it and when stay; the audit log records the redaction.\n" +
			"The key needs memory:review.",
		examples: []string{"warden memory redact support-bot creds --reason 'a password'"},
		json:     true}
	c.flags = func(fs *flagSet) {
		fs.Int64(&version, "version", "N", "only version N (default: every version)")
		fs.String(&reason, "reason", "TEXT", "why, for the audit log and reviewers")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want AGENT KEY")
		}
		if version < 0 {
			return usageErr(c, "--version must not be negative")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		n, err := cl.RedactMemory(ctx, args[0], args[1], version, reason)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, map[string]any{"agent": args[0], "key": args[1], "versions_redacted": n})
		}
		fmt.Fprintf(r.env.Stdout, "redacted %d version(s) of %s\n", n, args[1])
		return nil
	}
	return c
}

func memoryExportCmd() *command {
	var out string
	c := &command{name: "export", args: "AGENT", short: "Export an agent's memory as JSON lines",
		long: "Write every version of every key of AGENT's memory, by key and version, one JSON\n" +
			"object per line (redacted versions without their text).",
		examples: []string{"warden memory export support-bot > support-bot-memory.jsonl"}}
	c.flags = func(fs *flagSet) {
		fs.String(&out, "output", "FILE", "write to FILE instead of standard output")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one AGENT")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		rc, err := cl.ExportMemory(ctx, args[0])
		if err != nil {
			return err
		}
		defer rc.Close()
		var w io.Writer = r.env.Stdout
		if out != "" {
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				return fmt.Errorf("export: %w", err)
			}
			defer f.Close()
			w = f
		}
		if _, err := io.Copy(w, rc); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		return nil
	}
	return c
}
