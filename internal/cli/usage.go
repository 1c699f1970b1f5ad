package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func usageCmd() *command {
	var (
		q     warden.UsageQuery
		asCSV bool
	)
	c := &command{
		name:  "usage",
		short: "Show sandbox resource use and LLM usage and cost",
		long: "Show what sandboxes used (CPU-seconds from their cgroups, memory GiB-seconds, egress\n" +
			"bytes, seconds running and paused, disk) and the LLM calls, tokens and cost the LLM gateway\n" +
			"recorded, summed by principal, agent, sandbox, model or day over a range (default: the\n" +
			"last 30 days). Sandbox figures are kept per UTC hour, LLM figures per UTC day. LLM calls\n" +
			"count for the sandbox they came from (through warden.internal, or straight to a known\n" +
			"provider through the egress broker); by sandbox, calls from none are the row '-'. Needs\n" +
			"admin. For a live sandbox's counters now, see 'warden sandbox usage'.",
		examples: []string{
			"warden usage",
			"warden usage --by sandbox --since 24h",
			"warden usage --by agent --since 2026-11-01 --until 2026-12-01",
			"warden usage --by day --since 2026-11-01 --csv > usage.csv",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.String(&q.GroupBy, "by", "G", "group by principal (default), agent, sandbox, model or day")
		fs.String(&q.Since, "since", "T", "from: RFC 3339, YYYY-MM-DD or a duration back (24h, 7d)")
		fs.String(&q.Until, "until", "T", "to (default now), same forms")
		fs.String(&q.Principal, "principal", "P", "only this principal's use")
		fs.String(&q.Agent, "agent", "A", "only this agent's use")
		fs.String(&q.Sandbox, "sandbox", "ID", "only this sandbox's use (resources and LLM calls)")
		fs.Bool(&asCSV, "csv", "print CSV with a header row")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "unexpected argument %q", args[0])
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		if asCSV {
			b, err := cl.LLMUsageCSV(ctx, q)
			if err != nil {
				return err
			}
			_, err = r.env.Stdout.Write(b)
			return err
		}
		rep, err := cl.LLMUsage(ctx, q)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, rep)
		}
		fmt.Fprintf(r.env.Stdout, "Usage from %s to %s (LLM: UTC days %s to %s)\n", rep.From.Format(time.RFC3339),
			rep.To.Format(time.RFC3339), rep.FromDay, rep.ToDay)
		t := newTable(r.env.Stdout, strings.ToUpper(rep.GroupBy), "SANDBOXES", "CPU-S", "MEM GIB-S", "EGRESS OUT", "EGRESS IN",
			"RUNNING-S", "PAUSED-S", "CALLS", "TOKENS IN", "TOKENS OUT", "COST (USD)")
		f1 := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
		i := func(v int64) string { return strconv.FormatInt(v, 10) }
		for _, row := range rep.Rows {
			t.row(orDash(row.Key), i(row.Sandboxes), f1(row.CPUSeconds), strconv.FormatFloat(row.MemoryGiBSeconds, 'f', 3, 64),
				i(row.EgressBytesOut), i(row.EgressBytesIn), f1(row.RunningSeconds), f1(row.PausedSeconds),
				i(row.Calls), i(row.TokensIn), i(row.TokensOut), strconv.FormatFloat(row.CostUSD, 'f', 6, 64))
		}
		return t.flush()
	}
	return c
}

func llmCmd() *command {
	return &command{
		name:  "llm",
		short: "Manage the LLM gateway's prices and budgets",
		long: "Show and replace the LLM gateway's price table and budgets at run time (kept in the\n" +
			"database, in force instead of the config file's until reset). Needs admin.",
		subs: []*command{llmSettingCmd("prices"), llmSettingCmd("budgets")},
	}
}

// llmSettingCmd is 'warden llm prices|budgets [set FILE | reset]'.
func llmSettingCmd(what string) *command {
	c := &command{
		name: what,
		args: "[set FILE | reset]",
		short: map[string]string{"prices": "Show, set or reset the LLM price table",
			"budgets": "Show, set or reset the LLM budgets"}[what],
		long: map[string]string{
			"prices": "With no argument, print the price table in force (JSON). 'set FILE' replaces it with\n" +
				"the JSON in FILE ('-' for stdin): {\"prices\":[{\"model\":\"gpt-4o*\",\"input\":2.5,\"output\":10}]},\n" +
				"dollars per million tokens. 'reset' goes back to the config file's.",
			"budgets": "With no argument, print the budgets in force (JSON). 'set FILE' replaces them with the\n" +
				"JSON in FILE ('-' for stdin): {\"budgets\":[{\"name\":\"daily\",\"agent\":\"*\",\"period\":\"day\",\n" +
				"\"tokens\":1000000}]}; each budget has one of principal, agent or group. 'reset' goes back\n" +
				"to the config file's.",
		}[what],
		examples: []string{"warden llm " + what, "warden llm " + what + " set " + what + ".json", "warden llm " + what + " reset"},
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		cl, err := r.client()
		if err != nil {
			return err
		}
		var data []byte
		switch {
		case len(args) == 0:
		case len(args) == 1 && args[0] == "reset":
		case len(args) == 2 && args[0] == "set":
			if args[1] == "-" {
				data, err = io.ReadAll(io.LimitReader(r.env.Stdin, 1<<20))
			} else {
				data, err = os.ReadFile(args[1])
			}
			if err != nil {
				return fmt.Errorf("read %s: %w", args[1], err)
			}
		default:
			return usageErr(c, "want no argument, 'set FILE' or 'reset'")
		}
		var out any
		if what == "prices" {
			var p warden.LLMPrices
			switch {
			case len(args) == 0:
				p, err = cl.LLMPrices(ctx)
			case args[0] == "reset":
				p, err = cl.SetLLMPrices(ctx, nil)
			default:
				var in warden.LLMPrices
				if err := json.Unmarshal(data, &in); err != nil || in.Prices == nil {
					return usageErr(c, "%s: want {\"prices\":[...]}", args[1])
				}
				p, err = cl.SetLLMPrices(ctx, in.Prices)
			}
			out = p
		} else {
			var b warden.LLMBudgets
			switch {
			case len(args) == 0:
				b, err = cl.LLMBudgets(ctx)
			case args[0] == "reset":
				b, err = cl.SetLLMBudgets(ctx, nil)
			default:
				var in warden.LLMBudgets
				if err := json.Unmarshal(data, &in); err != nil || in.Budgets == nil {
					return usageErr(c, "%s: want {\"budgets\":[...]}", args[1])
				}
				b, err = cl.SetLLMBudgets(ctx, in.Budgets)
			}
			out = b
		}
		if err != nil {
			return err
		}
		return printJSON(r.env.Stdout, out)
	}
	return c
}
