package inject

import (
	"context"

	"github.com/warden-sandbox/warden/internal/guard"
)

// ID is the detector's name in guard findings.
const ID = "injection"

// ID implements guard.Detector.
func (d *Detector) ID() string { return ID }

// Detect implements guard.Detector: the guard.Scanner hands it decoded
// strings (JSON string values, decoded base64, ...). A match's Kind is
// LabelInjection or LabelJailbreak; which heuristic rule fired is only in
// Inspect's findings. When the model could not be loaded, Detect reports the
// whole string as an injection with confidence 1 (fail closed): Inspect
// returns the error itself.
func (d *Detector) Detect(in guard.Input, out []guard.Match) []guard.Match {
	f, err := d.Inspect(context.Background(), in.Text)
	if err != nil {
		return append(out, guard.Match{Kind: LabelInjection, Start: 0, End: len(in.Text), Confidence: 1})
	}
	for _, x := range f {
		out = append(out, guard.Match{Kind: x.Kind, Start: x.Start, End: x.End, Confidence: max(x.Confidence, 1e-9)})
	}
	return out
}

var _ guard.Detector = (*Detector)(nil)
