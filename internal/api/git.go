package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/gitops"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/secrets"
	"github.com/warden-sandbox/warden/internal/store"
)

// Git helpers (docs/persistence.md, "Git"): clone, pull, commit, push and
// status of a repository in a sandbox. Each runs git inside the sandbox,
// as its default user, through the agent (argv, never a shell), and is
// governed as the exec of that git command line (kind exec: exec rules
// apply to it) and audited. A secret named for clone, pull or push is
// brokered: the helper grants it to the sandbox for the remote's host only,
// in HTTP Basic form (secrets.FormatBasic), for the duration of the
// command (governed as a secret.use), and revokes the grant after; git
// sends only the grant's placeholder, and the broker puts the token in on
// the wire. The token never enters the sandbox.

const (
	gitDefaultTimeout = 10 * time.Minute
	gitMaxTimeout     = 3600
	gitOutputTail     = 32 << 10
)

// gitResult is every git route's answer.
type gitResult struct {
	Path     string `json:"path"`
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	// Head is the commit HEAD names after the command ("" if none).
	Head string `json:"head,omitempty"`
	// Status only.
	Branch   string   `json:"branch,omitempty"`
	Upstream string   `json:"upstream,omitempty"`
	Ahead    int      `json:"ahead,omitempty"`
	Behind   int      `json:"behind,omitempty"`
	Clean    *bool    `json:"clean,omitempty"`
	Changes  []string `json:"changes,omitempty"`
}

