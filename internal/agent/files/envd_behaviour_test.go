package files

// Behaviours E2B users rely on, written from envd's (issue 18): uploads
// write in place (watchers see WRITE), missing parents of an upload are
// made even where the user may not create them, removing a missing path
// succeeds, and a symlink's entry names its resolved absolute target.

import (
	"context"
	"os"
	"testing"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/warden-sandbox/warden/internal/agentpb/filesystem"
)

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Stat(p, &st))
	return st.Ino
}

// TestUploadWritesInPlace: a file written through POST /files produces a
// WRITE event for a watcher of its directory (after CREATE for a new
// file), as an in-place write does on envd, and an overwrite keeps the
// file's inode, so a hard link sees the new content.
func TestUploadWritesInPlace(t *testing.T) {
	e := newEnv(t, Config{})
	must(t, os.Mkdir(e.h("w"), 0o755))
	must(t, os.Chown(e.h("w"), testUID, testUID))
	// made before the watch, so its own events are not mistaken for the
	// upload's
	e.write(e.h("w", "old.txt"), "old content that is longer", 0o600, testUID)
	must(t, os.Link(e.h("w", "old.txt"), e.h("hardlink")))
	ws := e.watch(true, &pb.WatchDirRequest{Path: "w"})

	// a new file: CREATE, then WRITE
	resp, body := e.do(e.h2, "POST", e.url("/files", "path", "w/new.txt"), stringsReader("hello"), "Content-Type", "application/octet-stream")
	wantStatus(t, resp, body, 200)
	ws.expect("new.txt", pb.EventType_EVENT_TYPE_CREATE)
	ws.expect("new.txt", pb.EventType_EVENT_TYPE_WRITE)
	// an upload right after it is a write of its own, not merged into the
	// first one's events
	resp, body = e.do(e.h2, "POST", e.url("/files", "path", "w/new.txt"), stringsReader("hello"), "Content-Type", "application/octet-stream")
	wantStatus(t, resp, body, 200)
	ws.expect("new.txt", pb.EventType_EVENT_TYPE_WRITE)
	if readFile(t, e.h("w", "new.txt")) != "hello" || modeOf(t, e.h("w", "new.txt")).Perm() != 0o644 {
		t.Fatal("new file content or mode")
	}
	if uid, gid := owner(t, e.h("w", "new.txt")); uid != testUID || gid != testUID {
		t.Fatalf("new file owned by %d:%d", uid, gid)
	}

	// an existing file, through multipart as files.write sends it: WRITE,
	// same inode, a hard link sees it, the mode stays
	ino := inode(t, e.h("w", "old.txt"))
	mp, ct := multipartBody(t, [2]string{e.h("w", "old.txt"), "new"})
	resp, body = e.do(e.h1, "POST", e.url("/files"), mp, "Content-Type", ct)
	wantStatus(t, resp, body, 200)
	ws.expect("old.txt", pb.EventType_EVENT_TYPE_WRITE)
	if got := readFile(t, e.h("w", "old.txt")); got != "new" {
		t.Fatalf("overwritten content %q", got)
	}
	if inode(t, e.h("w", "old.txt")) != ino || readFile(t, e.h("hardlink")) != "new" {
		t.Fatal("the overwrite replaced the file instead of writing it")
	}
	if modeOf(t, e.h("w", "old.txt")).Perm() != 0o600 {
		t.Fatalf("mode %v after overwrite", modeOf(t, e.h("w", "old.txt")))
	}
	for _, n := range ws.seen {
		if len(n) > 8 && n[:1] == "." {
			t.Fatalf("temporary file event %s", n)
		}
	}

	// metadata is replaced on an in-place write too
	e.do(e.h2, "POST", e.url("/files", "path", "w/new.txt"), stringsReader("m"), "Content-Type", "application/octet-stream", "X-Metadata-A", "1")
	if md := readMetadata(e.h("w", "new.txt")); len(md) != 1 || md["a"] != "1" {
		t.Fatalf("metadata %v", md)
	}
	e.do(e.h2, "POST", e.url("/files", "path", "w/new.txt"), stringsReader("m"), "Content-Type", "application/octet-stream")
	if md := readMetadata(e.h("w", "new.txt")); len(md) != 0 {
		t.Fatalf("metadata kept: %v", md)
	}

	// a failed write of a new file leaves nothing: no file, no directory
	full := gz(t, "some content")
	resp, body = e.do(e.h2, "POST", e.url("/files", "path", "w/fresh/broken.txt"), bytesReader(full[:len(full)/2]),
		"Content-Type", "application/octet-stream", "Content-Encoding", "gzip")
	wantStatus(t, resp, body, 400)
	if _, err := os.Lstat(e.h("w", "fresh")); !os.IsNotExist(err) {
		t.Fatalf("failed write left %s: %v", e.h("w", "fresh"), err)
	}

	// the disk fills up: 507, and the new file is gone
	small := e.h("small")
	mountTmpfs(t, small, "1m")
	must(t, os.Chown(small, testUID, testUID))
	resp, body = e.do(e.h2, "POST", e.url("/files", "path", "small/big"), bytesReader(make([]byte, 3<<20)), "Content-Type", "application/octet-stream")
	wantStatus(t, resp, body, 507)
	if _, err := os.Lstat(e.h("small", "big")); !os.IsNotExist(err) {
		t.Fatalf("failed write left the file: %v", err)
	}
}

