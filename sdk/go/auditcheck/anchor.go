package auditcheck

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// Retention. The daemon may delete the oldest events of the log (audit
// retention). It then keeps an anchor in their place:
//
//   - Size, the number of events deleted (events 1 to Size), and Hash, the
//     hash of event Size, which the first retained event links to;
//   - Checkpoint, the signed checkpoint whose size is Size: the boundary is
//     always the size of a checkpoint the daemon signed before deleting;
//   - Nodes, hashes of perfect subtrees of the Merkle tree over the deleted
//     events: the "frontier" of the tree at Size (at most log2(Size)
//     hashes), from which the roots of larger trees are rebuilt from the
//     retained events, plus what proves the consistency (RFC 9162 2.1.4)
//     of every earlier checkpoint with the tree at Size and the inclusion
//     of Hash as its last leaf.
//
// A verifier holding old checkpoints therefore still checks them: one of
// size Size or more against the retained events as before, one of a
// smaller size by a consistency proof from it to the anchor's checkpoint.
// None of these hashes need to be trusted: each proof is checked against
// roots signed by the daemon.

// NodeID names a perfect subtree of the Merkle tree: 2^Level leaves from
// leaf Index<<Level (leaves counted from 0).
type NodeID struct {
	Level uint8
	Index int64
}

func (id NodeID) String() string { return fmt.Sprintf("%d/%d", id.Level, id.Index) }

// ParseNodeID parses "level/index".
func ParseNodeID(s string) (NodeID, error) {
	l, i, ok := strings.Cut(s, "/")
	lv, err1 := strconv.ParseUint(l, 10, 8)
	ix, err2 := strconv.ParseInt(i, 10, 64)
	if !ok || err1 != nil || err2 != nil || lv > 62 || ix < 0 {
		return NodeID{}, fmt.Errorf("bad node id %q", s)
	}
	return NodeID{uint8(lv), ix}, nil
}

// Nodes holds hashes of perfect subtrees.
type Nodes map[NodeID][sha256.Size]byte

// ParseNodes decodes the wire form: "level/index" to base64 hash.
func ParseNodes(m map[string]string) (Nodes, error) {
	out := make(Nodes, len(m))
	for k, v := range m {
		id, err := ParseNodeID(k)
		if err != nil {
			return nil, err
		}
		h, err := base64.StdEncoding.DecodeString(v)
		if err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("node %s: bad hash", k)
		}
		out[id] = [sha256.Size]byte(h)
	}
	return out, nil
}

// Encode is the wire form of ParseNodes.
func (n Nodes) Encode() map[string]string {
	out := make(map[string]string, len(n))
	for id, h := range n {
		out[id.String()] = base64.StdEncoding.EncodeToString(h[:])
	}
	return out
}

// NodeSource returns the hash of a perfect subtree, or ok false when it is
// not known.
type NodeSource func(NodeID) (h [sha256.Size]byte, ok bool, err error)

// Get is n as a NodeSource.
func (n Nodes) Get(id NodeID) ([sha256.Size]byte, bool, error) {
	h, ok := n[id]
	return h, ok, nil
}

// errNoNode marks a subtree the source cannot provide.
var errNoNode = errors.New("a subtree hash is missing")

// LeafHash is the Merkle leaf of an event hash (hex): SHA-256(0x00 || hash).
func LeafHash(eventHash string) ([sha256.Size]byte, error) {
	var t Tree
	if err := t.Append(eventHash); err != nil {
		return [sha256.Size]byte{}, err
	}
	return t.nodes[0], nil
}

// largestPow2Below is the largest power of two smaller than n (n > 1).
func largestPow2Below(n int64) int64 {
	return int64(1) << (bits.Len64(uint64(n-1)) - 1)
}

