package auditcheck

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// Tree is the RFC 6962 Merkle tree over the events' hashes, in seq order:
// a leaf is SHA-256(0x00 || event hash), an interior node SHA-256(0x01 ||
// left || right), and a tree of n leaves splits at the largest power of
// two below n. It keeps only the roots of its perfect subtrees, so
// appending is O(log n) and so is the memory.
type Tree struct {
	size  int64
	nodes [][sha256.Size]byte // roots of the perfect subtrees, largest first
	sizes []int64             // their leaf counts
}

// Append adds an event's hash (hex) as the next leaf.
func (t *Tree) Append(eventHash string) error {
	h, err := hex.DecodeString(eventHash)
	if err != nil || len(h) != sha256.Size {
		return errors.New("event hash is not 32 bytes of hex")
	}
	t.appendLeaf(sha256.Sum256(append([]byte{0}, h...)))
	return nil
}

func (t *Tree) appendLeaf(leaf [sha256.Size]byte) {
	t.nodes = append(t.nodes, leaf)
	t.sizes = append(t.sizes, 1)
	t.size++
	for n := len(t.nodes); n >= 2 && t.sizes[n-1] == t.sizes[n-2]; n = len(t.nodes) {
		t.nodes[n-2] = nodeHash(t.nodes[n-2], t.nodes[n-1])
		t.sizes[n-2] *= 2
		t.nodes, t.sizes = t.nodes[:n-1], t.sizes[:n-1]
	}
}

// Size is the number of leaves.
func (t *Tree) Size() int64 { return t.size }

// Root is the tree head: SHA-256 of nothing for the empty tree.
func (t *Tree) Root() [sha256.Size]byte {
	if len(t.nodes) == 0 {
		return sha256.Sum256(nil)
	}
	r := t.nodes[len(t.nodes)-1]
	for i := len(t.nodes) - 2; i >= 0; i-- {
		r = nodeHash(t.nodes[i], r)
	}
	return r
}

func nodeHash(l, r [sha256.Size]byte) [sha256.Size]byte {
	b := make([]byte, 0, 1+2*sha256.Size)
	b = append(b, 1)
	b = append(b, l[:]...)
	b = append(b, r[:]...)
	return sha256.Sum256(b)
}
