package broker

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/secrets"
)

// A Basic grant (secrets.FormatBasic) substitutes the placeholder inside
// the base64 credentials of "Authorization: Basic ...", as git sends a
// token: the upstream gets base64(user:VALUE), the sandbox's view of the
// echoed header is its own credentials again, and a plain (non-Basic)
// placeholder in the header is left alone by such a grant.
func TestBasicGrantSubstitutesInsideBase64(t *testing.T) {
	e := newEnv(t)
	sec := e.put("git-token", secretV1)
	g := e.grant(secrets.Grant{SecretID: sec.ID, Sandbox: "sb-1", Hosts: []string{apiHost}, Format: secrets.FormatBasic})
	rec := &recorder{}
	target, _ := e.upstream(echo(rec), apiHost)
	c, _ := e.client("sb-1", "agent-1", target, []string{apiHost}, e.sandboxRoots("sb-1"))

	shown := base64.StdEncoding.EncodeToString([]byte("x-access-token:" + g.Placeholder))
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+secretV1))
	resp, body := do(t, c, "GET", "https://"+apiHost+"/repo.git/info/refs", "Basic "+shown, "")
	if got := rec.last(t).Auth; got != want {
		t.Fatalf("upstream got Authorization %q, want %q", got, want)
	}
	if resp.Header.Get("X-Echo-Auth") != "Basic "+shown {
		t.Errorf("the echoed header reached the sandbox as %q: want the sandbox's own credentials", resp.Header.Get("X-Echo-Auth"))
	}
	// (In the body, streamed in pieces, a form of the bare value inside the
	// credentials may be replaced first: no form of either passes.)
	assertNoSecret(t, "response body", body, secretV1, strings.TrimPrefix(want, "Basic "))
	assertNoSecret(t, "response headers", fmt.Sprint(resp.Header), secretV1, strings.TrimPrefix(want, "Basic "))
	if uses, _ := e.events(); len(uses) != 1 || uses[0].GrantID != g.ID {
		t.Errorf("uses = %+v, want one of grant %s", uses, g.ID)
	}

	// The placeholder outside base64 is not this grant's format.
	do(t, c, "GET", "https://"+apiHost+"/x", "Bearer "+g.Placeholder, "")
	if got := rec.last(t).Auth; got != "Bearer "+g.Placeholder {
		t.Errorf("a Basic grant substituted in a Bearer header: upstream got %q", got)
	}
}
