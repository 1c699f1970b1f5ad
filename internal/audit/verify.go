package audit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/warden-sandbox/warden/internal/store"
)

// Kind classifies a Problem.
type Kind string

// Problem kinds.
const (
	// KindModified: the event's stored hash is not the MAC of its content
	// (a field was edited, or the hash was recomputed without the key).
	KindModified Kind = "modified"
	// KindMissing: events are absent, from a gap in the seqs or from the
	// log ending below the checkpoint (newest events deleted).
	KindMissing Kind = "missing"
	// KindReordered: an authentic event is stored at a seq other than the
	// one it was written at (seqs swapped or an event moved).
	KindReordered Kind = "reordered"
	// KindBrokenChain: an authentic event does not link to the event
	// stored before it, or is not the event the checkpoint recorded.
	KindBrokenChain Kind = "broken_chain"
	// KindAnchor: the retention anchor, which stands for the deleted
	// oldest events, was altered.
	KindAnchor Kind = "anchor"
)

// Problem is one finding of Verify.
type Problem struct {
	Seq     int64  `json:"seq"`
	Kind    Kind   `json:"kind"`
	Message string `json:"message"`
}

// Report is the result of Verify. OK is true when Problems is empty.
type Report struct {
	OK       bool      `json:"ok"`
	Checked  int       `json:"checked"`
	Problems []Problem `json:"problems"`
	// Pruned is how many of the oldest events retention deleted (events
	// 1 to Pruned); the check starts after them.
	Pruned int64 `json:"pruned,omitempty"`
}

// maxDeferred bounds how many non-authentic events Verify keeps in memory
// to tell moved events from modified ones; beyond it they are reported as
// modified without that analysis.
const maxDeferred = 10000

// Verify checks the whole log against the key and the chain's head: the
// head this Logger appended last and the checkpoint it found at start. It
// returns an error only when the log cannot be read; tampering is reported
// in the Report. Appends may continue while it runs.
func (l *Logger) Verify(ctx context.Context) (Report, error) {
	l.mu.Lock()
	anchors := []anchor{l.head}
	if l.startup.seq > 0 {
		anchors = append(anchors, l.startup)
	}
	issues := slices.Clone(l.issues)
	l.mu.Unlock()
	return verify(ctx, l.cfg.Store, l.cfg.Key, anchors, issues)
}

// VerifyStore verifies a log without a running Logger, for example from a
// command-line tool while wardend is stopped, using the checkpoint file at
// checkpointPath.
func VerifyStore(ctx context.Context, st store.Store, key []byte, checkpointPath string) (Report, error) {
	if len(key) != KeySize {
		return Report{}, fmt.Errorf("verify audit log: key is %d bytes, want %d", len(key), KeySize)
	}
	cp, ok, err := readCheckpoint(checkpointPath, key)
	if err != nil {
		return Report{}, fmt.Errorf("verify audit log: %w", err)
	}
	var anchors []anchor
	var issues []Problem
	if ok {
		anchors = append(anchors, anchor{cp.Seq, cp.Hash})
	} else if last, err := st.LastAudit(ctx); err == nil {
		issues = append(issues, Problem{Seq: last.Seq, Kind: KindMissing, Message: fmt.Sprintf(
			"no checkpoint file at %s: deletion of the newest events cannot be ruled out", checkpointPath)})
	} else if !errors.Is(err, store.ErrNotFound) {
		return Report{}, fmt.Errorf("verify audit log: %w", err)
	}
	return verify(ctx, st, key, anchors, issues)
}

// verify checks the log; should retention move the anchor meanwhile (the
// events it deleted would look missing), it checks again.
func verify(ctx context.Context, st store.Store, key []byte, anchors []anchor, issues []Problem) (Report, error) {
	for try := 1; ; try++ {
		before, _, _ := loadAnchor(ctx, st)
		r, err := verifyOnce(ctx, st, key, anchors, issues)
		after, _, _ := loadAnchor(ctx, st)
		if err != nil || after.Size == before.Size || try == 3 {
			return r, err
		}
	}
}