// RangeHash is the Merkle tree hash of leaves [a, b) (RFC 9162 MTH), from
// perfect subtrees the source knows, descending into the children of those
// it does not.
func RangeHash(a, b int64, get NodeSource) ([sha256.Size]byte, error) {
	n := b - a
	if n <= 0 {
		return sha256.Sum256(nil), nil
	}
	if n&(n-1) == 0 && a%n == 0 {
		id := NodeID{uint8(bits.TrailingZeros64(uint64(n))), a / n}
		h, ok, err := get(id)
		if err != nil {
			return h, err
		}
		if ok {
			return h, nil
		}
		if n == 1 {
			return h, fmt.Errorf("%w: leaf %d", errNoNode, a)
		}
		l, err := RangeHash(a, a+n/2, get)
		if err != nil {
			return l, err
		}
		r, err := RangeHash(a+n/2, b, get)
		if err != nil {
			return r, err
		}
		return nodeHash(l, r), nil
	}
	k := largestPow2Below(n)
	l, err := RangeHash(a, a+k, get)
	if err != nil {
		return l, err
	}
	r, err := RangeHash(a+k, b, get)
	if err != nil {
		return r, err
	}
	return nodeHash(l, r), nil
}

// ConsistencyProof is the RFC 9162 consistency proof from the tree of m
// leaves to the tree of n leaves (0 < m < n), built from the source.
func ConsistencyProof(m, n int64, get NodeSource) ([][sha256.Size]byte, error) {
	if m <= 0 || m >= n {
		return nil, nil
	}
	return subproof(m, 0, n, true, get)
}

func subproof(m, a, b int64, complete bool, get NodeSource) ([][sha256.Size]byte, error) {
	n := b - a
	if m == n {
		if complete {
			return nil, nil
		}
		h, err := RangeHash(a, b, get)
		if err != nil {
			return nil, err
		}
		return [][sha256.Size]byte{h}, nil
	}
	k := largestPow2Below(n)
	if m <= k {
		p, err := subproof(m, a, a+k, complete, get)
		if err != nil {
			return nil, err
		}
		h, err := RangeHash(a+k, b, get)
		if err != nil {
			return nil, err
		}
		return append(p, h), nil
	}
	p, err := subproof(m-k, a+k, b, false, get)
	if err != nil {
		return nil, err
	}
	h, err := RangeHash(a, a+k, get)
	if err != nil {
		return nil, err
	}
	return append(p, h), nil
}

// VerifyConsistency checks an RFC 9162 consistency proof between the tree
// of m leaves with root r1 and the tree of n leaves with root r2.
func VerifyConsistency(m, n int64, r1, r2 [sha256.Size]byte, proof [][sha256.Size]byte) bool {
	switch {
	case m == n:
		return len(proof) == 0 && r1 == r2
	case m == 0:
		return len(proof) == 0 && r1 == sha256.Sum256(nil)
	case m > n || len(proof) == 0:
		return false
	}
	if m&(m-1) == 0 {
		proof = append([][sha256.Size]byte{r1}, proof...)
	}
	fn, sn := uint64(m-1), uint64(n-1)
	for fn&1 == 1 {
		fn, sn = fn>>1, sn>>1
	}
	fr, sr := proof[0], proof[0]
	for _, c := range proof[1:] {
		if sn == 0 {
			return false
		}
		if fn&1 == 1 || fn == sn {
			fr, sr = nodeHash(c, fr), nodeHash(c, sr)
			for fn&1 == 0 && fn != 0 {
				fn, sn = fn>>1, sn>>1
			}
		} else {
			sr = nodeHash(sr, c)
		}
		fn, sn = fn>>1, sn>>1
	}
	return fr == r1 && sr == r2 && sn == 0
}

// InclusionProof is the RFC 9162 audit path of leaf i in the tree of n
// leaves, built from the source.
func InclusionProof(i, n int64, get NodeSource) ([][sha256.Size]byte, error) {
	return path(i, 0, n, get)
}

func path(i, a, b int64, get NodeSource) ([][sha256.Size]byte, error) {
	n := b - a
	if n <= 1 {
		return nil, nil
	}
	k := largestPow2Below(n)
	if i < k {
		p, err := path(i, a, a+k, get)
		if err != nil {
			return nil, err
		}
		h, err := RangeHash(a+k, b, get)
		return append(p, h), err
	}
	p, err := path(i-k, a+k, b, get)
	if err != nil {
		return nil, err
	}
	h, err := RangeHash(a, a+k, get)
	return append(p, h), err
}

