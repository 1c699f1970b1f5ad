// Package gitops builds the git command lines of Warden's git helpers
// (clone, pull, commit, push, status through the API, SDK and CLI) and
// validates what callers put in them. The commands run inside the sandbox,
// as its user, through the agent's exec: argv, never a shell. A token the
// caller names is brokered: the command carries only a placeholder, in an
// "Authorization: Basic" header git sends to the remote's host, and the
// credential broker swaps it for the secret on the wire (a grant of format
// secrets.FormatBasic), so the token never enters the sandbox.
package gitops

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/warden-sandbox/warden/internal/secrets"
)

// ErrInvalid marks a value the helpers refuse (the API answers 400).
var ErrInvalid = errors.New("git: invalid")

// Limits.
const (
	MaxURLLen     = 2048
	MaxPathLen    = 1024
	MaxRefLen     = 255
	MaxIdentLen   = 256
	MaxMessageLen = 64 << 10
	MaxDepth      = 1 << 20
)

// BrokerCABundle is where a sandbox with grants finds the trust bundle
// holding its broker CA (internal/daemon writes it; git, built on GnuTLS
// in Debian, does not read SSL_CERT_FILE, so the helpers point
// GIT_SSL_CAINFO at it).
const BrokerCABundle = "/etc/ssl/warden-ca-bundle.pem"

// GrantManager marks the grants the helpers make for one command
// (secrets.Grant.ManagedBy): the daemon revokes any still live when it
// starts (a crash during a command leaves its grant).
const GrantManager = "git-helper"

// TokenUser is the user name of the Basic credentials the helpers send
// (GitHub's convention for tokens; other hosts ignore the name).
const TokenUser = "x-access-token"

// Roots are the directories a repository path must lie below: homes, and
// the usual mount points of volumes and scratch space.
var Roots = []string{"/home", "/root", "/workspace", "/mnt", "/data", "/tmp"}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
}

// Remote is a validated remote URL.
type Remote struct {
	URL  string // canonical: https://host[:port]/path
	Host string // the host name, normalized (what a grant names)
	// Base is "https://host[:port]/", the prefix git's URL-matched
	// settings (http.<url>.extraHeader) use.
	Base string
}

// ParseURL validates a remote URL: https only, a DNS host name (what a
// grant can name; no address), an optional port, a path, and nothing that
// git would read as another transport or an option (ext::, file://, a
// leading '-', scp-like "host:path"), no user information (it would be
// stored in .git/config), no query or fragment, no control characters.
func ParseURL(raw string) (Remote, error) {
	if raw == "" || len(raw) > MaxURLLen {
		return Remote{}, invalid("url must be 1 to %d bytes", MaxURLLen)
	}
	if strings.HasPrefix(raw, "-") {
		return Remote{}, invalid("url must not start with '-'")
	}
	for _, c := range []byte(raw) {
		if c <= ' ' || c == 0x7f || c == '\\' {
			return Remote{}, invalid("url holds a space, a backslash or a control character")
		}
	}
	if !utf8.ValidString(raw) {
		return Remote{}, invalid("url is not UTF-8")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Remote{}, invalid("url: %v", err)
	}
	if !strings.EqualFold(u.Scheme, "https") || u.Opaque != "" {
		return Remote{}, invalid("url %q: only https:// remotes are supported", truncate(raw, 64))
	}
	if u.User != nil {
		return Remote{}, invalid("url must not hold a user or password: name a secret instead")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(raw, "#") {
		return Remote{}, invalid("url must not hold a query or a fragment")
	}
	host, ok := secrets.NormalizeHost(u.Hostname())
	if !ok || !strings.Contains(host, ".") {
		return Remote{}, invalid("url host %q is not a fully qualified domain name", truncate(u.Hostname(), 64))
	}
	hostport := host
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
			return Remote{}, invalid("url port %q", p)
		}
		if n != 443 {
			hostport = host + ":" + p
		}
	} else if strings.HasSuffix(u.Host, ":") {
		return Remote{}, invalid("url has an empty port")
	}
	if u.Path == "" || u.Path == "/" {
		return Remote{}, invalid("url names no repository")
	}
	for seg := range strings.SplitSeq(u.Path[1:], "/") {
		if seg == "." || seg == ".." {
			return Remote{}, invalid("url path holds a dot segment")
		}
	}
	out := url.URL{Scheme: "https", Host: hostport, Path: u.Path, RawPath: u.RawPath}
	return Remote{URL: out.String(), Host: host, Base: "https://" + hostport + "/"}, nil
}

