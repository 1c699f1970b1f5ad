// Package auth authenticates API callers: principals (users and agents),
// their API keys and the scopes the keys carry.
//
// A key looks like wdn_<id>_<secret> (see Key). Only the SHA-256 of the
// secret is stored; the whole key is shown once, when it is issued.
// Authenticate reads the key from the store on every call, so a revoked
// key is refused from the next request on: there is no cache to outlive a
// revocation. The key's last-used time is written at most once per
// TouchInterval per key, so authentication normally costs two indexed
// reads and no write.
//
// On first start Bootstrap creates the "admin" user with an admin key and
// writes the key to a 0600 file.
package auth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/telemetry"
)

// Errors of Authenticate. All of them wrap ErrUnauthenticated (HTTP 401),
// of kind Unauthenticated (internal/errkind); the message given to the
// caller does not say which one it was.
var (
	ErrUnauthenticated = errkind.New(errkind.Unauthenticated, "unauthenticated")
	ErrNoCredentials   = fmt.Errorf("%w: no api key", ErrUnauthenticated)
	ErrMalformed       = fmt.Errorf("%w: malformed api key", ErrUnauthenticated)
	// ErrInvalidKey: no key with that ID, or the secret does not match.
	ErrInvalidKey = fmt.Errorf("%w: invalid api key", ErrUnauthenticated)
	// ErrRevoked: the key was revoked. Only returned to callers that
	// present the right secret.
	ErrRevoked = fmt.Errorf("%w: api key revoked", ErrUnauthenticated)
)

// ErrHumanOnlyScope refuses a key for an agent principal that would carry
// a human-only scope (Scope.HumanOnly).
var ErrHumanOnlyScope = errkind.New(errkind.Forbidden, "policies:write, approvals:decide and mcp:admin are never granted to an agent's key")

// Identity is an authenticated caller: the principal and the key it used.
type Identity struct {
	Principal store.Principal
	Key       store.APIKey // never carries the secret
	Scopes    []Scope
}

// Has reports whether the identity holds scope s. ScopeAdmin implies
// every scope, except that an agent principal never holds a human-only
// scope (Scope.HumanOnly), whatever its key says.
func (id Identity) Has(s Scope) bool {
	if s.HumanOnly() && id.Principal.Kind == store.PrincipalAgent {
		return false
	}
	return slices.Contains(id.Scopes, s) || slices.Contains(id.Scopes, ScopeAdmin)
}

// CanAccessSandbox reports whether the identity may act on a sandbox owned
// by the given principal: its own, or anyone's with ScopeSandboxesAll (or
// ScopeAdmin). The operation's own scope (sandboxes:exec ...) is checked
// separately with Has.
func (id Identity) CanAccessSandbox(owner string) bool {
	return (owner != "" && owner == id.Principal.ID) || id.Has(ScopeSandboxesAll)
}

// DefaultTouchInterval is how often a key's last-used time is written.
const DefaultTouchInterval = time.Minute

// Authenticator checks API keys against a store and issues new ones.
type Authenticator struct {
	st            store.Store
	now           func() time.Time
	touchInterval time.Duration

	mu      sync.Mutex
	touched map[string]time.Time // key ID -> last last-used write by us
	// principals caches principals by id: they never change once created
	// (a key whose principal is deleted goes with it, and the key is read
	// on every call, so revocation still takes effect at once).
	principals map[string]store.Principal
}

// Option configures an Authenticator.
type Option func(*Authenticator)

// WithClock sets the clock (tests).
func WithClock(now func() time.Time) Option { return func(a *Authenticator) { a.now = now } }

// WithTouchInterval sets how often last-used times are written.
func WithTouchInterval(d time.Duration) Option {
	return func(a *Authenticator) { a.touchInterval = d }
}

// New returns an Authenticator over st.
func New(st store.Store, opts ...Option) *Authenticator {
	a := &Authenticator{st: st, now: time.Now, touchInterval: DefaultTouchInterval, touched: map[string]time.Time{},
		principals: map[string]store.Principal{}}
	for _, o := range opts {
		o(a)
	}
	return a
}

// Authenticate checks the Authorization header value and returns the
// caller's identity. Errors wrap ErrUnauthenticated, except store failures,
// which do not (HTTP 500/503, not 401).
func (a *Authenticator) Authenticate(ctx context.Context, header string) (Identity, error) {
	key, err := ParseAuthorization(header)
	if err != nil {
		return Identity{}, err
	}
	rec, err := a.st.GetKeyByID(ctx, key.ID)
	if errors.Is(err, store.ErrNotFound) {
		// Spend the same hashing work as for a known key.
		matchHash(key.Secret, "")
		return Identity{}, ErrInvalidKey
	}
	if err != nil {
		return Identity{}, fmt.Errorf("authenticate: %w", err)
	}
	if !matchHash(key.Secret, rec.Hash) {
		return Identity{}, ErrInvalidKey
	}
	if !rec.RevokedAt.IsZero() {
		return Identity{}, ErrRevoked
	}
	a.mu.Lock()
	p, ok := a.principals[rec.PrincipalID]
	a.mu.Unlock()
	if !ok {
		if p, err = a.st.GetPrincipal(ctx, rec.PrincipalID); err != nil {
			return Identity{}, fmt.Errorf("authenticate: key %s: %w", rec.ID, err)
		}
		a.mu.Lock()
		if len(a.principals) > 10000 {
			clear(a.principals)
		}
		a.principals[p.ID] = p
		a.mu.Unlock()
	}
	a.touch(ctx, rec)
	telemetry.SetPrincipal(ctx, p.ID) // on the request's span (docs/tracing.md)
	scopes := make([]Scope, len(rec.Scopes))
	for i, s := range rec.Scopes {
		scopes[i] = Scope(s)
	}
	return Identity{Principal: p, Key: rec, Scopes: scopes}, nil
}

