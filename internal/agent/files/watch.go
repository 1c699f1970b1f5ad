package files

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
	pb "github.com/warden-sandbox/warden/internal/agentpb/filesystem"
)

// DefaultKeepalive is the keepalive interval of WatchDir streams whose
// request carries no Keepalive-Ping-Interval header (envd's default).
const DefaultKeepalive = 90 * time.Second

// dedupeWindow: an event identical to the previous one for the same name
// within this window is dropped. It merges the duplicates inotify produces
// for watched subdirectories (a chmod reported by the parent and by the
// directory itself; a rename seen as moved-from and move-self) and bursts of
// writes.
const dedupeWindow = 100 * time.Millisecond

// watch is one armed inotify watch on a directory tree, shared by the
// streaming and the polling forms. Its methods are not safe for concurrent
// use, except close.
type watch struct {
	gens         *writeGens
	u            *sysuser.User
	root         string
	recursive    bool
	includeEntry bool
	fsw          *fsnotify.Watcher
	dirs         map[string]struct{} // watched directories
	last         map[string]lastEvent
}

type lastEvent struct {
	typ pb.EventType
	at  time.Time
	gen uint64 // the agent's write generation of the path then
}

// writeGens numbers the agent's own in-place writes per path (an upload
// to /files), so a watcher does not merge the WRITE of one upload into the
// previous one's when they come within dedupeWindow: each upload is its
// own write, as on envd.
type writeGens struct {
	mu  sync.Mutex
	seq uint64
	m   map[string]uint64
}

// bump marks the start of a write to p.
func (g *writeGens) bump(p string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil || len(g.m) > 4096 {
		g.m = map[string]uint64{} // numbers stay unique: seq goes on
	}
	g.seq++
	g.m[p] = g.seq
}

func (g *writeGens) get(p string) uint64 {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m[p]
}

// newWatch arms a watch on root (and, recursive, every directory below it).
func newWatch(gens *writeGens, u *sysuser.User, root string, recursive, includeEntry, allowNetwork bool) (*watch, error) {
	w := &watch{
		gens: gens, u: u, root: root, recursive: recursive, includeEntry: includeEntry,
		dirs: map[string]struct{}{}, last: map[string]lastEvent{},
	}
	// Created outside AsFS: fsnotify starts a reader goroutine, which only
	// reads the inotify descriptor.
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, pathErr("watch", root, err)
	}
	w.fsw = fsw
	err = u.AsFS(func() error {
		var st unix.Stat_t
		if err := unix.Stat(root, &st); err != nil {
			return pathErr("watch", root, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return invalidf("watch %s: not a directory", root)
		}
		if !allowNetwork && isNetworkMount(root) {
			return connect.NewError(connect.CodeFailedPrecondition,
				errors.New("watch "+root+": watching network mounts is not supported"))
		}
		if err := w.add(root); err != nil {
			return err
		}
		if recursive {
			w.addBelow(root, false)
		}
		return nil
	})
	if err != nil {
		fsw.Close()
		return nil, err
	}
	return w, nil
}

func (w *watch) close() { w.fsw.Close() }

// add watches dir; the caller holds the user's identity.
func (w *watch) add(dir string) error {
	if err := w.fsw.Add(dir); err != nil {
		return pathErr("watch", dir, err)
	}
	w.dirs[dir] = struct{}{}
	return nil
}

// addBelow watches every directory below dir (not following symlinks) and,
// with emit, returns CREATE events for everything found there: entries made
// in a new directory before its watch was armed ("mkdir -p a/b/c", a
// directory moved in) would otherwise go unreported. Directories the user
// cannot read are skipped. The caller holds the user's identity.
func (w *watch) addBelow(dir string, emit bool) []*pb.FilesystemEvent {
	var evs []*pb.FilesystemEvent
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		if emit {
			evs = append(evs, w.event(p, pb.EventType_EVENT_TYPE_CREATE)...)
		}
		if d.IsDir() {
			if w.add(p) != nil {
				return filepath.SkipDir
			}
		}
		return nil
	})
	return evs
}

