package e2b

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	filesystem "github.com/warden-sandbox/warden/internal/agentpb/filesystem"
	"github.com/warden-sandbox/warden/internal/agentpb/filesystem/filesystempbconnect"
	process "github.com/warden-sandbox/warden/internal/agentpb/process"
	"github.com/warden-sandbox/warden/internal/agentpb/process/processpbconnect"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/store"
)

// The E2B door of the governed path (docs/governance.md, "E2B door").
// Every action that comes through this API is described as a
// govern.Action and decided by the daemon's engine before it is done:
// control-plane calls in their handlers, sandbox traffic in the proxy,
// which decodes the request (Connect envelopes of process.Process/Start
// and filesystem.Filesystem/*, /files, /execute, /contexts) and forwards
// the very bytes it decoded. The action and its decision go with the
// call's audit event to the governed path's audit log (govern.AuditLog),
// which records them under govern.AuditKey.

// maxGovernedBody bounds a request body the proxy reads to describe an
// action (a Connect message, an /execute or /contexts body). A larger one
// is refused: the proxy never forwards bytes it did not decide on.
const maxGovernedBody = 4 << 20

// proxyKinds names, for every route the proxy forwards, the action kinds
// it is governed as, or why it is none ("-" and a reason): a route missing
// here fails TestProxyRoutesHaveKinds.
var proxyKinds = map[string]string{
	"/files":   "file.read (GET), file.write (POST)",
	"/health":  "- health probe, no credential, no action",
	"/metrics": "- the sandbox's resource usage, answered by the proxy",
	"/envs":    "- reads the sandbox's default environment, no action",

	processpbconnect.ProcessStartProcedure:       "exec, pty",
	processpbconnect.ProcessListProcedure:        "- lists processes",
	processpbconnect.ProcessConnectProcedure:     "- attaches to a process already governed at start",
	processpbconnect.ProcessUpdateProcedure:      "- resizes a pty already governed at start",
	processpbconnect.ProcessStreamInputProcedure: "- stdin of a process governed at start (not per keystroke)",
	processpbconnect.ProcessSendInputProcedure:   "- stdin of a process governed at start (not per keystroke)",
	processpbconnect.ProcessSendSignalProcedure:  "- signals a process governed at start",
	processpbconnect.ProcessCloseStdinProcedure:  "- closes stdin of a process governed at start",

	filesystempbconnect.FilesystemStatProcedure:             "file.read (op stat)",
	filesystempbconnect.FilesystemListDirProcedure:          "file.read (op list)",
	filesystempbconnect.FilesystemWatchDirProcedure:         "file.read (op watch)",
	filesystempbconnect.FilesystemCreateWatcherProcedure:    "file.read (op watch)",
	filesystempbconnect.FilesystemGetWatcherEventsProcedure: "- events of a watcher governed at creation",
	filesystempbconnect.FilesystemRemoveWatcherProcedure:    "- removes a watcher",
	filesystempbconnect.FilesystemMakeDirProcedure:          "file.write (op mkdir)",
	filesystempbconnect.FilesystemMoveProcedure:             "file.write (op move, dest)",
	filesystempbconnect.FilesystemRemoveProcedure:           "file.remove",

	"/execute":           "code.run",
	"/contexts":          "code.run (POST: a new context, code \"\"); - GET lists contexts",
	"/contexts/{id}":     "- deletes a context",
	"/contexts/{id}/...": "- restart or interrupt a context",
	"code:/health":       "- health probe",
}

// actorOf is the governed principal of an identity.
func actorOf(id auth.Identity) govern.Principal {
	return govern.Principal{ID: id.Principal.ID, Kind: id.Principal.Kind, Owner: id.Principal.CreatedBy}
}

// sandboxInfo is what the door knows of a sandbox.
func sandboxInfo(sb store.Sandbox) *govern.SandboxInfo {
	return &govern.SandboxInfo{ID: sb.ID, Name: sb.Name, Template: sb.Template, Owner: sb.Owner, Metadata: sb.Metadata}
}

