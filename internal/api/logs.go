package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/warden-sandbox/warden/internal/agent/agentcfg"
	"github.com/warden-sandbox/warden/internal/agentclient"
	processpb "github.com/warden-sandbox/warden/internal/agentpb/process"
	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
)

// logEvent is the LogEvent schema: one chunk of a process's output, or a
// marker (stream "dropped": output lost to the ring buffer before the
// chunks that follow; stream "end": the process exited).
type logEvent struct {
	PID     uint32    `json:"pid"`
	Stream  string    `json:"stream"`
	Data    []byte    `json:"data,omitempty"` // base64
	Dropped int64     `json:"dropped,omitempty"`
	Status  string    `json:"status,omitempty"`
	Time    time.Time `json:"time"`
}

// logError is a log stream's error event.
type logError struct {
	Stream  string `json:"stream"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// logs sends the output the agent keeps of the sandbox's processes (one, or
// all it lists: the template's start command and processes started through
// the API), as NDJSON. Without follow the stream ends with what is buffered;
// with follow it goes on with live output until every process has exited.
func (s *Server) logs(w http.ResponseWriter, r *http.Request) error {
	follow, err := queryBool(r, "follow")
	if err != nil {
		return err
	}
	var pids []uint32
	if v := r.URL.Query().Get("pid"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == 0 {
			return apierr.BadRequest("pid: %q is not a process ID", truncate(v, 32))
		}
		pids = []uint32{uint32(n)}
	}
	st := stateOf(r)
	st.detail["follow"] = follow
	agent, err := s.agentFor(r)
	if err != nil {
		return err
	}
	if pids == nil {
		ctx, cancel := callCtx(r)
		res, err := agent.Process.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
		cancel()
		if err != nil {
			return err
		}
		for _, p := range res.Msg.GetProcesses() {
			pids = append(pids, p.GetPid())
		}
	} else {
		st.detail["pid"] = pids[0]
		if err := s.processExists(r.Context(), agent, pids[0]); err != nil {
			return err
		}
	}
	out := startNDJSON(w)
	s.commitAudit(r, govern.AuditSuccess)
	var mu sync.Mutex
	send := func(v any) error {
		mu.Lock()
		defer mu.Unlock()
		return out.send(v)
	}
	if !follow {
		for _, pid := range pids {
			if err := relayLogs(r.Context(), agent, pid, false, send); err != nil {
				return logsFailed(r, send, err)
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	errs := make(chan error, len(pids))
	for _, pid := range pids {
		go func() { errs <- relayLogs(ctx, agent, pid, true, send) }()
	}
	var first error
	for range pids {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	if first != nil {
		return logsFailed(r, send, first)
	}
	return nil
}

// logsFailed ends a log stream that failed with an error event, unless the
// client went away.
func logsFailed(r *http.Request, send func(any) error, err error) error {
	if errors.Is(err, errClientGone) || r.Context().Err() != nil {
		return nil
	}
	e := apierr.From(err)
	send(logError{Stream: "error", Code: e.Code, Message: e.Message})
	return err
}

// relayLogs sends one process's retained output (then, with follow, its live
// output up to its end) as log events. A process that is gone by now (it
// exited and was forgotten) has no logs left: not an error.
func relayLogs(ctx context.Context, agent *agentclient.Client, pid uint32, follow bool, send func(any) error) error {
	req := connect.NewRequest(&processpb.ConnectRequest{Process: selector(pid), Replay: true})
	if !follow {
		req.Header().Set(agentcfg.SnapshotHeader, "1")
	}
	cs, err := agent.Process.Connect(ctx, req)
	if err != nil {
		if connect.CodeOf(err) == connect.CodeNotFound {
			return nil
		}
		return err
	}
	defer cs.Close()
	ps := connectStream(cs)
	if _, err := ps.first(); err != nil {
		if connect.CodeOf(err) == connect.CodeNotFound {
			return nil
		}
		return err
	}
	if n, _ := strconv.ParseInt(cs.ResponseHeader().Get(agentcfg.DroppedHeader), 10, 64); n > 0 {
		if err := send(logEvent{PID: pid, Stream: "dropped", Dropped: n, Time: time.Now().UTC()}); err != nil {
			return err
		}
	}
	for {
		ev, err := ps.next()
		if err != nil {
			return err
		}
		if ev == nil {
			return nil // a snapshot's end, or the stream after the end event
		}
		var le logEvent
		switch d := ev.GetData().GetOutput().(type) {
		case *processpb.ProcessEvent_DataEvent_Stdout:
			le = logEvent{Stream: "stdout", Data: nonNil(d.Stdout)}
		case *processpb.ProcessEvent_DataEvent_Stderr:
			le = logEvent{Stream: "stderr", Data: nonNil(d.Stderr)}
		case *processpb.ProcessEvent_DataEvent_Pty:
			le = logEvent{Stream: "pty", Data: nonNil(d.Pty)}
		default:
			e := ev.GetEnd()
			if e == nil {
				continue
			}
			le = logEvent{Stream: "end", Status: e.GetStatus()}
		}
		le.PID, le.Time = pid, time.Now().UTC()
		if err := send(le); err != nil {
			return err
		}
		if le.Stream == "end" {
			return nil
		}
	}
}
