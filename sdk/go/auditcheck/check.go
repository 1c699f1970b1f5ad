package auditcheck

import (
	"crypto/sha256"
	"fmt"
	"strings"
)

// Kind classifies a Problem.
type Kind string

// Problem kinds; the same strings as the daemon's own verification.
const (
	// KindModified: an event's hash is malformed.
	KindModified Kind = "modified"
	// KindMissing: events are absent, from a gap in the seqs or from the
	// log ending below a checkpoint (truncation).
	KindMissing Kind = "missing"
	// KindReordered: an event's seq does not follow the one before.
	KindReordered Kind = "reordered"
	// KindBrokenChain: an event does not link to the event stored before
	// it.
	KindBrokenChain Kind = "broken_chain"
	// KindRewritten: the events a checkpoint covers no longer hash to its
	// root.
	KindRewritten Kind = "rewritten"
	// KindCheckpoint: the series of checkpoints itself is damaged (one
	// dropped, reordered or shrinking).
	KindCheckpoint Kind = "checkpoint"
	// KindAnchor: the retention anchor, which stands for the pruned
	// oldest events, does not check out.
	KindAnchor Kind = "anchor"
)

// Problem is one finding.
type Problem struct {
	Seq     int64  `json:"seq"`
	Kind    Kind   `json:"kind"`
	Message string `json:"message"`
}

// Report is the result of a check. OK is true when Problems is empty.
type Report struct {
	OK       bool      `json:"ok"`
	Checked  int       `json:"checked"`
	Problems []Problem `json:"problems"`
	// Pruned is how many of the oldest events retention deleted (events
	// 1 to Pruned); Checked counts the retained ones.
	Pruned int64 `json:"pruned,omitempty"`
}

// GenesisHash is the PrevHash of the first event: 32 zero bytes in hex.
var GenesisHash = strings.Repeat("00", sha256.Size)

// LogChecker checks a log, event by event in seq order, against signed
// checkpoints, without the daemon's HMAC key: the seqs must run from 1
// without gaps, each event must link to the one before, and the first
// Size events must hash to each checkpoint's root.
type LogChecker struct {
	cps      []Checkpoint // in file order
	bySize   map[int64][]int
	tree     Tree
	prevSeq  int64
	prevHash string
	problems []Problem
	matched  map[int]bool
	pruned   int64 // the anchor's size, 0 without one
	badAnch  bool  // the anchor's tree state is wrong: roots cannot be compared
}

// NewLogChecker checks the series of checkpoints (numbers without gaps,
// each naming the one before, sizes not shrinking) and returns a checker
// for the log.
func NewLogChecker(cps []Checkpoint) *LogChecker { return NewLogCheckerFrom(cps, nil) }

// NewLogCheckerFrom is NewLogChecker for a log whose oldest events were
// deleted by retention: the log starts after the anchor (nil: at seq 1).
// The anchor is checked against its signed checkpoint, checkpoints that
// cover only pruned events by consistency proofs from the anchor, and the
// others against the retained events as usual.
func NewLogCheckerFrom(cps []Checkpoint, a *Anchor) *LogChecker {
	lc := &LogChecker{cps: cps, bySize: map[int64][]int{}, prevHash: GenesisHash, matched: map[int]bool{}}
	for i, c := range cps {
		lc.bySize[c.Size] = append(lc.bySize[c.Size], i)
		if i == 0 {
			continue
		}
		p := cps[i-1]
		switch {
		case c.N > p.N+1:
			missingN := fmt.Sprintf("checkpoint %d is missing", p.N+1)
			if c.N > p.N+2 {
				missingN = fmt.Sprintf("checkpoints %d to %d are missing", p.N+1, c.N-1)
			}
			lc.problems = append(lc.problems, Problem{c.Size, KindCheckpoint, fmt.Sprintf(
				"%s: %s follows checkpoint %d (%d events): a checkpoint was dropped", missingN, c, p.N, p.Size)})
		case c.N <= p.N:
			lc.problems = append(lc.problems, Problem{c.Size, KindCheckpoint, fmt.Sprintf(
				"%s comes after checkpoint %d: the checkpoints are out of order or repeated", c, p.N)})
		case c.Prev != TextHash(p.Text):
			lc.problems = append(lc.problems, Problem{c.Size, KindCheckpoint, fmt.Sprintf(
				"%s does not name checkpoint %d before it (prev %s): a checkpoint was replaced", c, p.N, short(c.Prev))})
		}
		if c.Size < p.Size {
			lc.problems = append(lc.problems, Problem{c.Size, KindCheckpoint, fmt.Sprintf(
				"%s covers fewer events than checkpoint %d (%d): the log shrank between them", c, p.N, p.Size)})
		}
	}
	if a != nil {
		lc.tree = lc.checkAnchor(a)
		lc.prevSeq, lc.prevHash, lc.pruned = a.Size, a.Hash, a.Size
		for _, i := range lc.bySize[a.Size] {
			lc.check(i)
		}
		return lc
	}
	for _, i := range lc.bySize[0] {
		lc.check(i)
	}
	return lc
}

