package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func agentCmd() *command {
	return &command{
		name:    "agent",
		aliases: []string{"agents"},
		short:   "Define hosted agents and run them: manual, cron, webhook and Slack triggers",
		long: "Hosted agents (docs/agents.md) are programs that live on Warden: each has its own principal\n" +
			"and keys, a template and entry command, triggers and versions. A run gets a sandbox (fresh,\n" +
			"or the agent's persistent one), its input in $WARDEN_RUN_INPUT and " + "/tmp/warden-run/input.json,\n" +
			"and a key of its own in $WARDEN_API_KEY; its output is kept as the run's log.",
		subs: []*command{agentCreateCmd(), agentUpdateCmd(), agentLsCmd(), agentGetCmd(), agentRmCmd(), agentVersionsCmd(),
			agentRunCmd(), agentRunsCmd(), agentLogsCmd(), agentCancelCmd()},
	}
}

func agentCreateCmd() *command {
	var file string
	c := &command{name: "create", short: "Define an agent from agent.yaml",
		long: "Define an agent from its spec (agent.yaml: YAML or JSON, - for stdin). It gets a principal\n" +
			"of its own, owned by you. The webhook secret is printed once: keep it to sign webhooks.",
		examples: []string{"warden agent create -f agent.yaml"}, json: true}
	c.flags = func(fs *flagSet) {
		fs.String(&file, "file", "FILE", "the agent's spec (YAML or JSON; - for stdin)", "f")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 || file == "" {
			return usageErr(c, "want -f FILE")
		}
		spec, err := readSpec(r, file)
		if err != nil {
			return err
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		a, err := cl.CreateAgent(ctx, spec)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, a)
		}
		fmt.Fprintf(r.env.Stdout, "agent %s (version %d, principal %s)\n", a.Name, a.Version, a.PrincipalID)
		fmt.Fprintf(r.env.Stdout, "webhook: POST %s\nwebhook secret (shown once): %s\n", a.WebhookPath, a.WebhookSecret)
		return nil
	}
	return c
}

func agentUpdateCmd() *command {
	var file string
	c := &command{name: "update", args: "NAME", short: "Store a new version of an agent",
		long:     "Store the spec as the agent's next version; runs that started keep the version they ran.",
		examples: []string{"warden agent update triage -f agent.yaml"}, json: true}
	c.flags = func(fs *flagSet) {
		fs.String(&file, "file", "FILE", "the agent's spec (YAML or JSON; - for stdin)", "f")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 || file == "" {
			return usageErr(c, "want the agent's name and -f FILE")
		}
		spec, err := readSpec(r, file)
		if err != nil {
			return err
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		a, err := cl.UpdateAgent(ctx, args[0], spec)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, a)
		}
		_, err = fmt.Fprintf(r.env.Stdout, "agent %s: version %d\n", a.Name, a.Version)
		return err
	}
	return c
}

func agentLsCmd() *command {
	c := &command{name: "ls", aliases: []string{"list"}, short: "List agents",
		long: "List the agents you own or are (all of them for an admin).", json: true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "takes no arguments")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		list, err := cl.ListAgents(ctx)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, list)
		}
		now := r.env.Now()
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tVERSION\tPRINCIPAL\tOWNER\tAGE")
		for _, a := range list {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", a.Name, a.Version, a.PrincipalID, a.OwnerID, age(a.CreatedAt, now))
		}
		return tw.Flush()
	}
	return c
}

func agentGetCmd() *command {
	c := &command{name: "get", aliases: []string{"inspect"}, args: "NAME", short: "Show an agent and its spec", json: true,
		long: "Print the agent as JSON: its principal, owner, current version and spec."}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want the agent's name")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		a, err := cl.GetAgent(ctx, args[0])
		if err != nil {
			return err
		}
		return printJSON(r.env.Stdout, a)
	}
	return c
}

func agentRmCmd() *command {
	c := &command{name: "rm", aliases: []string{"remove"}, args: "NAME...", short: "Remove agents with their runs",
		long: "Cancel the agents' runs, kill their persistent sandboxes and remove them with their runs and logs."}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) == 0 {
			return usageErr(c, "want at least one agent name")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		for _, n := range args {
			if err := cl.DeleteAgent(ctx, n); err != nil {
				return err
			}
			fmt.Fprintln(r.env.Stdout, n)
		}
		return nil
	}
	return c
}

func agentVersionsCmd() *command {
	c := &command{name: "versions", args: "NAME", short: "List an agent's versions", json: true,
		long: "List the versions of an agent's spec, oldest first; each run records the version it ran."}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want the agent's name")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		vs, err := cl.AgentVersions(ctx, args[0])
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, vs)
		}
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tCREATED\tBY")
		for _, v := range vs {
			fmt.Fprintf(tw, "%d\t%s\t%s\n", v.Version, v.CreatedAt.Format(time.RFC3339), v.CreatedBy)
		}
		return tw.Flush()
	}
	return c
}

