package gitops

import (
	"errors"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	good := map[string]Remote{
		"https://git.example.com/org/repo.git":     {URL: "https://git.example.com/org/repo.git", Host: "git.example.com", Base: "https://git.example.com/"},
		"HTTPS://Git.Example.com:443/org/repo":     {URL: "https://git.example.com/org/repo", Host: "git.example.com", Base: "https://git.example.com/"},
		"https://git.example.com:8443/a/b%20c.git": {URL: "https://git.example.com:8443/a/b%20c.git", Host: "git.example.com", Base: "https://git.example.com:8443/"},
		"https://git.example.test/repo.git/":       {URL: "https://git.example.test/repo.git/", Host: "git.example.test", Base: "https://git.example.test/"},
	}
	for in, want := range good {
		got, err := ParseURL(in)
		if err != nil || got != want {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{
		"", "ext::sh -c touch% /tmp/pwned", "ext::sh", "file:///etc", "/srv/repo.git", "git@github.com:org/repo.git",
		"-uhttps://x", "--upload-pack=touch /tmp/x", "http://git.example.com/repo", "ssh://git@git.example.com/repo",
		"https://user:pw@git.example.com/repo", "https://token@git.example.com/repo", "https://git.example.com/repo?x=1",
		"https://git.example.com/repo#frag", "https://10.0.0.1/repo", "https://[::1]/repo", "https://localhost/repo",
		"https://git.example.com", "https://git.example.com/", "https://git.example.com:0/r", "https://git.example.com:99999/r",
		"https://git.example.com:/r", "https://git.example.com/a/../b", "https://git.example.com/a b", "https://git.example.com/a\nb",
		"https://git.example.com\\@evil.com/r", "fd::17/foo", "https:/git.example.com/r", "https:git.example.com/r",
		"https://git.example.com:08443/r",
	} {
		if r, err := ParseURL(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseURL(%q) = %+v, %v; want ErrInvalid", in, r, err)
		}
	}
}

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{
		"repo": "/home/user/repo", "a/b/": "/home/user/a/b", "/workspace/x": "/workspace/x", "/tmp/r": "/tmp/r",
		"/home/user/./r": "/home/user/r", "/mnt/vol/r": "/mnt/vol/r",
	} {
		if got, err := CleanPath(in, "/home/user"); err != nil || got != want {
			t.Errorf("CleanPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "/", "/etc/x", "/home", "/tmp", "../x", "/home/user/../../etc", "-C", "/tmp/--upload-pack=x",
		"repo/-x", "/tmp/a\nb", "/proc/self", "/homex/y", strings.Repeat("a", MaxPathLen+1)} {
		if got, err := CleanPath(in, "/home/user"); !errors.Is(err, ErrInvalid) {
			t.Errorf("CleanPath(%q) = %q, %v; want ErrInvalid", in, got, err)
		}
	}
}

func TestCheckNames(t *testing.T) {
	for _, ok := range []string{"main", "feature/x-1", "v1.2", "release+1"} {
		if err := CheckRef(ok); err != nil {
			t.Errorf("CheckRef(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-f", "--force", "a..b", "a//b", "/a", "a/", "a.lock", ".a", "a/.b", "a b", "a~1", "a^", "a:b", "@{x}", "a\x00"} {
		if err := CheckRef(bad); err == nil {
			t.Errorf("CheckRef(%q) passed", bad)
		}
	}
	if CheckRemoteName("origin") != nil || CheckRemoteName("-o") == nil || CheckRemoteName("a/b") == nil || CheckRemoteName("") == nil {
		t.Error("CheckRemoteName")
	}
	if CheckIdent("name", "A B") != nil || CheckIdent("email", "a@b") != nil || CheckIdent("name", "x>y") == nil || CheckIdent("name", "a\nb") == nil {
		t.Error("CheckIdent")
	}
	if CheckMessage("fix") != nil || CheckMessage(" \n") == nil || CheckMessage("a\x00") == nil {
		t.Error("CheckMessage")
	}
}

func TestCommands(t *testing.T) {
	auth := &Auth{Base: "https://git.example.com/", Placeholder: "warden-ph-abc", CA: BrokerCABundle}
	c := Clone(CloneOpts{URL: "https://git.example.com/r.git", Path: "/home/user/r", Branch: "main", Depth: 1}, auth)
	want := []string{"git", "-c", "protocol.allow=never", "-c", "protocol.https.allow=always", "-c", "credential.helper=",
		"clone", "--no-recurse-submodules", "--depth=1", "--branch=main", "--", "https://git.example.com/r.git", "/home/user/r"}
	if !slices.Equal(c.Args, want) {
		t.Errorf("clone argv = %q", c.Args)
	}
	if c.Env["GIT_CONFIG_KEY_0"] != "http.https://git.example.com/.extraHeader" ||
		c.Env["GIT_CONFIG_VALUE_0"] != "Authorization: Basic eC1hY2Nlc3MtdG9rZW46d2FyZGVuLXBoLWFiYw==" ||
		c.Env["GIT_SSL_CAINFO"] != BrokerCABundle || c.Env["GIT_TERMINAL_PROMPT"] != "0" {
		t.Errorf("clone env = %v", c.Env)
	}
	for _, a := range c.Args {
		if strings.Contains(a, "warden-ph-") {
			t.Errorf("the placeholder is on the command line: %q", c.Args)
		}
	}
	if p := Push("/home/user/r", "origin", "main", nil); !slices.Equal(p.Args[7:], []string{"-C", "/home/user/r", "push", "--no-recurse-submodules", "origin", "main"}) || p.Env["GIT_CONFIG_COUNT"] != "" {
		t.Errorf("push = %+v", p)
	}
	m := Commit(CommitOpts{Path: "/home/user/r", Message: "-m --amend", AuthorName: "A", AuthorEmail: "a@x"})
	if !slices.Equal(m.Args[7:], []string{"-C", "/home/user/r", "commit", "--message=-m --amend"}) || m.Env["GIT_COMMITTER_EMAIL"] != "a@x" {
		t.Errorf("commit = %+v", m)
	}
}

func TestParseStatus(t *testing.T) {
	s := ParseStatus("# branch.oid 0123abc\n# branch.head main\n# branch.upstream origin/main\n# branch.ab +2 -1\n1 .M N... 100644 100644 100644 a b f.txt\n? new.txt\n")
	if s.Head != "0123abc" || s.Branch != "main" || s.Upstream != "origin/main" || s.Ahead != 2 || s.Behind != 1 || len(s.Changes) != 2 {
		t.Errorf("ParseStatus = %+v", s)
	}
	if s := ParseStatus("# branch.oid (initial)\n# branch.head (detached)\n"); s.Head != "" || s.Branch != "" {
		t.Errorf("ParseStatus initial = %+v", s)
	}
}

// FuzzParseURL: whatever passes is an https URL to a DNS name with a path,
// which git reads as a URL (not an option, not another transport), with
// no credentials, query, whitespace or control characters; and parsing the
// canonical form again gives the same result.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"https://git.example.com/org/repo.git", "ext::sh -c id", "file:///etc/passwd", "-uhttps://a.b/c",
		"https://u:p@a.b/c", "https://a.b:8443/c%2e%2e/d", "HTTPS://A.B/c", "https://a.b/c?d#e", "https://a.b\\@c.d/e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := ParseURL(raw)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		if !strings.HasPrefix(r.URL, "https://") || !strings.HasPrefix(r.URL, r.Base) || strings.HasPrefix(raw, "-") {
			t.Fatalf("%q -> %+v", raw, r)
		}
		if strings.ContainsAny(r.URL, " \t\r\n\x00\\#?@") || strings.Contains(r.URL, "::") {
			t.Fatalf("%q -> %q holds a forbidden character", raw, r.URL)
		}
		u, err := url.Parse(r.URL)
		if err != nil || u.User != nil || u.Hostname() != r.Host || u.Path == "" || u.Path == "/" {
			t.Fatalf("%q -> %q parses as %+v, %v", raw, r.URL, u, err)
		}
		again, err := ParseURL(r.URL)
		if err != nil || again != r {
			t.Fatalf("%q -> %+v; again %+v, %v", raw, r, again, err)
		}
	})
}

// FuzzCleanPath: whatever passes is clean, absolute, strictly below a
// root, and has no component git could read as an option.
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"repo", "/tmp/x", "../../etc", "/home/user/-x", "-C", "/workspace/a/./b//c", "/tmp"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c, err := CleanPath(p, "/home/user")
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		if path.Clean(c) != c || !strings.HasPrefix(c, "/") || strings.Contains(c, "/-") || strings.ContainsAny(c, "\n\r\x00") {
			t.Fatalf("%q -> %q", p, c)
		}
		if !slices.ContainsFunc(Roots, func(r string) bool { return strings.HasPrefix(c, r+"/") }) {
			t.Fatalf("%q -> %q is below no root", p, c)
		}
	})
}
