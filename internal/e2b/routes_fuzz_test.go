package e2b

import (
	"net/http"
	"net/url"
	"path"
	"strings"
	"testing"
)

// FuzzProxyRoute checks the proxy's route allow-list against any request
// target: whatever it lets through is one of envd's or the interpreter's
// own routes, already clean (a router that cleans paths sees the same
// path), never under /warden/, and forwarded exactly as matched. The
// acting-user parser never panics and only yields plain names.
func FuzzProxyRoute(f *testing.F) {
	for _, s := range []string{"/files?path=x", "/warden/suspend", "//warden/suspend", "/%77arden/suspend",
		"/warden/../warden/suspend", "/process.Process/Start", "/contexts/ab/restart", "/contexts/%2e%2e/warden",
		"/files/..%2fwarden%2fsuspend", "http://agent/warden/suspend", "*", "/init", "/contexts/a/../../warden/suspend"} {
		f.Add(s, "Basic cm9vdDo=")
	}
	f.Add("/health", "")
	f.Add("/envs", "Basic Og==")
	f.Fuzz(func(t *testing.T, target, authz string) {
		u, err := url.ParseRequestURI(target)
		if err == nil {
			p := u.Path
			if envdRoute(p) || codeRoute(p) {
				if path.Clean(p) != p {
					t.Fatalf("routed %q is not clean (%q)", p, path.Clean(p))
				}
				if strings.HasPrefix(p, "/warden") || strings.Contains(p, "..") || strings.Contains(p, "//") {
					t.Fatalf("routed %q", p)
				}
				out := &url.URL{Scheme: "http", Host: "agent", Path: p}
				back, err := url.ParseRequestURI(out.RequestURI())
				if err != nil || back.Path != p {
					t.Fatalf("forwarded %q reads back as %v (%v)", p, back, err)
				}
			}
		}
		h := http.Header{"Authorization": {authz}}
		if name, err := requestUser(h); err == nil && !validUserName(name) {
			t.Fatalf("requestUser(%q) = %q", authz, name)
		}
	})
}
