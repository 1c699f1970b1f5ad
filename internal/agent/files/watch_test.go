package files

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/warden-sandbox/warden/internal/agentpb/filesystem"
)

type watchStream struct {
	t      *testing.T
	seen   []string // every filesystem event received, "name:TYPE"
	events chan *pb.WatchDirResponse
	cancel context.CancelFunc
	errc   chan error
}

func (e *env) watch(json bool, msg *pb.WatchDirRequest, hdr ...string) *watchStream {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := req(msg, "")
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header().Set(hdr[i], hdr[i+1])
	}
	stream, err := e.client(json).WatchDir(ctx, r)
	if err != nil {
		cancel()
		e.t.Fatal(err)
	}
	ws := &watchStream{t: e.t, events: make(chan *pb.WatchDirResponse, 1000), cancel: cancel, errc: make(chan error, 1)}
	go func() {
		defer close(ws.events)
		for stream.Receive() {
			ws.events <- stream.Msg()
		}
		ws.errc <- stream.Err()
		stream.Close()
	}()
	e.t.Cleanup(cancel)
	// the first message is start, sent once armed
	select {
	case m, ok := <-ws.events:
		if !ok {
			e.t.Fatalf("stream ended before start: %v", <-ws.errc)
		}
		if m.GetStart() == nil {
			e.t.Fatalf("first message %v, want start", m)
		}
	case <-time.After(5 * time.Second):
		e.t.Fatal("no start message")
	}
	return ws
}

// expect waits for a filesystem event with name and type, skipping others.
func (ws *watchStream) expect(name string, typ pb.EventType) *pb.FilesystemEvent {
	ws.t.Helper()
	deadline := time.After(5 * time.Second)
	var seen []string
	for {
		select {
		case m, ok := <-ws.events:
			if !ok {
				ws.t.Fatalf("stream ended waiting for %s %v (seen %v)", name, typ, seen)
			}
			fe := m.GetFilesystem()
			if fe == nil {
				continue
			}
			ws.seen = append(ws.seen, fe.Name+":"+fe.Type.String())
			if fe.Name == name && fe.Type == typ {
				return fe
			}
			seen = append(seen, fe.Name+":"+fe.Type.String())
		case <-deadline:
			ws.t.Fatalf("no %s %v event (seen %v)", name, typ, seen)
		}
	}
}

func TestWatchDir(t *testing.T) {
	for _, json := range []bool{true, false} {
		t.Run(map[bool]string{true: "json", false: "proto"}[json], func(t *testing.T) {
			e := newEnv(t, Config{})
			must(t, os.Mkdir(e.h("w"), 0o755))
			must(t, os.Chown(e.h("w"), testUID, testUID))
			ws := e.watch(json, &pb.WatchDirRequest{Path: "w", IncludeEntry: true})

			must(t, os.WriteFile(e.h("w", "a.txt"), nil, 0o644))
			fe := ws.expect("a.txt", pb.EventType_EVENT_TYPE_CREATE)
			if fe.Entry == nil || fe.Entry.Path != e.h("w", "a.txt") {
				t.Fatalf("create event without entry: %v", fe)
			}
			f, err := os.OpenFile(e.h("w", "a.txt"), os.O_WRONLY, 0)
			must(t, err)
			f.WriteString("data")
			f.Close()
			ws.expect("a.txt", pb.EventType_EVENT_TYPE_WRITE)
			must(t, os.Chmod(e.h("w", "a.txt"), 0o600))
			ws.expect("a.txt", pb.EventType_EVENT_TYPE_CHMOD)
			must(t, os.Rename(e.h("w", "a.txt"), e.h("w", "b.txt")))
			ws.expect("a.txt", pb.EventType_EVENT_TYPE_RENAME)
			ws.expect("b.txt", pb.EventType_EVENT_TYPE_CREATE)
			must(t, os.Remove(e.h("w", "b.txt")))
			fe = ws.expect("b.txt", pb.EventType_EVENT_TYPE_REMOVE)
			if fe.Entry != nil {
				t.Fatalf("entry for a removed file: %v", fe)
			}

			// an atomic upload shows as its own name only, not the
			// temporary file
			resp, body := e.do(e.h2, "POST", e.url("/files", "path", "w/up.txt", "atomic", "true"), stringsReader("u"), "Content-Type", "application/octet-stream")
			wantStatus(t, resp, body, 200)
			fe = ws.expect("up.txt", pb.EventType_EVENT_TYPE_CREATE)
			if fe.Entry == nil || fe.Entry.Size != 1 {
				t.Fatalf("upload event %v", fe)
			}

			// not recursive: nothing from a subdirectory's contents
			must(t, os.Mkdir(e.h("w", "sub"), 0o755))
			ws.expect("sub", pb.EventType_EVENT_TYPE_CREATE)
			must(t, os.WriteFile(e.h("w", "sub", "inner"), nil, 0o644))
			must(t, os.WriteFile(e.h("w", "marker"), nil, 0o644))
			ws.expect("marker", pb.EventType_EVENT_TYPE_CREATE)
			for _, n := range ws.seen {
				if strings.Contains(n, "inner") || strings.Contains(n, ".warden-") {
					t.Fatalf("unexpected event %s (all: %v)", n, ws.seen)
				}
			}
		})
	}
}

