package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func approvalsCmd() *command {
	return &command{
		name:    "approvals",
		aliases: []string{"approval"},
		short:   "List, approve and reject actions held for approval",
		long: "Decide actions that a require_approval rule holds. An approved action passes once, when\n" +
			"retried unchanged before the approval expires; a rejected one is refused. Nobody decides\n" +
			"their own request (nor an agent its owner's). The key needs approvals:decide, which no\n" +
			"agent's key can hold.",
		subs: []*command{approvalsLsCmd(), approvalsDecideCmd(true), approvalsDecideCmd(false)},
	}
}

func approvalsLsCmd() *command {
	var q warden.ApprovalQuery
	c := &command{name: "ls", aliases: []string{"list"}, short: "List approvals, newest first",
		long:     "List approvals, newest first; --state pending shows what awaits a decision.",
		examples: []string{"warden approvals ls --state pending"},
		json:     true}
	c.flags = func(fs *flagSet) {
		fs.String(&q.State, "state", "STATE", "only pending, approved, rejected or expired ones")
		fs.String(&q.Principal, "principal", "ID", "only those this principal requested")
		fs.Int(&q.Limit, "limit", "N", "at most N (default 50)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "takes no arguments")
		}
		switch q.State {
		case "", warden.ApprovalPending, warden.ApprovalApproved, warden.ApprovalRejected, warden.ApprovalExpired:
		default:
			return usageErr(c, "--state: want pending, approved, rejected or expired")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		list, err := cl.ListApprovals(ctx, q)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, list)
		}
		now := r.env.Now()
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tKIND\tREQUESTER\tTARGET\tRULE\tAGE\tMESSAGE")
		for _, a := range list {
			rule := a.RuleID
			if a.PolicyID != "" {
				rule = fmt.Sprintf("%s/%s@%d", a.PolicyID, a.RuleID, a.PolicyVersion)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.State, a.Kind, a.Principal, a.Target, rule,
				age(a.CreatedAt, now), a.Message)
		}
		return tw.Flush()
	}
	return c
}

func approvalsDecideCmd(approve bool) *command {
	var reason string
	name, short := "approve", "Approve a pending action: it passes once"
	if !approve {
		name, short = "reject", "Reject a pending action"
	}
	c := &command{name: name, args: "ID", short: short,
		long: short + ".\nThe reason (--reason) is kept with the approval and in the audit log.",
		json: true}
	c.flags = func(fs *flagSet) { fs.String(&reason, "reason", "TEXT", "why (kept with the decision)") }
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want the approval's ID")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		decide := cl.Approve
		if !approve {
			decide = cl.Reject
		}
		a, err := decide(ctx, args[0], reason)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, a)
		}
		fmt.Fprintf(r.env.Stdout, "%s %s\n", a.ID, a.State)
		return nil
	}
	return c
}

// parseSince reads --since: a duration back from now (24h, 7d, 300) or an
// RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := parseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("want a duration (24h, 7d) or an RFC 3339 time: %w", err)
	}
	return now.Add(-d), nil
}