// decide runs a through the engine as an E2B action and returns it with
// the decision, for the call's audit event. The error is nil when the
// action may go on, else the engine's refusal (govern.ErrDenied,
// ErrApprovalRequired, ...) or a stage's error. Without an engine every
// action goes on undecided (and nothing is returned to record).
func (s *Server) decide(ctx context.Context, a *govern.Action) ([]govern.Decided, error) {
	if s.cfg.Govern == nil {
		return nil, nil
	}
	a.Surface = govern.SurfaceE2B
	d, err := s.cfg.Govern.Decide(ctx, a)
	gov := []govern.Decided{{Action: a, Decision: d}}
	if err != nil {
		return gov, err
	}
	return gov, d.Err()
}

// refusedByPolicy reports whether err is the engine's refusal of an action
// (as opposed to a failure to decide).
func refusedByPolicy(err error) bool {
	return errors.Is(err, govern.ErrDenied) || errors.Is(err, govern.ErrApprovalRequired) ||
		errors.Is(err, govern.ErrApprovalRejected) || errors.Is(err, govern.ErrApprovalExpired)
}

// publicMessage is the text a refused caller sees: the engine's public
// text ("denied by policy: <rule's message>", "approval required: approval
// apr_... is pending; retry ...").
func publicMessage(err error) string {
	if _, msg := errkind.Of(err); msg != "" {
		return msg
	}
	return "denied by policy"
}

// governCall decides a control-plane action of the calling key; a refusal
// is E2B's 403 and audited as denied.
func (s *Server) governCall(c *call, a *govern.Action) error {
	a.Principal, a.RequestID, a.Credential = actorOf(c.ident), c.reqID, &govern.Checked{Identity: c.ident}
	gov, err := s.decide(c.r.Context(), a)
	if gov != nil {
		c.governed = gov
	}
	if err != nil && refusedByPolicy(err) {
		return &apiError{status: http.StatusForbidden, message: publicMessage(err), denied: true, cause: err}
	}
	return err
}

// governLifecycle decides a lifecycle action (sandbox.lifecycle) on sb.
func (s *Server) governLifecycle(c *call, sb store.Sandbox, l *govern.Lifecycle) error {
	return s.governCall(c, &govern.Action{Kind: govern.KindLifecycle, SandboxID: sb.ID, Sandbox: sandboxInfo(sb), Lifecycle: l})
}

// governPort decides one request to a user port (port.preview: port,
// method, the path the program sees, and how it was let in: "token" or
// "public"). ident is the key the sandbox's tokens are bound to ("token"),
// the zero identity for a public port. A refusal is answered here (E2B's
// error JSON, 403) and audited as e2b.port.proxy with the decision; it
// returns false then. A log_only decision is audited too.
func (s *Server) governPort(w http.ResponseWriter, r *http.Request, sb store.Sandbox, ident auth.Identity, port int, via string) bool {
	if s.cfg.Govern == nil {
		return true
	}
	a := &govern.Action{Kind: govern.KindPortPreview, RequestID: w.Header().Get("X-Request-Id"),
		SandboxID: sb.ID, Sandbox: sandboxInfo(sb), Port: govern.NewPreview(port, r.Method, r.URL.Path, via)}
	if via != "public" {
		a.Principal, a.Credential = actorOf(ident), &govern.Checked{Identity: ident}
	}
	detail := map[string]any{}
	gov, err := s.decide(r.Context(), a)
	if err == nil && (len(gov) == 0 || gov[0].Decision.Outcome != govern.LogOnly) {
		return true
	}
	outcome := govern.AuditSuccess
	if err != nil {
		outcome = govern.AuditDenied
		if !refusedByPolicy(err) {
			outcome = govern.AuditError
			detail["error"] = err.Error()
		}
		status := http.StatusForbidden
		if outcome == govern.AuditError {
			status = http.StatusInternalServerError
			s.log.Error("e2b: govern port request", "sandbox", sb.ID, "port", port, "err", err)
		}
		writeJSON(w, status, map[string]any{"sandboxId": sb.ID, "code": status, "message": publicMessage(err)})
		detail["status"] = status
	}
	detail["method"], detail["path"], detail["port"], detail["auth"] = r.Method, r.URL.Path, port, via
	s.appendAudit(r.Context(), a.RequestID, a.Principal.ID, "e2b.port.proxy", sb.ID, outcome, detail, gov)
	return err == nil
}

// errUngovernable is a request the proxy cannot describe (a body it cannot
// decode, or one too large): refused, never forwarded undecided.
type errUngovernable struct{ msg string }

