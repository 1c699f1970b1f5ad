// Package secrets is Warden's store of brokered credentials: secret values
// (API keys) encrypted at rest, and grants that let a sandbox, or every
// sandbox of an agent principal, use a secret against named hosts without
// ever seeing it. Inside the sandbox only a placeholder exists; the broker
// (internal/broker) swaps it for the value on the way out.
//
// Values are sealed with AES-256-GCM under a key kept in its own file
// (LoadOrCreateKey), each version with a random nonce and the secret id and
// version number as additional data, so ciphertexts cannot be moved between
// rows. Nothing here logs; no read method but Current and ReadVersion
// returns a value.
package secrets

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"net/textproto"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Files under the daemon's state directory (see Open).
const (
	KeyFile  = "secrets.key"
	DataFile = "secrets.json"
)

// Limits and defaults.
const (
	// MinValueLen is the shortest value accepted: the broker replaces every
	// occurrence of a value in responses, which for a very short value would
	// mangle unrelated bytes.
	MinValueLen = 8
	// MaxValueLen is the longest value accepted.
	MaxValueLen = 16 << 10
	// MaxHosts is the most hosts one grant may name.
	MaxHosts = 64
	// DefaultHeader is the header a grant substitutes in when none is named.
	DefaultHeader = "Authorization"
	// PlaceholderPrefix starts every placeholder; 32 base32 characters
	// (160 random bits) follow.
	PlaceholderPrefix = "warden-ph-"
)

// Errors.
var (
	ErrNotFound = errors.New("secrets: not found")
	ErrRevoked  = errors.New("secrets: revoked")
	ErrInvalid  = errors.New("secrets: invalid")
	ErrDecrypt  = errors.New("secrets: ciphertext does not decrypt under this key (wrong key, or tampered or swapped data)")
	ErrWrongKey = errors.New("secrets: the key does not match the one the store was written with")
)

// Secret is a secret's metadata. It never holds the value.
type Secret struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Owner   string    `json:"owner"`
	Created time.Time `json:"created"`
	// Current is the version new requests use (the newest).
	Current int `json:"current_version"`
	// Revoked reports whether the current version is revoked, so the secret
	// is not usable until the next Put.
	Revoked  bool          `json:"revoked"`
	Versions []VersionInfo `json:"versions"`
}

// VersionInfo describes one version of a secret.
type VersionInfo struct {
	Version int       `json:"version"`
	Created time.Time `json:"created"`
	Revoked bool      `json:"revoked"`
	// Fingerprint is "sha256:" and the first 16 hex digits of the value's
	// SHA-256, to tell versions apart and compare with a known key. (An
	// unsalted hash: for a guessable, low-entropy value it allows an offline
	// guess; API keys are not guessable.)
	Fingerprint string `json:"fingerprint"`
}

// Grant lets a sandbox (Sandbox), or every sandbox of an agent principal
// (Principal), use a secret: in requests to Hosts (exact names or
// "*.example.com" for every name below example.com) whose path starts with
// PathPrefix (if set), the broker replaces Placeholder with the secret's
// current value in the Header header (only there). EnvName, if set, is the
// environment variable through which the sandbox learns the placeholder.
type Grant struct {
	ID          string    `json:"id"`
	SecretID    string    `json:"secret_id"`
	Sandbox     string    `json:"sandbox,omitempty"`
	Principal   string    `json:"principal,omitempty"`
	Hosts       []string  `json:"hosts"`
	Header      string    `json:"header"`
	PathPrefix  string    `json:"path_prefix,omitempty"`
	EnvName     string    `json:"env_name,omitempty"`
	Placeholder string    `json:"placeholder"`
	Created     time.Time `json:"created"`
	Revoked     bool      `json:"revoked,omitempty"`
	// Format is how the placeholder sits in the header: "" (as is) or
	// FormatBasic (inside the base64 credentials of "Basic ...", as git
	// and other HTTP Basic clients send a token; see format.go).
	Format string `json:"format,omitempty"`
	// Middleware, instead of a sandbox or a principal, lets the middleware
	// of that name read the secret (secrets.NAME in its script, when its
	// definition lists NAME); Hosts are then optional and bound the hosts
	// its fetch may send the value to. Header, PathPrefix and EnvName do
	// not apply.
	Middleware string `json:"middleware,omitempty"`
	// ManagedBy names what keeps a sandbox grant in step with a
	// definition ("agent:NAME": a hosted agent's spec secrets,
	// SyncSandboxGrants); "" for grants made through the API.
	ManagedBy string `json:"managed_by,omitempty"`
}

