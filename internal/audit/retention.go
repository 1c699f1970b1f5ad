package audit

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/sdk/go/auditcheck"
)

// Retention (docs/security.md, "Audit retention"). Prune deletes the
// oldest events and leaves an anchor in their place (store.AuditAnchor):
// the number of events deleted K, the hash of event K (which event K+1
// links to), the signed checkpoint of size K and the Merkle subtree
// hashes that rebuild the tree at K and prove every older checkpoint
// consistent with it (see sdk/go/auditcheck/anchor.go). The boundary K is
// always the size of a checkpoint signed earlier, so the anchor is signed
// and the series of checkpoints keeps growing.
//
// Before deleting anything, Prune brings the checkpoints up to date,
// checks every event it is about to delete (its MAC, its link to the one
// before, from the previous anchor on) and builds the anchor from those
// events and the previous anchor alone, verifying every proof it keeps
// against the signed checkpoints: a log that does not match them is not
// pruned. The anchor and the deletion are one transaction.

// anchorDomain separates the anchor's MAC from the others.
const anchorDomain = "warden-audit-anchor-v1\x00"

// anchorMAC authenticates an anchor's (size, hash, checkpoint) under the
// audit key.
func anchorMAC(key []byte, size int64, hash string, n int64) string {
	m := hmac.New(sha256.New, key)
	io.WriteString(m, anchorDomain)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(size))
	m.Write(b[:])
	binary.BigEndian.PutUint64(b[:], uint64(n))
	m.Write(b[:])
	io.WriteString(m, hash)
	return hex.EncodeToString(m.Sum(nil))
}

// anchorOK reports whether the anchor's MAC checks out.
func anchorOK(key []byte, a store.AuditAnchor) bool {
	want, _ := hex.DecodeString(anchorMAC(key, a.Size, a.Hash, a.CheckpointN))
	got, err := hex.DecodeString(a.MAC)
	return err == nil && hmac.Equal(got, want)
}

// loadAnchor returns the store's anchor, or ok false when it keeps none
// (or cannot: a store without retention).
func loadAnchor(ctx context.Context, st store.Store) (store.AuditAnchor, bool, error) {
	as, ok := st.(store.AuditRetentionStore)
	if !ok {
		return store.AuditAnchor{}, false, nil
	}
	a, err := as.GetAuditAnchor(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return store.AuditAnchor{}, false, nil
	}
	if err != nil {
		return store.AuditAnchor{}, false, err
	}
	return a, true, nil
}

// DefaultPruneBatch bounds how many events one round of Prune deletes
// (and holds in memory); Prune goes on with further rounds.
const DefaultPruneBatch = 100_000

// PruneResult says what Prune did.
type PruneResult struct {
	Deleted int64 // events deleted
	Size    int64 // the anchor's size after it: events 1 to Size are gone
}

