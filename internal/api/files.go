package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/warden-sandbox/warden/internal/agentclient"
	fspb "github.com/warden-sandbox/warden/internal/agentpb/filesystem"
	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
)

// entryJSON is the Entry schema.
type entryJSON struct {
	Name          string    `json:"name"`
	Path          string    `json:"path"`
	Type          string    `json:"type"`
	Size          int64     `json:"size"`
	Mode          string    `json:"mode"`
	Owner         string    `json:"owner"`
	Group         string    `json:"group"`
	ModifiedAt    time.Time `json:"modified_at"`
	SymlinkTarget string    `json:"symlink_target"`
}

func toEntry(e *fspb.EntryInfo) entryJSON {
	typ := "file"
	switch e.GetType() {
	case fspb.FileType_FILE_TYPE_DIRECTORY:
		typ = "dir"
	case fspb.FileType_FILE_TYPE_SYMLINK:
		typ = "symlink"
	}
	out := entryJSON{
		Name: e.GetName(), Path: e.GetPath(), Type: typ, Size: e.GetSize(),
		Mode:  fmt.Sprintf("%04o", e.GetMode()&0o7777),
		Owner: e.GetOwner(), Group: e.GetGroup(), SymlinkTarget: e.GetSymlinkTarget(),
	}
	if t := e.GetModifiedTime(); t != nil {
		out.ModifiedAt = t.AsTime().UTC()
	}
	return out
}

// agentBase is the URL base agentclient uses for the agent's HTTP routes
// (the host is never resolved: the client dials the sandbox's agent).
const agentBase = "http://agent"

// fileTarget reads the sandbox access, agent and path of a file request.
func (s *Server) fileTarget(r *http.Request) (*agentclient.Client, string, error) {
	p, err := queryPath(r)
	if err != nil {
		return nil, "", err
	}
	st := stateOf(r)
	st.detail["path"] = truncate(p, 512)
	agent, err := s.agentFor(r)
	if err != nil {
		return nil, "", err
	}
	// The route's audit action names the file operation; an upload is
	// described by its Content-Length (-1, unknown, is 0), never by
	// reading the body first.
	op := fileOps[st.action]
	var size int64
	if op == "write" && r.ContentLength > 0 {
		size = r.ContentLength
	}
	a := &govern.Action{File: govern.NewFile(op, p, "", size)}
	var head []byte
	screened := st.action == "file.write" && s.cfg.Govern != nil && s.cfg.Govern.Guards(govern.KindFileWrite)
	if screened {
		// A guard screens written files: it sees the body's first
		// govern.MaxGuardBody bytes (uploads stay streaming otherwise).
		if head, err = io.ReadAll(io.LimitReader(r.Body, govern.MaxGuardBody+1)); err != nil {
			return nil, "", apierr.BadRequest("read body: %v", err)
		}
		pl := &govern.Payload{Body: head}
		if len(head) > govern.MaxGuardBody {
			pl.Body, pl.Truncated = head[:govern.MaxGuardBody], true
		}
		a.Payload = pl
	}
	if err := s.decide(r, a); err != nil {
		return nil, "", err
	}
	if screened {
		rest := r.Body
		if g := st.governed; len(g) > 0 && g[0].Decision.Masked != nil {
			// The guard masked the body (it was read whole: a body over
			// the limit is refused rather than masked in part).
			st.detail["guard_masked"] = true
			r.Body = io.NopCloser(bytes.NewReader(g[0].Decision.Masked))
		} else {
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(head), rest), rest}
		}
	}
	return agent, p, nil
}

// fileOps is the govern.File op of each route that calls fileTarget, by
// its audit action.
var fileOps = map[string]string{
	"file.read": "read", "file.write": "write", "file.remove": "remove", "file.stat": "stat",
	"file.list": "list", "file.watch": "watch", "archive.download": "read", "archive.upload": "write",
}

func queryUser(r *http.Request) (string, error) {
	u := r.URL.Query().Get("user")
	if err := checkUser("user", u); err != nil {
		return "", err
	}
	if u != "" {
		stateOf(r).detail["user"] = u
	}
	return u, nil
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) error {
	user, err := queryUser(r)
	if err != nil {
		return err
	}
	agent, p, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	return serveFile(w, r, agent, p, user)
}