// CleanPath resolves a repository path in the sandbox: relative to home
// when not absolute, then it must be clean, below one of Roots, with no
// component starting with '-' and no control characters.
func CleanPath(p, home string) (string, error) {
	if p == "" {
		return "", invalid("path is required")
	}
	if len(p) > MaxPathLen {
		return "", invalid("path must be at most %d bytes", MaxPathLen)
	}
	for _, c := range []byte(p) {
		if c < ' ' || c == 0x7f {
			return "", invalid("path holds a control character")
		}
	}
	if !utf8.ValidString(p) {
		return "", invalid("path is not UTF-8")
	}
	if !strings.HasPrefix(p, "/") {
		p = home + "/" + p
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		if seg == ".." {
			return "", invalid("path must not hold '..'")
		}
		if strings.HasPrefix(seg, "-") {
			return "", invalid("path components must not start with '-'")
		}
	}
	c := path.Clean(p)
	for _, r := range Roots {
		if strings.HasPrefix(c, r+"/") {
			return c, nil
		}
	}
	return "", invalid("path %q is not below %s", truncate(c, 64), strings.Join(Roots, ", "))
}

// CheckRef validates a branch name (a conservative git check-ref-format).
func CheckRef(name string) error {
	if name == "" || len(name) > MaxRefLen {
		return invalid("branch must be 1 to %d bytes", MaxRefLen)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._/-+", c) >= 0) {
			return invalid("branch %q: letters, digits and . _ / - + only", truncate(name, 64))
		}
	}
	if strings.HasPrefix(name, "-") || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") ||
		strings.HasSuffix(name, ".") || strings.HasSuffix(name, ".lock") || strings.Contains(name, "..") || strings.Contains(name, "//") {
		return invalid("branch %q is not a valid ref name", truncate(name, 64))
	}
	for seg := range strings.SplitSeq(name, "/") {
		if strings.HasPrefix(seg, ".") {
			return invalid("branch %q is not a valid ref name", truncate(name, 64))
		}
	}
	return nil
}

// CheckRemoteName validates a remote's name ("origin").
func CheckRemoteName(name string) error {
	if name == "" || len(name) > 64 || name[0] == '-' || name[0] == '.' {
		return invalid("remote must be 1 to 64 bytes, not starting with '-' or '.'")
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return invalid("remote %q: letters, digits, '.', '_' and '-' only", truncate(name, 64))
		}
	}
	return nil
}

// CheckIdent validates an author name or email ("" passes: git's own
// configuration is used).
func CheckIdent(what, v string) error {
	if len(v) > MaxIdentLen || !utf8.ValidString(v) || strings.ContainsAny(v, "<>\n\r\x00") {
		return invalid("%s must be at most %d bytes of text without '<', '>' or line breaks", what, MaxIdentLen)
	}
	return nil
}

// CheckMessage validates a commit message.
func CheckMessage(m string) error {
	if strings.TrimSpace(m) == "" || len(m) > MaxMessageLen || strings.ContainsRune(m, 0) || !utf8.ValidString(m) {
		return invalid("message must be 1 to %d bytes of UTF-8 text", MaxMessageLen)
	}
	return nil
}

// Cmd is a git command to run in the sandbox: argv and the environment
// added to the sandbox's.
type Cmd struct {
	Args []string
	Env  map[string]string
}

// Auth is the brokered credential of a command: the grant's placeholder
// for the remote's Base.
type Auth struct {
	Base        string
	Placeholder string
	// CA, if set, is the trust bundle git verifies the (brokered)
	// connection with.
	CA string
}

// base returns the command's common part: git with every transport but
// https refused (submodules and remote helpers included: no ext::, no
// file://) and no credential helper or prompt; with auth, the header git
// sends to the remote's base URL only, set through GIT_CONFIG_* variables
// (neither on the command line nor in any config file).
func base(auth *Auth) Cmd {
	c := Cmd{
		Args: []string{"git", "-c", "protocol.allow=never", "-c", "protocol.https.allow=always", "-c", "credential.helper="},
		Env:  map[string]string{"GIT_TERMINAL_PROMPT": "0", "GCM_INTERACTIVE": "never"},
	}
	if auth != nil {
		creds := base64.StdEncoding.EncodeToString([]byte(TokenUser + ":" + auth.Placeholder))
		c.Env["GIT_CONFIG_COUNT"] = "1"
		c.Env["GIT_CONFIG_KEY_0"] = "http." + auth.Base + ".extraHeader"
		c.Env["GIT_CONFIG_VALUE_0"] = "Authorization: Basic " + creds
		if auth.CA != "" {
			c.Env["GIT_SSL_CAINFO"] = auth.CA
		}
	}
	return c
}

// CloneOpts are a clone's options (validated by the caller with the
// functions above).
type CloneOpts struct {
	URL    string // Remote.URL
	Path   string // CleanPath
	Branch string
	Depth  int
}