// Prune deletes the events older than before, up to the largest signed
// checkpoint that covers only such events (never the newest event), in
// rounds of at most batch events (0: DefaultPruneBatch). It needs the
// Logger (its key checks the events), this Publisher (its checkpoints
// and key) and a store that keeps the anchor.
func (p *Publisher) Prune(ctx context.Context, l *Logger, before time.Time, batch int64) (PruneResult, error) {
	as, ok := p.cfg.Store.(store.AuditRetentionStore)
	if !ok {
		return PruneResult{}, errors.New("prune audit log: the store cannot keep a retention anchor")
	}
	if batch <= 0 {
		batch = DefaultPruneBatch
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// A fresh checkpoint first, so the newest events are signed too.
	if _, _, err := p.checkpoint(ctx); err != nil {
		return PruneResult{}, fmt.Errorf("prune audit log: %w", err)
	}
	var res PruneResult
	for {
		n, size, err := p.pruneRound(ctx, l.cfg.Key, as, before, batch)
		res.Deleted += n
		if size > 0 {
			res.Size = size
		}
		if err != nil || n == 0 {
			return res, err
		}
	}
}

// pruneRound prunes once; n is 0 when there was nothing to prune.
func (p *Publisher) pruneRound(ctx context.Context, key []byte, as store.AuditRetentionStore, before time.Time, batch int64) (n, size int64, err error) {
	fail := func(format string, args ...any) (int64, int64, error) {
		return 0, 0, fmt.Errorf("prune audit log: "+format, args...)
	}
	prev, havePrev, err := loadAnchor(ctx, p.cfg.Store)
	if err != nil {
		return fail("%w", err)
	}
	prevHash, prevNodes := GenesisHash, auditcheck.Nodes{}
	if havePrev {
		if !anchorOK(key, prev) {
			return fail("the retention anchor (events 1 to %d) was altered: run warden audit verify", prev.Size)
		}
		if prevNodes, err = auditcheck.ParseNodes(prev.Nodes); err != nil {
			return fail("the retention anchor: %w", err)
		}
		prevHash = prev.Hash
	}

	// The signed checkpoints, verified with the public key: their roots.
	cps, err := p.cfg.Checkpoints.ListAuditCheckpoints(ctx)
	if err != nil {
		return fail("%w", err)
	}
	roots := map[int64][sha256.Size]byte{}
	lastN := map[int64]int64{} // size -> the last checkpoint of that size
	for _, c := range cps {
		parsed, err := auditcheck.ParseCheckpoints([]byte(c.Note), p.vkey)
		if err != nil || len(parsed) != 1 || parsed[0].N != c.N || parsed[0].Size != c.Size {
			return fail("checkpoint %d in the database does not verify: run warden audit verify", c.N)
		}
		if r, ok := roots[c.Size]; ok && r != parsed[0].Root {
			return fail("checkpoints of %d events with different roots: run warden audit verify", c.Size)
		}
		roots[c.Size], lastN[c.Size] = parsed[0].Root, c.N
	}

	// The events that may go: older than before, at most batch of them,
	// each checked against the key and linked to the one before.
	from := prev.Size
	last, err := p.cfg.Store.LastAudit(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return fail("%w", err)
	}
	// Read at least up to the next checkpoint, which may be more than
	// batch events away.
	limit := from + batch
	next := int64(0)
	for s := range roots {
		if s > from && (next == 0 || s < next) {
			next = s
		}
	}
	limit = max(limit, next)
	var leaves []string // event hashes from seq from+1 on
	hash := prevHash
	for after := from; after < limit; {
		evs, err := p.cfg.Store.ListAudit(ctx, store.AuditFilter{After: after, Limit: int(min(int64(store.MaxPageSize), limit-after))})
		if err != nil {
			return fail("%w", err)
		}
		stop := len(evs) == 0
		for _, e := range evs {
			if !e.Time.Before(before) {
				stop = true
				break
			}
			switch {
			case e.Seq != after+1:
				return fail("event %d follows %d: run warden audit verify", e.Seq, after)
			case !authentic(key, e.Seq, e):
				return fail("event %d does not match its hash: run warden audit verify", e.Seq)
			case e.PrevHash != hash:
				return fail("event %d does not link to event %d: run warden audit verify", e.Seq, after)
			}
			leaves = append(leaves, e.Hash)
			after, hash = e.Seq, e.Hash
		}
		if stop {
			break
		}
	}
	// The boundary: the largest checkpoint size among them, below the
	// newest event.
	var k int64
	for s := range roots {
		if s > from && s <= from+int64(len(leaves)) && s < last.Seq && s > k {
			k = s
		}
	}
	if k == 0 {
		return 0, 0, nil
	}

	src := leafSource(from, leaves[:k-from], prevNodes)
	proofRoots := map[int64][sha256.Size]byte{}
	for s, r := range roots {
		if s <= k {
			proofRoots[s] = r
		}
	}
	nodes, err := auditcheck.AnchorNodes(k, leaves[k-from-1], proofRoots, src)
	if err != nil {
		return fail("the events to delete do not match the signed checkpoints: %w; run warden audit verify", err)
	}
	a := store.AuditAnchor{Size: k, Hash: leaves[k-from-1], CheckpointN: lastN[k], Nodes: nodes.Encode(), PrunedAt: p.cfg.Now().UTC()}
	a.MAC = anchorMAC(key, a.Size, a.Hash, a.CheckpointN)
	deleted, err := as.PruneAudit(ctx, a)
	if err != nil {
		return 0, 0, fmt.Errorf("prune audit log: %w", err)
	}
	p.cfg.Log.Info("audit events past retention deleted", "events", deleted, "anchor", k, "checkpoint", a.CheckpointN)
	return deleted, k, nil
}

// leafSource serves subtree hashes from the previous anchor's nodes and
// from the event hashes of seqs from+1 on (leaves from on, counted from
// 0), computing each at most once.
func leafSource(from int64, hashes []string, prev auditcheck.Nodes) auditcheck.NodeSource {
	memo := map[auditcheck.NodeID][sha256.Size]byte{}
	to := from + int64(len(hashes))
	var get auditcheck.NodeSource
	get = func(id auditcheck.NodeID) ([sha256.Size]byte, bool, error) {
		if h, ok := prev[id]; ok {
			return h, true, nil
		}
		a, b := id.Index<<id.Level, (id.Index+1)<<id.Level
		if a < from || b > to {
			return [sha256.Size]byte{}, false, nil
		}
		if h, ok := memo[id]; ok {
			return h, true, nil
		}
		var h [sha256.Size]byte
		if id.Level == 0 {
			var err error
			if h, err = auditcheck.LeafHash(hashes[a-from]); err != nil {
				return h, false, fmt.Errorf("event %d: %w", a+1, err)
			}
		} else {
			l, _, err := get(auditcheck.NodeID{Level: id.Level - 1, Index: 2 * id.Index})
			if err != nil {
				return h, false, err
			}
			r, _, err := get(auditcheck.NodeID{Level: id.Level - 1, Index: 2*id.Index + 1})
			if err != nil {
				return h, false, err
			}
			h = auditcheck.NodeHash(l, r)
		}
		memo[id] = h
		return h, true, nil
	}
	return get
}