// serveFile streams a file from the agent, passing Range through: the
// agent answers 206 with Content-Range for a satisfiable range.
func serveFile(w http.ResponseWriter, r *http.Request, agent *agentclient.Client, p, user string) error {
	q := url.Values{"path": {p}}
	if user != "" {
		q.Set("username", user)
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, agentBase+"/files?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	// Identity encoding keeps Content-Length and byte ranges exact.
	req.Header.Set("Accept-Encoding", "identity")
	if rg := r.Header.Get("Range"); rg != "" {
		req.Header.Set("Range", rg)
		stateOf(r).detail["range"] = truncate(rg, 64)
	}
	resp, err := agent.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("agent get /files: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &agentclient.HTTPError{Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	for _, k := range []string{"Content-Length", "Content-Range", "Last-Modified", "Accept-Ranges"} {
		if v := resp.Header.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	if _, err := io.Copy(w, resp.Body); err != nil && r.Context().Err() == nil {
		return abort(fmt.Errorf("copy file from the agent: %w", err))
	}
	return nil
}

var modeRE = regexp.MustCompile(`^[0-7]{3,4}$`)

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) error {
	user, err := queryUser(r)
	if err != nil {
		return err
	}
	mode, err := queryMode(r)
	if err != nil {
		return err
	}
	agent, p, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	e, err := putFile(r, agent, p, user, mode)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, e)
}

func queryMode(r *http.Request) (uint32, error) {
	v := r.URL.Query().Get("mode")
	if v == "" {
		return 0, nil
	}
	if !modeRE.MatchString(v) {
		return 0, apierr.BadRequest("query parameter mode: %q is not 3 or 4 octal digits", truncate(v, 16))
	}
	m, _ := strconv.ParseUint(v, 8, 32)
	stateOf(r).detail["mode"] = v
	return uint32(m), nil
}

// putFile streams the request body into the file and returns its entry.
func putFile(r *http.Request, agent *agentclient.Client, p, user string, mode uint32) (entryJSON, error) {
	body := &countingReader{r: r.Body}
	err := agent.WriteFile(r.Context(), p, user, mode, body)
	stateOf(r).detail["bytes"] = body.n
	if err != nil {
		return entryJSON{}, err
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	res, err := agent.FS.Stat(ctx, withUser(connect.NewRequest(&fspb.StatRequest{Path: p}), user))
	if err != nil {
		return entryJSON{}, err
	}
	return toEntry(res.Msg.GetEntry()), nil
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request) error {
	agent, p, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	if p == "/" {
		return apierr.Validation("path: refusing to remove /")
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	// The agent, like envd, removes a missing path without complaint; the
	// spec promises 404 for one (warden fs rm -r relies on it).
	if _, err := agent.FS.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: p})); err != nil {
		return err
	}
	if _, err := agent.FS.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: p})); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) stat(w http.ResponseWriter, r *http.Request) error {
	agent, p, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	res, err := agent.FS.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: p}))
	if err != nil {
		if e := apierr.From(err); e != nil && e.Code == apierr.CodeNotFound {
			// Asking whether a path exists is no failure (warden cp asks
			// before every upload): the read succeeded, the answer is no.
			st := stateOf(r)
			st.detail["exists"] = false
			s.commitAudit(r, govern.AuditSuccess)
		}
		return err
	}
	return writeJSON(w, http.StatusOK, toEntry(res.Msg.GetEntry()))
}

