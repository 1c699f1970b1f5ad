package auditcheck

import (
	"crypto/sha256"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// leafSource serves the subtrees of the fake events' tree that lie in
// leaves [from, to), and those in old.
func leafSource(from, to int64, old Nodes) NodeSource {
	var get NodeSource
	get = func(id NodeID) ([sha256.Size]byte, bool, error) {
		if h, ok := old[id]; ok {
			return h, true, nil
		}
		a, b := id.Index<<id.Level, (id.Index+1)<<id.Level
		if a < from || b > to {
			return [sha256.Size]byte{}, false, nil
		}
		if id.Level == 0 {
			h, err := LeafHash(eventHash(a + 1))
			return h, err == nil, err
		}
		l, _, _ := get(NodeID{id.Level - 1, 2 * id.Index})
		r, _, _ := get(NodeID{id.Level - 1, 2*id.Index + 1})
		return nodeHash(l, r), true, nil
	}
	return get
}

var roots = map[int64][sha256.Size]byte{}

func rootOf(size int64) [sha256.Size]byte {
	if r, ok := roots[size]; ok {
		return r
	}
	defer func() { roots[size] = rootOfSlow(size) }()
	return rootOfSlow(size)
}

func rootOfSlow(size int64) [sha256.Size]byte {
	var t Tree
	for s := int64(1); s <= size; s++ {
		_ = t.Append(eventHash(s))
	}
	return t.Root()
}

func TestMerkleProofs(t *testing.T) {
	all := leafSource(0, 1<<20, nil)
	for n := int64(1); n <= 70; n++ {
		rn := rootOf(n)
		for m := int64(0); m <= n; m++ {
			rm := rootOf(m)
			p, err := ConsistencyProof(m, n, all)
			if err != nil || !VerifyConsistency(m, n, rm, rn, p) {
				t.Fatalf("consistency %d to %d: %v", m, n, err)
			}
			if m > 0 && m < n && VerifyConsistency(m, n, rootOf(m-1), rn, p) {
				t.Fatalf("consistency %d to %d verifies with a wrong old root", m, n)
			}
			if m > 0 && m < n && len(p) > 0 {
				bad := slices.Clone(p)
				bad[len(bad)-1][0] ^= 1
				if VerifyConsistency(m, n, rm, rn, bad) {
					t.Fatalf("consistency %d to %d verifies with an altered proof", m, n)
				}
			}
		}
		for i := int64(0); i < n; i++ {
			leaf, _ := LeafHash(eventHash(i + 1))
			p, err := InclusionProof(i, n, all)
			if err != nil || !VerifyInclusion(i, n, leaf, rn, p) {
				t.Fatalf("inclusion %d in %d: %v", i, n, err)
			}
			other, _ := LeafHash(eventHash(i + 2))
			if VerifyInclusion(i, n, other, rn, p) {
				t.Fatalf("inclusion %d in %d verifies another leaf", i, n)
			}
		}
		tr, err := TreeAt(n, all)
		if err != nil || tr.Root() != rn {
			t.Fatalf("TreeAt(%d): %v", n, err)
		}
	}
}

// pruneSim prunes the fake log repeatedly at checkpoint sizes, each time
// from the previous anchor's nodes and the retained leaves only, as the
// daemon does, and returns the last anchor's nodes.
func pruneSim(t *testing.T, sizes []int64, bounds []int64) Nodes {
	t.Helper()
	var nodes Nodes
	prev := int64(0)
	for _, k := range bounds {
		roots := map[int64][sha256.Size]byte{}
		for _, s := range sizes {
			if s <= k {
				roots[s] = rootOf(s)
			}
		}
		var err error
		nodes, err = AnchorNodes(k, eventHash(k), roots, leafSource(prev, 1<<40, nodes))
		if err != nil {
			t.Fatalf("prune at %d (previous %d, checkpoints %v): %v", k, prev, sizes, err)
		}
		prev = k
	}
	return nodes
}

// TestAnchorRepeatedPrunes: an anchor made from the previous anchor and
// the retained events alone proves every earlier checkpoint, across many
// random series.
func TestAnchorRepeatedPrunes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 120 {
		var sizes []int64
		s := int64(0)
		for range 2 + rng.IntN(20) {
			s += 1 + rng.Int64N(40)
			sizes = append(sizes, s)
		}
		var bounds []int64
		for _, s := range sizes[:len(sizes)-1] {
			if rng.IntN(3) == 0 {
				bounds = append(bounds, s)
			}
		}
		if len(bounds) == 0 {
			continue
		}
		nodes := pruneSim(t, sizes, bounds)
		k := bounds[len(bounds)-1]
		if len(nodes) > 8*len(sizes)*64 {
			t.Fatalf("%d nodes for %d checkpoints", len(nodes), len(sizes))
		}
		for _, m := range sizes {
			if m >= k {
				continue
			}
			p, err := ConsistencyProof(m, k, nodes.Get)
			if err != nil || !VerifyConsistency(m, k, rootOf(m), rootOf(k), p) {
				t.Fatalf("sizes %v, bounds %v: checkpoint of %d not proven: %v", sizes, bounds, m, err)
			}
		}
	}
}

