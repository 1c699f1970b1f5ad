package store

import (
	"context"
	"time"
)

// AuditRetentionStore keeps the anchor that stands for the audit events
// retention deleted (internal/audit/retention.go) and deletes them.
// *sqlite.Store implements it; it is not part of Store.
type AuditRetentionStore interface {
	// GetAuditAnchor returns the anchor, or ErrNotFound when no event was
	// ever deleted.
	GetAuditAnchor(ctx context.Context) (AuditAnchor, error)
	// PruneAudit, in one transaction, replaces the anchor with a and
	// deletes the events with seq up to a.Size, returning how many it
	// deleted. a.CheckpointN must name a stored checkpoint of size a.Size
	// and at least one event must stay after a.Size (ErrInvalid
	// otherwise); a.Size must exceed the current anchor's (ErrConflict),
	// except that pruning again to the same anchor does nothing.
	PruneAudit(ctx context.Context, a AuditAnchor) (int64, error)
}

// AuditAnchor stands for the audit events 1 to Size, deleted by retention.
type AuditAnchor struct {
	Size        int64             // events 1 to Size were deleted
	Hash        string            // hex hash of event Size
	CheckpointN int64             // the signed checkpoint of size Size
	Nodes       map[string]string // Merkle subtree hashes, "level/index" to base64
	MAC         string            // hex HMAC of (Size, Hash, CheckpointN) under the audit key
	PrunedAt    time.Time
}

// UsageRetentionStore deletes old usage rows (usage.retention).
// *sqlite.Store implements it; it is not part of Store.
type UsageRetentionStore interface {
	// PruneUsage deletes the LLM usage rows of days before before's UTC
	// day and the sandbox usage rows of hours that ended by before,
	// returning how many of each it deleted. Live sandboxes' meter rows
	// stay.
	PruneUsage(ctx context.Context, before time.Time) (llm, sandbox int64, err error)
}
