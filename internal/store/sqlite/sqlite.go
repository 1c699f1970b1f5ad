// Package sqlite implements store.Store on an embedded SQLite database file
// (modernc.org/sqlite, pure Go, no cgo).
//
// The database runs in WAL mode with foreign keys on and a busy timeout.
// It is opened through two connection pools: one writer connection, so
// writes are serialised in Go instead of spinning on SQLITE_BUSY, and a
// small pool of read-only connections, so reads proceed while a write is in
// progress. Write transactions begin IMMEDIATE, which takes SQLite's write
// lock up front; that makes the read-modify-write in UpdateSandbox safe even
// against another process writing the same file.
//
// synchronous=NORMAL is used: in WAL mode a commit survives a crash of
// wardend but the last few commits may be lost on power failure. Schema
// migrations are numbered SQL files embedded in the binary and applied in
// one transaction by Open.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	sqlitedriver "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/warden-sandbox/warden/internal/store"
)

var _ store.Store = (*Store)(nil)

// busyTimeout bounds how long a connection waits for a lock held by another
// process (within this process the single writer connection queues writes).
const busyTimeout = 5 * time.Second

// Store is a store.Store backed by one SQLite file. Create it with Open.
type Store struct {
	path   string
	writer *sql.DB // exactly one connection
	reader *sql.DB // read-only connections
	stmts  statements
}

// Open opens (creating if needed) the database file at path, applies
// pending migrations and returns the store. A new file is created with mode
// 0600; an existing one is tightened to 0600. The directory must exist.
//
// path must be a file path: ":memory:" is refused because the reader and
// writer pools would each get a different empty database. Tests use a file
// in t.TempDir().
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("open sqlite store: path %q: want a plain file path: %w", path, store.ErrInvalid)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	err = f.Chmod(0o600)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}

	s := &Store{path: path}
	common := url.Values{}
	common.Set("_busy_timeout", fmt.Sprint(busyTimeout.Milliseconds()))
	common.Set("_foreign_keys", "1")
	common.Set("_synchronous", "NORMAL")

	w := cloneValues(common)
	w.Set("_journal_mode", "WAL")
	w.Set("_txlock", "immediate")
	s.writer, err = sql.Open("sqlite", path+"?"+w.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	s.writer.SetMaxOpenConns(1)
	s.writer.SetMaxIdleConns(1)
	s.writer.SetConnMaxLifetime(0)
	s.writer.SetConnMaxIdleTime(0)

	// Establish WAL mode (a property of the file) before readers connect.
	var mode string
	if err := s.writer.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		s.writer.Close()
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		s.writer.Close()
		return nil, fmt.Errorf("open sqlite store: journal mode is %q, want wal", mode)
	}

	r := cloneValues(common)
	r.Set("_query_only", "1")
	s.reader, err = sql.Open("sqlite", path+"?"+r.Encode())
	if err != nil {
		s.writer.Close()
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	n := min(max(runtime.GOMAXPROCS(0), 2), 8)
	s.reader.SetMaxOpenConns(n)
	s.reader.SetMaxIdleConns(n)
	s.reader.SetConnMaxLifetime(0)
	s.reader.SetConnMaxIdleTime(5 * time.Minute)

	if err := migrate(ctx, s.writer); err != nil {
		s.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", filepath.Base(path), err)
	}
	if err := s.stmts.prepare(ctx, s.writer, s.reader); err != nil {
		s.Close()
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	return s, nil
}

// Path returns the database file path.
func (s *Store) Path() string { return s.path }

// Close closes both pools. The WAL is checkpointed by SQLite when the last
// connection closes.
func (s *Store) Close() error {
	s.stmts.close()
	var errs []error
	if s.reader != nil {
		errs = append(errs, s.reader.Close())
	}
	if s.writer != nil {
		errs = append(errs, s.writer.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close sqlite store: %w", err)
	}
	return nil
}

// inTx runs fn in a write transaction (BEGIN IMMEDIATE) and commits it if
// fn returns nil.
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return full(fmt.Errorf("begin: %w", err))
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return full(err)
	}
	if err := tx.Commit(); err != nil {
		return full(fmt.Errorf("commit: %w", err))
	}
	return nil
}

// full marks a write that failed because the disk is full (SQLITE_FULL,
// or ENOSPC from the file system) with store.ErrFull.
func full(err error) error {
	var se *sqlitedriver.Error
	if errors.Is(err, store.ErrFull) {
		return err
	}
	if (errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL) || errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: %w", store.ErrFull, err)
	}
	return err
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// constraint classifies a SQLite constraint violation: it returns the
// extended result code, or 0 when err is not a constraint error.
func constraint(err error) int {
	var se *sqlitedriver.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CONSTRAINT {
		return se.Code()
	}
	return 0
}

func isUnique(err error) bool {
	c := constraint(err)
	return c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

// isNameTaken reports a violation of the unique index on live sandboxes'
// (owner, name), the only UNIQUE constraint of the sandboxes table (its id
// is the primary key).
func isNameTaken(err error) bool {
	return constraint(err) == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

func isForeignKey(err error) bool {
	return constraint(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}

// nanos converts a time to the stored form: unix nanoseconds, NULL for the
// zero time.
func nanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

// fromNanos converts a stored time back; NULL becomes the zero time.
func fromNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}
