package cli

import (
	"context"
	"fmt"
	"os"

	warden "github.com/warden-sandbox/warden/sdk/go"
	"github.com/warden-sandbox/warden/sdk/go/auditcheck"
)

func auditVerifyCmd() *command {
	var checkpoint, keyFile string
	c := &command{
		name:  "verify",
		short: "Check the audit log's hash chain",
		long: "Ask the daemon to recompute the audit log's hash chain. Exits 0 when the log is intact;\n" +
			"otherwise prints one line per problem (SEQ KIND MESSAGE) and exits 1.\n\n" +
			"With --checkpoint, check the log here instead, against signed checkpoints you saved\n" +
			"(one or more notes from the daemon's audit-checkpoints.txt) and the public key in\n" +
			"--key (audit-checkpoint.pub): every event is fetched, the events each checkpoint covers\n" +
			"must still hash to its Merkle root, none may be missing, and the checkpoints must\n" +
			"follow one another. This catches truncation and a rewritten chain without trusting\n" +
			"the daemon's key.",
		examples: []string{
			"warden audit verify",
			"warden audit verify --checkpoint saved.txt --key audit-checkpoint.pub",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.String(&checkpoint, "checkpoint", "FILE", "verify against the signed checkpoints in FILE")
		fs.String(&keyFile, "key", "FILE", "the checkpoints' public key (needed with --checkpoint)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "unexpected argument %q", args[0])
		}
		if (checkpoint == "") != (keyFile == "") {
			return usageErr(c, "--checkpoint and --key go together")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		var rep warden.VerifyReport
		if checkpoint != "" {
			if rep, err = verifyCheckpoints(ctx, cl, checkpoint, keyFile); err != nil {
				return err
			}
		} else if rep, err = cl.VerifyAudit(ctx); err != nil {
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

// verifyCheckpoints fetches every event and checks them here against the
// signed checkpoints in file.
func verifyCheckpoints(ctx context.Context, cl *warden.Client, file, keyFile string) (warden.VerifyReport, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return warden.VerifyReport{}, fmt.Errorf("read checkpoints: %w", err)
	}
	vkey, err := os.ReadFile(keyFile)
	if err != nil {
		return warden.VerifyReport{}, fmt.Errorf("read checkpoint key: %w", err)
	}
	cps, err := auditcheck.ParseCheckpoints(data, string(vkey))
	if err != nil {
		return warden.VerifyReport{}, fmt.Errorf("%s: %w", file, err)
	}
	lc := auditcheck.NewLogChecker(cps)
	for ev, err := range cl.AllAuditEvents(ctx, warden.AuditQuery{Limit: 1000}) {
		if err != nil {
			return warden.VerifyReport{}, err
		}
		lc.Add(ev.Seq, ev.PrevHash, ev.Hash)
	}
	rep := lc.Finish()
	out := warden.VerifyReport{OK: rep.OK, Checked: int64(rep.Checked)}
	for _, p := range rep.Problems {
		out.Problems = append(out.Problems, warden.VerifyProblem{Seq: p.Seq, Kind: string(p.Kind), Message: p.Message})
	}
	return out, nil
}