func verifyOnce(ctx context.Context, st store.Store, key []byte, anchors []anchor, issues []Problem) (Report, error) {
	var (
		problems = issues
		flagged  = map[int64]bool{} // seqs already reported as modified or reordered
		deferred []Event            // not authentic at their seq: moved or modified?
		broken   []int64            // authentic, but not linked to the event before
		mismatch []int64            // hash differs from an anchor at that seq
		checked  int
		prevSeq  int64
		prevHash = GenesisHash
	)
	// After retention the log starts after the anchor, whose MAC says
	// the daemon wrote it.
	ra, pruned, err := loadAnchor(ctx, st)
	if err != nil {
		return Report{}, fmt.Errorf("verify audit log: %w", err)
	}
	if pruned {
		prevSeq, prevHash = ra.Size, ra.Hash
		if !anchorOK(key, ra) {
			problems = append(problems, Problem{ra.Size, KindAnchor, fmt.Sprintf(
				"the retention anchor (events 1 to %d deleted, the last with hash %s, checkpoint %d) does not match its mac: "+
					"it was altered or written without the key", ra.Size, short(ra.Hash), ra.CheckpointN)})
		}
	}
	firstHash := prevHash
	anchorAt := map[int64]string{}
	var top anchor
	for _, a := range anchors {
		anchorAt[a.seq] = a.hash
		if a.seq > top.seq {
			top = a
		}
	}

	// Pass 1: integrity of each event, gaps, links, anchors.
	err = st.WalkAudit(ctx, func(e Event) error {
		checked++
		if e.Seq <= prevSeq {
			problems = append(problems, Problem{e.Seq, KindReordered, fmt.Sprintf("event has seq %d, not after %d", e.Seq, prevSeq)})
			flagged[e.Seq] = true
			return nil
		}
		if e.Seq > prevSeq+1 {
			problems = append(problems, missing(prevSeq+1, e.Seq-1, ""))
		}
		if h, ok := anchorAt[e.Seq]; ok && h != e.Hash {
			mismatch = append(mismatch, e.Seq)
		}
		if authentic(key, e.Seq, e) {
			if e.Seq == prevSeq+1 && e.PrevHash != prevHash {
				broken = append(broken, e.Seq)
			}
		} else if len(deferred) < maxDeferred {
			deferred = append(deferred, e)
		} else {
			problems = append(problems, modified(e.Seq))
			flagged[e.Seq] = true
		}
		prevSeq, prevHash = e.Seq, e.Hash
		return nil
	})
	if err != nil {
		return Report{}, fmt.Errorf("verify audit log: %w", err)
	}
	if top.seq > prevSeq {
		problems = append(problems, missing(prevSeq+1, top.seq, fmt.Sprintf(
			"; the log ends at seq %d but the checkpoint records seq %d: the newest events were deleted", prevSeq, top.seq)))
	}

	// Pass 2: an event that is not authentic at its own seq may be an
	// authentic event moved from elsewhere. Its neighbours in the chain
	// (the event whose hash it links to, the event that links to it) say
	// where it was written; if its MAC checks out there, it was moved.
	if len(deferred) > 0 {
		wantHash, wantPrev := map[string][]int64{}, map[string][]int64{}
		for _, d := range deferred {
			wantHash[d.PrevHash] = nil
			wantPrev[d.Hash] = nil
		}
		err := st.WalkAudit(ctx, func(e Event) error {
			if s, ok := wantHash[e.Hash]; ok {
				wantHash[e.Hash] = append(s, e.Seq)
			}
			if s, ok := wantPrev[e.PrevHash]; ok {
				wantPrev[e.PrevHash] = append(s, e.Seq)
			}
			return nil
		})
		if err != nil {
			return Report{}, fmt.Errorf("verify audit log: %w", err)
		}
		for _, d := range deferred {
			var candidates []int64
			if d.PrevHash == firstHash {
				candidates = append(candidates, ra.Size+1)
			}
			for _, j := range wantHash[d.PrevHash] {
				candidates = append(candidates, j+1)
			}
			for _, k := range wantPrev[d.Hash] {
				candidates = append(candidates, k-1)
			}
			written := int64(0)
			for _, c := range candidates {
				if c > 0 && c != d.Seq && authentic(key, c, d) {
					written = c
					break
				}
			}
			if written != 0 {
				problems = append(problems, Problem{d.Seq, KindReordered, fmt.Sprintf(
					"event stored at seq %d was written as seq %d: events were moved or their seqs swapped", d.Seq, written)})
			} else {
				problems = append(problems, modified(d.Seq))
			}
			flagged[d.Seq] = true
		}
	}

	// A broken link right after a flagged event is that event's fault;
	// report only the unexplained ones.
	for _, s := range broken {
		if !flagged[s-1] {
			problems = append(problems, Problem{s, KindBrokenChain, fmt.Sprintf(
				"event %d is authentic but does not link to the hash of event %d stored before it", s, s-1)})
		}
	}
	for _, s := range mismatch {
		if !flagged[s] {
			problems = append(problems, Problem{s, KindBrokenChain, fmt.Sprintf(
				"event %d is not the event the checkpoint recorded (hash %s)", s, short(anchorAt[s]))})
		}
	}

	slices.SortStableFunc(problems, func(a, b Problem) int { return cmp.Compare(a.Seq, b.Seq) })
	if problems == nil {
		problems = []Problem{}
	}
	return Report{OK: len(problems) == 0, Checked: checked, Problems: problems, Pruned: ra.Size}, nil
}

func modified(seq int64) Problem {
	return Problem{seq, KindModified, fmt.Sprintf(
		"event %d: stored hash does not match its content: a field or the hash was changed", seq)}
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