func agentRunCmd() *command {
	var input string
	var wait bool
	c := &command{name: "run", args: "NAME", short: "Start a run of an agent",
		long: "Queue a manual run with --input (JSON; a non-JSON value is sent as a JSON string) and print\n" +
			"its ID. With --wait, print its log until it ends and exit with 0 if it succeeded, 1 if not.",
		examples: []string{`warden agent run triage --input '{"issue": 42}' --wait`}, json: true}
	c.flags = func(fs *flagSet) {
		fs.String(&input, "input", "JSON", "the run's input payload")
		fs.Bool(&wait, "wait", "follow the run's log until it ends", "w")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want the agent's name")
		}
		var in json.RawMessage
		if input != "" {
			if json.Valid([]byte(input)) {
				in = json.RawMessage(input)
			} else {
				in, _ = json.Marshal(input)
			}
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		run, err := cl.RunAgent(ctx, args[0], in)
		if err != nil {
			return err
		}
		if !wait {
			if r.g.json {
				return printJSON(r.env.Stdout, run)
			}
			_, err = fmt.Fprintln(r.env.Stdout, run.ID)
			return err
		}
		if !r.g.json {
			fmt.Fprintln(r.env.Stderr, run.ID)
		}
		return followAgentRun(ctx, r, cl, run.ID, !r.g.json)
	}
	return c
}

// followAgentRun prints a run's log until it ends (when print) and exits
// with the run's outcome.
func followAgentRun(ctx context.Context, r *runner, cl *warden.Client, id string, print bool) error {
	s, err := cl.AgentRunLogs(ctx, id, true)
	if err != nil {
		return err
	}
	defer s.Close()
	for {
		l, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if print {
			printAgentLogLine(r, l)
		}
	}
	run, err := cl.GetAgentRun(ctx, id)
	if err != nil {
		return err
	}
	if r.g.json {
		if err := printJSON(r.env.Stdout, run); err != nil {
			return err
		}
	}
	if run.State != warden.AgentRunSucceeded {
		if !r.g.json {
			fmt.Fprintf(r.env.Stderr, "run %s %s: %s\n", run.ID, run.State, run.Reason)
		}
		return exitCode(1)
	}
	return nil
}

func printAgentLogLine(r *runner, l warden.AgentLogLine) {
	switch l.Stream {
	case "stdout":
		io.WriteString(r.env.Stdout, l.Data)
	case "stderr":
		io.WriteString(r.env.Stderr, l.Data)
	default:
		fmt.Fprintf(r.env.Stderr, "[%s] %s", l.Stream, l.Data)
	}
}

func agentRunsCmd() *command {
	var state string
	var limit int
	c := &command{name: "runs", args: "NAME", short: "List an agent's runs, newest first", json: true,
		long: "List an agent's runs with their trigger, state, exit code, duration, the tokens and cost of\n" +
			"their LLM calls (made with the run's key) and the reason they ended."}
	c.flags = func(fs *flagSet) {
		fs.String(&state, "state", "STATE", "only runs in this state (queued, running, succeeded, failed, timed_out, cancelled)")
		fs.Int(&limit, "limit", "N", "at most N runs (default 50)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want the agent's name")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		runs, err := cl.AgentRuns(ctx, args[0], state, limit)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, runs)
		}
		now := r.env.Now()
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RUN\tVERSION\tTRIGGER\tSTATE\tEXIT\tDURATION\tAGE\tTOKENS\tCOST\tREASON")
		for _, x := range runs {
			exit, dur := "-", "-"
			if x.ExitCode != nil {
				exit = strconv.Itoa(*x.ExitCode)
			}
			if x.DurationMS != nil {
				dur = (time.Duration(*x.DurationMS) * time.Millisecond).String()
			}
			tokens, cost := "-", "-"
			if x.LLMCalls > 0 {
				tokens, cost = strconv.FormatInt(x.TokensIn+x.TokensOut, 10), fmt.Sprintf("$%.4f", float64(x.CostMicros)/1e6)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.ID, x.Version, x.Trigger, x.State, exit, dur, age(x.CreatedAt, now),
				tokens, cost, strings.ReplaceAll(x.Reason, "\n", " "))
		}
		return tw.Flush()
	}
	return c
}

func agentLogsCmd() *command {
	var follow bool
	c := &command{name: "logs", args: "RUN", short: "Print a run's log",
		long: "Print a run's output (stdout to stdout, stderr and Warden's own lines to stderr). With -f,\n" +
			"follow it until the run ends, then exit 0 if it succeeded, 1 if not."}
	c.flags = func(fs *flagSet) {
		fs.Bool(&follow, "follow", "follow the log until the run ends", "f")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want the run's ID")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		if follow {
			return followAgentRun(ctx, r, cl, args[0], true)
		}
		s, err := cl.AgentRunLogs(ctx, args[0], false)
		if err != nil {
			return err
		}
		defer s.Close()
		for {
			l, err := s.Next()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			printAgentLogLine(r, l)
		}
	}
	return c
}

func agentCancelCmd() *command {
	c := &command{name: "cancel", args: "RUN...", short: "Cancel runs", json: true,
		long: "Cancel queued or running runs; a running run's process is killed and its fresh sandbox removed."}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) == 0 {
			return usageErr(c, "want at least one run ID")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		for _, id := range args {
			run, err := cl.CancelAgentRun(ctx, id)
			if err != nil {
				return err
			}
			if r.g.json {
				if err := printJSON(r.env.Stdout, run); err != nil {
					return err
				}
				continue
			}
			fmt.Fprintf(r.env.Stdout, "%s %s\n", run.ID, run.State)
		}
		return nil
	}
	return c
}