// CoversHost reports whether one of g's hosts matches host (normalised
// with NormalizeHost by the caller, or raw: it is normalised here).
func (g *Grant) CoversHost(host string) bool {
	h, ok := NormalizeHost(host)
	if !ok {
		return false
	}
	for _, p := range g.Hosts {
		if MatchHost(p, h) {
			return true
		}
	}
	return false
}

// CoversPath reports whether path (an origin-form request path, with or
// without a query) falls under g's PathPrefix. Without a prefix every path
// does. With one, a path holding dot segments or encoded dots, slashes or
// backslashes never does: the upstream could resolve it outside the prefix.
func (g *Grant) CoversPath(path string) bool {
	if g.PathPrefix == "" {
		return true
	}
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	if !cleanPath(path) {
		return false
	}
	p := g.PathPrefix
	if !strings.HasPrefix(path, p) {
		return false
	}
	return len(path) == len(p) || strings.HasSuffix(p, "/") || path[len(p)] == '/'
}

func cleanPath(path string) bool {
	if !strings.HasPrefix(path, "/") || strings.Contains(path, "\\") || strings.Contains(path, "//") {
		return false
	}
	l := strings.ToLower(path)
	if strings.Contains(l, "%2e") || strings.Contains(l, "%2f") || strings.Contains(l, "%5c") || strings.Contains(l, "%25") {
		return false
	}
	for seg := range strings.SplitSeq(path[1:], "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// Vault holds secrets and grants. It is safe for concurrent use; every
// change is saved to its Store before it takes effect.
type Vault struct {
	aead  cipher.AEAD
	store Store
	now   func() time.Time

	mu sync.RWMutex
	st *State
}

// Open opens the vault of a state directory: the key in KeyFile (created on
// first use) and the state in DataFile.
func Open(stateDir string) (*Vault, error) {
	key, err := LoadOrCreateKey(filepath.Join(stateDir, KeyFile))
	if err != nil {
		return nil, err
	}
	return New(key, NewFileStore(filepath.Join(stateDir, DataFile)))
}

// New returns a vault sealing values with key (KeySize bytes) and persisting
// to st. It fails with ErrWrongKey if st was written under another key.
func New(key []byte, st Store) (*Vault, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("%w: key of %d bytes, want %d", ErrInvalid, len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	s, err := st.Load()
	if err != nil {
		return nil, err
	}
	v := &Vault{aead: aead, store: st, now: time.Now, st: s}
	if s.Format == 0 {
		s.Format = StateFormat
	}
	if len(s.KeyCheck) > 0 {
		if !v.checkKey(s.KeyCheck) {
			return nil, ErrWrongKey
		}
	}
	return v, nil
}

var keyCheckAAD = []byte("warden-secrets key-check v1")

func (v *Vault) makeKeyCheck() []byte {
	nonce := make([]byte, v.aead.NonceSize())
	rand.Read(nonce)
	return v.aead.Seal(nonce, nonce, nil, keyCheckAAD)
}

func (v *Vault) checkKey(kc []byte) bool {
	n := v.aead.NonceSize()
	if len(kc) < n {
		return false
	}
	_, err := v.aead.Open(nil, kc[:n], kc[n:], keyCheckAAD)
	return err == nil
}

func aad(id string, version int) []byte {
	return []byte("warden-secret v1\x00" + id + "\x00" + strconv.Itoa(version))
}

func (v *Vault) seal(id string, version int, value []byte) (nonce, ct []byte) {
	nonce = make([]byte, v.aead.NonceSize())
	rand.Read(nonce)
	return nonce, v.aead.Seal(nil, nonce, value, aad(id, version))
}

func (v *Vault) open(id string, sv *SealedVersion) ([]byte, error) {
	if len(sv.Nonce) != v.aead.NonceSize() {
		return nil, ErrDecrypt
	}
	pt, err := v.aead.Open(nil, sv.Nonce, sv.Ciphertext, aad(id, sv.Version))
	if err != nil {
		return nil, ErrDecrypt
	}
	return pt, nil
}

// update applies fn to a copy of the state, saves the copy and, if that
// succeeds, makes it current. The caller holds v.mu.
func (v *Vault) update(fn func(s *State) error) error {
	s := v.st.clone()
	if err := fn(s); err != nil {
		return err
	}
	if len(s.KeyCheck) == 0 {
		s.KeyCheck = v.makeKeyCheck()
	}
	if err := v.store.Save(s); err != nil {
		return err
	}
	v.st = s
	return nil
}

func fingerprint(value []byte) string {
	sum := sha256.Sum256(value)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

func checkValue(value []byte) error {
	if len(value) < MinValueLen || len(value) > MaxValueLen {
		return fmt.Errorf("%w: a value must be %d to %d bytes", ErrInvalid, MinValueLen, MaxValueLen)
	}
	for _, c := range value {
		// The value goes into an HTTP header: no control characters (CR and
		// LF would let it inject headers), tabs and spaces are fine.
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return fmt.Errorf("%w: a value must not hold control characters", ErrInvalid)
		}
	}
	if bytes.Contains(value, []byte(PlaceholderPrefix)) {
		return fmt.Errorf("%w: a value must not contain %q", ErrInvalid, PlaceholderPrefix)
	}
	return nil
}

func checkName(name string) error {
	if name == "" || len(name) > 128 {
		return fmt.Errorf("%w: a name must be 1 to 128 characters", ErrInvalid)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Errorf("%w: name %q: letters, digits, '_', '-' and '.' only", ErrInvalid, name)
		}
	}
	return nil
}

func newID(prefix string) string {
	b := make([]byte, 10)
	rand.Read(b)
	return prefix + strings.ToLower(base32.StdEncoding.EncodeToString(b))
}

// NewPlaceholder returns a fresh placeholder: PlaceholderPrefix and 32
// random base32 characters.
func NewPlaceholder() string {
	b := make([]byte, 20)
	rand.Read(b)
	return PlaceholderPrefix + strings.ToLower(base32.StdEncoding.EncodeToString(b))
}

func (s *State) secret(id string) *Record {
	for i := range s.Secrets {
		if s.Secrets[i].ID == id {
			return &s.Secrets[i]
		}
	}
	return nil
}

func (s *State) grant(id string) *Grant {
	for i := range s.Grants {
		if s.Grants[i].ID == id {
			return &s.Grants[i]
		}
	}
	return nil
}

func meta(r *Record) Secret {
	s := Secret{ID: r.ID, Name: r.Name, Owner: r.Owner, Created: r.Created}
	for _, v := range r.Versions {
		s.Versions = append(s.Versions, VersionInfo{Version: v.Version, Created: v.Created, Revoked: v.Revoked, Fingerprint: v.Fingerprint})
	}
	if n := len(r.Versions); n > 0 {
		s.Current = r.Versions[n-1].Version
		s.Revoked = r.Versions[n-1].Revoked
	}
	return s
}

// Put stores value as the secret name of owner: a new secret, or a new
// version of the existing one (rotation). After rotation only the new
// version is used for requests; older ones stay readable by ReadVersion.
// Putting a revoked secret rotates it to a fresh, usable version.
func (v *Vault) Put(name, owner string, value []byte) (Secret, error) {
	if err := checkName(name); err != nil {
		return Secret{}, err
	}
	if owner == "" {
		return Secret{}, fmt.Errorf("%w: empty owner", ErrInvalid)
	}
	if err := checkValue(value); err != nil {
		return Secret{}, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	var out Secret
	err := v.update(func(s *State) error {
		now := v.now().UTC()
		var r *Record
		for i := range s.Secrets {
			if s.Secrets[i].Owner == owner && s.Secrets[i].Name == name {
				r = &s.Secrets[i]
			}
		}
		if r == nil {
			s.Secrets = append(s.Secrets, Record{ID: newID("sec-"), Name: name, Owner: owner, Created: now})
			r = &s.Secrets[len(s.Secrets)-1]
		}
		ver := 1
		if n := len(r.Versions); n > 0 {
			ver = r.Versions[n-1].Version + 1
		}
		nonce, ct := v.seal(r.ID, ver, value)
		r.Versions = append(r.Versions, SealedVersion{Version: ver, Created: now, Fingerprint: fingerprint(value), Nonce: nonce, Ciphertext: ct})
		out = meta(r)
		return nil
	})
	return out, err
}

// Get returns a secret's metadata.
func (v *Vault) Get(id string) (Secret, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	r := v.st.secret(id)
	if r == nil {
		return Secret{}, ErrNotFound
	}
	return meta(r), nil
}

// Lookup returns the metadata of owner's secret called name.
func (v *Vault) Lookup(owner, name string) (Secret, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for i := range v.st.Secrets {
		if r := &v.st.Secrets[i]; r.Owner == owner && r.Name == name {
			return meta(r), nil
		}
	}
	return Secret{}, ErrNotFound
}

// List returns the metadata of owner's secrets (every secret for ""),
// ordered by name.
func (v *Vault) List(owner string) []Secret {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []Secret
	for i := range v.st.Secrets {
		if r := &v.st.Secrets[i]; owner == "" || r.Owner == owner {
			out = append(out, meta(r))
		}
	}
	slices.SortFunc(out, func(a, b Secret) int {
		return strings.Compare(a.Owner+"\x00"+a.Name, b.Owner+"\x00"+b.Name)
	})
	return out
}

// Revoke revokes every version of a secret: no request uses it from the
// next one on, until a Put stores a new version.
func (v *Vault) Revoke(id string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.update(func(s *State) error {
		r := s.secret(id)
		if r == nil {
			return ErrNotFound
		}
		for i := range r.Versions {
			r.Versions[i].Revoked = true
		}
		return nil
	})
}

// Delete removes a secret, all its versions and its grants.
func (v *Vault) Delete(id string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.update(func(s *State) error {
		i := slices.IndexFunc(s.Secrets, func(r Record) bool { return r.ID == id })
		if i < 0 {
			return ErrNotFound
		}
		s.Secrets = slices.Delete(s.Secrets, i, i+1)
		s.Grants = slices.DeleteFunc(s.Grants, func(g Grant) bool { return g.SecretID == id })
		return nil
	})
}

// Current returns the value and number of the version requests use: the
// newest. It fails with ErrRevoked if that version is revoked (older
// versions are never used instead) and ErrDecrypt if it does not decrypt.
func (v *Vault) Current(id string) ([]byte, int, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	r := v.st.secret(id)
	if r == nil || len(r.Versions) == 0 {
		return nil, 0, ErrNotFound
	}
	sv := &r.Versions[len(r.Versions)-1]
	if sv.Revoked {
		return nil, sv.Version, ErrRevoked
	}
	pt, err := v.open(r.ID, sv)
	return pt, sv.Version, err
}

// ReadVersion returns the value of one version of a secret, revoked or not:
// an audit operation for the secret's owner or an operator, never for a
// sandbox.
func (v *Vault) ReadVersion(id string, version int) ([]byte, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	r := v.st.secret(id)
	if r == nil {
		return nil, ErrNotFound
	}
	for i := range r.Versions {
		if r.Versions[i].Version == version {
			return v.open(r.ID, &r.Versions[i])
		}
	}
	return nil, ErrNotFound
}

// CreateGrant stores a grant. The caller sets SecretID, exactly one of
// Sandbox and Principal, Hosts, and optionally Header (default
// DefaultHeader), PathPrefix and EnvName; ID, Placeholder and Created are
// generated. Hosts are normalised (lowercase, no trailing dot). Checking
// that the caller may use the secret and address the sandbox or principal
// is the API's job.
func (v *Vault) CreateGrant(g Grant) (Grant, error) {
	g, err := normalizeGrant(g)
	if err != nil {
		return Grant{}, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	err = v.update(func(s *State) error {
		if s.secret(g.SecretID) == nil {
			return fmt.Errorf("%w: secret %q", ErrNotFound, g.SecretID)
		}
		g.ID = newID("grt-")
		g.Placeholder = NewPlaceholder()
		g.Created = v.now().UTC()
		g.Revoked = false
		s.Grants = append(s.Grants, g)
		return nil
	})
	if err != nil {
		return Grant{}, err
	}
	return cloneGrant(g), nil
}

// hop-by-hop and framing headers a grant may not substitute in.
var forbiddenHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Keep-Alive": true, "Upgrade": true, "Te": true, "Trailer": true, "Expect": true,
	"Proxy-Connection": true, "Content-Encoding": true, "Accept-Encoding": true,
}

func normalizeGrant(g Grant) (Grant, error) {
	bad := func(format string, a ...any) (Grant, error) {
		return Grant{}, fmt.Errorf("%w: grant: "+format, append([]any{ErrInvalid}, a...)...)
	}
	if g.SecretID == "" {
		return bad("no secret")
	}
	set := 0
	for _, x := range []string{g.Sandbox, g.Principal, g.Middleware} {
		if x != "" {
			set++
		}
	}
	if set != 1 {
		return bad("set exactly one of sandbox, principal and middleware")
	}
	if g.Format != "" && g.Format != FormatBasic {
		return bad("format %q: \"\" or %q", g.Format, FormatBasic)
	}
	if g.Middleware != "" {
		if g.Header != "" || g.PathPrefix != "" || g.EnvName != "" || g.Format != "" {
			return bad("header, path prefix, env name and format do not apply to a middleware grant")
		}
		if len(g.Hosts) > MaxHosts {
			return bad("name at most %d hosts", MaxHosts)
		}
	} else if len(g.Hosts) == 0 || len(g.Hosts) > MaxHosts {
		return bad("name 1 to %d hosts", MaxHosts)
	}
	hosts := make([]string, 0, len(g.Hosts))
	for _, h := range g.Hosts {
		n, err := normalizePattern(h)
		if err != nil {
			return bad("%v", err)
		}
		hosts = append(hosts, n)
	}
	slices.Sort(hosts)
	g.Hosts = slices.Compact(hosts)
	if g.Middleware != "" {
		return g, nil
	}
	if g.Header == "" {
		g.Header = DefaultHeader
	}
	if !validToken(g.Header) {
		return bad("header %q is not a header name", g.Header)
	}
	g.Header = textproto.CanonicalMIMEHeaderKey(g.Header)
	if forbiddenHeaders[g.Header] || strings.HasPrefix(g.Header, "Proxy-") && g.Header != "Proxy-Authorization" {
		return bad("header %q cannot carry a secret", g.Header)
	}
	if g.PathPrefix != "" {
		if len(g.PathPrefix) > 1024 || !cleanPath(g.PathPrefix) || strings.ContainsAny(g.PathPrefix, "?# \t") {
			return bad("path prefix %q: an absolute path without dot segments, query or escapes", g.PathPrefix)
		}
	}
	if g.EnvName != "" && !validEnvName(g.EnvName) {
		return bad("env name %q: letters, digits and '_', not starting with a digit", g.EnvName)
	}
	return g, nil
}

func validToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func validEnvName(s string) bool {
	if s == "" || len(s) > 128 || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func cloneGrant(g Grant) Grant {
	g.Hosts = slices.Clone(g.Hosts)
	return g
}

// RevokeGrant revokes a grant; the broker stops substituting from the next
// request on, on open connections too.
func (v *Vault) RevokeGrant(id string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.update(func(s *State) error {
		g := s.grant(id)
		if g == nil {
			return ErrNotFound
		}
		g.Revoked = true
		return nil
	})
}

// GetGrant returns a grant, revoked or not.
func (v *Vault) GetGrant(id string) (Grant, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	g := v.st.grant(id)
	if g == nil {
		return Grant{}, ErrNotFound
	}
	return cloneGrant(*g), nil
}

// ListGrants returns the grants, revoked ones included, of one secret
// (every grant for "").
func (v *Vault) ListGrants(secretID string) []Grant {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []Grant
	for _, g := range v.st.Grants {
		if secretID == "" || g.SecretID == secretID {
			out = append(out, cloneGrant(g))
		}
	}
	return out
}

// PurgeSandbox removes the grants made to one sandbox (call it when the
// sandbox is deleted). Principal-wide grants stay.
func (v *Vault) PurgeSandbox(sandboxID string) error {
	if sandboxID == "" {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !slices.ContainsFunc(v.st.Grants, func(g Grant) bool { return g.Sandbox == sandboxID }) {
		return nil
	}
	return v.update(func(s *State) error {
		s.Grants = slices.DeleteFunc(s.Grants, func(g Grant) bool { return g.Sandbox == sandboxID })
		return nil
	})
}

// GrantsFor returns the grants that are not revoked and apply to a sandbox:
// those made to sandboxID and those made to principalID (the agent the
// sandbox belongs to). Principal-wide grants come first, then the sandbox's
// own; each group in creation order.
func (v *Vault) GrantsFor(sandboxID, principalID string) []Grant {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var byPrincipal, bySandbox []Grant
	for _, g := range v.st.Grants {
		if g.Revoked || v.st.secret(g.SecretID) == nil {
			continue
		}
		switch {
		case g.Sandbox != "" && g.Sandbox == sandboxID:
			bySandbox = append(bySandbox, cloneGrant(g))
		case g.Principal != "" && g.Principal == principalID:
			byPrincipal = append(byPrincipal, cloneGrant(g))
		}
	}
	return append(byPrincipal, bySandbox...)
}

// ErrNotGranted: no grant lets the middleware read a secret of that name.
var ErrNotGranted = errors.New("secrets: not granted")

// ForMiddleware returns the current value of the secret called name that a
// grant (not revoked) lets middleware mw read, and that grant's hosts (none:
// any host the middleware may fetch). Where grants of several owners' secrets
// of that name exist, the newest grant wins. It fails with ErrNotGranted
// when none does, ErrRevoked when the secret's current version is revoked.
func (v *Vault) ForMiddleware(mw, name string) ([]byte, []string, error) {
	if mw == "" || name == "" {
		return nil, nil, ErrNotGranted
	}
	v.mu.RLock()
	var secretID string
	var hosts []string
	for _, g := range v.st.Grants {
		if g.Revoked || g.Middleware != mw {
			continue
		}
		if r := v.st.secret(g.SecretID); r != nil && r.Name == name {
			secretID, hosts = r.ID, slices.Clone(g.Hosts)
		}
	}
	v.mu.RUnlock()
	if secretID == "" {
		return nil, nil, ErrNotGranted
	}
	val, _, err := v.Current(secretID)
	if err != nil {
		return nil, nil, err
	}
	return val, hosts, nil
}

// PurgeMiddleware removes the grants made to middleware mw (call it when the
// middleware is removed, so that a new one of that name starts with none).
func (v *Vault) PurgeMiddleware(mw string) error {
	if mw == "" {
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !slices.ContainsFunc(v.st.Grants, func(g Grant) bool { return g.Middleware == mw }) {
		return nil
	}
	return v.update(func(s *State) error {
		s.Grants = slices.DeleteFunc(s.Grants, func(g Grant) bool { return g.Middleware == mw })
		return nil
	})
}

// EnvFor returns the environment variables that tell a sandbox its
// placeholders: EnvName → Placeholder of each grant GrantsFor returns that
// names a variable. Where two grants name the same variable, a sandbox's
// own grant beats a principal-wide one, and a newer one an older one.
func (v *Vault) EnvFor(sandboxID, principalID string) map[string]string {
	env := map[string]string{}
	for _, g := range v.GrantsFor(sandboxID, principalID) {
		if g.EnvName != "" {
			env[g.EnvName] = g.Placeholder
		}
	}
	return env
}

// NormalizeHost lowercases a host name and drops one trailing dot; it
// reports false for anything but a plausible DNS name (labels of 1-63
// letters, digits, '-' and '_'; at most 253 bytes; a last label starting
// with a letter, so no address passes).
func NormalizeHost(s string) (string, bool) {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return "", false
	}
	b := []byte(s)
	start := 0
	for i := 0; i <= len(b); i++ {
		if i == len(b) || b[i] == '.' {
			l := i - start
			if l == 0 || l > 63 || b[start] == '-' || b[i-1] == '-' {
				return "", false
			}
			start = i + 1
			continue
		}
		switch c := b[i]; {
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return "", false
		}
	}
	last := b[bytes.LastIndexByte(b, '.')+1:]
	if last[0] < 'a' || last[0] > 'z' {
		return "", false
	}
	return string(b), true
}

// normalizePattern normalises a grant host: a name, or "*." and a name of
// at least two labels.
func normalizePattern(p string) (string, error) {
	rest, wild := strings.CutPrefix(p, "*.")
	n, ok := NormalizeHost(rest)
	if !ok {
		return "", fmt.Errorf("host %q is not a domain name or *.domain", p)
	}
	if !strings.Contains(n, ".") {
		if wild {
			return "", fmt.Errorf("host %q: a wildcard needs at least two labels after *.", p)
		}
		return "", fmt.Errorf("host %q has a single label: name a fully qualified domain", p)
	}
	if wild {
		return "*." + n, nil
	}
	return n, nil
}

// MatchHost reports whether the normalised host matches pattern: equal to
// it, or, for "*.example.com", any name below example.com (not example.com
// itself).
func MatchHost(pattern, host string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*"); ok {
		return len(host) > len(suffix) && strings.HasSuffix(host, suffix)
	}
	return host == pattern
}