// anchored builds a signed series and an anchor at the series' size
// bounds[-1], pruned at each of bounds in turn.
func anchored(t *testing.T, k testKey, sizes []int64, bounds []int64) ([]Checkpoint, *Anchor) {
	t.Helper()
	cps, err := ParseCheckpoints([]byte(strings.Join(series(k, sizes...), "\n")), k.vkey)
	if err != nil {
		t.Fatal(err)
	}
	nodes := pruneSim(t, sizes, bounds)
	size := bounds[len(bounds)-1]
	i := slices.Index(sizes, size)
	a, err := ParseAnchor(size, eventHash(size), series(k, sizes...)[i], nodes.Encode(), k.vkey)
	if err != nil {
		t.Fatal(err)
	}
	return cps, a
}

func checkFrom(cps []Checkpoint, a *Anchor, from, to int64, edit func(seq int64) (prev, hash string)) Report {
	lc := NewLogCheckerFrom(cps, a)
	for s := from; s <= to; s++ {
		prev, hash := eventHash(s-1), eventHash(s)
		if s == 1 {
			prev = GenesisHash
		}
		if edit != nil {
			prev, hash = edit(s)
		}
		lc.Add(s, prev, hash)
	}
	return lc.Finish()
}

func hasProblem(r Report, kind Kind, seq int64, text string) bool {
	for _, p := range r.Problems {
		if p.Kind == kind && p.Seq == seq && strings.Contains(p.Message, text) {
			return true
		}
	}
	return false
}

