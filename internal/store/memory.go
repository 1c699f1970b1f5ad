package store

import (
	"context"
	"time"
)

// MemoryStore persists agents' memory (internal/memory owns its meaning):
// per namespace, keys whose every write is a new version. Versions are
// never rewritten except by RedactMemory, which removes their text.
type MemoryStore interface {
	// PutMemory appends the next version of e's key (e.Version is
	// ignored and set in the result). A forgotten entry is a tombstone.
	PutMemory(ctx context.Context, e MemoryEntry) (MemoryEntry, error)
	// GetMemory returns the latest version of a key, ErrNotFound when the
	// key has none or the latest is forgotten.
	GetMemory(ctx context.Context, namespace, key string) (MemoryEntry, error)
	// MemoryHistory returns every version of a key, oldest first
	// (ErrNotFound when there is none).
	MemoryHistory(ctx context.Context, namespace, key string) ([]MemoryEntry, error)
	// ListMemory returns the latest version of each live key of a
	// namespace, ordered by key, limited by f.
	ListMemory(ctx context.Context, namespace string, f MemoryFilter) ([]MemoryEntry, error)
	// SearchMemory returns live entries of a namespace matching any of
	// the query's words (text, key or tags), best match first.
	SearchMemory(ctx context.Context, namespace, query string, f MemoryFilter) ([]MemoryEntry, error)
	// RedactMemory removes the text of one version of a key (version >
	// 0) or of all its versions (0), recording by, reason and at; it
	// returns the versions redacted now (ErrNotFound: no such key or
	// version).
	RedactMemory(ctx context.Context, namespace, key string, version int64, by, reason string, at time.Time) (int, error)
	// ExportMemory calls fn with every version of every key of a
	// namespace, ordered by key and version.
	ExportMemory(ctx context.Context, namespace string, fn func(MemoryEntry) error) error
}

// MemoryEntry is one version of a memory key.
type MemoryEntry struct {
	Namespace string
	Key       string
	Version   int64
	Text      string
	Tags      []string
	SHA256    string // hex digest of Text ("" when forgotten or redacted)
	Forgotten bool
	// Who wrote it: the principal, the agent and its run ("" when none).
	PrincipalID string
	Agent       string
	RunID       string
	CreatedAt   time.Time
	// Redaction, when RedactedAt is set.
	RedactedAt   time.Time
	RedactedBy   string
	RedactReason string
}

// MemoryFilter limits a memory listing or search.
type MemoryFilter struct {
	Prefix string // keys starting with it
	Tag    string // entries carrying it
	Limit  int    // at most this many (0: 100; capped at 1000)
}
