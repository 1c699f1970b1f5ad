package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
)

// Sandbox names (internal/sandbox/names.go) are usable wherever a path or
// body takes a sandbox id: sandboxFor resolves them, here, and nowhere
// else. An id starts with "sb-" and a name never does, so a reference is
// read one way only.
//
// A name resolves among live sandboxes (not stopped, failed or lost):
//
//   - the caller's own first: a name is unique among an owner's live
//     sandboxes, so this finds at most one;
//   - then, for a caller that may act on every sandbox (sandboxes:all and
//     not limited to its own by the route), among every owner's: one match
//     is the sandbox, several are a 409 naming them, to be told apart by id.
//
// Anything else is 404, exactly like an id that does not exist or belongs
// to someone else, so names do not leak. An ended sandbox is reached by
// its id only.

// resolveName returns the live sandbox the caller means by name.
func (s *Server) resolveName(r *http.Request, name string) (store.Sandbox, error) {
	st := stateOf(r)
	notFound := notFoundf("sandbox %s not found", name)
	if st.ident == nil {
		return store.Sandbox{}, notFound
	}
	mine, err := s.mgr.LiveByName(r.Context(), st.principal, name)
	if err != nil {
		return store.Sandbox{}, err
	}
	if len(mine) > 0 {
		return mine[0], nil
	}
	if st.ownOnly || !st.ident.Has(auth.ScopeSandboxesAll) {
		return store.Sandbox{}, notFound
	}
	all, err := s.mgr.LiveByName(r.Context(), "", name)
	if err != nil {
		return store.Sandbox{}, err
	}
	switch len(all) {
	case 0:
		return store.Sandbox{}, notFound
	case 1:
		return all[0], nil
	}
	var which []string
	for i, sb := range all {
		if i == 4 {
			which = append(which, fmt.Sprintf("and %d more", len(all)-i))
			break
		}
		which = append(which, sb.ID+" (owner "+sb.Owner+")")
	}
	return store.Sandbox{}, apierr.Conflict("sandbox name %s is used by live sandboxes of %d other owners: %s; use the sandbox id",
		name, len(all), strings.Join(which, ", "))
}

// nameErr gives a create's or fork's refusal of a taken name its own
// message (409); other errors pass through.
func nameErr(err error) error {
	var nt *sandbox.NameTakenError
	if errors.As(err, &nt) {
		return apierr.Conflict("%s", nt.Error())
	}
	return err
}
