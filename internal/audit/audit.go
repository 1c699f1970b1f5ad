// Package audit is wardend's tamper-evident audit log, kept on top of
// store.Store.
//
// Every event is chained to the one before it:
//
//	hash = HMAC-SHA256(key, prev_hash || canonical(seq, time, request_id,
//	                         principal_id, action, target, outcome, detail))
//
// (see eventMAC for the exact encoding). The 32-byte key lives in a
// root-only file outside the database (LoadOrCreateKey), so someone who can
// edit the database can neither fix up a modified event nor recompute the
// chain after removing one. The Logger also keeps the head of the chain
// (seq, hash, and a MAC over both) in a second root-only file, the
// checkpoint, replaced with an atomic rename; deleting the newest rows then
// leaves the checkpoint pointing past the end of the log. By default a
// background writer updates the checkpoint at most every 10 ms while
// appends happen (an Append costs a database insert, not a file rename),
// and Close writes the final one; Config.CheckpointInterval < 0 makes
// every Append write it synchronously instead. While the Logger runs,
// Verify also checks against the head it holds in memory, so the lag only
// matters if wardend crashes within it.
//
// Verify walks the whole log and reports each problem with its seq and
// kind: modified (the event's hash does not match its content), missing (a
// seq gap, or the log ends below the checkpoint), reordered (an authentic
// event stored at a seq other than the one it was written at) and
// broken_chain (an authentic event that does not link to the event stored
// before it).
//
// What the log cannot detect: someone who can read the key file (root on
// the host) can rewrite everything; and because the database commits with
// synchronous=NORMAL and the checkpoint is not fsynced by default, a power
// failure can lose the newest events or checkpoint, and may then be
// reported as missing events.
package audit

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/store"
)

// Event is one audit event. Seq, PrevHash and Hash are assigned by
// Logger.Append; Time is set to the current time when zero.
type Event = store.AuditEvent

// Outcomes of an audited action.
const (
	OutcomeSuccess = "success"
	OutcomeDenied  = "denied"
	OutcomeError   = "error"
)

// ErrClosed is returned by Append after Close, when the daemon shuts down.
var ErrClosed = errkind.New(errkind.Unavailable, "audit log closed: the daemon is shutting down")

// Config configures a Logger.
type Config struct {
	// Store persists the events.
	Store store.Store
	// Key is the HMAC key, KeySize bytes (see LoadOrCreateKey).
	Key []byte
	// CheckpointPath is the root-only file the head of the chain is
	// written to. Required.
	CheckpointPath string
	// CheckpointInterval bounds how far the checkpoint may lag behind the
	// newest event. Zero means DefaultCheckpointInterval: a background
	// goroutine rewrites the checkpoint at most that often while appends
	// happen, and Close writes the final one. Negative means every Append
	// writes the checkpoint before it returns, which costs a file rename
	// per event (about 0.4 to 1.3 ms on ext4, which flushes a file renamed
	// over another; see BenchmarkAppend*).
	CheckpointInterval time.Duration
	// FsyncCheckpoint fsyncs the checkpoint file and its directory on each
	// write. Off by default: the database itself does not fsync each
	// commit (WAL, synchronous=NORMAL), and a checkpoint that survives a
	// power failure the events did not would be reported as missing events.
	FsyncCheckpoint bool
	// Now returns the current time; time.Now when nil.
	Now func() time.Time
}

// DefaultCheckpointInterval is the default CheckpointInterval.
const DefaultCheckpointInterval = 10 * time.Millisecond

// Logger appends events to the chain and verifies it. Appends are
// serialised so the chain is linear. A Logger must be the only writer of
// audit events to its store, and must be closed (Close writes the final
// checkpoint and stops the background writer).
type Logger struct {
	cfg Config
	now func() time.Time

	mu      sync.Mutex
	head    anchor    // newest event of the chain (seq 0 and GenesisHash when empty)
	closed  bool      // no more appends
	startup anchor    // checkpoint found by New, if any
	issues  []Problem // problems found by New, repeated by every Verify
	cpErr   error     // last checkpoint write error, until a write succeeds

	cpMu      sync.Mutex // serialises checkpoint file writes
	cpWritten anchor     // what the checkpoint file holds; under cpMu

	kick chan struct{} // appends happened (buffered 1; background mode only)
	stop chan struct{} // closed by Close
	done chan struct{} // closed when the background writer exits
}

