package e2b

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/sandbox"
)

// TestSignedURLActsAsSignedUser: a URL signed with no user reads as the
// default user even with "Authorization: Basic root:" and a repeated
// username; signed for root it reads as root.
func TestSignedURLActsAsSignedUser(t *testing.T) {
	needsRealSandbox(t)
	sb := create(t, env.aKey, nil)
	ag, err := env.mgr.Agent(context.Background(), sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ag.Run(context.Background(), agentclient.Cmd{User: "root", Args: []string{"sh", "-c", "echo topsecret > /tmp/s && chmod 600 /tmp/s"}}); err != nil {
		t.Fatal(err)
	}
	token := sb.EnvdAccessToken
	u := "/files?path=/tmp/s&signature=" + url.QueryEscape(Signature("/tmp/s", "read", "", token, 0))
	// Acting as the default user: 403. With username=root added the URL no
	// longer matches its signature (no sandbox found: 502); with an empty
	// username first (the one checked) and root second, the default user.
	for target, want := range map[string]int{u: 403, u + "&username=root": 502, u + "&username=&username=root": 403} {
		st, _, body := do(t, "GET", target, map[string]string{"Authorization": rootAuth}, nil)
		if st != want || strings.Contains(string(body), "topsecret") {
			t.Errorf("%s with a root header: %d %s, want %d", target, st, body, want)
		}
	}
	st, _, body := do(t, "GET", "/files?path=/tmp/s&username=root&signature="+url.QueryEscape(Signature("/tmp/s", "read", "root", token, 0)), nil, nil)
	if st != http.StatusOK || !strings.Contains(string(body), "topsecret") {
		t.Errorf("signed for root: %d %s", st, body)
	}
	// The token itself may name any user.
	st, _, body = envd(t, sb, "GET", "/files?path=/tmp/s", map[string]string{"Authorization": rootAuth}, nil)
	if st != http.StatusOK || !strings.Contains(string(body), "topsecret") {
		t.Errorf("token as root: %d %s", st, body)
	}
	st, _, body = envd(t, sb, "GET", "/files?path=/tmp/s", map[string]string{"Authorization": "Bearer x"}, nil)
	wantError(t, http.StatusUnauthorized, st, body)
}

const rootAuth = "Basic cm9vdDo="

// TestTokenBoundToKey: revoking the key a sandbox's token is bound to cuts
// the token; connect with another key of the owner binds a new one; a
// sandbox bound to no key (made through Warden's API) has no token until
// getInfo or connect binds it.
func TestTokenBoundToKey(t *testing.T) {
	ctx := context.Background()
	authn := auth.New(env.st)
	scopes := []auth.Scope{auth.ScopeSandboxesCreate, auth.ScopeSandboxesRead, auth.ScopeSandboxesExec}
	k1, rec1, err := authn.IssueKey(ctx, env.aID, "k1", scopes)
	if err != nil {
		t.Fatal(err)
	}
	k2, rec2, err := authn.IssueKey(ctx, env.aID, "k2", scopes)
	if err != nil {
		t.Fatal(err)
	}
	sb := create(t, k1, nil)
	if got := stored(t, sb.SandboxID).EnvdKey; got != rec1.ID {
		t.Fatalf("bound to %q, want %q", got, rec1.ID)
	}
	list := map[string]string{"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
	if st, _, body := envd(t, sb, "POST", "/process.Process/List", list, strings.NewReader("{}")); st != 200 {
		t.Fatalf("before revocation: %d %s", st, body)
	}
	if _, err := authn.RevokeKey(ctx, rec1.ID); err != nil {
		t.Fatal(err)
	}
	st, _, body := envd(t, sb, "POST", "/process.Process/List", list, strings.NewReader("{}"))
	wantError(t, http.StatusUnauthorized, st, body)
	st, _, b := api(t, k2, "POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", map[string]any{})
	if st != 200 {
		t.Fatalf("connect with k2: %d %s", st, b)
	}
	var again created
	decodeJSON(t, b, &again)
	if again.EnvdAccessToken == sb.EnvdAccessToken || stored(t, sb.SandboxID).EnvdKey != rec2.ID {
		t.Fatalf("connect with k2 did not rebind: %+v", again)
	}
	again.SandboxID = sb.SandboxID
	if st, _, body := envd(t, again, "POST", "/process.Process/List", list, strings.NewReader("{}")); st != 200 {
		t.Fatalf("new token: %d %s", st, body)
	}
	if st, _, _ := envd(t, sb, "POST", "/process.Process/List", list, strings.NewReader("{}")); st != 401 {
		t.Fatalf("old token after rebinding: %d", st)
	}

	// Made through Warden's API: unbound, no token works, getInfo binds.
	native, err := env.mgr.Create(ctx, sandbox.CreateRequest{Owner: env.aID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.mgr.Kill(context.Background(), native.ID, "test cleanup") })
	if st, _, _ := envd(t, created{SandboxID: native.ID, EnvdAccessToken: ""}, "POST", "/process.Process/List", list, strings.NewReader("{}")); st != 401 {
		t.Fatalf("unbound sandbox, no token: %d", st)
	}
	st, _, b = api(t, k2, "GET", "/sandboxes/"+native.ID, nil)
	if st != 200 {
		t.Fatalf("getInfo: %d %s", st, b)
	}
	var info created
	decodeJSON(t, b, &info)
	info.SandboxID = native.ID
	if info.EnvdAccessToken == "" {
		t.Fatal("getInfo gave no token")
	}
	if st, _, body := envd(t, info, "POST", "/process.Process/List", list, strings.NewReader("{}")); st != 200 {
		t.Fatalf("token from getInfo: %d %s", st, body)
	}
}
