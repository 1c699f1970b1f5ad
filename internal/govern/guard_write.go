package govern

import "context"

// ScreenWrite runs only the guard stage over a file write whose rules were
// decided earlier (a presigned upload, decided when it was signed) or over
// one file of a write already decided as a whole (an entry of an archive
// upload, a part of a multipart upload): a must be a file.write carrying
// its body in Payload. The decision is Allow (Masked set when a mask guard
// rewrote the body), LogOnly (flag) or Deny (block; and require_approval,
// which such a write cannot wait for). Without a guard screening file
// writes it scans nothing and allows.
func (e *Engine) ScreenWrite(ctx context.Context, a *Action) Decision {
	if a.Kind != KindFileWrite {
		return Decision{Outcome: Deny, Stage: "guard", Message: "guard: only file writes are screened here"}
	}
	d, err := e.guardStage(ctx, a)
	d.Stage = "guard"
	if err != nil {
		d.Outcome, d.Message = Deny, "guard: "+err.Error()
	}
	if d.Outcome == RequireApproval {
		d.Outcome = Deny
		d.Message += "; this write cannot wait for an approval, so it is refused"
	}
	return d
}

// GuardScanner returns a scan of text by the named built-in detectors
// (all when none are named), for evaluations: findings carry no value.
func GuardScanner(names []string) (func(text string) []GuardFinding, error) {
	s, err := namedScanner(names)
	if err != nil {
		return nil, err
	}
	return func(text string) []GuardFinding { return guardFindings(s.Inspect(text)) }, nil
}
