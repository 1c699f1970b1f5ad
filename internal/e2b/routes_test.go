package e2b

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"testing"
)

// TestRouteAllowlist: the proxy forwards envd's and the code interpreter's
// own routes, spelled exactly, and nothing else: not the agent's daemon-only
// routes, not /warden/*, not any spelling that a router would clean into
// one of those.
func TestRouteAllowlist(t *testing.T) {
	envdOK := []string{"/files", "/health", "/metrics", "/envs", "/process.Process/Start", "/process.Process/Connect",
		"/process.Process/SendSignal", "/filesystem.Filesystem/ListDir", "/filesystem.Filesystem/WatchDir"}
	for _, p := range envdOK {
		if !envdRoute(p) {
			t.Errorf("envdRoute(%q) = false, want true", p)
		}
	}
	codeOK := []string{"/execute", "/contexts", "/health", "/contexts/0a1b2c", "/contexts/abc/restart", "/contexts/abc/interrupt"}
	for _, p := range codeOK {
		if !codeRoute(p) {
			t.Errorf("codeRoute(%q) = false, want true", p)
		}
	}
	bad := []string{"", "/", "*", "/warden/suspend", "//warden/suspend", "/warden/../warden/suspend", "/warden/suspend/",
		"/Warden/suspend", "/warden", "/warden/", "/init", "/tar", "/port", "/port/connect", "/files/", "//files", "/files/../warden/suspend",
		"/./files", "/files?x", "/process.Process/", "/process.Process/Nope", "/process.Process/Start/../../warden/suspend",
		"/process.Process/../warden/suspend", "/filesystem.Filesystem", "/FILES", "/files%2f", "/contexts/../warden/suspend",
		"/contexts/a/../../warden/suspend", "/contexts//restart", "/contexts/a/b", "/contexts/a/restart/x", "/contexts/", "/execute/",
		"/contexts/a%2F..%2F..%2Fwarden", "/freeze", "/upgrade"}
	for _, p := range bad {
		if envdRoute(p) || codeRoute(p) {
			t.Errorf("%q is routed (envd %v, code %v), want neither", p, envdRoute(p), codeRoute(p))
		}
	}
}

// TestStripCredentials: every spelling and repetition of a credential
// header goes; other headers stay.
func TestStripCredentials(t *testing.T) {
	h := http.Header{}
	h["Authorization"] = []string{"Basic cm9vdDo=", "Basic eDo="}
	h["authorization"] = []string{"Basic cm9vdDo="}
	h["AUTHORIZATION"] = []string{"Basic cm9vdDo="}
	h["X_access_token"] = []string{"t"}
	h["X-Access-Token"] = []string{"t"}
	h["Cookie"] = []string{"a=b"}
	h["E2b-Traffic-Access-Token"] = []string{"t"}
	h["X-Api-Key"] = []string{"k"}
	h["Proxy-Authorization"] = []string{"Basic x"}
	h["Content-Type"] = []string{"application/json"}
	h["Connect-Protocol-Version"] = []string{"1"}
	h["X-Metadata-Owner"] = []string{"me"}
	stripCredentials(h)
	if len(h) != 3 || h.Get("Content-Type") == "" || h.Get("Connect-Protocol-Version") == "" || h.Get("X-Metadata-Owner") == "" {
		t.Fatalf("after strip: %v", h)
	}
}

// TestRequestUser: one Basic header names the user; none is the default;
// two, another scheme or a malformed one are refused.
func TestRequestUser(t *testing.T) {
	for _, c := range []struct {
		hdr  http.Header
		want string
		ok   bool
	}{
		{http.Header{}, "", true},
		{http.Header{"Authorization": {"Basic cm9vdDo="}}, "root", true},
		{http.Header{"Authorization": {"basic dXNlcjo="}}, "user", true},
		{http.Header{"Authorization": {"Basic Og=="}}, "", true}, // ":" : the default user
		{http.Header{"Authorization": {"Basic dXNlcjo=", "Basic cm9vdDo="}}, "", false},
		{http.Header{"Authorization": {"Basic dXNlcjo="}, "authorization": {"Basic cm9vdDo="}}, "", false},
		{http.Header{"Authorization": {"Bearer wdn_x"}}, "", false},
		{http.Header{"Authorization": {"Basic !!!"}}, "", false},
		{http.Header{"Authorization": {"Basic " + b64("a/b:")}}, "", false},
		{http.Header{"Authorization": {"Basic " + b64("a b:")}}, "", false},
	} {
		got, err := requestUser(c.hdr)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("requestUser(%v) = %q, %v; want %q, ok %v", c.hdr, got, err, c.want, c.ok)
		}
	}
}

// TestCanonicalQuery: one value per key; a signed request carries exactly
// the signed user (none for ""), whatever else the URL repeats.
func TestCanonicalQuery(t *testing.T) {
	q, _ := url.ParseQuery("path=/root/x&path=/etc/shadow&username=&username=root&signature=v1_x&signature_expiration=9&source=sdk")
	got, _ := url.ParseQuery(canonicalQuery(q, true, ""))
	if got.Get("path") != "/root/x" || len(got["path"]) != 1 || got.Has("username") || got.Has("signature") || got.Get("source") != "sdk" {
		t.Errorf("signed, no user: %v", got)
	}
	got, _ = url.ParseQuery(canonicalQuery(q, true, "user"))
	if got["username"][0] != "user" || len(got["username"]) != 1 {
		t.Errorf("signed as user: %v", got)
	}
	got, _ = url.ParseQuery(canonicalQuery(q, false, "ignored"))
	if len(got["username"]) != 1 || got.Get("username") != "" || !got.Has("signature") {
		t.Errorf("token request: %v", got)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