// Clone returns the clone command.
func Clone(o CloneOpts, auth *Auth) Cmd {
	c := base(auth)
	c.Args = append(c.Args, "clone", "--no-recurse-submodules")
	if o.Depth > 0 {
		c.Args = append(c.Args, "--depth="+strconv.Itoa(o.Depth))
	}
	if o.Branch != "" {
		c.Args = append(c.Args, "--branch="+o.Branch)
	}
	c.Args = append(c.Args, "--", o.URL, o.Path)
	return c
}

// Pull returns a fast-forward-only pull of path from remote (and branch).
func Pull(dir, remote, branch string, auth *Auth) Cmd {
	c := base(auth)
	c.Args = append(c.Args, "-C", dir, "pull", "--ff-only", "--no-recurse-submodules")
	if remote != "" {
		c.Args = append(c.Args, remote)
		if branch != "" {
			c.Args = append(c.Args, branch)
		}
	}
	return c
}

// CommitOpts are a commit's options.
type CommitOpts struct {
	Path, Message           string
	AuthorName, AuthorEmail string
}

// Commit returns the commit command. An author given is also the
// committer; without one, git's configuration in the sandbox applies
// (EMAIL gives it a fallback address).
func Commit(o CommitOpts) Cmd {
	c := base(nil)
	c.Args = append(c.Args, "-C", o.Path, "commit", "--message="+o.Message)
	if o.AuthorName != "" {
		c.Env["GIT_AUTHOR_NAME"] = o.AuthorName
		c.Env["GIT_COMMITTER_NAME"] = o.AuthorName
	}
	if o.AuthorEmail != "" {
		c.Env["GIT_AUTHOR_EMAIL"] = o.AuthorEmail
		c.Env["GIT_COMMITTER_EMAIL"] = o.AuthorEmail
	}
	c.Env["EMAIL"] = "warden@localhost"
	return c
}

// AddAll returns the command that stages every change of dir, new and
// deleted files included (what a commit with "all" runs first).
func AddAll(dir string) Cmd {
	c := base(nil)
	c.Args = append(c.Args, "-C", dir, "add", "--all")
	return c
}

// Push returns the push command: remote, and branch if given (default:
// git's push.default for the current branch).
func Push(dir, remote, branch string, auth *Auth) Cmd {
	c := base(auth)
	c.Args = append(c.Args, "-C", dir, "push", "--no-recurse-submodules", remote)
	if branch != "" {
		c.Args = append(c.Args, branch)
	}
	return c
}

// RemoteURL returns the command that prints a remote's (push) URL.
func RemoteURL(dir, remote string, push bool) Cmd {
	c := base(nil)
	c.Args = append(c.Args, "-C", dir, "remote", "get-url")
	if push {
		c.Args = append(c.Args, "--push")
	}
	c.Args = append(c.Args, "--", remote)
	return c
}

// Head returns the command that prints the commit HEAD names.
func Head(dir string) Cmd {
	c := base(nil)
	c.Args = append(c.Args, "-C", dir, "rev-parse", "--verify", "--quiet", "HEAD")
	return c
}

// Status returns the status command (porcelain v2 with the branch
// headers, parsed by ParseStatus).
func Status(dir string) Cmd {
	c := base(nil)
	c.Args = append(c.Args, "-C", dir, "status", "--porcelain=v2", "--branch")
	return c
}

// StatusInfo is what ParseStatus reads from porcelain v2 output.
type StatusInfo struct {
	Branch   string   // "" when detached
	Head     string   // "" before the first commit
	Upstream string   // "" without one
	Ahead    int      // commits not on the upstream
	Behind   int      // upstream commits not here
	Changes  []string // one porcelain line per changed or untracked path
}

// ParseStatus parses `git status --porcelain=v2 --branch`.
func ParseStatus(out string) StatusInfo {
	var s StatusInfo
	for line := range strings.SplitSeq(out, "\n") {
		switch {
		case line == "":
		case strings.HasPrefix(line, "# branch.oid "):
			if v := strings.TrimPrefix(line, "# branch.oid "); v != "(initial)" {
				s.Head = v
			}
		case strings.HasPrefix(line, "# branch.head "):
			if v := strings.TrimPrefix(line, "# branch.head "); v != "(detached)" {
				s.Branch = v
			}
		case strings.HasPrefix(line, "# branch.upstream "):
			s.Upstream = strings.TrimPrefix(line, "# branch.upstream ")
		case strings.HasPrefix(line, "# branch.ab "):
			fmt.Sscanf(strings.TrimPrefix(line, "# branch.ab "), "+%d -%d", &s.Ahead, &s.Behind)
		case strings.HasPrefix(line, "#"):
		default:
			s.Changes = append(s.Changes, line)
		}
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