// Add checks the next event of the log: its seq, the hash of the event
// before it that it links to, and its own hash (hex).
func (lc *LogChecker) Add(seq int64, prevHash, hash string) {
	switch {
	case seq <= lc.prevSeq:
		lc.problems = append(lc.problems, Problem{seq, KindReordered, fmt.Sprintf("event has seq %d, not after %d", seq, lc.prevSeq)})
		return
	case seq > lc.prevSeq+1:
		lc.problems = append(lc.problems, missing(lc.prevSeq+1, seq-1, ""))
	case prevHash != lc.prevHash:
		lc.problems = append(lc.problems, Problem{seq, KindBrokenChain, fmt.Sprintf(
			"event %d does not link to the hash of event %d stored before it", seq, lc.prevSeq)})
	}
	lc.prevSeq, lc.prevHash = seq, hash
	if err := lc.tree.Append(hash); err != nil {
		lc.problems = append(lc.problems, Problem{seq, KindModified, fmt.Sprintf("event %d: %v", seq, err)})
		var zero [sha256.Size]byte
		_ = lc.tree.Append(fmt.Sprintf("%x", zero))
	}
	for _, i := range lc.bySize[lc.tree.Size()] {
		lc.check(i)
	}
}

// check compares checkpoint i with the tree at its size.
func (lc *LogChecker) check(i int) {
	c := lc.cps[i]
	if lc.badAnch {
		return // reported once, as the anchor's problem
	}
	if lc.tree.Root() == c.Root {
		lc.matched[i] = true
		return
	}
	// Where: after the largest earlier checkpoint that still matches.
	from := lc.pruned + 1
	for j, d := range lc.cps {
		if lc.matched[j] && d.Size < c.Size && d.Size+1 > from {
			from = d.Size + 1
		}
	}
	lc.problems = append(lc.problems, Problem{from, KindRewritten, fmt.Sprintf(
		"the first %d events do not hash to the root of %s: the log was rewritten after it was signed; "+
			"the change is in events %d to %d", c.Size, c, from, c.Size)})
}

// Finish returns the problems found; checkpoints that cover more events
// than the log holds are reported as truncation.
func (lc *LogChecker) Finish() Report {
	problems := lc.problems
	var top *Checkpoint
	for i := range lc.cps {
		if lc.cps[i].Size > lc.tree.Size() && (top == nil || lc.cps[i].Size > top.Size) {
			top = &lc.cps[i]
		}
	}
	if top != nil {
		problems = append(problems, missing(lc.tree.Size()+1, top.Size, fmt.Sprintf(
			"; the log ends at seq %d but %s covers %d events: the log was truncated", lc.tree.Size(), *top, top.Size)))
	}
	if problems == nil {
		problems = []Problem{}
	}
	return Report{OK: len(problems) == 0, Checked: int(lc.tree.Size() - lc.pruned), Problems: problems, Pruned: lc.pruned}
}

func missing(from, to int64, why string) Problem {
	msg := fmt.Sprintf("event %d is missing", from)
	if to > from {
		msg = fmt.Sprintf("events %d to %d (%d events) are missing", from, to, to-from+1)
	}
	return Problem{from, KindMissing, msg + why}
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
