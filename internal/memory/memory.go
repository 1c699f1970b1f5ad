// Package memory is hosted agents' memory (docs/memory.md): a versioned
// key/text store per agent, owned by the installation rather than any
// sandbox. Agents use it through the MCP gateway's builtin memory tools
// (remember, recall, list, forget), scoped to their own memory; humans
// review it through the API (list, history, diff, redact, export). Every
// write is a new version attributed to its principal, agent and run, and
// a memory.write action on the governed path: a policy's guard blocks a
// secret (the error names the detector) or masks it (stored masked).
// Redaction removes a value from the store and its history and is
// audited.
package memory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
)

// Limits of what is stored.
const (
	MaxText = 64 << 10
	MaxKey  = 200
	MaxTags = 16
	MaxTag  = 64
)

// Errors. All carry an errkind so the API maps them.
var (
	ErrInvalid   = errkind.Sentinel(errkind.Invalid, "invalid memory request", errkind.WithDetail)
	ErrNotFound  = errkind.Sentinel(errkind.NotFound, "no such memory", errkind.WithDetail)
	ErrNoAgent   = errkind.Sentinel(errkind.Forbidden, "memory is for agent principals", errkind.WithDetail)
	errNoService = errors.New("memory: no store")
)

var (
	namespaceRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)
	tagRE       = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]*$`)
)

// Actor is who acts on memory: the namespace (an agent's memory) and what
// a write is attributed to.
type Actor struct {
	Namespace string
	// Team is the namespace of the team memory the agent shares ("" none;
	// team.go).
	Team      string
	Agent     string
	RunID     string
	Principal govern.Principal
}

// Config configures a Service.
type Config struct {
	Store store.MemoryStore
	// Govern decides each write (memory.write; nil: none screened).
	Govern *govern.Engine
	// Audit records writes, forgets and redactions (nil: none).
	Audit *govern.AuditLog
	Now   func() time.Time
}

// Service is the memory store's logic. Safe for concurrent use.
type Service struct {
	cfg Config
	mu  sync.RWMutex
	// runOf maps an API key to the hosted-agent run it belongs to.
	runOf func(ctx context.Context, keyID string) (runID string, ok bool)
	// teamOf maps an agent's name to the team memory it shares (team.go).
	teamOf func(ctx context.Context, agent string) (team string, ok bool)
}

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errNoService
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg}, nil
}

// SetRunLookup installs how an agent's API key maps to its current run
// (internal/agents gives each run its own key), so writes name the run.
func (s *Service) SetRunLookup(fn func(ctx context.Context, keyID string) (runID string, ok bool)) {
	s.mu.Lock()
	s.runOf = fn
	s.mu.Unlock()
}

// ValidNamespace reports whether ns can name a memory (an agent's name).
func ValidNamespace(ns string) bool { return namespaceRE.MatchString(ns) }

// ActorFor is the actor of an agent principal's own memory: the
// namespace is the agent's name (its principal's name), the run the one
// its key belongs to. Other principals have no memory of their own.
func (s *Service) ActorFor(ctx context.Context, ident auth.Identity) (Actor, error) {
	p := ident.Principal
	if p.Kind != store.PrincipalAgent {
		return Actor{}, fmt.Errorf("%w: principal %s is a %s", ErrNoAgent, p.ID, p.Kind)
	}
	if !ValidNamespace(p.Name) {
		return Actor{}, fmt.Errorf("%w: agent name %q cannot name a memory", ErrInvalid, p.Name)
	}
	a := Actor{Namespace: p.Name, Agent: p.Name, Principal: govern.Principal{ID: p.ID, Kind: p.Kind, Owner: p.CreatedBy}}
	s.mu.RLock()
	runOf, teamOf := s.runOf, s.teamOf
	s.mu.RUnlock()
	if runOf != nil && ident.Key.ID != "" {
		if run, ok := runOf(ctx, ident.Key.ID); ok {
			a.RunID = run
		}
	}
	if teamOf != nil {
		if team, ok := teamOf(ctx, p.Name); ok {
			a.Team = TeamNamespace(team)
		}
	}
	return a, nil
}

// Redaction says who removed a version's text, when and why.
type Redaction struct {
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"`
}

