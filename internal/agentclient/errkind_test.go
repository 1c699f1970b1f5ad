package agentclient_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/warden-sandbox/warden/internal/agentclient"
	process "github.com/warden-sandbox/warden/internal/agentpb/process"
	"github.com/warden-sandbox/warden/internal/agentpb/process/processpbconnect"
	"github.com/warden-sandbox/warden/internal/api/apierr"
)

// failingAgent answers SendSignal for pid N with errs[N] (pid 99 waits
// for the caller's deadline), Start with an error, and GET /files with a
// 404 JSON body.
type failingAgent struct {
	processpbconnect.UnimplementedProcessHandler
	errs map[uint32]error
}

func (a *failingAgent) SendSignal(ctx context.Context, r *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	if r.Msg.GetProcess().GetPid() == 99 { // too slow
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Second):
			return nil, errors.New("the client did not give up")
		}
	}
	return nil, a.errs[r.Msg.GetProcess().GetPid()]
}

func (a *failingAgent) Start(context.Context, *connect.Request[process.StartRequest], *connect.ServerStream[process.StartResponse]) error {
	return connect.NewError(connect.CodeInvalidArgument, errors.New("start: cwd /x: not a directory"))
}

func startAgent(t *testing.T, a *failingAgent) *agentclient.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(processpbconnect.NewProcessHandler(a))
	mux.HandleFunc("GET /files", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"code":404,"message":"open /x: no such file or directory"}`))
	})
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &protos}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	t.Cleanup(c.Close)
	return c
}

// TestAgentErrorKinds drives real Connect and HTTP answers of an agent
// through the client and checks what the native API makes of them: the
// kinds are attached by the client (its interceptor and transport), and
// the Connect error stays reachable.
func TestAgentErrorKinds(t *testing.T) {
	a := &failingAgent{errs: map[uint32]error{
		1: connect.NewError(connect.CodeNotFound, errors.New("process with pid 1 not found")),
		2: connect.NewError(connect.CodePermissionDenied, errors.New("denied")),
		3: connect.NewError(connect.CodeFailedPrecondition, errors.New("stdin is closed")),
		4: connect.NewError(connect.CodeUnknown, errors.New("/host/path")),
		5: connect.NewError(connect.CodeResourceExhausted, errors.New("too many processes")),
		6: connect.NewError(connect.CodeUnauthenticated, errors.New("unknown user bob")),
	}}
	c := startAgent(t, a)
	ctx := context.Background()
	for pid, want := range map[uint32]struct {
		code, msg string
		connect   connect.Code
	}{
		1: {apierr.CodeNotFound, "process with pid 1 not found", connect.CodeNotFound},
		2: {apierr.CodePermissionDenied, "in the sandbox: denied", connect.CodePermissionDenied},
		3: {apierr.CodeConflict, "stdin is closed", connect.CodeFailedPrecondition},
		4: {apierr.CodeInternal, "internal error", connect.CodeUnknown},
		5: {apierr.CodeUnavailable, "too many processes", connect.CodeResourceExhausted},
		6: {apierr.CodeBadRequest, "unknown user bob", connect.CodeUnauthenticated},
	} {
		err := c.Signal(ctx, pid, syscall.SIGTERM)
		e := apierr.From(err)
		if e.Code != want.code || e.Message != want.msg || connect.CodeOf(err) != want.connect {
			t.Errorf("pid %d: %v -> %s %q (connect %s), want %s %q", pid, err, e.Code, e.Message, connect.CodeOf(err), want.code, want.msg)
		}
	}

	// A stream's error, from Receive.
	st, err := c.Start(ctx, agentclient.Cmd{Args: []string{"true"}})
	if err == nil {
		for st.Receive() {
		}
		err = st.Err()
	}
	if e := apierr.From(err); e.Code != apierr.CodeBadRequest || e.Message != "start: cwd /x: not a directory" {
		t.Errorf("stream: %v -> %s %q", err, e.Code, e.Message)
	}

	// An HTTP route's error.
	_, err = c.ReadFile(ctx, "/x", "")
	if e := apierr.From(err); e.Code != apierr.CodeNotFound || e.Message != "open /x: no such file or directory" {
		t.Errorf("files: %v -> %s %q", err, e.Code, e.Message)
	}

	// The agent did not answer in time.
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = c.Signal(tctx, 99, syscall.SIGTERM)
	if e := apierr.From(err); e.Code != apierr.CodeTimeout {
		t.Errorf("deadline: %v -> %s %q", err, e.Code, e.Message)
	}
}

// TestAgentUnreachable checks that failing to reach the agent is
// unavailable, without the transport's text (host paths) in the message.
func TestAgentUnreachable(t *testing.T) {
	c := agentclient.New(func(context.Context) (net.Conn, error) {
		return nil, errors.New("dial unix /run/warden/native/sb-1/agent.sock: connection refused")
	})
	defer c.Close()
	ctx := context.Background()
	_, ferr := c.ReadFile(ctx, "/x", "")
	serr := c.Signal(ctx, 1, syscall.SIGTERM)
	for _, err := range []error{ferr, serr} {
		if e := apierr.From(err); e.Code != apierr.CodeUnavailable || e.Message != "sandbox agent unavailable" {
			t.Errorf("%v -> %s %q", err, e.Code, e.Message)
		}
	}
}
