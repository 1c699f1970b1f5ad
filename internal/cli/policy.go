package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"go.yaml.in/yaml/v3"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// maxPolicyFile bounds a policy file; the daemon takes 1 MiB of JSON.
const maxPolicyFile = 1 << 20

func policyCmd() *command {
	return &command{
		name:    "policy",
		aliases: []string{"policies"},
		short:   "Write, inspect and dry-run governance policies (CEL rules on actions)",
		long: "Manage the policies that decide actions (exec, file access, sandbox creation ...) with\n" +
			"CEL rules: allow, deny, require approval or log only. Policy files are YAML, in the format\n" +
			"of docs/governance.md. Conditions are checked when written: a bad one is refused with its\n" +
			"rule, line and column. `policy test` replays a draft against the audit log.",
		subs: []*command{policyCreateCmd(), policyLsCmd(), policyShowCmd(), policyEditCmd(), policyRmCmd(), policyTestCmd()},
	}
}

// readPolicyFile reads a YAML (or JSON) policy file; "-" is stdin. Unknown
// fields are errors, so a misspelt key is not silently dropped.
func readPolicyFile(r *runner, name string) (warden.PolicyWrite, error) {
	var p warden.PolicyWrite
	var in io.Reader
	if name == "-" {
		in = r.env.Stdin
	} else {
		f, err := os.Open(name)
		if err != nil {
			return p, err
		}
		defer f.Close()
		in = f
	}
	b, err := io.ReadAll(io.LimitReader(in, maxPolicyFile+1))
	if err != nil {
		return p, fmt.Errorf("read %s: %w", name, err)
	}
	if len(b) > maxPolicyFile {
		return p, fmt.Errorf("%s: larger than %d bytes", name, maxPolicyFile)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil {
		if errors.Is(err, io.EOF) {
			return p, fmt.Errorf("%s: empty policy file", name)
		}
		return p, fmt.Errorf("%s: %w", name, err)
	}
	return p, nil
}

func policyFileFlag(fs *flagSet, file *string) {
	fs.String(file, "file", "FILE", "the policy, a YAML file (- for stdin)", "f")
}

func printPolicyLine(r *runner, p warden.Policy) {
	fmt.Fprintf(r.env.Stdout, "%s version %d\n", p.ID, p.Version)
}

func policyCreateCmd() *command {
	var file string
	c := &command{
		name:     "create",
		short:    "Create a policy from a YAML file",
		long:     "Create a policy from a YAML file (-f). It is in force at once, as version 1.",
		examples: []string{"warden policy create -f agents-in-ci.yaml"},
		json:     true,
	}
	c.flags = func(fs *flagSet) { policyFileFlag(fs, &file) }
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 || file == "" {
			return usageErr(c, "want -f FILE")
		}
		p, err := readPolicyFile(r, file)
		if err != nil {
			return err
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		out, err := cl.CreatePolicy(ctx, p)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, out)
		}
		printPolicyLine(r, out)
		return nil
	}
	return c
}

func scopeString(s warden.PolicyScope) string {
	if s.ID == "" {
		return s.Kind
	}
	return s.Kind + ":" + s.ID
}

func policyLsCmd() *command {
	c := &command{name: "ls", aliases: []string{"list"}, short: "List the policies in force",
		long: "List the policies in force: id, version, scope, rules and name.", json: true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "takes no arguments")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		list, err := cl.ListPolicies(ctx)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, list)
		}
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tVERSION\tSCOPE\tRULES\tNAME")
		for _, p := range list {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\n", p.ID, p.Version, scopeString(p.Scope), len(p.Rules), p.Name)
		}
		return tw.Flush()
	}
	return c
}

func policyShowCmd() *command {
	var version int64
	c := &command{
		name:  "show",
		args:  "ID",
		short: "Show a policy, or one of its versions, as YAML",
		long: "Show a policy as YAML, in the format `policy create` reads. With --version, a recorded\n" +
			"version (also of a deleted policy), as audit events name them.",
		examples: []string{"warden policy show agents-in-ci --version 2"},
		json:     true,
	}
	c.flags = func(fs *flagSet) { fs.Int64(&version, "version", "N", "a recorded version") }
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want the policy's ID")
		}
		if version < 0 {
			return usageErr(c, "--version must be positive")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		p, err := cl.GetPolicy(ctx, args[0], version)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, p)
		}
		fmt.Fprintf(r.env.Stdout, "# version %d, updated %s by %s\n", p.Version,
			p.UpdatedAt.UTC().Format("2006-01-02T15:04:05Z"), p.UpdatedBy)
		enc := yaml.NewEncoder(r.env.Stdout)
		enc.SetIndent(2)
		if err := enc.Encode(warden.PolicyWrite{ID: p.ID, Name: p.Name, Scope: p.Scope, Rules: p.Rules, Defaults: p.Defaults}); err != nil {
			return err
		}
		return enc.Close()
	}
	return c
}

