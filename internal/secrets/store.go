package secrets

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/safefile"
)

// Store persists a Vault's state. Load returns an empty state when nothing
// was saved yet. Save replaces the whole state atomically: after a crash,
// Load returns either the previous or the new state, never a mix. The Vault
// serialises its calls; implementations must still be safe for concurrent
// use.
//
// The state holds ciphertexts only; a Store never sees a secret value.
type Store interface {
	Load() (*State, error)
	Save(*State) error
}

// StateFormat is the version of the persisted state layout.
const StateFormat = 1

// State is everything a Vault persists.
type State struct {
	Format int `json:"format"`
	// KeyCheck is an AES-GCM tag under the vault key (nonce || sealed empty
	// plaintext) that lets Open detect a wrong key before any use.
	KeyCheck []byte   `json:"key_check,omitempty"`
	Secrets  []Record `json:"secrets"`
	Grants   []Grant  `json:"grants"`
}

// Record is a stored secret: metadata and its sealed versions.
type Record struct {
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Owner    string          `json:"owner"`
	Created  time.Time       `json:"created"`
	Versions []SealedVersion `json:"versions"`
}

// SealedVersion is one version of a secret value, encrypted with AES-256-GCM
// under the vault key, AAD bound to the secret id and version number.
type SealedVersion struct {
	Version     int       `json:"version"`
	Created     time.Time `json:"created"`
	Revoked     bool      `json:"revoked,omitempty"`
	Fingerprint string    `json:"fingerprint"`
	Nonce       []byte    `json:"nonce"`
	Ciphertext  []byte    `json:"ciphertext"`
}

// clone returns a deep copy of s (through JSON: the state is small and this
// keeps the copy exact for every field, present and future).
func (s *State) clone() *State {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("secrets: marshal state: %v", err))
	}
	var c State
	if err := json.Unmarshal(b, &c); err != nil {
		panic(fmt.Sprintf("secrets: unmarshal state: %v", err))
	}
	return &c
}

// MemStore keeps the state in memory (tests, or a daemon without a state
// directory). It stores a serialised copy, as a file would.
type MemStore struct {
	mu   sync.Mutex
	data []byte
}

// Load implements Store.
func (m *MemStore) Load() (*State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == nil {
		return &State{Format: StateFormat}, nil
	}
	var s State
	if err := json.Unmarshal(m.data, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Save implements Store.
func (m *MemStore) Save(s *State) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.data = b
	m.mu.Unlock()
	return nil
}

// FileStore keeps the state in one JSON file, replaced atomically on every
// Save (write a temporary file, fsync, rename, fsync the directory). The
// file is created mode 0600.
type FileStore struct {
	path string
	mu   sync.Mutex
}

// NewFileStore returns a FileStore for the file at path; its directory must
// exist.
func NewFileStore(path string) *FileStore { return &FileStore{path: path} }

// Path returns the file's path.
func (f *FileStore) Path() string { return f.path }

// Load implements Store.
func (f *FileStore) Load() (*State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return &State{Format: StateFormat}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("secrets: parse %s: %w", f.path, err)
	}
	if s.Format != StateFormat {
		return nil, fmt.Errorf("secrets: %s has format %d; this build reads %d", f.path, s.Format, StateFormat)
	}
	return &s, nil
}

// Save implements Store.
func (f *FileStore) Save(s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return writeAtomicP(f.path, append(b, '\n'))
}

// writeAtomicP is safefile.WriteAtomic with this package's error prefix.
func writeAtomicP(path string, data []byte) error {
	if err := safefile.WriteAtomic(path, data); err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	return nil
}