// anchor is a (seq, hash) pair known to be the head of the chain at some
// point.
type anchor struct {
	seq  int64
	hash string
}

// New loads the checkpoint and the newest stored event and returns a
// Logger that continues the chain. If the log ends below the checkpoint
// (its newest events were deleted), the chain continues from the
// checkpoint, so the gap stays visible to Verify instead of being
// overwritten. A checkpoint file that exists but fails authentication is
// an error: it needs an operator's attention.
func New(ctx context.Context, cfg Config) (*Logger, error) {
	if cfg.Store == nil {
		return nil, errors.New("new audit logger: no store")
	}
	if len(cfg.Key) != KeySize {
		return nil, fmt.Errorf("new audit logger: key is %d bytes, want %d", len(cfg.Key), KeySize)
	}
	if cfg.CheckpointPath == "" {
		return nil, errors.New("new audit logger: no checkpoint path")
	}
	if cfg.CheckpointInterval == 0 {
		cfg.CheckpointInterval = DefaultCheckpointInterval
	}
	l := &Logger{cfg: cfg, now: cfg.Now, head: anchor{0, GenesisHash}}
	if l.now == nil {
		l.now = time.Now
	}

	cp, haveCP, err := readCheckpoint(cfg.CheckpointPath, cfg.Key)
	if err != nil {
		return nil, fmt.Errorf("new audit logger: %w", err)
	}
	last, err := cfg.Store.LastAudit(ctx)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// Retention never deletes the newest event, but should the log
		// be empty after it, the chain goes on from the anchor.
		if a, ok, aerr := loadAnchor(ctx, cfg.Store); aerr != nil {
			return nil, fmt.Errorf("new audit logger: %w", aerr)
		} else if ok {
			l.head = anchor{a.Size, a.Hash}
		}
	case err != nil:
		return nil, fmt.Errorf("new audit logger: %w", err)
	default:
		l.head = anchor{last.Seq, last.Hash}
	}
	if haveCP {
		l.startup = anchor{cp.Seq, cp.Hash}
		l.cpWritten = l.startup
		if cp.Seq > l.head.seq {
			l.head = l.startup
		}
	} else if l.head.seq > 0 {
		l.issues = append(l.issues, Problem{
			Seq:  l.head.seq,
			Kind: KindMissing,
			Message: fmt.Sprintf("no checkpoint file at %s although the log holds events up to seq %d: "+
				"deletion of the newest events cannot be ruled out", cfg.CheckpointPath, l.head.seq),
		})
	}
	// Bring the file up to date now (also when it was missing), so later
	// truncation is caught.
	if err := l.flushCheckpoint(); err != nil {
		return nil, fmt.Errorf("new audit logger: %w", err)
	}
	if cfg.CheckpointInterval > 0 {
		l.kick = make(chan struct{}, 1)
		l.stop = make(chan struct{})
		l.done = make(chan struct{})
		go l.checkpointLoop(cfg.CheckpointInterval)
	}
	return l, nil
}

