package cli

import (
	"context"
	"fmt"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func auditVerifyCmd() *command {
	c := &command{
		name:  "verify",
		short: "Check the audit log's hash chain",
		long: "Ask the daemon to recompute the audit log's hash chain. Exits 0 when the log is intact;\n" +
			"otherwise prints one line per problem (SEQ KIND MESSAGE) and exits 1.",
		json: true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "unexpected argument %q", args[0])
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		rep, err := cl.VerifyAudit(ctx)
		if err != nil {
			return err
		}
		if r.g.json {
			if rep.Problems == nil {
				rep.Problems = []warden.VerifyProblem{}
			}
			if err := printJSON(r.env.Stdout, rep); err != nil {
				return err
			}
		} else if rep.OK {
			fmt.Fprintf(r.env.Stdout, "audit log ok: %d events checked\n", rep.Checked)
		} else {
			for _, p := range rep.Problems {
				fmt.Fprintf(r.env.Stdout, "seq %d: %s: %s\n", p.Seq, p.Kind, oneLine(p.Message))
			}
		}
		if rep.OK {
			return nil
		}
		return withHint(fmt.Errorf("audit log verification failed: %d problems in %d events checked", len(rep.Problems), rep.Checked),
			"the log was changed outside the daemon or is damaged; keep a copy of the database before anything else")
	}
	return c
}