func policyEditCmd() *command {
	var file string
	c := &command{
		name:  "edit",
		args:  "ID",
		short: "Replace a policy with a YAML file (a new version)",
		long: "Replace policy ID with the YAML file (-f): a new version, in force at once. The file's id,\n" +
			"when it has one, must be ID. Earlier versions stay readable with `policy show --version`.",
		examples: []string{"warden policy show ci > p.yaml; $EDITOR p.yaml; warden policy edit ci -f p.yaml"},
		json:     true,
	}
	c.flags = func(fs *flagSet) { policyFileFlag(fs, &file) }
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 || file == "" {
			return usageErr(c, "want the policy's ID and -f FILE")
		}
		p, err := readPolicyFile(r, file)
		if err != nil {
			return err
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		out, err := cl.UpdatePolicy(ctx, args[0], p)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, out)
		}
		printPolicyLine(r, out)
		return nil
	}
	return c
}

func policyRmCmd() *command {
	c := &command{name: "rm", aliases: []string{"delete"}, args: "ID...", short: "Delete policies",
		long: "Take policies out of force. Their versions stay readable; their ids cannot be reused."}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) == 0 {
			return usageErr(c, "want at least one policy ID")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		for _, id := range args {
			if err := cl.DeletePolicy(ctx, id); err != nil {
				return err
			}
			fmt.Fprintln(r.env.Stdout, id)
		}
		return nil
	}
	return c
}

func policyTestCmd() *command {
	var file, since string
	var last int
	c := &command{
		name:  "test",
		short: "Dry-run a draft policy against the audit log",
		long: "Evaluate the draft policy in the YAML file (-f), alone, against the last N audit events\n" +
			"(--last, default 1000) or those since a time (--since: a duration back from now, or an\n" +
			"RFC 3339 time), and print what it would have denied, held for approval or logged. Nothing\n" +
			"changes. The key needs policies:read and audit:read.",
		examples: []string{
			"warden policy test -f agents-in-ci.yaml --last 500",
			"warden policy test -f agents-in-ci.yaml --since 24h",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		policyFileFlag(fs, &file)
		fs.Int(&last, "last", "N", "the last N audit events (at most 10000)")
		fs.String(&since, "since", "WHEN", "events since a duration ago (24h, 7d) or an RFC 3339 time")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 || file == "" {
			return usageErr(c, "want -f FILE")
		}
		if last != 0 && since != "" {
			return usageErr(c, "give --last or --since, not both")
		}
		if last < 0 {
			return usageErr(c, "--last must be positive")
		}
		p, err := readPolicyFile(r, file)
		if err != nil {
			return err
		}
		q := warden.PolicyTestRequest{Policy: p, Limit: last}
		if since != "" {
			t, err := parseSince(since, r.env.Now())
			if err != nil {
				return usageErr(c, "--since: %v", err)
			}
			q.Since = &t
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		res, err := cl.TestPolicy(ctx, q)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, res)
		}
		return printPolicyTest(r.env.Stdout, res)
	}
	return c
}

func printPolicyTest(w io.Writer, res warden.PolicyTestResult) error {
	fmt.Fprintf(w, "%d events read (seq %d to %d), %d evaluated, %d out of scope, %d not actions\n",
		res.Events, res.FromSeq, res.ToSeq, res.Evaluated, res.OutOfScope, res.NotGovernable)
	if res.Truncated {
		fmt.Fprintln(w, "the range held more events: only the earliest were read")
	}
	outcomes := []string{warden.OutcomeDeny, warden.OutcomeRequireApproval, warden.OutcomeLogOnly, warden.OutcomeAllow}
	var parts []string
	for _, o := range outcomes {
		parts = append(parts, fmt.Sprintf("%s %d", o, res.Counts[o]))
	}
	fmt.Fprintf(w, "would have: %s\n", strings.Join(parts, ", "))
	if res.Rebuilt > 0 {
		fmt.Fprintf(w, "%d events predate governed audit records and were rebuilt (partial)\n", res.Rebuilt)
	}
	if len(res.ByRule) > 0 {
		rules := make([]string, 0, len(res.ByRule))
		for id := range res.ByRule {
			rules = append(rules, id)
		}
		sort.Strings(rules)
		for _, id := range rules {
			fmt.Fprintf(w, "  rule %s: %d\n", id, res.ByRule[id])
		}
	}
	if len(res.Results) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tPRINCIPAL\tKIND\tTARGET\tOUTCOME\tRULE")
	for _, e := range res.Results {
		rule := e.RuleID
		if rule == "" {
			rule = "(default)"
		}
		if e.Partial {
			rule += " (partial)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.Time.UTC().Format("2006-01-02T15:04:05Z"),
			e.PrincipalID, e.Kind, e.Target, e.Outcome, rule)
	}
	return tw.Flush()
}
