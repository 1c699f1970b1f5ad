package cli

import (
	"context"
	"fmt"
	"strings"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func gitCmd() *command {
	return &command{
		name:  "git",
		short: "Clone, pull, commit and push git repositories in a sandbox, tokens brokered",
		long: "Run git in a sandbox: clone, pull, commit, push and status of a repository, governed and\n" +
			"audited as the exec of the git command. With --secret, a secret of yours holding a token is\n" +
			"brokered for the remote's host for that command only: git sends a placeholder and the\n" +
			"daemon's egress path swaps in the token, so it never enters the sandbox. https remotes only.\n" +
			"A PATH is relative to the sandbox user's home, or absolute below /home, /root, /workspace,\n" +
			"/mnt, /data or /tmp. The command exits with git's exit code.",
		subs: []*command{gitCloneCmd(), gitPullCmd(), gitCommitCmd(), gitPushCmd(), gitStatusCmd()},
	}
}

// gitSecret resolves --secret: an ID, or the name of one of the caller's secrets.
func gitSecret(ctx context.Context, cl *warden.Client, ref string) (string, error) {
	if ref == "" || strings.HasPrefix(ref, "sec-") {
		return ref, nil
	}
	list, err := cl.ListSecrets(ctx)
	if err != nil {
		return "", err
	}
	for _, s := range list {
		if s.Name == ref {
			return s.ID, nil
		}
	}
	return "", fmt.Errorf("no secret named %q", ref)
}

// gitReport prints a result (git's own output, or JSON) and returns git's exit code.
func gitReport(r *runner, res warden.GitResult, summary string) error {
	if r.g.json {
		if err := printJSON(r.env.Stdout, res); err != nil {
			return err
		}
		return exitCode(min(res.ExitCode, 255))
	}
	fmt.Fprint(r.env.Stdout, res.Stdout)
	fmt.Fprint(r.env.Stderr, res.Stderr)
	if res.ExitCode == 0 && summary != "" {
		fmt.Fprintln(r.env.Stdout, summary)
	}
	return exitCode(min(res.ExitCode, 255))
}

func gitCloneCmd() *command {
	var q warden.GitCloneRequest
	c := &command{
		name:  "clone",
		args:  "ID URL [PATH]",
		short: "Clone an https repository into the sandbox",
		long:  "Clone URL into PATH (default: the repository's name in the user's home).",
		examples: []string{
			"warden git clone sb-01hzx3k9q2 https://github.com/org/repo.git --secret github-token",
			"warden git clone sb-01hzx3k9q2 https://github.com/org/repo.git work/repo --branch dev --depth 1",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.String(&q.Branch, "branch", "NAME", "the branch to check out")
		fs.Int(&q.Depth, "depth", "N", "a shallow clone of N commits")
		fs.String(&q.Secret, "secret", "SECRET", "a secret (ID or name) holding a token for the URL's host")
		fs.Int(&q.TimeoutSeconds, "timeout", "SECONDS", "give up after this long (default 600)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) < 2 || len(args) > 3 {
			return usageErr(c, "want a sandbox, a URL and optionally a path")
		}
		q.URL = args[1]
		if len(args) == 3 {
			q.Path = args[2]
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		if q.Secret, err = gitSecret(ctx, cl, q.Secret); err != nil {
			return err
		}
		res, err := cl.GitClone(ctx, args[0], q)
		if err != nil {
			return err
		}
		return gitReport(r, res, fmt.Sprintf("cloned into %s at %s", res.Path, res.Head))
	}
	return c
}

func gitRemoteCmd(push bool) *command {
	var q warden.GitRemoteRequest
	name, short := "pull", "Pull (fast-forward only) a repository in the sandbox"
	example := "warden git pull sb-01hzx3k9q2 repo --secret github-token"
	if push {
		name, short = "push", "Push a repository in the sandbox"
		example = "warden git push sb-01hzx3k9q2 repo --branch main --secret github-token"
	}
	c := &command{
		name:     name,
		args:     "ID PATH",
		short:    short,
		long:     short + " from or to --remote (default origin).",
		examples: []string{example},
		json:     true,
	}
	c.flags = func(fs *flagSet) {
		fs.String(&q.Remote, "remote", "NAME", "the remote (default origin)")
		fs.String(&q.Branch, "branch", "NAME", "the branch")
		fs.String(&q.Secret, "secret", "SECRET", "a secret (ID or name) holding a token for the remote's host")
		fs.Int(&q.TimeoutSeconds, "timeout", "SECONDS", "give up after this long (default 600)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want a sandbox and a repository path")
		}
		q.Path = args[1]
		cl, err := r.client()
		if err != nil {
			return err
		}
		if q.Secret, err = gitSecret(ctx, cl, q.Secret); err != nil {
			return err
		}
		var res warden.GitResult
		if push {
			res, err = cl.GitPush(ctx, args[0], q)
		} else {
			res, err = cl.GitPull(ctx, args[0], q)
		}
		if err != nil {
			return err
		}
		return gitReport(r, res, "")
	}
	return c
}

func gitPullCmd() *command { return gitRemoteCmd(false) }
func gitPushCmd() *command { return gitRemoteCmd(true) }

func gitCommitCmd() *command {
	var q warden.GitCommitRequest
	var staged bool
	c := &command{
		name:  "commit",
		args:  "ID PATH",
		short: "Commit every change (or only what is staged) in a repository in the sandbox",
		long:  "Stage every change, new and deleted files included, and commit it (--staged: commit only\nwhat is staged). Prints the new commit.",
		examples: []string{
			"warden git commit sb-01hzx3k9q2 repo -m 'Fix the build' --author 'Agent <agent@example.com>'",
		},
		json: true,
	}
	var author string
	c.flags = func(fs *flagSet) {
		fs.String(&q.Message, "message", "MSG", "the commit message (required)", "m")
		fs.String(&author, "author", "'NAME <EMAIL>'", "the author (and committer); default the sandbox's git config")
		fs.Bool(&staged, "staged", "commit only what is staged")
		fs.Int(&q.TimeoutSeconds, "timeout", "SECONDS", "give up after this long (default 600)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want a sandbox and a repository path")
		}
		if q.Message == "" {
			return usageErr(c, "-m MESSAGE is required")
		}
		q.Path = args[1]
		if author != "" {
			name, email, ok := strings.Cut(author, "<")
			q.AuthorName = strings.TrimSpace(name)
			if ok {
				q.AuthorEmail = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(email), ">"))
			}
		}
		if staged {
			all := false
			q.All = &all
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		res, err := cl.GitCommit(ctx, args[0], q)
		if err != nil {
			return err
		}
		return gitReport(r, res, "")
	}
	return c
}

func gitStatusCmd() *command {
	c := &command{
		name:  "status",
		args:  "ID PATH",
		short: "Show a repository's branch, HEAD and changes",
		long:  "Show the branch, HEAD, upstream and changed paths of the repository at PATH.",
		json:  true,
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want a sandbox and a repository path")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		res, err := cl.GitStatus(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		if r.g.json || res.ExitCode != 0 {
			return gitReport(r, res, "")
		}
		w := r.env.Stdout
		branch := res.Branch
		if branch == "" {
			branch = "(detached)"
		}
		fmt.Fprintf(w, "branch %s at %s\n", branch, gitOrNone(res.Head))
		if res.Upstream != "" {
			fmt.Fprintf(w, "upstream %s: ahead %d, behind %d\n", res.Upstream, res.Ahead, res.Behind)
		}
		if res.Clean != nil && *res.Clean {
			fmt.Fprintln(w, "clean")
		}
		for _, ch := range res.Changes {
			fmt.Fprintln(w, ch)
		}
		return nil
	}
	return c
}

func gitOrNone(s string) string {
	if s == "" {
		return "(no commit)"
	}
	return s
}