// touch writes the key's last-used time if neither the stored value nor
// our own last write is within the touch interval. A failed write is not
// an authentication failure; it is retried after the interval.
func (a *Authenticator) touch(ctx context.Context, k store.APIKey) {
	now := a.now()
	a.mu.Lock()
	last := a.touched[k.ID]
	if k.LastUsedAt.After(last) {
		last = k.LastUsedAt
	}
	if now.Sub(last) < a.touchInterval {
		a.mu.Unlock()
		return
	}
	a.touched[k.ID] = now
	a.mu.Unlock()
	_ = a.st.TouchKey(ctx, k.ID, now)
}

// CreatePrincipal creates a principal of the given kind
// (store.PrincipalUser or store.PrincipalAgent) with a new ID "pr-...".
// createdBy is the creating principal's ID ("" only for bootstrap).
func (a *Authenticator) CreatePrincipal(ctx context.Context, kind, name, createdBy string) (store.Principal, error) {
	p, err := newPrincipal(kind, name, createdBy, a.now())
	if err != nil {
		return store.Principal{}, err
	}
	if err := a.st.CreatePrincipal(ctx, p); err != nil {
		return store.Principal{}, fmt.Errorf("create principal: %w", err)
	}
	return p, nil
}

// IssueKey creates a key for the principal and returns it in wire form
// together with its stored record. The wire form is not kept anywhere:
// show it once.
func (a *Authenticator) IssueKey(ctx context.Context, principalID, name string, scopes []Scope) (string, store.APIKey, error) {
	for _, s := range scopes {
		if !s.Valid() {
			return "", store.APIKey{}, fmt.Errorf("issue api key: unknown scope %q", s)
		}
	}
	if slices.ContainsFunc(scopes, Scope.HumanOnly) {
		p, err := a.st.GetPrincipal(ctx, principalID)
		if err != nil {
			return "", store.APIKey{}, fmt.Errorf("issue api key: %w", err)
		}
		if p.Kind == store.PrincipalAgent {
			return "", store.APIKey{}, fmt.Errorf("issue api key: %w", ErrHumanOnlyScope)
		}
	}
	// An 8-character ID leaves room for rare collisions: retry.
	for range 5 {
		k, rec, err := newKey(principalID, name, scopes, a.now())
		if err != nil {
			return "", store.APIKey{}, fmt.Errorf("issue api key: %w", err)
		}
		err = a.st.CreateKey(ctx, rec)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return "", store.APIKey{}, fmt.Errorf("issue api key: %w", err)
		}
		return k.String(), rec, nil
	}
	return "", store.APIKey{}, errors.New("issue api key: no free key id after 5 tries")
}

// RevokeKey revokes a key. It takes effect at the next Authenticate.
func (a *Authenticator) RevokeKey(ctx context.Context, id string) (store.APIKey, error) {
	k, err := a.st.RevokeKey(ctx, id, a.now())
	if err != nil {
		return store.APIKey{}, fmt.Errorf("revoke api key: %w", err)
	}
	return k, nil
}

// CheckKey reports whether the key with this ID may still act: nil when
// it exists, is not revoked and its principal exists; an error wrapping
// ErrInvalidKey or ErrRevoked when not; a store failure otherwise. Like
// Authenticate it reads the store on every call (no cache), so credentials
// derived from a key (E2B envd tokens) die with it at once.
func (a *Authenticator) CheckKey(ctx context.Context, id string) error {
	if id == "" {
		return ErrInvalidKey
	}
	rec, err := a.st.GetKeyByID(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return ErrInvalidKey
	}
	if err != nil {
		return fmt.Errorf("check key: %w", err)
	}
	if !rec.RevokedAt.IsZero() {
		return ErrRevoked
	}
	if _, err := a.st.GetPrincipal(ctx, rec.PrincipalID); errors.Is(err, store.ErrNotFound) {
		return ErrInvalidKey
	} else if err != nil {
		return fmt.Errorf("check key: %w", err)
	}
	return nil
}

func newPrincipal(kind, name, createdBy string, now time.Time) (store.Principal, error) {
	if kind != store.PrincipalUser && kind != store.PrincipalAgent {
		return store.Principal{}, fmt.Errorf("create principal: kind %q: want user or agent", kind)
	}
	if name == "" {
		return store.Principal{}, errors.New("create principal: empty name")
	}
	id, err := randomString(idAlphabet, 16)
	if err != nil {
		return store.Principal{}, fmt.Errorf("create principal: %w", err)
	}
	return store.Principal{ID: "pr-" + id, Kind: kind, Name: name, CreatedBy: createdBy, CreatedAt: now}, nil
}

func newKey(principalID, name string, scopes []Scope, now time.Time) (Key, store.APIKey, error) {
	k, err := GenerateKey()
	if err != nil {
		return Key{}, store.APIKey{}, err
	}
	return k, store.APIKey{
		ID: k.ID, PrincipalID: principalID, Name: name, Prefix: k.Prefix(), Hash: k.Hash(),
		Scopes: scopeStrings(scopes), CreatedAt: now,
	}, nil
}
