package secrets

// RevokeManagedBy revokes every live grant marked managedBy, of any
// sandbox, and returns how many it revoked: the daemon calls it at start
// for grants that live only while one operation runs (the git helpers'),
// which a crash during the operation would otherwise leave in force.
func (v *Vault) RevokeManagedBy(managedBy string) (int, error) {
	if managedBy == "" {
		return 0, nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, g := range v.st.Grants {
		if !g.Revoked && g.ManagedBy == managedBy {
			n++
		}
	}
	if n == 0 {
		return 0, nil
	}
	err := v.update(func(s *State) error {
		for i := range s.Grants {
			if g := &s.Grants[i]; !g.Revoked && g.ManagedBy == managedBy {
				g.Revoked = true
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