func (e *errUngovernable) Error() string { return e.msg }

func ungovernable(format string, args ...any) error {
	return &errUngovernable{fmt.Sprintf(format, args...)}
}

// readBounded reads r's body (at most maxGovernedBody bytes) and puts the
// same bytes back for forwarding.
func readBounded(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxGovernedBody+1))
	r.Body.Close()
	if err != nil {
		return nil, ungovernable("read request body: %v", err)
	}
	if len(b) > maxGovernedBody {
		return nil, ungovernable("request body over %d bytes", maxGovernedBody)
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.ContentLength = int64(len(b))
	r.Header.Set("Content-Length", strconv.Itoa(len(b)))
	r.Header.Del("Transfer-Encoding")
	r.TransferEncoding = nil
	return b, nil
}

// connectStreaming reports whether a Connect procedure is streaming (its
// request is enveloped, its errors end the stream).
func connectStreaming(procedure string) bool {
	switch procedure {
	case processpbconnect.ProcessStartProcedure, processpbconnect.ProcessConnectProcedure,
		processpbconnect.ProcessStreamInputProcedure, filesystempbconnect.FilesystemWatchDirProcedure:
		return true
	}
	return false
}

// decodeConnect decodes the one request message of a unary or
// server-streaming Connect call into msg: JSON (application/json,
// application/connect+json) or protobuf (application/proto,
// application/connect+proto), gzip-compressed or not. Streaming requests
// are one envelope: [flags 1B][length u32 BE][message].
func decodeConnect(contentType, encoding string, streaming bool, body []byte, msg proto.Message) error {
	mt, _, _ := mime.ParseMediaType(contentType)
	var isJSON bool
	switch {
	case !streaming && mt == "application/json", streaming && mt == "application/connect+json":
		isJSON = true
	case !streaming && mt == "application/proto", streaming && mt == "application/connect+proto":
	default:
		return ungovernable("unsupported content type %q for a governed procedure", contentType)
	}
	compressed := false
	if streaming {
		if len(body) < 5 {
			return ungovernable("short envelope")
		}
		flags, n := body[0], binary.BigEndian.Uint32(body[1:5])
		if flags&^0x01 != 0 {
			return ungovernable("unexpected envelope flags %#x", flags)
		}
		if uint64(n) != uint64(len(body)-5) {
			return ungovernable("want exactly one request message")
		}
		body, compressed = body[5:], flags&0x01 != 0
	} else {
		compressed = encoding != "" && encoding != "identity"
	}
	if compressed {
		if encoding != "gzip" {
			return ungovernable("unsupported compression %q", encoding)
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return ungovernable("gzip: %v", err)
		}
		b, err := io.ReadAll(io.LimitReader(zr, maxGovernedBody+1))
		if err != nil {
			return ungovernable("gzip: %v", err)
		}
		if len(b) > maxGovernedBody {
			return ungovernable("decompressed message over %d bytes", maxGovernedBody)
		}
		body = b
	}
	var err error
	if isJSON {
		err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(body, msg)
	} else {
		err = proto.Unmarshal(body, msg)
	}
	if err != nil {
		return ungovernable("decode request: %v", err)
	}
	return nil
}

// homeOf is where the agent resolves relative paths of user: the home
// directory of E2B's and Warden's templates ("" is the default user,
// "user").
func homeOf(user string) string {
	switch user {
	case "root":
		return "/root"
	case "":
		return "/home/user"
	}
	return "/home/" + user
}

// filePath is a path as the agent resolves it (sysuser.User.Resolve), clean
// and absolute.
func filePath(p, user string) string {
	switch {
	case p == "" || p == "~":
		return homeOf(user)
	case strings.HasPrefix(p, "~/"):
		return path.Join(homeOf(user), p[2:])
	}
	return govern.CleanPath(p, homeOf(user))
}

// connectEncoding is the compression of a Connect request's message.
func connectEncoding(h http.Header, streaming bool) string {
	if streaming {
		return h.Get("Connect-Content-Encoding")
	}
	return h.Get("Content-Encoding")
}

