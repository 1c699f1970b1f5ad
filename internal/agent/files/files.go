// Package files is the file side of warden-agent: the Connect-RPC
// filesystem.Filesystem service (wire-compatible with E2B's envd: Stat,
// ListDir, MakeDir, Move, Remove, WatchDir and the polling watchers) and the
// plain HTTP routes /files (read with Range and gzip; write from an
// octet-stream or multipart body, in place as envd does or atomically with
// atomic=true) and /tar (pack a tree, extract a tar stream safely).
//
// Every operation acts as the request's user (sysuser.FromRequest, or the
// "username" query for the HTTP routes) through (*sysuser.User).AsFS, so the
// kernel checks permissions as that user and whatever is created is owned by
// them. Paths are resolved with (*sysuser.User).Resolve: relative to the
// user's home, "~" expanded, empty meaning the default workdir.
package files

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"sync"
	"syscall"

	"connectrpc.com/connect"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
	"github.com/warden-sandbox/warden/internal/agentpb/filesystem/filesystempbconnect"
)

// Config configures the file service.
type Config struct {
	DefaultUser    string // acting user when a request names none ("user" when empty)
	DefaultWorkdir string // what an empty path means (the user's home when empty)
	// DiskBytes is the sandbox's disk limit, named when a write does not
	// fit (0: the size of the filesystem written to).
	DiskBytes int64

	// MaxTarBytes caps the file content one POST /tar may write; 0 means
	// DefaultMaxTarBytes, negative means no cap but the disk.
	MaxTarBytes int64
	// MaxTarEntries caps the entries of one POST /tar; 0 means
	// DefaultMaxTarEntries.
	MaxTarEntries int
	// MaxWatcherEvents caps the events a polling watcher (CreateWatcher)
	// keeps between two GetWatcherEvents; the oldest are dropped beyond it.
	// 0 means DefaultMaxWatcherEvents.
	MaxWatcherEvents int
}

// Defaults for the zero values of Config.
const (
	DefaultMaxTarBytes      int64 = 64 << 30
	DefaultMaxTarEntries          = 100_000
	DefaultMaxWatcherEvents       = 10_000
)

// Service implements filesystempbconnect.FilesystemHandler and the /files and
// /tar HTTP routes.
type Service struct {
	cfg Config

	mu       sync.Mutex
	watchers map[string]*pollWatcher

	gens writeGens // in-place uploads, for watchers' deduplication
}

var _ filesystempbconnect.FilesystemHandler = (*Service)(nil)

// New builds a file service.
func New(cfg Config) *Service {
	if cfg.DefaultUser == "" {
		cfg.DefaultUser = "user"
	}
	if cfg.MaxTarBytes == 0 {
		cfg.MaxTarBytes = DefaultMaxTarBytes
	}
	if cfg.MaxTarEntries <= 0 {
		cfg.MaxTarEntries = DefaultMaxTarEntries
	}
	if cfg.MaxWatcherEvents <= 0 {
		cfg.MaxWatcherEvents = DefaultMaxWatcherEvents
	}
	return &Service{cfg: cfg, watchers: map[string]*pollWatcher{}}
}

// Close stops every polling watcher.
func (s *Service) Close() {
	s.mu.Lock()
	ws := s.watchers
	s.watchers = map[string]*pollWatcher{}
	s.mu.Unlock()
	for _, w := range ws {
		w.close()
	}
}

// rpcUser is the acting user of a Connect request.
func (s *Service) rpcUser(h http.Header) (*sysuser.User, error) {
	u, err := sysuser.FromRequest(h, s.cfg.DefaultUser)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("invalid user: %w", err))
	}
	return u, nil
}

// httpUser is the acting user of a /files or /tar request: the "username"
// query, else the Authorization header, else the default user.
func (s *Service) httpUser(r *http.Request) (*sysuser.User, error) {
	if n := r.URL.Query().Get("username"); n != "" {
		return sysuser.Lookup(n)
	}
	return sysuser.FromRequest(r.Header, s.cfg.DefaultUser)
}

func (s *Service) resolve(u *sysuser.User, p string) string {
	return u.Resolve(p, s.cfg.DefaultWorkdir)
}

// errInvalid marks errors caused by the request rather than the filesystem.
var errInvalid = errors.New("invalid argument")

// invalidf is fmt.Errorf for errors caused by the request: errors.Is(err,
// errInvalid) holds, and a %w operand stays reachable too.
func invalidf(format string, args ...any) error {
	return &invalidError{err: fmt.Errorf(format, args...)}
}