// VerifyInclusion checks an RFC 9162 inclusion proof of leaf i with hash
// leaf in the tree of n leaves with root.
func VerifyInclusion(i, n int64, leaf, root [sha256.Size]byte, proof [][sha256.Size]byte) bool {
	if i < 0 || i >= n {
		return false
	}
	fn, sn := uint64(i), uint64(n-1)
	r := leaf
	for _, p := range proof {
		if sn == 0 {
			return false
		}
		if fn&1 == 1 || fn == sn {
			r = nodeHash(p, r)
			for fn&1 == 0 && fn != 0 {
				fn, sn = fn>>1, sn>>1
			}
		} else {
			r = nodeHash(r, p)
		}
		fn, sn = fn>>1, sn>>1
	}
	return sn == 0 && r == root
}

// Frontier is the IDs of the perfect subtrees a tree of size leaves is
// made of, largest first: its state, from which appending continues.
func Frontier(size int64) []NodeID {
	var out []NodeID
	var off int64
	for l := 62; l >= 0; l-- {
		if size&(int64(1)<<l) != 0 {
			out = append(out, NodeID{uint8(l), off >> l})
			off += int64(1) << l
		}
	}
	return out
}

// TreeAt returns the tree of size leaves from its frontier (see Frontier),
// so that appending the events after the first size continues it.
func TreeAt(size int64, get NodeSource) (Tree, error) {
	t := Tree{size: size}
	for _, id := range Frontier(size) {
		h, err := RangeHash(id.Index<<id.Level, (id.Index+1)<<id.Level, get)
		if err != nil {
			return Tree{}, err
		}
		t.nodes = append(t.nodes, h)
		t.sizes = append(t.sizes, int64(1)<<id.Level)
	}
	return t, nil
}

// Anchor is where the retained log starts after retention deleted its
// oldest events (see the comment at the top of this file).
type Anchor struct {
	// Size is how many events were deleted: events 1 to Size.
	Size int64
	// Hash is event Size's hash (hex): the first retained event's prev_hash.
	Hash string
	// Checkpoint is the signed checkpoint of size Size.
	Checkpoint Checkpoint
	// Nodes are the subtree hashes of the deleted events' tree.
	Nodes Nodes
}

// ParseAnchor builds an Anchor from its wire form (GET /v1/audit/anchor),
// verifying the checkpoint note's signature with vkey. A size of 0 means
// nothing was ever deleted: it returns nil.
func ParseAnchor(size int64, hash, note string, nodes map[string]string, vkey string) (*Anchor, error) {
	if size == 0 {
		return nil, nil
	}
	if size < 0 {
		return nil, errors.New("audit anchor: negative size")
	}
	cps, err := ParseCheckpoints([]byte(note), vkey)
	if err != nil {
		return nil, fmt.Errorf("audit anchor's checkpoint: %w", err)
	}
	if len(cps) != 1 {
		return nil, fmt.Errorf("audit anchor: %d checkpoints, want 1", len(cps))
	}
	ns, err := ParseNodes(nodes)
	if err != nil {
		return nil, fmt.Errorf("audit anchor: %w", err)
	}
	return &Anchor{Size: size, Hash: hash, Checkpoint: cps[0], Nodes: ns}, nil
}

// checkAnchor checks the anchor on its own and returns the tree at its
// size to continue from.
func (lc *LogChecker) checkAnchor(a *Anchor) Tree {
	bad := func(msg string, args ...any) {
		lc.problems = append(lc.problems, Problem{a.Size, KindAnchor, fmt.Sprintf("retention anchor: "+msg, args...)})
	}
	zero := Tree{size: a.Size}
	for _, id := range Frontier(a.Size) {
		zero.nodes = append(zero.nodes, [sha256.Size]byte{})
		zero.sizes = append(zero.sizes, int64(1)<<id.Level)
	}

	if a.Checkpoint.Size != a.Size {
		bad("its %s covers %d events, not the %d pruned: the anchor was altered", a.Checkpoint, a.Checkpoint.Size, a.Size)
		lc.badAnch = true
		return zero
	}
	t, err := TreeAt(a.Size, a.Nodes.Get)
	if err != nil {
		bad("the tree state of the %d pruned events is incomplete (%v): the anchor was altered", a.Size, err)
		lc.badAnch = true
		return zero
	}
	if t.Root() != a.Checkpoint.Root {
		bad("the tree state of the %d pruned events does not hash to the root of %s: the anchor was altered", a.Size, a.Checkpoint)
		lc.badAnch = true
		return zero
	}
	leaf, err := LeafHash(a.Hash)
	var proof [][sha256.Size]byte
	if err == nil {
		proof, err = InclusionProof(a.Size-1, a.Size, a.Nodes.Get)
	}
	if err != nil || !VerifyInclusion(a.Size-1, a.Size, leaf, a.Checkpoint.Root, proof) {
		bad("hash %s is not event %d's in %s: the anchor was altered", short(a.Hash), a.Size, a.Checkpoint)
	}
	for i, c := range lc.cps {
		if c.N == a.Checkpoint.N && c.Text != a.Checkpoint.Text {
			bad("its checkpoint %d differs from checkpoint %d among yours: one of them was replaced", c.N, c.N)
		}
		if c.Size < a.Size {
			lc.checkPruned(i, a)
		}
	}
	return t
}