// describeRPC describes a governed Connect call; nil actions for a route
// that is not an action (see proxyKinds).
func describeRPC(r *http.Request, procedure, user string) ([]*govern.Action, error) {
	var msg proto.Message
	switch procedure {
	case processpbconnect.ProcessStartProcedure:
		msg = &process.StartRequest{}
	case filesystempbconnect.FilesystemStatProcedure:
		msg = &filesystem.StatRequest{}
	case filesystempbconnect.FilesystemListDirProcedure:
		msg = &filesystem.ListDirRequest{}
	case filesystempbconnect.FilesystemWatchDirProcedure:
		msg = &filesystem.WatchDirRequest{}
	case filesystempbconnect.FilesystemCreateWatcherProcedure:
		msg = &filesystem.CreateWatcherRequest{}
	case filesystempbconnect.FilesystemMakeDirProcedure:
		msg = &filesystem.MakeDirRequest{}
	case filesystempbconnect.FilesystemMoveProcedure:
		msg = &filesystem.MoveRequest{}
	case filesystempbconnect.FilesystemRemoveProcedure:
		msg = &filesystem.RemoveRequest{}
	default:
		return nil, nil
	}
	if r.Method != http.MethodPost {
		return nil, ungovernable("%s %s: only POST is served", r.Method, procedure)
	}
	body, err := readBounded(r)
	if err != nil {
		return nil, err
	}
	streaming := connectStreaming(procedure)
	if err := decodeConnect(r.Header.Get("Content-Type"), connectEncoding(r.Header, streaming), streaming, body, msg); err != nil {
		return nil, err
	}
	return []*govern.Action{describeMessage(msg, user)}, nil
}

// describeMessage is the action of a decoded Connect request.
func describeMessage(msg proto.Message, user string) *govern.Action {
	file := func(kind govern.Kind, op, p string) *govern.Action {
		return &govern.Action{Kind: kind, File: govern.NewFile(op, filePath(p, user), "", 0)}
	}
	switch m := msg.(type) {
	case *process.StartRequest:
		pc := m.GetProcess()
		argv := append([]string{pc.GetCmd()}, pc.GetArgs()...)
		var envKeys []string
		for k := range pc.GetEnvs() {
			envKeys = append(envKeys, k)
		}
		slices.Sort(envKeys)
		cwd := ""
		if pc != nil && pc.Cwd != nil {
			cwd = filePath(pc.GetCwd(), user)
		}
		a := &govern.Action{Kind: govern.KindExec, Exec: govern.NewExec(argv, cwd, user, envKeys)}
		if len(pc.GetEnvs()) > 0 {
			a.Payload = &govern.Payload{Env: pc.GetEnvs()} // the guard screens env values (never recorded)
		}
		if m.Pty != nil {
			a.Kind = govern.KindPTY
		}
		return a
	case *filesystem.StatRequest:
		return file(govern.KindFileRead, "stat", m.GetPath())
	case *filesystem.ListDirRequest:
		return file(govern.KindFileRead, "list", m.GetPath())
	case *filesystem.WatchDirRequest:
		return file(govern.KindFileRead, "watch", m.GetPath())
	case *filesystem.CreateWatcherRequest:
		return file(govern.KindFileRead, "watch", m.GetPath())
	case *filesystem.MakeDirRequest:
		return file(govern.KindFileWrite, "mkdir", m.GetPath())
	case *filesystem.MoveRequest:
		a := file(govern.KindFileWrite, "move", m.GetSource())
		a.File.Dest = filePath(m.GetDestination(), user)
		return a
	case *filesystem.RemoveRequest:
		return file(govern.KindFileRemove, "remove", m.GetPath())
	}
	return nil
}

// maxUploadParts bounds the file parts of a multipart upload the proxy
// describes (the agent's own bound is lower).
const maxUploadParts = 1000

