package auth

import (
	"context"
	"errors"
	"fmt"

	"github.com/warden-sandbox/warden/internal/store"
)

// KeyIdentity is CheckKey returning the identity of the key: its
// principal and scopes, read from the store on every call (no cache), so
// a caller acting through a credential derived from the key (an E2B envd
// token) is described as the key's principal, and cut off the moment the
// key or its principal goes.
func (a *Authenticator) KeyIdentity(ctx context.Context, id string) (Identity, error) {
	if id == "" {
		return Identity{}, ErrInvalidKey
	}
	rec, err := a.st.GetKeyByID(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Identity{}, ErrInvalidKey
	}
	if err != nil {
		return Identity{}, fmt.Errorf("check key: %w", err)
	}
	if !rec.RevokedAt.IsZero() {
		return Identity{}, ErrRevoked
	}
	p, err := a.st.GetPrincipal(ctx, rec.PrincipalID)
	if errors.Is(err, store.ErrNotFound) {
		return Identity{}, ErrInvalidKey
	} else if err != nil {
		return Identity{}, fmt.Errorf("check key: %w", err)
	}
	scopes := make([]Scope, len(rec.Scopes))
	for i, s := range rec.Scopes {
		scopes[i] = Scope(s)
	}
	rec.Hash = ""
	return Identity{Principal: p, Key: rec, Scopes: scopes}, nil
}
