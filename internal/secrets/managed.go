package secrets

import (
	"fmt"
	"slices"
)

// NormalizeGrant checks a grant's shape as CreateGrant does (exactly one
// of sandbox, principal and middleware; hosts; header; path prefix; env
// name) and returns it normalised, without storing it.
func NormalizeGrant(g Grant) (Grant, error) { return normalizeGrant(g) }

// sameGrant reports whether two normalised sandbox grants give the same
// use of the same secret.
func sameGrant(a, b Grant) bool {
	return a.SecretID == b.SecretID && a.Sandbox == b.Sandbox && slices.Equal(a.Hosts, b.Hosts) &&
		a.Header == b.Header && a.PathPrefix == b.PathPrefix && a.EnvName == b.EnvName
}

// SyncSandboxGrants makes the live grants of sandboxID marked managedBy
// exactly want (each with Sandbox sandboxID; SecretID, Hosts, Header,
// PathPrefix and EnvName set): a live managed grant equal to a wanted one
// is kept with its placeholder (a persistent sandbox's processes keep
// working), the others are revoked, and the wanted ones missing are made.
// Grants of the sandbox made through the API (not managedBy) are left
// alone. It returns the live managed grants, in want's order. Either all
// of it is saved or nothing is.
func (v *Vault) SyncSandboxGrants(sandboxID, managedBy string, want []Grant) ([]Grant, error) {
	if sandboxID == "" || managedBy == "" {
		return nil, fmt.Errorf("%w: grant sync: sandbox and manager are required", ErrInvalid)
	}
	norm := make([]Grant, 0, len(want))
	for _, g := range want {
		g.Sandbox, g.Principal, g.Middleware, g.ManagedBy = sandboxID, "", "", managedBy
		n, err := normalizeGrant(g)
		if err != nil {
			return nil, err
		}
		n.ManagedBy = managedBy
		norm = append(norm, n)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]Grant, len(norm))
	if v.syncedAlready(sandboxID, managedBy, norm, out) {
		return out, nil // nothing to change: nothing to save
	}
	err := v.update(func(s *State) error {
		done := make([]bool, len(norm))
		for i := range s.Grants {
			g := &s.Grants[i]
			if g.Revoked || g.Sandbox != sandboxID || g.ManagedBy != managedBy {
				continue
			}
			keep := false
			for j, w := range norm {
				if !done[j] && sameGrant(*g, w) {
					done[j], keep, out[j] = true, true, cloneGrant(*g)
					break
				}
			}
			if !keep {
				g.Revoked = true
			}
		}
		for j, w := range norm {
			if done[j] {
				continue
			}
			if s.secret(w.SecretID) == nil {
				return fmt.Errorf("%w: secret %q", ErrNotFound, w.SecretID)
			}
			w.ID, w.Placeholder, w.Created = newID("grt-"), NewPlaceholder(), v.now().UTC()
			s.Grants = append(s.Grants, w)
			out[j] = cloneGrant(w)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// syncedAlready reports whether the live managed grants of the sandbox are
// exactly norm, filling out with them; v.mu held.
func (v *Vault) syncedAlready(sandboxID, managedBy string, norm, out []Grant) bool {
	done := make([]bool, len(norm))
	for _, g := range v.st.Grants {
		if g.Revoked || g.Sandbox != sandboxID || g.ManagedBy != managedBy {
			continue
		}
		found := false
		for j, w := range norm {
			if !done[j] && sameGrant(g, w) {
				done[j], found, out[j] = true, true, cloneGrant(g)
				break
			}
		}
		if !found {
			return false
		}
	}
	return !slices.Contains(done, false)
}