// describeFiles describes GET /files (a read) and POST /files (a write
// per file: the path query, or each multipart part's filename when there
// is none). A multipart upload without a path is spooled to an unlinked
// temporary file while its part names are read, then forwarded from it;
// the returned cleanup closes it when the request is refused (forwarded,
// the transport closes it).
func describeFiles(r *http.Request, user string) ([]*govern.Action, func(), error) {
	q := r.URL.Query().Get("path")
	switch r.Method {
	case http.MethodGet:
		return []*govern.Action{{Kind: govern.KindFileRead, File: govern.NewFile("read", filePath(q, user), "", 0)}}, nil, nil
	case http.MethodPost:
	default:
		return nil, nil, nil // the agent refuses other methods
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if q != "" || mt != "multipart/form-data" {
		f := govern.NewFile("write", filePath(q, user), "", r.ContentLength)
		return []*govern.Action{{Kind: govern.KindFileWrite, File: f}}, nil, nil
	}
	tmp, err := os.CreateTemp("", "warden-e2b-upload-")
	if err != nil {
		return nil, nil, fmt.Errorf("spool upload: %w", err)
	}
	os.Remove(tmp.Name()) // unlinked: nothing left behind, whatever happens
	cleanup := func() { tmp.Close() }
	acts, err := multipartActions(io.TeeReader(r.Body, tmp), params["boundary"], user)
	if err == nil {
		_, err = io.Copy(tmp, r.Body) // what follows the last part
	}
	r.Body.Close()
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = tmp.Seek(0, io.SeekStart)
	}
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("spool upload: %w", err)
	}
	r.Body = tmp // the transport closes it
	r.ContentLength = size
	r.Header.Set("Content-Length", strconv.FormatInt(size, 10))
	r.Header.Del("Transfer-Encoding")
	r.TransferEncoding = nil
	return acts, cleanup, nil
}

// multipartActions reads a multipart upload and describes a write per
// file part, named by its raw filename as the agent reads it.
func multipartActions(body io.Reader, boundary, user string) ([]*govern.Action, error) {
	if boundary == "" {
		return nil, ungovernable("multipart body without boundary")
	}
	mr := multipart.NewReader(body, boundary)
	var acts []*govern.Action
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return acts, nil
		}
		if err != nil {
			return nil, ungovernable("read multipart body: %v", err)
		}
		if part.FormName() != "file" {
			continue
		}
		if len(acts) >= maxUploadParts {
			return nil, ungovernable("more than %d file parts", maxUploadParts)
		}
		_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		if err != nil || params["filename"] == "" {
			return nil, ungovernable("file part without a filename and no path query parameter")
		}
		n, err := io.Copy(io.Discard, part)
		if err != nil {
			return nil, ungovernable("read multipart body: %v", err)
		}
		acts = append(acts, &govern.Action{Kind: govern.KindFileWrite,
			File: govern.NewFile("write", filePath(params["filename"], user), "", n)})
	}
}

// describeCode describes the code interpreter's POST /execute (code.run
// of its language and code) and POST /contexts (a new context: code.run
// of its language with no code).
func describeCode(r *http.Request, p string) ([]*govern.Action, error) {
	if r.Method != http.MethodPost || (p != "/execute" && p != "/contexts") {
		return nil, nil
	}
	body, err := readBounded(r)
	if err != nil {
		return nil, err
	}
	var q struct {
		Code     string `json:"code"`
		Language string `json:"language"`
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &q); err != nil {
			return nil, ungovernable("invalid JSON body: %v", err)
		}
	}
	if p == "/contexts" {
		q.Code = ""
	}
	return []*govern.Action{{Kind: govern.KindCodeRun, Code: govern.NewCode(q.Language, q.Code)}}, nil
}

// connectError writes a Connect error: for a unary call HTTP status and a
// JSON body {"code","message"}; for a streaming one a 200 whose only
// message is the end-stream envelope (flags 0x02) carrying the error.
func connectError(w http.ResponseWriter, r *http.Request, streaming bool, status int, code, msg string) {
	if !streaming {
		writeJSON(w, status, map[string]any{"code": code, "message": msg})
		return
	}
	end, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "message": msg}})
	ct := "application/connect+json"
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/connect+proto" {
		ct = mt
	}
	buf := make([]byte, 5, 5+len(end))
	buf[0] = 0x02
	binary.BigEndian.PutUint32(buf[1:], uint32(len(end)))
	buf = append(buf, end...)
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	w.Write(buf)
}