func (s *Server) listDir(w http.ResponseWriter, r *http.Request) error {
	depth, err := queryInt(r, "depth", 1, 1, 1<<32-1)
	if err != nil {
		return err
	}
	agent, p, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	res, err := agent.FS.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: p, Depth: uint32(depth)}))
	if err != nil {
		return err
	}
	out := struct {
		Entries []entryJSON `json:"entries"`
	}{Entries: make([]entryJSON, 0, len(res.Msg.GetEntries()))}
	for _, e := range res.Msg.GetEntries() {
		out.Entries = append(out.Entries, toEntry(e))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		Path *string `json:"path"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.Path == nil {
		return apierr.BadRequest("request body: path is required")
	}
	if err := checkPath("path", *q.Path); err != nil {
		return err
	}
	stateOf(r).detail["path"] = truncate(*q.Path, 512)
	agent, err := s.agentFor(r)
	if err != nil {
		return err
	}
	if err := s.decide(r, &govern.Action{File: govern.NewFile("mkdir", *q.Path, "", 0)}); err != nil {
		return err
	}
	// The spec promises 409 for any existing path; the agent says so only
	// for directories.
	ctx, cancel := callCtx(r)
	defer cancel()
	if _, err := agent.FS.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: *q.Path})); err == nil {
		return apierr.Conflict("%s already exists", truncate(*q.Path, 256))
	} else if connect.CodeOf(err) != connect.CodeNotFound {
		return err
	}
	res, err := agent.FS.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: *q.Path}))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, toEntry(res.Msg.GetEntry()))
}

func (s *Server) move(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		Source      *string `json:"source"`
		Destination *string `json:"destination"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.Source == nil || q.Destination == nil {
		return apierr.BadRequest("request body: source and destination are required")
	}
	if err := checkPath("source", *q.Source); err != nil {
		return err
	}
	if err := checkPath("destination", *q.Destination); err != nil {
		return err
	}
	st := stateOf(r)
	st.detail["source"] = truncate(*q.Source, 512)
	st.detail["destination"] = truncate(*q.Destination, 512)
	agent, err := s.agentFor(r)
	if err != nil {
		return err
	}
	if err := s.decide(r, &govern.Action{File: govern.NewFile("move", *q.Source, *q.Destination, 0)}); err != nil {
		return err
	}
	ctx, cancel := callCtx(r)
	defer cancel()
	res, err := agent.FS.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: *q.Source, Destination: *q.Destination}))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, toEntry(res.Msg.GetEntry()))
}

// watchEvent is one line of a watch stream (WatchEvent schema).
type watchEvent struct {
	Type  string `json:"type"`
	Event string `json:"event,omitempty"`
	Name  string `json:"name,omitempty"`
}

var watchKinds = map[fspb.EventType]string{
	fspb.EventType_EVENT_TYPE_CREATE: "create",
	fspb.EventType_EVENT_TYPE_WRITE:  "write",
	fspb.EventType_EVENT_TYPE_REMOVE: "remove",
	fspb.EventType_EVENT_TYPE_RENAME: "rename",
	fspb.EventType_EVENT_TYPE_CHMOD:  "chmod",
}

func (s *Server) watch(w http.ResponseWriter, r *http.Request) error {
	recursive, err := queryBool(r, "recursive")
	if err != nil {
		return err
	}
	agent, p, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	if recursive {
		stateOf(r).detail["recursive"] = true
	}
	cs, err := agent.FS.WatchDir(r.Context(), connect.NewRequest(&fspb.WatchDirRequest{Path: p, Recursive: recursive}))
	if err != nil {
		return err
	}
	defer cs.Close()
	// The first message is the start event, or the error that prevented it.
	started := false
	for !started && cs.Receive() {
		started = cs.Msg().GetStart() != nil
	}
	if !started {
		if err := cs.Err(); err != nil {
			return err
		}
		return errors.New("watch stream ended before its start event")
	}
	s.commitAudit(r, govern.AuditSuccess)
	out := startNDJSON(w)
	if out.send(watchEvent{Type: "start"}) != nil {
		return nil
	}
	for cs.Receive() {
		fe := cs.Msg().GetFilesystem()
		if fe == nil {
			continue // keepalive
		}
		kind, ok := watchKinds[fe.GetType()]
		if !ok {
			continue
		}
		if out.send(watchEvent{Type: "event", Event: kind, Name: fe.GetName()}) != nil {
			return nil
		}
	}
	err = cs.Err()
	if err == nil {
		return nil // the agent ended the watch (the directory went away)
	}
	if r.Context().Err() != nil || errors.Is(err, context.Canceled) {
		return nil
	}
	return out.fail(err)
}

func (s *Server) downloadArchive(w http.ResponseWriter, r *http.Request) error {
	agent, p, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	rc, err := agent.Download(r.Context(), p, "")
	if err != nil {
		return err
	}
	defer rc.Close()
	h := w.Header()
	h.Set("Content-Type", "application/x-tar")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil && r.Context().Err() == nil {
		return abort(fmt.Errorf("copy archive from the agent: %w", err))
	}
	return nil
}

func (s *Server) uploadArchive(w http.ResponseWriter, r *http.Request) error {
	agent, p, err := s.fileTarget(r)
	if err != nil {
		return err
	}
	var src io.Reader = r.Body
	if s.guardsWrites() { // guard_writes.go: each file of the archive is screened
		var release func()
		if src, release, err = s.screenArchive(r, stateOf(r).target, p); err != nil {
			return err
		}
		defer release()
	}
	body := &countingReader{r: src}
	err = agent.Upload(r.Context(), p, "", body)
	stateOf(r).detail["bytes"] = body.n
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