// forget drops the watches on dir and below (a directory removed or moved
// away; its new name, if still inside the tree, arrives as a CREATE).
func (w *watch) forget(dir string) {
	for d := range w.dirs {
		if d == dir || strings.HasPrefix(d, dir+"/") {
			w.fsw.Remove(d) // the kernel may have dropped it already
			delete(w.dirs, d)
		}
	}
}

var opTypes = []struct {
	op  fsnotify.Op
	typ pb.EventType
}{
	{fsnotify.Create, pb.EventType_EVENT_TYPE_CREATE},
	{fsnotify.Write, pb.EventType_EVENT_TYPE_WRITE},
	{fsnotify.Remove, pb.EventType_EVENT_TYPE_REMOVE},
	{fsnotify.Rename, pb.EventType_EVENT_TYPE_RENAME},
	{fsnotify.Chmod, pb.EventType_EVENT_TYPE_CHMOD},
}

// handle turns one fsnotify event into the events to report, keeping the
// recursive watch set up to date.
func (w *watch) handle(ev fsnotify.Event) []*pb.FilesystemEvent {
	var evs []*pb.FilesystemEvent
	w.u.AsFS(func() error {
		for _, ot := range opTypes {
			if !ev.Op.Has(ot.op) {
				continue
			}
			evs = append(evs, w.event(ev.Name, ot.typ)...)
			if !w.recursive {
				continue
			}
			switch ot.typ {
			case pb.EventType_EVENT_TYPE_CREATE:
				var st unix.Stat_t
				if unix.Lstat(ev.Name, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
					w.forget(ev.Name) // stale watches of a directory moved here
					if w.add(ev.Name) == nil {
						evs = append(evs, w.addBelow(ev.Name, true)...)
					}
				}
			case pb.EventType_EVENT_TYPE_REMOVE, pb.EventType_EVENT_TYPE_RENAME:
				w.forget(ev.Name)
			}
		}
		return nil
	})
	return evs
}

// event builds the event for the absolute path p, or nothing when it is a
// duplicate. The caller holds the user's identity.
func (w *watch) event(p string, typ pb.EventType) []*pb.FilesystemEvent {
	rel, err := filepath.Rel(w.root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil
	}
	if isTempName(filepath.Base(p)) {
		// The agent's own upload in progress: its rename into place
		// reports the real name.
		return nil
	}
	now := time.Now()
	gen := w.gens.get(p)
	if prev, ok := w.last[rel]; ok && prev.typ == typ && now.Sub(prev.at) < dedupeWindow && prev.gen == gen {
		return nil
	}
	if len(w.last) > 4096 {
		clear(w.last)
	}
	w.last[rel] = lastEvent{typ, now, gen}
	e := &pb.FilesystemEvent{Name: rel, Type: typ}
	if w.includeEntry {
		if info, err := entryInfo(p); err == nil {
			e.Entry = info
		}
	}
	return []*pb.FilesystemEvent{e}
}

// isNetworkMount reports whether p is on a network filesystem, where inotify
// misses changes made by other clients.
func isNetworkMount(p string) bool {
	var sf unix.Statfs_t
	if unix.Statfs(p, &sf) != nil {
		return false
	}
	switch uint32(sf.Type) {
	case 0x6969, // NFS
		0x517b,     // SMB
		0xff534d42, // CIFS
		0xfe534d42, // SMB2
		0x5346414f, // AFS
		0x6b414653, // kAFS
		0x73757245, // Coda
		0x564c,     // NCP
		0x00c36400, // Ceph
		0x47504653, // GPFS
		0x013111a8: // IBRIX
		return true
	}
	return false
}