// TestUploadMakesParents: as a non-root user, an upload to a path whose
// missing parents lie in a directory the user may not write creates them
// (made by the agent, then owned by the user), as envd does. Atomic
// uploads (Warden's API) still make parents as the user only, and a
// directory the user may not search stays closed.
func TestUploadMakesParents(t *testing.T) {
	e := newEnv(t, Config{})
	must(t, os.Mkdir(e.p("opt"), 0o755)) // root's, not writable by the user
	must(t, os.Mkdir(e.p("private"), 0o700))

	dst := e.p("opt", "app", "conf", "f.txt")
	resp, body := e.do(e.h2, "POST", e.url("/files", "path", dst), stringsReader("cfg"), "Content-Type", "application/octet-stream")
	wantStatus(t, resp, body, 200)
	if readFile(t, dst) != "cfg" {
		t.Fatal("content")
	}
	for _, p := range []string{e.p("opt", "app"), e.p("opt", "app", "conf"), dst} {
		if uid, gid := owner(t, p); uid != testUID || gid != testUID {
			t.Fatalf("%s owned by %d:%d, want the user", p, uid, gid)
		}
	}
	if m := modeOf(t, e.p("opt", "app")); m.Perm() != 0o755 || !m.IsDir() {
		t.Fatalf("made directory mode %v", m)
	}
	if uid, _ := owner(t, e.p("opt")); uid != 0 {
		t.Fatal("the existing parent changed hands")
	}

	// multipart too, and a failed upload removes the directories it made
	mp, ct := multipartBody(t, [2]string{e.p("opt", "mp", "a.txt"), "a"})
	resp, body = e.do(e.h1, "POST", e.url("/files"), mp, "Content-Type", ct)
	wantStatus(t, resp, body, 200)
	if uid, _ := owner(t, e.p("opt", "mp")); uid != testUID || readFile(t, e.p("opt", "mp", "a.txt")) != "a" {
		t.Fatal("multipart upload into a made directory")
	}
	full := gz(t, "x")
	resp, body = e.do(e.h2, "POST", e.url("/files", "path", e.p("opt", "gone", "deep", "x.txt")), bytesReader(full[:len(full)/2]),
		"Content-Type", "application/octet-stream", "Content-Encoding", "gzip")
	wantStatus(t, resp, body, 400)
	if _, err := os.Lstat(e.p("opt", "gone")); !os.IsNotExist(err) {
		t.Fatalf("failed upload left its directories: %v", err)
	}

	// an existing file the user may not write is still refused
	e.write(e.p("opt", "root.txt"), "root", 0o644, 0)
	resp, body = e.do(e.h2, "POST", e.url("/files", "path", e.p("opt", "root.txt")), stringsReader("x"), "Content-Type", "application/octet-stream")
	wantStatus(t, resp, body, 403)
	// so is a directory the user may not search
	resp, body = e.do(e.h2, "POST", e.url("/files", "path", e.p("private", "d", "x")), stringsReader("x"), "Content-Type", "application/octet-stream")
	wantStatus(t, resp, body, 403)
	if _, err := os.Lstat(e.p("private", "d")); !os.IsNotExist(err) {
		t.Fatal("a directory was made where the user may not look")
	}
	// atomic (Warden's API): the user's own permissions
	resp, body = e.do(e.h2, "POST", e.url("/files", "path", e.p("opt", "atomic", "x"), "atomic", "true"), stringsReader("x"), "Content-Type", "application/octet-stream")
	wantStatus(t, resp, body, 403)
	resp, body = e.do(e.h2, "POST", e.url("/files", "path", "x", "atomic", "maybe"), stringsReader("x"), "Content-Type", "application/octet-stream")
	wantStatus(t, resp, body, 400)
}