func TestWatchDirRecursive(t *testing.T) {
	e := newEnv(t, Config{})
	must(t, os.MkdirAll(e.h("r", "old"), 0o755))
	ws := e.watch(true, &pb.WatchDirRequest{Path: e.h("r"), Recursive: true})

	must(t, os.WriteFile(e.h("r", "old", "f"), nil, 0o644))
	ws.expect("old/f", pb.EventType_EVENT_TYPE_CREATE)

	// a directory created after the watch started is watched too
	must(t, os.Mkdir(e.h("r", "new"), 0o755))
	ws.expect("new", pb.EventType_EVENT_TYPE_CREATE)
	time.Sleep(100 * time.Millisecond)
	must(t, os.WriteFile(e.h("r", "new", "g"), []byte("x"), 0o644))
	ws.expect("new/g", pb.EventType_EVENT_TYPE_CREATE)

	// mkdir -p: the inner levels are reported even if made before the watch
	must(t, os.MkdirAll(e.h("r", "p", "q", "s"), 0o755))
	ws.expect("p", pb.EventType_EVENT_TYPE_CREATE)
	ws.expect("p/q/s", pb.EventType_EVENT_TYPE_CREATE)
	time.Sleep(100 * time.Millisecond)
	must(t, os.WriteFile(e.h("r", "p", "q", "s", "deep"), nil, 0o644))
	ws.expect("p/q/s/deep", pb.EventType_EVENT_TYPE_CREATE)

	// a renamed directory keeps being watched under its new name
	must(t, os.Rename(e.h("r", "p"), e.h("r", "p2")))
	ws.expect("p", pb.EventType_EVENT_TYPE_RENAME)
	ws.expect("p2", pb.EventType_EVENT_TYPE_CREATE)
	time.Sleep(100 * time.Millisecond)
	must(t, os.WriteFile(e.h("r", "p2", "q", "after"), nil, 0o644))
	ws.expect("p2/q/after", pb.EventType_EVENT_TYPE_CREATE)

	must(t, os.RemoveAll(e.h("r", "new")))
	ws.expect("new/g", pb.EventType_EVENT_TYPE_REMOVE)
	ws.expect("new", pb.EventType_EVENT_TYPE_REMOVE)
}

func TestWatchDirKeepalive(t *testing.T) {
	e := newEnv(t, Config{})
	ws := e.watch(true, &pb.WatchDirRequest{Path: "~"}, "Keepalive-Ping-Interval", "1")
	select {
	case m := <-ws.events:
		if m.GetKeepalive() == nil {
			t.Fatalf("want keepalive, got %v", m)
		}
	case <-time.After(4 * time.Second):
		t.Fatal("no keepalive")
	}
	// the stream ends with the client
	ws.cancel()
	select {
	case <-ws.errc:
	case <-time.After(5 * time.Second):
		t.Fatal("stream did not end")
	}
}

func TestWatchDirErrors(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	e.write(e.h("file"), "", 0o644, testUID)
	must(t, os.Mkdir(e.p("private"), 0o700))
	for _, c := range []struct {
		path string
		code connect.Code
	}{
		{"missing", connect.CodeNotFound},
		{"file", connect.CodeInvalidArgument},
		{e.p("private"), connect.CodePermissionDenied},
	} {
		stream, err := e.client(true).WatchDir(ctx, req(&pb.WatchDirRequest{Path: c.path}, ""))
		if err == nil {
			for stream.Receive() {
			}
			err = stream.Err()
		}
		wantCode(t, err, c.code)
		_, err = e.client(false).CreateWatcher(ctx, req(&pb.CreateWatcherRequest{Path: c.path}, ""))
		wantCode(t, err, c.code)
	}
}

func TestPollingWatcher(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	c := e.client(true)
	must(t, os.Mkdir(e.h("pw"), 0o755))
	must(t, os.Chown(e.h("pw"), testUID, testUID))
	res, err := c.CreateWatcher(ctx, req(&pb.CreateWatcherRequest{Path: "pw", Recursive: true, IncludeEntry: true}, ""))
	must(t, err)
	id := res.Msg.WatcherId

	must(t, os.Mkdir(e.h("pw", "d"), 0o755))
	time.Sleep(100 * time.Millisecond)
	must(t, os.WriteFile(e.h("pw", "d", "x"), []byte("1"), 0o644))
	var got []string
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		ev, err := c.GetWatcherEvents(ctx, req(&pb.GetWatcherEventsRequest{WatcherId: id}, ""))
		must(t, err)
		for _, fe := range ev.Msg.Events {
			got = append(got, fe.Name+":"+fe.Type.String())
			if fe.Entry == nil && fe.Type == pb.EventType_EVENT_TYPE_CREATE {
				t.Fatalf("no entry: %v", fe)
			}
		}
		if strings.Contains(strings.Join(got, " "), "d/x:EVENT_TYPE_WRITE") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	all := strings.Join(got, " ")
	for _, want := range []string{"d:EVENT_TYPE_CREATE", "d/x:EVENT_TYPE_CREATE", "d/x:EVENT_TYPE_WRITE"} {
		if !strings.Contains(all, want) {
			t.Fatalf("events %v lack %s", got, want)
		}
	}
	// events are handed out once
	ev, err := c.GetWatcherEvents(ctx, req(&pb.GetWatcherEventsRequest{WatcherId: id}, ""))
	must(t, err)
	if len(ev.Msg.Events) != 0 {
		t.Fatalf("events again: %v", ev.Msg.Events)
	}
	_, err = c.RemoveWatcher(ctx, req(&pb.RemoveWatcherRequest{WatcherId: id}, ""))
	must(t, err)
	_, err = c.GetWatcherEvents(ctx, req(&pb.GetWatcherEventsRequest{WatcherId: id}, ""))
	wantCode(t, err, connect.CodeNotFound)
	_, err = c.RemoveWatcher(ctx, req(&pb.RemoveWatcherRequest{WatcherId: id}, ""))
	wantCode(t, err, connect.CodeNotFound)
}
