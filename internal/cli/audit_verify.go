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
			"the daemon's key. After audit retention deleted the oldest events, the check starts\n" +
			"from the anchor the daemon kept for them (GET /v1/audit/anchor), itself checked\n" +
			"against the signed checkpoints; checkpoints older than the anchor are checked by\n" +
			"consistency proofs.",
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
			fmt.Fprintf(r.env.Stdout, "audit log ok: %d events checked%s\n", rep.Checked, prunedNote(rep.Pruned))
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
// signed checkpoints in file. Should audit retention move the anchor while
// the events are fetched (the ones it deleted would look missing), it
// checks again.
func verifyCheckpoints(ctx context.Context, cl *warden.Client, file, keyFile string) (warden.VerifyReport, error) {
	for try := 1; ; try++ {
		rep, size, err := verifyCheckpointsOnce(ctx, cl, file, keyFile)
		if err != nil || rep.OK || try == 3 {
			return rep, err
		}
		a, err := cl.AuditAnchor(ctx)
		if err != nil || a.Size == size {
			return rep, nil
		}
	}
}

// verifyCheckpointsOnce is one pass of verifyCheckpoints; size is the
// anchor's it started from.
func verifyCheckpointsOnce(ctx context.Context, cl *warden.Client, file, keyFile string) (_ warden.VerifyReport, size int64, _ error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return warden.VerifyReport{}, 0, fmt.Errorf("read checkpoints: %w", err)
	}
	vkey, err := os.ReadFile(keyFile)
	if err != nil {
		return warden.VerifyReport{}, 0, fmt.Errorf("read checkpoint key: %w", err)
	}
	cps, err := auditcheck.ParseCheckpoints(data, string(vkey))
	if err != nil {
		return warden.VerifyReport{}, 0, fmt.Errorf("%s: %w", file, err)
	}
	// After audit retention the log starts after the anchor, which the
	// checker verifies against the signed checkpoints (audit_retention.go).
	wa, err := cl.AuditAnchor(ctx)
	if warden.IsNotFound(err) {
		// A daemon without retention. Hiding an anchor this way only
		// makes the deleted events show as missing.
		wa, err = warden.AuditAnchor{}, nil
	}
	if err != nil {
		return warden.VerifyReport{}, 0, err
	}
	var anchor *auditcheck.Anchor
	if wa.Size > 0 {
		note := ""
		if wa.Checkpoint != nil {
			note = wa.Checkpoint.Note
		}
		if anchor, err = auditcheck.ParseAnchor(wa.Size, wa.Hash, note, wa.Nodes, string(vkey)); err != nil {
			return warden.VerifyReport{OK: false, Pruned: wa.Size, Problems: []warden.VerifyProblem{{Seq: wa.Size, Kind: string(auditcheck.KindAnchor),
				Message: fmt.Sprintf("retention anchor (events 1 to %d deleted): %v", wa.Size, err)}}}, wa.Size, nil
		}
	}
	lc := auditcheck.NewLogCheckerFrom(cps, anchor)
	for ev, err := range cl.AllAuditEvents(ctx, warden.AuditQuery{Limit: 1000}) {
		if err != nil {
			return warden.VerifyReport{}, 0, err
		}
		lc.Add(ev.Seq, ev.PrevHash, ev.Hash)
	}
	rep := lc.Finish()
	out := warden.VerifyReport{OK: rep.OK, Checked: int64(rep.Checked), Pruned: rep.Pruned}
	for _, p := range rep.Problems {
		out.Problems = append(out.Problems, warden.VerifyProblem{Seq: p.Seq, Kind: string(p.Kind), Message: p.Message})
	}
	return out, wa.Size, nil
}

// prunedNote says that the log's oldest events were deleted by retention.
func prunedNote(pruned int64) string {
	if pruned <= 0 {
		return ""
	}
	return fmt.Sprintf(" (events 1 to %d were deleted by audit retention; the log starts at seq %d)", pruned, pruned+1)
}
