package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/warden-sandbox/warden/internal/store"
)

// Sandbox names.
//
// A sandbox may have a name its owner chose, usable wherever its id is. A
// name is a DNS label (1 to 63 of a-z, 0-9 and '-', starting and ending
// with a letter or digit) that does not begin with "sb-", the prefix of
// every sandbox id (NewID), so a reference is an id exactly when it starts
// with "sb-" and can never be read both ways. Among the live sandboxes of
// one owner (every state but stopped, failed and lost) a name is unique; it
// is free again once its sandbox has ended, and other owners may use it.

// MaxName is the longest sandbox name (a DNS label).
const MaxName = 63

// IDPrefix begins every sandbox id and no sandbox name.
const IDPrefix = "sb-"

// ErrNameTaken is wrapped by the error (a *NameTakenError) of Create and
// Fork when the owner already has a live sandbox of that name. It is a
// store.ErrConflict (HTTP 409).
var ErrNameTaken = store.ErrNameInUse

// IsID reports whether ref is a sandbox id rather than a name.
func IsID(ref string) bool { return strings.HasPrefix(ref, IDPrefix) }

// ValidName checks a sandbox name's syntax; the error wraps ErrInvalid and
// says what a name may be.
func ValidName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: name: %q is not a valid sandbox name (%s); a name is 1 to %d lowercase letters, "+
			"digits and '-', starting and ending with a letter or digit, and not starting with %q", ErrInvalid, clipName(name), why, MaxName, IDPrefix)
	}
	switch {
	case name == "":
		return bad("it is empty")
	case len(name) > MaxName:
		return bad(fmt.Sprintf("it is longer than %d characters", MaxName))
	case IsID(name):
		return bad(fmt.Sprintf("%q begins sandbox ids", IDPrefix))
	case name[0] == '-' || name[len(name)-1] == '-':
		return bad("it starts or ends with '-'")
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return bad(fmt.Sprintf("it contains %q", c))
		}
	}
	return nil
}

func clipName(s string) string {
	if len(s) > MaxName+8 {
		return s[:MaxName+8] + "..."
	}
	return s
}

// liveStates are the states of a sandbox that holds its name.
var liveStates = []string{string(StateStarting), string(StateRunning), string(StatePaused), string(StateStopping)}

// LiveByName returns the live sandboxes named name: those of owner, or
// of every owner when owner is "". A name unique per owner yields at most
// one sandbox for an owner.
func (m *Manager) LiveByName(ctx context.Context, owner, name string) ([]store.Sandbox, error) {
	if name == "" {
		return nil, nil
	}
	sbs, _, err := m.st.ListSandboxes(ctx, store.SandboxFilter{Owner: owner, Name: name, States: liveStates, Limit: store.MaxPageSize})
	if err != nil {
		return nil, fmt.Errorf("look up sandbox name %q: %w", name, err)
	}
	return sbs, nil
}

// checkName refuses a create's or fork's name when it is malformed or the
// owner already has a live sandbox of that name. It runs before anything is
// started; the store's unique index catches two creates that race past it.
func (m *Manager) checkName(ctx context.Context, owner, name string) error {
	if name == "" {
		return nil
	}
	if err := ValidName(name); err != nil {
		return err
	}
	sbs, err := m.LiveByName(ctx, owner, name)
	if err != nil {
		return err
	}
	if len(sbs) > 0 {
		return nameTaken(name, sbs[0].ID)
	}
	return nil
}

// NameTakenError is the refusal of a name held by another live sandbox
// of the same owner. It wraps ErrNameTaken (a store.ErrConflict).
type NameTakenError struct {
	Name string
	ID   string // the sandbox holding it, when known
}

func (e *NameTakenError) Error() string {
	if e.ID == "" {
		return fmt.Sprintf("name %q is taken by another live sandbox of the same owner", e.Name)
	}
	return fmt.Sprintf("name %q is taken by live sandbox %s of the same owner", e.Name, e.ID)
}

func (e *NameTakenError) Unwrap() error { return ErrNameTaken }

func nameTaken(name, id string) error { return &NameTakenError{Name: name, ID: id} }

// asNameTaken turns the store's refusal of a name into a NameTakenError;
// other errors pass through.
func asNameTaken(err error, name string) error {
	if errors.Is(err, store.ErrNameInUse) {
		return nameTaken(name, "")
	}
	return err
}