// tailBuffer keeps the last n bytes written to it.
type tailBuffer struct {
	n   int
	b   []byte
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.n {
		t.b = append(t.b[:0], t.b[len(t.b)-t.n:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	if t.cut {
		return "[...]" + strings.ToValidUTF8(string(t.b), "")
	}
	return string(t.b)
}

// gitOp is one git route's call once its body is read.
type gitOp struct {
	s       *Server
	r       *http.Request
	sb      store.Sandbox
	agent   *agentclient.Client
	home    string
	timeout time.Duration
}

func (s *Server) gitStart(r *http.Request, timeoutSeconds int) (*gitOp, error) {
	if timeoutSeconds < 0 || timeoutSeconds > gitMaxTimeout {
		return nil, apierr.BadRequest("timeout_seconds must be 0 to %d", gitMaxTimeout)
	}
	sb, err := s.sandboxFor(r, r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	agent, err := s.mgr.AgentFor(sb)
	if err != nil {
		return nil, err
	}
	home := "/home/user"
	switch sb.User {
	case "":
	case "root":
		home = "/root"
	default:
		home = "/home/" + sb.User
	}
	op := &gitOp{s: s, r: r, sb: sb, agent: agent, home: home, timeout: gitDefaultTimeout}
	if timeoutSeconds > 0 {
		op.timeout = time.Duration(timeoutSeconds) * time.Second
	}
	return op, nil
}

func gitBad(err error) error {
	if errors.Is(err, gitops.ErrInvalid) {
		return apierr.BadRequest("%v", err)
	}
	return err
}

// decide governs the command as an exec of its argv in dir and records it
// for the audit event.
func (op *gitOp) decide(cmd gitops.Cmd, dir string) error {
	st := stateOf(op.r)
	st.detail["cmd"] = auditArgv(cmd.Args)
	return op.s.decide(op.r, &govern.Action{Exec: govern.NewExec(cmd.Args, dir, "", envKeys(cmd.Env))})
}

// run runs a git command in the sandbox and collects its output.
func (op *gitOp) run(ctx context.Context, cmd gitops.Cmd) (gitResult, error) {
	out, errOut := &tailBuffer{n: gitOutputTail}, &tailBuffer{n: gitOutputTail}
	res, err := op.agent.Run(ctx, agentclient.Cmd{Args: cmd.Args, Env: cmd.Env, Stdout: out, Stderr: errOut})
	if err != nil {
		if connect.CodeOf(err) == connect.CodeNotFound || strings.Contains(err.Error(), "executable file not found") {
			return gitResult{}, apierr.Validation("this sandbox has no git: use a template with git installed (%v)", err)
		}
		if ctx.Err() != nil {
			return gitResult{}, apierr.New(apierr.CodeTimeout, fmt.Sprintf("git did not finish within %s", op.timeout))
		}
		return gitResult{}, fmt.Errorf("run git: %w", err)
	}
	code := res.ExitCode
	if res.Signal != 0 && code == 0 {
		code = 128 + res.Signal
	}
	return gitResult{ExitCode: code, Stdout: out.String(), Stderr: errOut.String()}, nil
}

// head returns the commit HEAD of dir names ("" if none or on error).
func (op *gitOp) head(ctx context.Context, dir string) string {
	res, err := op.run(ctx, gitops.Head(dir))
	if err != nil || res.ExitCode != 0 {
		return ""
	}
	return strings.TrimSpace(res.Stdout)
}

// remoteURL returns the validated (push) URL of a repository's remote.
func (op *gitOp) remoteURL(ctx context.Context, dir, remote string, push bool) (gitops.Remote, error) {
	res, err := op.run(ctx, gitops.RemoteURL(dir, remote, push))
	if err != nil {
		return gitops.Remote{}, err
	}
	if res.ExitCode != 0 {
		return gitops.Remote{}, apierr.Validation("remote %s of %s: %s", remote, dir, strings.TrimSpace(res.Stderr))
	}
	rm, err := gitops.ParseURL(strings.TrimSpace(res.Stdout))
	if err != nil {
		return gitops.Remote{}, apierr.BadRequest("remote %s of %s: %v", remote, dir, err)
	}
	return rm, nil
}

// auth brokers secretID for the remote's host for the duration of the
// command (release revokes the grant): the caller must hold
// secrets:write and own the secret, and the use is governed as
// secret.use. Without a secret, auth returns the trust bundle setting a
// grant already in force for the host needs (or nil).
func (op *gitOp) auth(rm *gitops.Remote, secretID string) (a *gitops.Auth, release func(), err error) {
	s, r, st := op.s, op.r, stateOf(op.r)
	release = func() {}
	if secretID == "" {
		if rm != nil && s.cfg.Secrets != nil {
			for _, g := range s.cfg.Secrets.GrantsFor(op.sb.ID, op.sb.Owner) {
				if g.CoversHost(rm.Host) {
					// The broker intercepts the host: git must trust it.
					return &gitops.Auth{Base: rm.Base, CA: gitops.BrokerCABundle, Placeholder: ""}, release, nil
				}
			}
		}
		return nil, release, nil
	}
	if rm == nil {
		return nil, release, apierr.BadRequest("a secret needs an https remote")
	}
	if !st.ident.Has(auth.ScopeSecretsWrite) {
		return nil, release, deny(apierr.Forbidden("missing scope %s (to broker a secret)", auth.ScopeSecretsWrite))
	}
	v, err := s.vault()
	if err != nil {
		return nil, release, err
	}
	target := st.target
	sec, err := s.secretOwned(r, v, secretID)
	st.target = target
	if err != nil {
		return nil, release, err
	}
	st.detail["secret"] = sec.ID
	st.detail["host"] = rm.Host
	grantee := "sandbox:" + op.sb.ID
	if err := s.decideAlso(r, &govern.Action{Kind: govern.KindSecretUse,
		Secret: &govern.Secret{ID: sec.ID, Name: sec.Name, Grant: grantee, Host: rm.Host}}); err != nil {
		return nil, release, err
	}
	g, err := v.CreateGrant(secrets.Grant{SecretID: sec.ID, Sandbox: op.sb.ID, Hosts: []string{rm.Host}, Format: secrets.FormatBasic,
		ManagedBy: gitops.GrantManager})
	if err != nil {
		return nil, release, secretErr(err)
	}
	st.detail["grant"] = g.ID
	release = func() {
		if err := v.RevokeGrant(g.ID); err != nil {
			s.log.Error("revoke a git helper's grant", "grant", g.ID, "sandbox", op.sb.ID, "err", err)
		}
	}
	if s.cfg.SecretHooks != nil {
		ctx, cancel := context.WithTimeout(r.Context(), agentCallTimeout)
		defer cancel()
		if err := s.cfg.SecretHooks.Apply(ctx, op.sb.ID, op.sb.Owner); err != nil {
			release()
			return nil, func() {}, fmt.Errorf("hand the sandbox its broker CA: %w", err)
		}
	}
	return &gitops.Auth{Base: rm.Base, Placeholder: g.Placeholder, CA: gitops.BrokerCABundle}, release, nil
}

// decideAlso runs a second action of the call through the governed path
// (after decide): its decision is recorded with the first.
func (s *Server) decideAlso(r *http.Request, a *govern.Action) error {
	st := stateOf(r)
	s.fillAction(st, a)
	a.Credential = &govern.Checked{Identity: st.ident}
	g := s.cfg.Govern
	if g == nil {
		return nil
	}
	d, err := g.Decide(r.Context(), a)
	st.governed = append(st.governed, govern.Decided{Action: a, Decision: d})
	if err != nil {
		return fmt.Errorf("govern %s: %w", a.Kind, err)
	}
	return policyError(d)
}

// finish runs the command (with the sandbox's HEAD after it when withHead)
// and answers.
func (op *gitOp) finish(w http.ResponseWriter, ctx context.Context, cmd gitops.Cmd, dir string, withHead bool) error {
	res, err := op.run(ctx, cmd)
	if err != nil {
		return err
	}
	res.Path = dir
	if withHead && res.ExitCode == 0 {
		res.Head = op.head(ctx, dir)
	}
	st := stateOf(op.r)
	st.detail["exit_code"] = res.ExitCode
	if res.Head != "" {
		st.detail["head"] = res.Head
	}
	return writeJSON(w, http.StatusOK, res)
}

// withAuth returns cmd built with a's credentials (a nil a: none).
func withAuth(build func(*gitops.Auth) gitops.Cmd, a *gitops.Auth) gitops.Cmd {
	if a != nil && a.Placeholder == "" {
		// Trust only (a grant in force does the rest): no header.
		c := build(nil)
		c.Env["GIT_SSL_CAINFO"] = a.CA
		return c
	}
	return build(a)
}

// shape is the command as governed: with a placeholder standing for the
// brokered header when a secret is named (its variables are what the
// exec action lists).
func shape(build func(*gitops.Auth) gitops.Cmd, secret string) gitops.Cmd {
	if secret == "" {
		return build(nil)
	}
	return build(&gitops.Auth{Base: "https://x/", Placeholder: "x", CA: gitops.BrokerCABundle})
}

func (s *Server) gitClone(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		URL            string `json:"url"`
		Path           string `json:"path"`
		Branch         string `json:"branch"`
		Depth          int    `json:"depth"`
		Secret         string `json:"secret"`
		TimeoutSeconds int    `json:"timeout_seconds"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	rm, err := gitops.ParseURL(q.URL)
	if err != nil {
		return gitBad(err)
	}
	if q.Branch != "" {
		if err := gitops.CheckRef(q.Branch); err != nil {
			return gitBad(err)
		}
	}
	if q.Depth < 0 || q.Depth > gitops.MaxDepth {
		return apierr.BadRequest("depth must be 0 to %d", gitops.MaxDepth)
	}
	op, err := s.gitStart(r, q.TimeoutSeconds)
	if err != nil {
		return err
	}
	if q.Path == "" {
		name := rm.URL[strings.LastIndexByte(strings.TrimSuffix(rm.URL, "/"), '/')+1:]
		q.Path = strings.TrimSuffix(strings.TrimSuffix(name, "/"), ".git")
	}
	dir, err := gitops.CleanPath(q.Path, op.home)
	if err != nil {
		return gitBad(err)
	}
	build := func(a *gitops.Auth) gitops.Cmd {
		return gitops.Clone(gitops.CloneOpts{URL: rm.URL, Path: dir, Branch: q.Branch, Depth: q.Depth}, a)
	}
	if err := op.decide(shape(build, q.Secret), ""); err != nil {
		return err
	}
	a, release, err := op.auth(&rm, q.Secret)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), op.timeout)
	defer cancel()
	return op.finish(w, ctx, withAuth(build, a), dir, true)
}

// gitRemoteOp is pull and push.
func (s *Server) gitRemoteOp(push bool) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		var q struct {
			Path           string `json:"path"`
			Remote         string `json:"remote"`
			Branch         string `json:"branch"`
			Secret         string `json:"secret"`
			TimeoutSeconds int    `json:"timeout_seconds"`
		}
		if err := decodeJSON(r, &q, true); err != nil {
			return err
		}
		if q.Remote == "" {
			q.Remote = "origin"
		}
		if err := gitops.CheckRemoteName(q.Remote); err != nil {
			return gitBad(err)
		}
		if q.Branch != "" {
			if err := gitops.CheckRef(q.Branch); err != nil {
				return gitBad(err)
			}
		}
		op, err := s.gitStart(r, q.TimeoutSeconds)
		if err != nil {
			return err
		}
		dir, err := gitops.CleanPath(q.Path, op.home)
		if err != nil {
			return gitBad(err)
		}
		build := func(a *gitops.Auth) gitops.Cmd {
			if push {
				return gitops.Push(dir, q.Remote, q.Branch, a)
			}
			return gitops.Pull(dir, q.Remote, q.Branch, a)
		}
		if err := op.decide(shape(build, q.Secret), dir); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(r.Context(), op.timeout)
		defer cancel()
		var rm *gitops.Remote
		if u, err := op.remoteURL(ctx, dir, q.Remote, push); err == nil {
			rm = &u
		} else if q.Secret != "" {
			return err
		}
		a, release, err := op.auth(rm, q.Secret)
		if err != nil {
			return err
		}
		defer release()
		return op.finish(w, ctx, withAuth(build, a), dir, true)
	}
}

func (s *Server) gitCommit(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		Path           string `json:"path"`
		Message        string `json:"message"`
		AuthorName     string `json:"author_name"`
		AuthorEmail    string `json:"author_email"`
		All            *bool  `json:"all"`
		TimeoutSeconds int    `json:"timeout_seconds"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if err := gitops.CheckMessage(q.Message); err != nil {
		return gitBad(err)
	}
	if err := gitops.CheckIdent("author_name", q.AuthorName); err != nil {
		return gitBad(err)
	}
	if err := gitops.CheckIdent("author_email", q.AuthorEmail); err != nil {
		return gitBad(err)
	}
	op, err := s.gitStart(r, q.TimeoutSeconds)
	if err != nil {
		return err
	}
	dir, err := gitops.CleanPath(q.Path, op.home)
	if err != nil {
		return gitBad(err)
	}
	// Governed as the commit; with all (the default), git add --all runs
	// first as part of it.
	cmd := gitops.Commit(gitops.CommitOpts{Path: dir, Message: q.Message, AuthorName: q.AuthorName, AuthorEmail: q.AuthorEmail})
	all := q.All == nil || *q.All
	st := stateOf(r)
	if all {
		st.detail["all"] = true
	}
	if err := op.decide(cmd, dir); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), op.timeout)
	defer cancel()
	if all {
		res, err := op.run(ctx, gitops.AddAll(dir))
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			res.Path = dir
			st.detail["exit_code"] = res.ExitCode
			return writeJSON(w, http.StatusOK, res)
		}
	}
	return op.finish(w, ctx, cmd, dir, true)
}

func (s *Server) gitStatus(w http.ResponseWriter, r *http.Request) error {
	op, err := s.gitStart(r, 0)
	if err != nil {
		return err
	}
	dir, err := gitops.CleanPath(r.URL.Query().Get("path"), op.home)
	if err != nil {
		return gitBad(err)
	}
	cmd := gitops.Status(dir)
	if err := op.decide(cmd, dir); err != nil {
		return err
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	res, err := op.run(ctx, cmd)
	if err != nil {
		return err
	}
	res.Path = dir
	if res.ExitCode == 0 {
		si := gitops.ParseStatus(res.Stdout)
		clean := len(si.Changes) == 0
		res.Head, res.Branch, res.Upstream, res.Ahead, res.Behind, res.Changes, res.Clean =
			si.Head, si.Branch, si.Upstream, si.Ahead, si.Behind, si.Changes, &clean
	}
	stateOf(r).detail["exit_code"] = res.ExitCode
	return writeJSON(w, http.StatusOK, res)
}
