package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func monitorCmd() *command {
	var (
		q                   warden.MonitorQuery
		agent, kinds, since string
		until               string
		follow              bool
	)
	c := &command{
		name:  "monitor",
		short: "Show or follow the Agent Monitor's timeline",
		long: "Show the Agent Monitor's timeline: every audited action (commands, file reads and writes,\n" +
			"MCP tool calls, egress, secret uses, LLM calls, rule and guardrail decisions) and what\n" +
			"agents that run elsewhere report (Claude Code hooks, the ingest endpoint). Without\n" +
			"--since, the newest --limit events (default 20); with it, every event from then on.\n" +
			"With -f, new events are printed as they happen, like tail -f, until interrupted.\n" +
			"--since and --until take a time (RFC 3339) or a duration back from now (10m, 2h, 1d).\n" +
			"--kind takes kinds separated by commas; one ending in \".\" matches by prefix (file.,\n" +
			"agent.). With --json, a JSON array, or with -f one JSON object per line. Needs\n" +
			"monitor:read.",
		examples: []string{
			"warden monitor -f",
			"warden monitor --agent ci-bot --kind exec,file. --since 10m",
			"warden monitor --sandbox sb-01hzx3k9q2 --json",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.String(&agent, "agent", "A", "only this agent principal (name or ID)")
		fs.String(&q.Principal, "principal", "P", "only this principal (name or ID)")
		fs.String(&q.Sandbox, "sandbox", "ID", "only events acting on or in this sandbox")
		fs.String(&q.Session, "session", "S", "only this agent session (a Claude Code session_id)")
		fs.String(&kinds, "kind", "K", "only these kinds, comma-separated (exec, file., agent.tool)")
		fs.String(&since, "since", "T", "only events from T on: a time or a duration back (10m)")
		fs.String(&until, "until", "T", "only events before T: a time or a duration back")
		fs.Int(&q.Limit, "limit", "N", "without --since, how many of the newest events to show (default 20)")
		fs.Bool(&follow, "follow", "keep printing new events until interrupted", "f")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "unexpected argument %q", args[0])
		}
		if q.Limit < 0 || q.Limit > 1000 {
			return usageErr(c, "--limit must be between 1 and 1000")
		}
		if q.Limit == 0 {
			q.Limit = 20
		}
		var err error
		now := time.Now()
		if q.Since, err = timeArg(since, now); err != nil {
			return usageErr(c, "--since: %v", err)
		}
		if q.Until, err = timeArg(until, now); err != nil {
			return usageErr(c, "--until: %v", err)
		}
		for _, k := range strings.Split(kinds, ",") {
			if k = strings.TrimSpace(k); k != "" {
				q.Kinds = append(q.Kinds, k)
			}
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		if q.Agent, err = resolvePrincipal(ctx, cl, agent); err != nil {
			return err
		}
		if q.Principal, err = resolvePrincipal(ctx, cl, q.Principal); err != nil {
			return err
		}
		if !follow {
			// The newest --limit events, or every event from --since on.
			events := []warden.MonitorEvent{}
			for {
				page, err := cl.ListMonitorEvents(ctx, q)
				if err != nil {
					return err
				}
				events = append(events, page.Events...)
				if q.Since.IsZero() || len(page.Events) < q.Limit || page.NextCursor <= q.Cursor {
					break
				}
				q.Cursor = page.NextCursor
			}
			if r.g.json {
				return printJSON(r.env.Stdout, events)
			}
			for _, ev := range events {
				writeMonitorLine(r.env.Stdout, ev)
			}
			return nil
		}
		enc := json.NewEncoder(r.env.Stdout)
		enc.SetEscapeHTML(false)
		for ev, err := range cl.FollowMonitorEvents(ctx, q) {
			if err != nil {
				return err
			}
			if r.g.json {
				if err := enc.Encode(ev); err != nil {
					return err
				}
				continue
			}
			writeMonitorLine(r.env.Stdout, ev)
		}
		return ctx.Err()
	}
	return c
}

// timeArg reads an RFC 3339 time or a duration back from now ("" is the zero time).
func timeArg(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := parseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("want a time (2026-01-02T15:04:05Z) or a duration back from now (10m): %w", err)
	}
	return now.Add(-d), nil
}

// writeMonitorLine prints one event as a line: local time, kind, outcome, who (agent or
// principal, and session), sandbox, target and rule.
func writeMonitorLine(w io.Writer, ev warden.MonitorEvent) {
	who := ev.PrincipalID
	if ev.AgentID != "" {
		who = ev.AgentID
	}
	if ev.SessionID != "" {
		who += "/" + shorten(ev.SessionID, 12)
	}
	outcome := ev.Outcome
	if outcome == "" {
		outcome = "-"
	}
	target := ev.Target
	if ev.RuleID != "" {
		target += " [rule " + ev.RuleID + "]"
	}
	line := fmt.Sprintf("%s  %-20s %-8s %-24s %-16s %s", ev.Time.Local().Format("2006-01-02 15:04:05"),
		ev.Kind, outcome, orDash(who), orDash(ev.SandboxID), orDash(target))
	fmt.Fprintln(w, strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		return r
	}, strings.TrimRight(line, " ")))
}

func shorten(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