// Append assigns the next seq, links the event to the head of the chain,
// computes its hash and stores it. Detail must be JSON (or empty); it is
// stored in canonical form (compact, keys sorted). Action is required and
// Outcome must be one of the Outcome constants. The returned event is what
// was stored.
//
// If the event was stored but writing the checkpoint failed (now, or in
// the background since the last Append), Append returns the event and an
// error wrapping ErrCheckpoint.
//
// The write is not abandoned when ctx is cancelled: an audit record should
// survive the client going away. The store's own timeouts bound it.
func (l *Logger) Append(ctx context.Context, e Event) (Event, error) {
	if e.Action == "" {
		return Event{}, errors.New("append audit event: empty action")
	}
	switch e.Outcome {
	case OutcomeSuccess, OutcomeDenied, OutcomeError:
	default:
		return Event{}, fmt.Errorf("append audit event %s: outcome %q: want success, denied or error", e.Action, e.Outcome)
	}
	detail, err := canonicalDetail(e.Detail)
	if err != nil {
		return Event{}, fmt.Errorf("append audit event %s: %w", e.Action, err)
	}
	e.Detail = detail
	if e.Time.IsZero() {
		e.Time = l.now()
	}
	e.Time = e.Time.UTC().Round(0)

	e, err = l.append(context.WithoutCancel(ctx), e)
	if err != nil {
		return Event{}, err
	}
	l.mu.Lock()
	cpErr := l.cpErr // from a background write since the last Append
	l.mu.Unlock()
	if l.kick == nil {
		cpErr = l.flushCheckpoint()
	} else {
		select {
		case l.kick <- struct{}{}:
		default: // a write is already pending
		}
	}
	if cpErr != nil {
		return e, fmt.Errorf("append audit event %d: stored, but %w: %w", e.Seq, ErrCheckpoint, cpErr)
	}
	return e, nil
}

// append chains and stores e under l.mu.
func (l *Logger) append(ctx context.Context, e Event) (Event, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return Event{}, ErrClosed
	}
	e.Seq = l.head.seq + 1
	e.PrevHash = l.head.hash
	mac, err := eventMAC(l.cfg.Key, e.Seq, e)
	if err != nil {
		return Event{}, fmt.Errorf("append audit event %d: head: %w", e.Seq, err)
	}
	e.Hash = hex.EncodeToString(mac)
	if err := l.cfg.Store.AppendAudit(ctx, e); err != nil {
		if errors.Is(err, store.ErrConflict) {
			// Someone else wrote this seq. Resynchronise so the log
			// does not stay stuck; Verify will judge the intruder.
			if last, lerr := l.cfg.Store.LastAudit(ctx); lerr == nil && last.Seq > l.head.seq {
				l.head = anchor{last.Seq, last.Hash}
			}
		}
		return Event{}, fmt.Errorf("append audit event: %w", err)
	}
	l.head = anchor{e.Seq, e.Hash}
	return e, nil
}

// ErrCheckpoint marks a failure to write the checkpoint file.
var ErrCheckpoint = errors.New("audit checkpoint not written")

// Head returns the seq and hash of the newest event of the chain.
func (l *Logger) Head() (seq int64, hash string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.head.seq, l.head.hash
}

// Close refuses further appends, stops the background writer and writes
// the final checkpoint. It is safe to call more than once.
func (l *Logger) Close() error {
	l.mu.Lock()
	already := l.closed
	l.closed = true
	l.mu.Unlock()
	if already {
		return nil
	}
	if l.stop != nil {
		close(l.stop)
		<-l.done
	}
	if err := l.flushCheckpoint(); err != nil {
		return fmt.Errorf("close audit logger: %w", err)
	}
	return nil
}

// checkpointLoop writes the checkpoint after appends, at most once per
// interval, until Close.
func (l *Logger) checkpointLoop(interval time.Duration) {
	defer close(l.done)
	for {
		select {
		case <-l.stop:
			return
		case <-l.kick:
		}
		_ = l.flushCheckpoint() // the error is kept in l.cpErr for Append
		select {
		case <-l.stop:
			return
		case <-time.After(interval):
		}
	}
}

// flushCheckpoint writes the current head to the checkpoint file unless
// the file already holds it. The head is read after taking cpMu, so a
// write never replaces a newer checkpoint with an older one, and only
// committed events are ever checkpointed.
func (l *Logger) flushCheckpoint() error {
	l.cpMu.Lock()
	defer l.cpMu.Unlock()
	l.mu.Lock()
	head := l.head
	l.mu.Unlock()
	if head == l.cpWritten {
		return nil
	}
	err := writeCheckpoint(l.cfg.CheckpointPath, l.cfg.Key, head.seq, head.hash, l.cfg.FsyncCheckpoint)
	if err == nil {
		l.cpWritten = head
	}
	l.mu.Lock()
	l.cpErr = err
	l.mu.Unlock()
	return err
}