// Entry is one version of a memory key as the API and tools show it.
type Entry struct {
	Namespace string     `json:"namespace"`
	Key       string     `json:"key"`
	Version   int64      `json:"version"`
	Text      string     `json:"text"`
	Tags      []string   `json:"tags"`
	SHA256    string     `json:"sha256,omitempty"`
	Forgotten bool       `json:"forgotten,omitempty"`
	Principal string     `json:"principal_id"`
	Agent     string     `json:"agent,omitempty"`
	RunID     string     `json:"run_id,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	Redacted  *Redaction `json:"redacted,omitempty"`
}

func entryOf(e store.MemoryEntry) Entry {
	out := Entry{Namespace: e.Namespace, Key: e.Key, Version: e.Version, Text: e.Text, Tags: e.Tags, SHA256: e.SHA256,
		Forgotten: e.Forgotten, Principal: e.PrincipalID, Agent: e.Agent, RunID: e.RunID, CreatedAt: e.CreatedAt}
	if out.Tags == nil {
		out.Tags = []string{}
	}
	if !e.RedactedAt.IsZero() {
		out.Redacted = &Redaction{By: e.RedactedBy, At: e.RedactedAt, Reason: e.RedactReason}
	}
	return out
}

func entriesOf(es []store.MemoryEntry) []Entry {
	out := make([]Entry, 0, len(es))
	for _, e := range es {
		out = append(out, entryOf(e))
	}
	return out
}

func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: key is required", ErrInvalid)
	case len(key) > MaxKey:
		return fmt.Errorf("%w: key is over %d bytes", ErrInvalid, MaxKey)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key is not UTF-8", ErrInvalid)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: key has control characters", ErrInvalid)
		}
	}
	return nil
}

func checkNamespace(ns string) error {
	if !ValidNamespace(ns) {
		return fmt.Errorf("%w: %q is not a memory namespace (an agent name)", ErrInvalid, ns)
	}
	return nil
}

func checkTags(tags []string) error {
	if len(tags) > MaxTags {
		return fmt.Errorf("%w: at most %d tags", ErrInvalid, MaxTags)
	}
	for _, t := range tags {
		if len(t) > MaxTag || !tagRE.MatchString(t) {
			return fmt.Errorf("%w: tag %q: letters, digits and ._:/- up to %d bytes", ErrInvalid, t, MaxTag)
		}
	}
	return nil
}

func storeErr(err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case errors.Is(err, store.ErrInvalid):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return err
}

// Remember writes text under key in the actor's memory as a new version.
// The write is decided as a memory.write action first: refused (a guard
// blocking a secret) it returns the decision's error, which names the
// detector; masked, the masked text is stored.
func (s *Service) Remember(ctx context.Context, a Actor, key, text string, tags []string) (Entry, error) {
	if err := checkNamespace(a.Namespace); err != nil {
		return Entry{}, err
	}
	if err := checkKey(key); err != nil {
		return Entry{}, err
	}
	if text == "" {
		return Entry{}, fmt.Errorf("%w: text is required (forget removes a key)", ErrInvalid)
	}
	if len(text) > MaxText || !utf8.ValidString(text) {
		return Entry{}, fmt.Errorf("%w: text must be UTF-8 of at most %d bytes", ErrInvalid, MaxText)
	}
	if err := checkTags(tags); err != nil {
		return Entry{}, err
	}
	act := s.action(a, key, "remember", tags, []byte(text))
	d, governed, err := s.decide(ctx, act)
	if err != nil {
		return Entry{}, err
	}
	masked := false
	if d.Masked != nil {
		text, masked = string(d.Masked), true
	}
	sum := sha256.Sum256([]byte(text))
	e, err := s.cfg.Store.PutMemory(ctx, store.MemoryEntry{Namespace: a.Namespace, Key: key, Text: text, Tags: tags,
		SHA256: hex.EncodeToString(sum[:]), PrincipalID: a.Principal.ID, Agent: a.Agent, RunID: a.RunID,
		CreatedAt: s.cfg.Now().UTC()})
	if err != nil {
		s.audit(ctx, act, "memory.write", govern.AuditError, map[string]any{"error": err.Error()}, governed)
		return Entry{}, storeErr(err)
	}
	s.audit(ctx, act, "memory.write", govern.AuditSuccess, map[string]any{"version": e.Version, "sha256": e.SHA256,
		"size": len(text), "masked": masked, "tags": e.Tags}, governed)
	return entryOf(e), nil
}

// Forget removes key from the actor's memory: a tombstone version (its
// history stays for review; redaction removes values).
func (s *Service) Forget(ctx context.Context, a Actor, key string) (Entry, error) {
	if err := checkNamespace(a.Namespace); err != nil {
		return Entry{}, err
	}
	if err := checkKey(key); err != nil {
		return Entry{}, err
	}
	if _, err := s.cfg.Store.GetMemory(ctx, a.Namespace, key); err != nil {
		return Entry{}, storeErr(err)
	}
	act := s.action(a, key, "forget", nil, nil)
	_, governed, err := s.decide(ctx, act)
	if err != nil {
		return Entry{}, err
	}
	e, err := s.cfg.Store.PutMemory(ctx, store.MemoryEntry{Namespace: a.Namespace, Key: key, Forgotten: true,
		PrincipalID: a.Principal.ID, Agent: a.Agent, RunID: a.RunID, CreatedAt: s.cfg.Now().UTC()})
	if err != nil {
		s.audit(ctx, act, "memory.forget", govern.AuditError, map[string]any{"error": err.Error()}, governed)
		return Entry{}, storeErr(err)
	}
	s.audit(ctx, act, "memory.forget", govern.AuditSuccess, map[string]any{"version": e.Version}, governed)
	return entryOf(e), nil
}

func (s *Service) action(a Actor, key, op string, tags []string, text []byte) *govern.Action {
	act := &govern.Action{Kind: govern.KindMemoryWrite, Surface: govern.SurfaceMCP, Principal: a.Principal,
		RequestID: newRequestID(), RunID: a.RunID,
		Memory: &govern.MemoryWrite{Namespace: a.Namespace, Key: key, Op: op, Tags: tags, Size: int64(len(text))}}
	if a.Agent != "" {
		act.Agent = &govern.Agent{Name: a.Agent, Owner: a.Principal.Owner}
	}
	if text != nil {
		act.Payload = &govern.Payload{Body: text}
	}
	return act
}

// decide runs the engine on a write; a refusal is audited and returned.
func (s *Service) decide(ctx context.Context, act *govern.Action) (govern.Decision, []govern.Decided, error) {
	if s.cfg.Govern == nil {
		return govern.Decision{Outcome: govern.Allow}, nil, nil
	}
	d, err := s.cfg.Govern.Decide(ctx, act)
	governed := []govern.Decided{{Action: act, Decision: d}}
	name := "memory.write"
	if act.Memory.Op == "forget" {
		name = "memory.forget"
	}
	if err != nil {
		s.audit(ctx, act, name, govern.AuditError, map[string]any{"error": err.Error()}, governed)
		return d, nil, fmt.Errorf("memory: decide the write: %w", err)
	}
	if err := d.Err(); err != nil {
		s.audit(ctx, act, name, govern.AuditDenied, nil, governed)
		return d, nil, err
	}
	return d, governed, nil
}

func (s *Service) audit(ctx context.Context, act *govern.Action, name, outcome string, detail map[string]any, governed []govern.Decided) {
	if s.cfg.Audit == nil {
		return
	}
	if detail == nil {
		detail = map[string]any{}
	}
	detail["namespace"], detail["key"] = act.Memory.Namespace, act.Memory.Key
	if act.RunID != "" {
		detail["run_id"] = act.RunID
	}
	_ = s.cfg.Audit.Write(ctx, govern.AuditEvent{RequestID: act.RequestID, Principal: act.Principal.ID, Name: name,
		Target: "memory:" + act.Memory.Namespace + "/" + act.Memory.Key, Outcome: outcome, Detail: detail, Governed: governed})
}

// Get returns the latest version of a key.
func (s *Service) Get(ctx context.Context, ns, key string) (Entry, error) {
	if err := checkNamespace(ns); err != nil {
		return Entry{}, err
	}
	e, err := s.cfg.Store.GetMemory(ctx, ns, key)
	if err != nil {
		return Entry{}, storeErr(err)
	}
	return entryOf(e), nil
}

// History returns every version of a key, oldest first.
func (s *Service) History(ctx context.Context, ns, key string) ([]Entry, error) {
	if err := checkNamespace(ns); err != nil {
		return nil, err
	}
	h, err := s.cfg.Store.MemoryHistory(ctx, ns, key)
	if err != nil {
		return nil, storeErr(err)
	}
	return entriesOf(h), nil
}

// List returns the live keys of a namespace.
func (s *Service) List(ctx context.Context, ns string, f store.MemoryFilter) ([]Entry, error) {
	if err := checkNamespace(ns); err != nil {
		return nil, err
	}
	l, err := s.cfg.Store.ListMemory(ctx, ns, f)
	if err != nil {
		return nil, storeErr(err)
	}
	return entriesOf(l), nil
}

// Recall searches a namespace's live entries, best match first.
func (s *Service) Recall(ctx context.Context, ns, query string, f store.MemoryFilter) ([]Entry, error) {
	if err := checkNamespace(ns); err != nil {
		return nil, err
	}
	if len(query) > 1024 {
		return nil, fmt.Errorf("%w: query over 1024 bytes", ErrInvalid)
	}
	l, err := s.cfg.Store.SearchMemory(ctx, ns, query, f)
	if err != nil {
		return nil, storeErr(err)
	}
	return entriesOf(l), nil
}

// Diff is the difference between two versions of a key.
type Diff struct {
	Key     string `json:"key"`
	From    int64  `json:"from"`
	To      int64  `json:"to"`
	Unified string `json:"unified"`
}

// Diff compares two versions of a key (to 0: the latest; from 0: the one
// before to).
func (s *Service) Diff(ctx context.Context, ns, key string, from, to int64) (Diff, error) {
	h, err := s.History(ctx, ns, key)
	if err != nil {
		return Diff{}, err
	}
	if to == 0 {
		to = h[len(h)-1].Version
	}
	if from == 0 {
		from = to - 1
	}
	find := func(v int64) (Entry, bool) {
		for _, e := range h {
			if e.Version == v {
				return e, true
			}
		}
		return Entry{}, v == 0
	}
	a, okA := find(from)
	b, okB := find(to)
	if !okA || !okB {
		return Diff{}, fmt.Errorf("%w: %s has versions 1 to %d", ErrNotFound, key, h[len(h)-1].Version)
	}
	return Diff{Key: key, From: from, To: to, Unified: unified(fmt.Sprintf("%s@%d", key, from), fmt.Sprintf("%s@%d", key, to),
		a.Text, b.Text)}, nil
}

// Redact removes the text of one version of a key (version > 0) or of all
// its versions (0) from the store and its history, and audits that by did
// so (never the text). It returns how many versions it redacted.
func (s *Service) Redact(ctx context.Context, ns, key string, version int64, by govern.Principal, reason string) (int, error) {
	if err := checkNamespace(ns); err != nil {
		return 0, err
	}
	if len(reason) > 1024 {
		return 0, fmt.Errorf("%w: reason over 1024 bytes", ErrInvalid)
	}
	n, err := s.cfg.Store.RedactMemory(ctx, ns, key, version, by.ID, reason, s.cfg.Now().UTC())
	if err != nil {
		return 0, storeErr(err)
	}
	if s.cfg.Audit != nil {
		_ = s.cfg.Audit.Write(ctx, govern.AuditEvent{RequestID: newRequestID(), Principal: by.ID, Name: "memory.redact",
			Target: "memory:" + ns + "/" + key, Outcome: govern.AuditSuccess,
			Detail: map[string]any{"namespace": ns, "key": key, "version": version, "versions_redacted": n, "reason": reason}})
	}
	return n, nil
}

// Export writes every version of every key of a namespace as JSON lines
// (Entry), ordered by key and version.
func (s *Service) Export(ctx context.Context, ns string, w io.Writer) error {
	if err := checkNamespace(ns); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	return s.cfg.Store.ExportMemory(ctx, ns, func(e store.MemoryEntry) error {
		return enc.Encode(entryOf(e))
	})
}