// keepaliveInterval reads the Keepalive-Ping-Interval header (seconds).
func keepaliveInterval(h http.Header) time.Duration {
	if v := h.Get("Keepalive-Ping-Interval"); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 && f < 1e6 {
			return time.Duration(f * float64(time.Second))
		}
	}
	return DefaultKeepalive
}

// WatchDir streams the changes in a directory: first a start message once
// the watch is armed, then filesystem events and keepalives, until the
// client goes away or the request deadline passes.
func (s *Service) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	u, err := s.rpcUser(req.Header())
	if err != nil {
		return err
	}
	m := req.Msg
	w, err := newWatch(&s.gens, u, s.resolve(u, m.GetPath()), m.GetRecursive(), m.GetIncludeEntry(), m.GetAllowNetworkMounts())
	if err != nil {
		return rpcError(err)
	}
	defer w.close()
	if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	interval := keepaliveInterval(req.Header())
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return rpcError(ctx.Err())
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return connect.NewError(connect.CodeInternal, errors.New("watcher closed"))
			}
			for _, e := range w.handle(ev) {
				if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: e}}); err != nil {
					return err
				}
				timer.Reset(interval)
			}
		case <-w.fsw.Errors:
			// Queue overflow (events were lost) or a failed watch on a new
			// subdirectory: keep streaming what can be seen.
		case <-timer.C:
			if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Keepalive{Keepalive: &pb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
			timer.Reset(interval)
		}
	}
}

// pollWatcher is a watch whose events are collected for GetWatcherEvents.
type pollWatcher struct {
	w    *watch
	max  int
	done chan struct{}
	once sync.Once

	mu     sync.Mutex
	events []*pb.FilesystemEvent
}

func (p *pollWatcher) run() {
	for {
		select {
		case <-p.done:
			return
		case ev, ok := <-p.w.fsw.Events:
			if !ok {
				return
			}
			evs := p.w.handle(ev)
			if len(evs) == 0 {
				continue
			}
			p.mu.Lock()
			p.events = append(p.events, evs...)
			if n := len(p.events) - p.max; n > 0 {
				p.events = append(p.events[:0:0], p.events[n:]...)
			}
			p.mu.Unlock()
		case <-p.w.fsw.Errors:
		}
	}
}

func (p *pollWatcher) take() []*pb.FilesystemEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	evs := p.events
	p.events = nil
	return evs
}

func (p *pollWatcher) close() {
	p.once.Do(func() {
		close(p.done)
		p.w.close()
	})
}

// CreateWatcher arms a watch whose events are fetched with GetWatcherEvents.
func (s *Service) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	u, err := s.rpcUser(req.Header())
	if err != nil {
		return nil, err
	}
	m := req.Msg
	w, err := newWatch(&s.gens, u, s.resolve(u, m.GetPath()), m.GetRecursive(), m.GetIncludeEntry(), m.GetAllowNetworkMounts())
	if err != nil {
		return nil, rpcError(err)
	}
	var b [16]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	pw := &pollWatcher{w: w, max: s.cfg.MaxWatcherEvents, done: make(chan struct{})}
	s.mu.Lock()
	s.watchers[id] = pw
	s.mu.Unlock()
	go pw.run()
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: id}), nil
}

func (s *Service) watcher(id string) (*pollWatcher, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.watchers[id]; ok {
		return w, nil
	}
	return nil, connect.NewError(connect.CodeNotFound, errors.New("watcher "+strconv.Quote(id)+" not found"))
}

// GetWatcherEvents returns, and forgets, the events seen since the last call.
func (s *Service) GetWatcherEvents(ctx context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	w, err := s.watcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.GetWatcherEventsResponse{Events: w.take()}), nil
}

// RemoveWatcher stops a polling watcher.
func (s *Service) RemoveWatcher(ctx context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	w, err := s.watcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	delete(s.watchers, req.Msg.GetWatcherId())
	s.mu.Unlock()
	w.close()
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}
