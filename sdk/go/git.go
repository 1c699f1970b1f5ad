package warden

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// GitCloneRequest clones an https repository into a sandbox. Path is relative to the
// sandbox user's home or absolute below /home, /root, /workspace, /mnt, /data or /tmp
// (default: the repository's name). Secret, a secret the caller owns holding a token, is
// brokered for the URL's host for this command only: the token never enters the sandbox.
type GitCloneRequest struct {
	URL            string `json:"url"`
	Path           string `json:"path,omitempty"`
	Branch         string `json:"branch,omitempty"`
	Depth          int    `json:"depth,omitempty"`
	Secret         string `json:"secret,omitempty"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty"`
}

// GitRemoteRequest pulls (fast-forward only) or pushes the repository at Path. Remote
// defaults to origin; Secret is brokered for the remote's host as for a clone.
type GitRemoteRequest struct {
	Path           string `json:"path"`
	Remote         string `json:"remote,omitempty"`
	Branch         string `json:"branch,omitempty"`
	Secret         string `json:"secret,omitempty"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty"`
}

// GitCommitRequest commits in the repository at Path. All (nil: true) stages every
// change first, new and deleted files included. An author given is also the committer.
type GitCommitRequest struct {
	Path           string `json:"path"`
	Message        string `json:"message"`
	AuthorName     string `json:"author_name,omitempty"`
	AuthorEmail    string `json:"author_email,omitempty"`
	All            *bool  `json:"all,omitempty"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty"`
}

// GitResult is how a git helper's command ended: a git failure is a non-zero ExitCode
// (with the tails of its output), not an error.
type GitResult struct {
	Path     string `json:"path"`
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	// Head is the commit HEAD names after the command.
	Head string `json:"head,omitempty"`
	// Status only.
	Branch   string   `json:"branch,omitempty"`
	Upstream string   `json:"upstream,omitempty"`
	Ahead    int      `json:"ahead,omitempty"`
	Behind   int      `json:"behind,omitempty"`
	Clean    *bool    `json:"clean,omitempty"`
	Changes  []string `json:"changes,omitempty"`
}

func (c *Client) git(ctx context.Context, id, op string, body any) (GitResult, error) {
	var res GitResult
	if err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/sandboxes/%s/git/"+op, id), json: body}, &res); err != nil {
		return res, fmt.Errorf("git %s in sandbox %s: %w", op, id, err)
	}
	return res, nil
}

// GitClone clones a repository into sandbox id.
func (c *Client) GitClone(ctx context.Context, id string, req GitCloneRequest) (GitResult, error) {
	return c.git(ctx, id, "clone", req)
}

// GitPull pulls (fast-forward only) a repository in sandbox id.
func (c *Client) GitPull(ctx context.Context, id string, req GitRemoteRequest) (GitResult, error) {
	return c.git(ctx, id, "pull", req)
}

// GitCommit commits in a repository in sandbox id; GitResult.Head is the new commit.
func (c *Client) GitCommit(ctx context.Context, id string, req GitCommitRequest) (GitResult, error) {
	return c.git(ctx, id, "commit", req)
}

// GitPush pushes a repository in sandbox id.
func (c *Client) GitPush(ctx context.Context, id string, req GitRemoteRequest) (GitResult, error) {
	return c.git(ctx, id, "push", req)
}

// GitStatus returns the status of the repository at path in sandbox id.
func (c *Client) GitStatus(ctx context.Context, id, path string) (GitResult, error) {
	var res GitResult
	q := url.Values{"path": {path}}
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/sandboxes/%s/git/status", id), query: q, idempotent: true}, &res); err != nil {
		return res, fmt.Errorf("git status in sandbox %s: %w", id, err)
	}
	return res, nil
}
