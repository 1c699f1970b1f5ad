package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func auditLsCmd() *command {
	var (
		q   warden.AuditQuery
		all bool
	)
	c := &command{
		name:    "ls",
		aliases: []string{"list"},
		short:   "List audit events",
		long: "List audit events in order, from the one after --after on: one page (--limit, default\n" +
			"the daemon's 100), or every page with --all.",
		examples: []string{
			"warden audit ls --target sb-01hzx3k9q2",
			"warden audit ls --after 1200 --all",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.Var((*int64Value)(&q.After), "after", "N", "only events with a sequence number greater than N")
		fs.Int(&q.Limit, "limit", "N", "page size, 1 to 1000")
		fs.String(&q.Target, "target", "T", "only events acting on this object ID")
		fs.String(&q.Principal, "principal", "P", "only events caused by this principal ID")
		fs.Bool(&all, "all", "fetch every page, not only the first")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "unexpected argument %q", args[0])
		}
		if q.Limit < 0 || q.Limit > 1000 {
			return usageErr(c, "--limit must be between 1 and 1000")
		}
		if q.After < 0 {
			return usageErr(c, "--after must not be negative")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		var events []warden.AuditEvent
		var next int64
		if all {
			for ev, err := range cl.AllAuditEvents(ctx, q) {
				if err != nil {
					return err
				}
				events = append(events, ev)
			}
		} else {
			page, err := cl.ListAudit(ctx, q)
			if err != nil {
				return err
			}
			events, next = page.Events, page.NextAfter
		}
		if r.g.json {
			if events == nil {
				events = []warden.AuditEvent{}
			}
			return printJSON(r.env.Stdout, events)
		}
		if err := writeAuditTable(r.env.Stdout, events); err != nil {
			return err
		}
		if !all && q.Limit > 0 && len(events) == q.Limit {
			fmt.Fprintf(r.env.Stderr, "(more events may follow: --after %d)\n", next)
		}
		return nil
	}
	return c
}

type int64Value int64

func (v *int64Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("not a whole number: %q", s)
	}
	*v = int64Value(n)
	return nil
}
func (v *int64Value) String() string { return strconv.FormatInt(int64(*v), 10) }

// writeAuditTable writes audit events as a table, with absolute times.
func writeAuditTable(w io.Writer, events []warden.AuditEvent) error {
	t := newTable(w, "SEQ", "TIME", "PRINCIPAL", "ACTION", "TARGET", "OUTCOME")
	for _, ev := range events {
		t.row(strconv.FormatInt(ev.Seq, 10), shortTime(ev.Time), orDash(ev.PrincipalID), ev.Action, orDash(ev.Target), ev.Outcome)
	}
	return t.flush()
}
