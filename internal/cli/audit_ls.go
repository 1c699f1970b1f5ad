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
			"the daemon's 100), or every page with --all. Times are local, to the second; principals\n" +
			"show as \"name (ID)\" when your key may list them (admin), else by ID.",
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
		fs.String(&q.Principal, "principal", "P", "only events caused by this principal (ID or name)")
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
		if q.Principal, err = resolvePrincipal(ctx, cl, q.Principal); err != nil {
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
		if err := writeAuditTable(r.env.Stdout, events, principalNames(ctx, cl)); err != nil {
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

// principalNames maps principal IDs to names, or is nil when the caller may not list
// principals (that needs admin; audit:read alone shows IDs only).
func principalNames(ctx context.Context, cl *warden.Client) map[string]string {
	ps, err := cl.ListPrincipals(ctx)
	if err != nil {
		return nil
	}
	names := make(map[string]string, len(ps))
	for _, p := range ps {
		names[p.ID] = p.Name
	}
	return names
}

// writeAuditTable writes audit events as a table, with absolute times to the second and
// each principal as "name (ID)" where names has it.
func writeAuditTable(w io.Writer, events []warden.AuditEvent, names map[string]string) error {
	t := newTable(w, "SEQ", "TIME", "PRINCIPAL", "ACTION", "TARGET", "OUTCOME")
	for _, ev := range events {
		who := orDash(ev.PrincipalID)
		if n := names[ev.PrincipalID]; n != "" {
			who = n + " (" + ev.PrincipalID + ")"
		}
		tm := "-"
		if !ev.Time.IsZero() {
			tm = ev.Time.Local().Format("2006-01-02 15:04:05")
		}
		t.row(strconv.FormatInt(ev.Seq, 10), tm, who, ev.Action, orDash(ev.Target), ev.Outcome)
	}
	return t.flush()
}
