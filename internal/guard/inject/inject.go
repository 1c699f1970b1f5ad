// Package inject detects prompt injection and jailbreaks in prompts, tool
// arguments, tool results and fetched content.
//
// Two detectors run in-process, with no network and no GPU:
//
//   - heuristics (heuristics.go): instruction overrides, fake role and
//     delimiter tokens, system-prompt extraction, jailbreak personas,
//     invisible Unicode (tag block, zero-width, bidi overrides) and encoded
//     payloads (base64, ROT13);
//   - a classifier (model.go): multinomial logistic regression over hashed
//     word and character n-grams, trained by cmd/guard-train on the train
//     split of the guard corpus, its weights embedded from model.bin.
//
// Endpoint (endpoint.go) is a third, optional detector that asks an external
// classifier over HTTP.
package inject

import (
	"context"
	"errors"
	"fmt"
	"unicode"
)

// Detector names, as they appear in findings.
const (
	DetectorClassifier = "injection_classifier"
	DetectorHeuristics = "injection_heuristics"
	DetectorEndpoint   = "injection_endpoint"
)

// Finding is one detection. Start and End are byte offsets into the
// inspected text; Confidence is in [0,1].
type Finding struct {
	Detector   string
	Kind       string // LabelInjection or LabelJailbreak
	Rule       string // the heuristic rule; empty for classifiers
	Start, End int
	Confidence float64
}

// Flagged reports whether any finding says the text is an attack.
func Flagged(findings []Finding) bool { return len(findings) > 0 }

// Options configure a Detector; the zero value uses the committed model at
// its threshold, with the heuristics on.
type Options struct {
	// Model is the classifier; nil: DefaultModel.
	Model *Model
	// Threshold on the classifier's attack probability; 0: the model's own,
	// chosen by cross-validation on the training split.
	Threshold float64
	// NoClassifier and NoHeuristics turn one of the two off.
	NoClassifier bool
	NoHeuristics bool
}

// Detector runs the heuristics and the classifier. It is safe for
// concurrent use.
type Detector struct {
	model     *Model
	threshold float64
	heur      bool
	err       error
}

// New returns a detector. An error loading the model is returned by
// Inspect (never a panic), so a broken build fails closed where it is used.
func New(o Options) *Detector {
	d := &Detector{model: o.Model, threshold: o.Threshold, heur: !o.NoHeuristics}
	if !o.NoClassifier && d.model == nil {
		d.model, d.err = DefaultModel()
	}
	if o.NoClassifier {
		d.model = nil
	}
	if d.model != nil && d.threshold == 0 {
		d.threshold = d.model.Threshold()
	}
	if d.err == nil && (d.threshold < 0 || d.threshold > 1) {
		d.err = fmt.Errorf("injection detector: threshold %v out of [0,1]", d.threshold)
	}
	return d
}

// minClassifiedWords is the fewest words a text needs before the classifier
// scores it. The guard hands the detector each decoded JSON string value on
// its own, and a one- or two-word value ("payments", "open", "system") is not
// an instruction, yet it scored above the threshold: the corpus has almost
// no short benign texts to learn that from. The heuristics still see short
// texts. On the dev split the gate costs 0.004 of the classifier's injection
// recall (4 of 708 rows) and no jailbreak recall.
const minClassifiedWords = 3

// hasWords reports whether text has at least n words (runs of letters or
// digits), reading no further than the n-th.
func hasWords(text string, n int) bool {
	in := false
	for _, r := range text {
		w := unicode.IsLetter(r) || unicode.IsDigit(r)
		if w && !in {
			if n--; n == 0 {
				return true
			}
		}
		in = w
	}
	return n <= 0
}

// ErrNoModel is wrapped by Inspect's error when the classifier is on and its
// model could not be loaded.
var ErrNoModel = errors.New("injection model unavailable")

// Inspect returns the findings in text: one per heuristic hit and one for
// the classifier when its attack probability reaches the threshold (with
// the span of the window that scored highest).
func (d *Detector) Inspect(ctx context.Context, text string) ([]Finding, error) {
	if d.err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoModel, d.err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("injection detector: %w", err)
	}
	var out []Finding
	if d.model != nil && hasWords(text, minClassifiedWords) {
		p := d.model.Score(text)
		if p.Attack >= d.threshold {
			kind := LabelInjection
			if p.Jailbreak > p.Injection {
				kind = LabelJailbreak
			}
			out = append(out, Finding{Detector: DetectorClassifier, Kind: kind, Start: p.Start, End: p.End, Confidence: p.Attack})
		}
	}
	if d.heur {
		var score func(string) Prediction
		if d.model != nil {
			score = d.model.Score
		}
		for _, h := range heuristics(text, score, d.threshold) {
			out = append(out, Finding{Detector: DetectorHeuristics, Kind: h.Kind, Rule: h.Rule, Start: h.Start, End: h.End, Confidence: h.Confidence})
		}
	}
	return out, nil
}
