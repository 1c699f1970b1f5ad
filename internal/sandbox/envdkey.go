package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/warden-sandbox/warden/internal/store"
)

// ErrKeyChanged is BindEnvdKey's answer when the sandbox's envd key is no
// longer the one the caller saw.
var ErrKeyChanged = errors.New("envd key changed")

// BindEnvdKey binds the sandbox's E2B envd access token to API key to,
// provided it is still bound to from (compare and swap: two callers
// rebinding at once cannot both win). Binding to another key changes the
// token (internal/e2b derives it from the sandbox and the key).
func (m *Manager) BindEnvdKey(ctx context.Context, id, from, to string) (store.Sandbox, error) {
	sb, err := m.st.UpdateSandbox(ctx, id, func(s *store.Sandbox) error {
		if State(s.State).Terminal() {
			return &StateError{ID: id, State: State(s.State), Want: "running or paused"}
		}
		if s.EnvdKey != from {
			return fmt.Errorf("sandbox %s: %w", id, ErrKeyChanged)
		}
		s.EnvdKey = to
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return sb, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return sb, err
}