// refuseProxied answers a refused (or undescribable) proxied request in
// the form of its route: Connect permission_denied (invalid_argument for
// a body that cannot be decoded) on envd's RPC routes, E2B's error JSON
// elsewhere. It returns the HTTP status for the audit event.
func refuseProxied(w http.ResponseWriter, r *http.Request, p string, err error) int {
	status, code, msg := http.StatusForbidden, "permission_denied", publicMessage(err)
	var ue *errUngovernable
	switch {
	case errors.As(err, &ue):
		status, code, msg = http.StatusBadRequest, "invalid_argument", "cannot govern this request: "+ue.msg
	case !refusedByPolicy(err):
		ae := toAPIError(err)
		status, msg = ae.status, ae.message
		code = "internal"
		if status == http.StatusForbidden {
			code = "permission_denied"
		} else if status == http.StatusNotFound {
			code = "not_found"
		} else if status < 500 {
			code = "invalid_argument"
		}
	}
	if rpcProcedures[p] {
		streaming := connectStreaming(p)
		connectError(w, r, streaming, status, code, msg)
		if streaming {
			return http.StatusOK
		}
		return status
	}
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
	return status
}

// governProxied describes a proxied request's actions and decides each,
// as the key the sandbox's tokens are bound to (ident). It returns the
// audit detail of the allowed request and its decided actions (the audit
// log records the first under govern.AuditKey, a multipart upload's
// further files under govern.GovernMoreKey), or false once it has answered
// a refused or undescribable request, which it audits.
func (s *Server) governProxied(w http.ResponseWriter, r *http.Request, sb store.Sandbox, ident auth.Identity,
	p string, port int, user, authBy string) (map[string]any, []govern.Decided, bool) {
	var (
		acts    []*govern.Action
		cleanup func()
		err     error
	)
	reqID := w.Header().Get("X-Request-Id")
	var records []govern.Decided
	switch {
	case port == PortEnvd && p == "/files" && r.Method == http.MethodPost && s.guardsWrites():
		records, cleanup, err = s.governUpload(r, sb, ident, user, reqID) // guard.go
	case port == PortEnvd && p == "/files":
		acts, cleanup, err = describeFiles(r, user)
	case port == PortEnvd:
		acts, err = describeRPC(r, p, user)
	default:
		acts, err = describeCode(r, p)
	}
	detail := map[string]any{"principal": ident.Principal.ID}
	for _, a := range acts {
		if err != nil {
			break
		}
		a.Principal, a.RequestID, a.Credential = actorOf(ident), reqID, &govern.Checked{Identity: ident}
		a.SandboxID, a.Sandbox = sb.ID, sandboxInfo(sb)
		var gov []govern.Decided
		gov, err = s.decide(r.Context(), a)
		records = append(records, gov...)
	}
	// The decisive record (the refusal, else the first) is the event's;
	// an allowed request's others follow it.
	if err != nil && len(records) > 0 {
		records = records[len(records)-1:]
	}
	if err == nil {
		return detail, records, true
	}
	if cleanup != nil {
		cleanup()
	}
	status := refuseProxied(w, r, p, err)
	outcome := govern.AuditDenied
	var ue *errUngovernable
	if errors.As(err, &ue) || !refusedByPolicy(err) {
		outcome = govern.AuditError
		detail["error"] = err.Error()
		if toAPIError(err).denied || toAPIError(err).status == http.StatusForbidden {
			outcome = govern.AuditDenied
		}
	}
	delete(detail, "principal")
	detail["method"], detail["path"], detail["port"], detail["status"], detail["auth"] = r.Method, p, port, status, authBy
	s.appendAudit(r.Context(), reqID, ident.Principal.ID, "e2b.envd", sb.ID, outcome, detail, records)
	return nil, nil, false
}

// createAttrs are the sandbox.create attributes of an E2B create request.
func createAttrs(tmpl string, q newSandboxRequest, netp *network.Policy) *govern.SandboxCreate {
	c := &govern.SandboxCreate{Template: tmpl, Network: govern.Network{Mode: string(network.ModeNone)}}
	if q.Timeout != nil {
		c.Limits.TimeoutSeconds = *q.Timeout
	}
	if netp != nil {
		c.Network.Mode = string(netp.Mode)
		for _, a := range netp.Allow {
			c.Network.Allow = append(c.Network.Allow, cmp.Or(a.Host, a.CIDR))
		}
	}
	for k := range q.EnvVars {
		c.EnvKeys = append(c.EnvKeys, k)
	}
	slices.Sort(c.EnvKeys)
	return c
}