// TestRemoveMissing: removing a path that does not exist succeeds, as on
// envd; one the user may not reach is still refused.
func TestRemoveMissing(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	e.write(e.h("file"), "f", 0o644, testUID)
	must(t, os.Mkdir(e.p("private"), 0o700))
	c := e.client(true)
	for _, p := range []string{"never-was", "no/such/dir", "file/below"} {
		if _, err := c.Remove(ctx, req(&pb.RemoveRequest{Path: p}, "")); err != nil {
			t.Fatalf("remove %s: %v", p, err)
		}
	}
	_, err := c.Remove(ctx, req(&pb.RemoveRequest{Path: e.p("private", "x")}, ""))
	wantCode(t, err, connect.CodePermissionDenied)
	if readFile(t, e.h("file")) != "f" {
		t.Fatal("file changed")
	}
}

// TestSymlinkTargetResolved: a symlink's entry reports the absolute target
// with every link resolved, as envd does, not the link's text.
func TestSymlinkTargetResolved(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	e.write(e.h("dir", "a.txt"), "a", 0o644, testUID)
	must(t, os.Symlink("dir/a.txt", e.h("rel")))           // relative
	must(t, os.Symlink("rel", e.h("chain")))               // a link to a link
	must(t, os.Symlink("../user/dir", e.h("dirlink")))     // relative with ..
	must(t, os.Symlink("missing/x", e.h("dangling")))      // dangling, relative
	must(t, os.Symlink("/nowhere/at/all", e.h("absdang"))) // dangling, absolute
	want := map[string]string{
		"rel":      e.h("dir", "a.txt"),
		"chain":    e.h("dir", "a.txt"),
		"dirlink":  e.h("dir"),
		"dangling": e.h("missing", "x"),
		"absdang":  "/nowhere/at/all",
	}
	c := e.client(true)
	for name, target := range want {
		res, err := c.Stat(ctx, req(&pb.StatRequest{Path: name}, ""))
		must(t, err)
		if en := res.Msg.Entry; en.Type != pb.FileType_FILE_TYPE_SYMLINK || en.GetSymlinkTarget() != target || en.Path != e.h(name) {
			t.Errorf("stat %s: type %v target %q path %q, want target %q", name, en.Type, en.GetSymlinkTarget(), en.Path, target)
		}
	}
	res, err := c.ListDir(ctx, req(&pb.ListDirRequest{Path: ""}, ""))
	must(t, err)
	n := 0
	for _, en := range res.Msg.Entries {
		if w, ok := want[en.Name]; ok {
			n++
			if en.GetSymlinkTarget() != w {
				t.Errorf("list %s: target %q, want %q", en.Name, en.GetSymlinkTarget(), w)
			}
		}
	}
	if n != len(want) {
		t.Fatalf("listed %d of the %d links", n, len(want))
	}
}
