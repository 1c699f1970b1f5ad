package cli

import (
	"context"
	"fmt"
	"strings"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func principalsCmd() *command {
	return &command{
		name:  "principals",
		short: "Create and list principals (users and agents)",
		long: "Manage principals: the users and agents that API keys belong to. Every principals\n" +
			"command needs an admin key.",
		subs: []*command{
			principalsCreateCmd(),
			principalsLsCmd(),
		},
	}
}

// resolvePrincipal returns the ID of the principal named by s: s itself when it is an ID
// (pr-...) or empty, else the ID of the one principal called s.
func resolvePrincipal(ctx context.Context, cl *warden.Client, s string) (string, error) {
	if s == "" || strings.HasPrefix(s, "pr-") {
		return s, nil
	}
	list, err := cl.ListPrincipals(ctx)
	if err != nil {
		return "", err
	}
	var ids []string
	for _, p := range list {
		if p.Name == s {
			ids = append(ids, p.ID)
		}
	}
	switch len(ids) {
	case 0:
		return "", withHint(fmt.Errorf("no principal is called %q", s), "'warden principals ls' lists the principals")
	case 1:
		return ids[0], nil
	}
	return "", withHint(fmt.Errorf("%d principals are called %q (%s)", len(ids), s, strings.Join(ids, ", ")), "pass the principal's ID instead of its name")
}