// checkPruned checks checkpoint i, which covers only pruned events, by a
// consistency proof to the anchor's checkpoint.
func (lc *LogChecker) checkPruned(i int, a *Anchor) {
	c := lc.cps[i]
	proof, err := ConsistencyProof(c.Size, a.Size, a.Nodes.Get)
	if err != nil {
		lc.problems = append(lc.problems, Problem{c.Size, KindAnchor, fmt.Sprintf(
			"%s covers only pruned events (1 to %d were deleted by retention) and the retention anchor cannot prove it (%v): "+
				"the anchor was altered", c, a.Size, err)})
		return
	}
	if !VerifyConsistency(c.Size, a.Size, c.Root, a.Checkpoint.Root, proof) {
		lc.problems = append(lc.problems, Problem{c.Size, KindRewritten, fmt.Sprintf(
			"%s is not consistent with %s at the retention boundary: the first %d events were rewritten before "+
				"events 1 to %d were pruned (or the anchor was altered)", c, a.Checkpoint, c.Size, a.Size)})
		return
	}
	lc.matched[i] = true
}

// AnchorNodes collects, from the source, the subtree hashes an anchor at
// size needs: the frontier of the tree at size, the inclusion proof of its
// last leaf, and for each earlier checkpoint size m (0 < m < size) the
// frontier at m and the consistency proof from m to size. Each proof is
// verified before it is kept; an error means the source cannot provide
// one or it does not check (the log does not match the checkpoints).
func AnchorNodes(size int64, lastHash string, roots map[int64][sha256.Size]byte, get NodeSource) (Nodes, error) {
	out := Nodes{}
	rec := func(id NodeID) ([sha256.Size]byte, bool, error) {
		h, ok, err := get(id)
		if ok && err == nil {
			out[id] = h
		}
		return h, ok, err
	}
	t, err := TreeAt(size, rec)
	if err != nil {
		return nil, fmt.Errorf("tree at %d: %w", size, err)
	}
	root := t.Root()
	if r, ok := roots[size]; ok && r != root {
		return nil, fmt.Errorf("the first %d events do not hash to the checkpoint's root", size)
	}
	leaf, err := LeafHash(lastHash)
	if err != nil {
		return nil, fmt.Errorf("event %d: %w", size, err)
	}
	proof, err := InclusionProof(size-1, size, rec)
	if err != nil {
		return nil, fmt.Errorf("inclusion of event %d: %w", size, err)
	}
	if !VerifyInclusion(size-1, size, leaf, root, proof) {
		return nil, fmt.Errorf("event %d is not the last leaf of the tree at %d", size, size)
	}
	for m, r := range roots {
		if m <= 0 || m >= size {
			continue
		}
		if _, err := TreeAt(m, rec); err != nil {
			return nil, fmt.Errorf("tree at %d: %w", m, err)
		}
		proof, err := ConsistencyProof(m, size, rec)
		if err != nil {
			return nil, fmt.Errorf("consistency %d to %d: %w", m, size, err)
		}
		if !VerifyConsistency(m, size, r, root, proof) {
			return nil, fmt.Errorf("the checkpoint of %d events is not consistent with the tree at %d", m, size)
		}
	}
	return out, nil
}

// NodeHash is the hash of an interior node: SHA-256(0x01 || l || r).
func NodeHash(l, r [sha256.Size]byte) [sha256.Size]byte { return nodeHash(l, r) }