func TestLogCheckerAnchor(t *testing.T) {
	k := newTestKey(t, "warden-audit", 1)
	sizes := []int64{3, 8, 13, 21, 30, 40}
	cps, a := anchored(t, k, sizes, []int64{8, 21})

	r := checkFrom(cps, a, 22, 45, nil)
	if !r.OK || r.Checked != 24 || r.Pruned != 21 {
		t.Fatalf("pruned log: %+v", r)
	}
	// Only old checkpoints (all below the boundary) held: still checked.
	if r := checkFrom(cps[:2], a, 22, 45, nil); !r.OK {
		t.Fatalf("old checkpoints only: %+v", r)
	}

	// Truncation of the retained events.
	r = checkFrom(cps, a, 22, 35, nil)
	if !hasProblem(r, KindMissing, 36, "events 36 to 40 (5 events) are missing; the log ends at seq 35") {
		t.Fatalf("truncated: %+v", r)
	}
	// A retained event rewritten (a fresh chain from there on).
	fresh := func(s int64) (string, string) {
		prev, hash := eventHash(s-1), eventHash(s)
		if s >= 25 {
			hash = eventHash(s + 1000)
		}
		if s > 25 {
			prev = eventHash(s - 1 + 1000)
		}
		return prev, hash
	}
	r = checkFrom(cps, a, 22, 45, fresh)
	if r.OK || !hasProblem(r, KindRewritten, 22, "the first 30 events do not hash to the root of checkpoint 5") {
		t.Fatalf("rewritten: %+v", r)
	}
	// The anchor row removed: the oldest retained events look deleted.
	r = checkFrom(cps, nil, 22, 45, nil)
	if !hasProblem(r, KindMissing, 1, "events 1 to 21") {
		t.Fatalf("anchor removed: %+v", r)
	}
	// A checkpoint dropped from the series.
	r = checkFrom(append(slices.Clone(cps[:2]), cps[3:]...), a, 22, 45, nil)
	if !hasProblem(r, KindCheckpoint, 21, "checkpoint 3 is missing") {
		t.Fatalf("dropped checkpoint: %+v", r)
	}

	// The anchor tampered with.
	tamper := func(f func(b *Anchor)) Report {
		b := *a
		b.Nodes = maps(a.Nodes)
		f(&b)
		return checkFrom(cps, &b, b.Size+1, 45, nil)
	}
	r = tamper(func(b *Anchor) {
		top := NodeID{}
		for id := range b.Nodes {
			if id.Index == 0 && id.Level >= top.Level {
				top = id
			}
		}
		h := b.Nodes[top]
		h[0] ^= 1
		b.Nodes[top] = h
	})
	if !hasProblem(r, KindAnchor, 21, "does not hash to the root of checkpoint 4") {
		t.Fatalf("altered frontier: %+v", r)
	}
	r = tamper(func(b *Anchor) { b.Hash = eventHash(999) })
	if !hasProblem(r, KindAnchor, 21, "is not event 21's") {
		t.Fatalf("altered hash: %+v", r)
	}
	r = tamper(func(b *Anchor) {
		keep := Nodes{}
		rec := func(id NodeID) ([sha256.Size]byte, bool, error) {
			h, ok := b.Nodes[id]
			if ok {
				keep[id] = h
			}
			return h, ok, nil
		}
		_, _ = TreeAt(21, rec)
		_, _ = InclusionProof(20, 21, rec)
		b.Nodes = keep
	})
	if r.OK || !hasProblem(r, KindAnchor, 3, "cannot prove it") {
		t.Fatalf("stripped nodes: %+v", r)
	}
	// A forged anchor made for a different (rewritten) prefix with the
	// same checkpoint: its frontier cannot match the signed root.
	r = tamper(func(b *Anchor) {
		var tr Tree
		for s := int64(1); s <= 21; s++ {
			_ = tr.Append(eventHash(s + 5000))
		}
		for i, id := range Frontier(21) {
			b.Nodes[id] = tr.nodes[i]
		}
	})
	if !hasProblem(r, KindAnchor, 21, "does not hash to the root") {
		t.Fatalf("forged frontier: %+v", r)
	}

	// An old checkpoint whose events were rewritten before the prune: the
	// proof from it to the boundary fails, naming it.
	var tr Tree
	for s := int64(1); s <= 8; s++ {
		_ = tr.Append(eventHash(s + 7000))
	}
	other := cps[1]
	other.Root = tr.Root()
	r = checkFrom([]Checkpoint{cps[0], other, cps[2], cps[3]}, a, 22, 45, nil)
	if !hasProblem(r, KindRewritten, 8, "checkpoint 2 (8 events") || !hasProblem(r, KindRewritten, 8, "were rewritten before events 1 to 21 were pruned") {
		t.Fatalf("old checkpoint rewritten: %+v", r)
	}
}

func maps(n Nodes) Nodes {
	out := Nodes{}
	for k, v := range n {
		out[k] = v
	}
	return out
}