type invalidError struct{ err error }

func (e *invalidError) Error() string        { return e.err.Error() }
func (e *invalidError) Unwrap() error        { return errors.Unwrap(e.err) }
func (e *invalidError) Is(target error) bool { return target == errInvalid }

// pathErr rewrites err (usually an *fs.PathError from an operation on a
// temporary or root-relative name) as "op path: reason", so messages name
// only the sandbox path the client asked about. errors.Is still sees the
// underlying errno.
func pathErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	var ie *invalidError
	if errors.As(err, &ie) {
		return err
	}
	return fmt.Errorf("%s %s: %w", op, p, rootCause(err))
}

// rootCause strips fs.PathError, os.LinkError and os.SyscallError wrappers.
func rootCause(err error) error {
	for {
		switch e := err.(type) {
		case *fs.PathError:
			err = e.Err
		case *os.LinkError:
			err = e.Err
		case *os.SyscallError:
			err = e.Err
		default:
			return err
		}
	}
}

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// diskFullError is a write that did not fit, with the limit it hit.
type diskFullError struct {
	limit int64 // bytes; 0 unknown
	err   error
}

func (e *diskFullError) Error() string { return e.err.Error() }
func (e *diskFullError) Unwrap() error { return e.err }

// diskFull annotates a no-space error of a write under dir with the
// sandbox's disk limit (else the size of dir's filesystem).
func (s *Service) diskFull(err error, dir string) error {
	if !isNoSpace(err) {
		return err
	}
	limit := s.cfg.DiskBytes
	var sf syscall.Statfs_t
	if limit <= 0 && syscall.Statfs(dir, &sf) == nil {
		limit = int64(sf.Blocks) * sf.Bsize
	}
	return &diskFullError{limit: limit, err: err}
}

// noSpaceMessage is the message of a 507: "sandbox disk is full (limit N
// MiB)" when the limit is known.
func noSpaceMessage(err error) string {
	var df *diskFullError
	if errors.As(err, &df) && df.limit > 0 {
		return fmt.Sprintf("sandbox disk is full (limit %d MiB)", (df.limit+(1<<20)-1)>>20)
	}
	return "sandbox disk is full"
}

// rpcError maps a filesystem error to a Connect error.
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return connect.NewError(connect.CodeCanceled, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewError(codeOf(err), err)
}

func codeOf(err error) connect.Code {
	switch {
	case errors.Is(err, errInvalid):
		return connect.CodeInvalidArgument
	case errors.Is(err, sysuser.ErrUnknownUser):
		return connect.CodeUnauthenticated
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		// ENOTDIR: a component of the path is not a directory, so the path
		// does not exist.
		return connect.CodeNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return connect.CodePermissionDenied
	case isNoSpace(err), errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return connect.CodeResourceExhausted
	case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.ENOTEMPTY):
		return connect.CodeAlreadyExists
	case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP),
		errors.Is(err, syscall.EXDEV), errors.Is(err, syscall.EBUSY):
		return connect.CodeInvalidArgument
	default:
		return connect.CodeInternal
	}
}

// httpStatus maps a filesystem error to an HTTP status and message.
func httpStatus(err error) (int, string) {
	switch {
	case isNoSpace(err):
		return http.StatusInsufficientStorage, noSpaceMessage(err)
	case errors.Is(err, context.Canceled):
		return 499, err.Error()
	}
	switch codeOf(err) {
	case connect.CodeInvalidArgument:
		return http.StatusBadRequest, err.Error()
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized, err.Error()
	case connect.CodeNotFound:
		return http.StatusNotFound, err.Error()
	case connect.CodePermissionDenied:
		return http.StatusForbidden, err.Error()
	case connect.CodeAlreadyExists:
		return http.StatusConflict, err.Error()
	case connect.CodeResourceExhausted:
		return http.StatusServiceUnavailable, err.Error()
	default:
		return http.StatusInternalServerError, err.Error()
	}
}

// jsonError writes the envd error body {"code": status, "message": msg}.
func jsonError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Encoding")
	w.Header().Del("Content-Length")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
}

// httpError writes err as a JSON error with the status httpStatus picks.
func httpError(w http.ResponseWriter, err error) {
	status, msg := httpStatus(err)
	jsonError(w, status, msg)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	json.NewEncoder(w).Encode(v)
}
