package files

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/warden-sandbox/warden/internal/agentpb/filesystem"
)

func TestPermString(t *testing.T) {
	for _, c := range []struct {
		mode uint32
		want string
	}{
		{unix.S_IFREG | 0o644, "-rw-r--r--"},
		{unix.S_IFDIR | 0o755, "drwxr-xr-x"},
		{unix.S_IFDIR | 0o1777, "drwxrwxrwt"},
		{unix.S_IFLNK | 0o777, "lrwxrwxrwx"},
		{unix.S_IFREG | 0o4755, "-rwsr-xr-x"},
		{unix.S_IFREG | 0o2644, "-rw-r-Sr--"},
		{unix.S_IFIFO | 0o600, "prw-------"},
		{unix.S_IFCHR | 0o666, "crw-rw-rw-"},
	} {
		if got := permString(c.mode); got != c.want {
			t.Errorf("permString(%o) = %q, want %q", c.mode, got, c.want)
		}
	}
}

func TestStat(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	f := e.h("dir", "a.txt")
	e.write(f, "hello", 0o640, testUID)
	must(t, unix.Lsetxattr(f, "user.e2b.owner", []byte("alice"), 0))
	must(t, unix.Lsetxattr(f, "user.other", []byte("x"), 0))
	must(t, os.Symlink("dir/a.txt", e.h("link")))

	for _, json := range []bool{true, false} {
		c := e.client(json)
		// relative path: against the home of the default user
		res, err := c.Stat(ctx, req(&pb.StatRequest{Path: "dir/a.txt"}, ""))
		must(t, err)
		en := res.Msg.Entry
		if en.Name != "a.txt" || en.Path != f || en.Type != pb.FileType_FILE_TYPE_FILE || en.Size != 5 ||
			en.Mode != 0o640 || en.Permissions != "-rw-r-----" || en.Owner != "user" || en.Group != "user" {
			t.Fatalf("json=%v: entry %v", json, en)
		}
		if en.ModifiedTime == nil || en.ModifiedTime.AsTime().IsZero() {
			t.Fatalf("no modified time: %v", en)
		}
		if len(en.Metadata) != 1 || en.Metadata["owner"] != "alice" {
			t.Fatalf("metadata %v", en.Metadata)
		}
		if en.SymlinkTarget != nil {
			t.Fatalf("symlink target on a file: %v", en)
		}

		res, err = c.Stat(ctx, req(&pb.StatRequest{Path: "~/link"}, ""))
		must(t, err)
		en = res.Msg.Entry
		if en.Type != pb.FileType_FILE_TYPE_SYMLINK || en.GetSymlinkTarget() != f || en.Permissions != "lrwxrwxrwx" {
			t.Fatalf("symlink entry %v", en)
		}

		res, err = c.Stat(ctx, req(&pb.StatRequest{Path: e.home}, "root"))
		must(t, err)
		if en := res.Msg.Entry; en.Type != pb.FileType_FILE_TYPE_DIRECTORY || en.Permissions != "drwxr-xr-x" || en.Owner != "user" {
			t.Fatalf("dir entry %v", en)
		}

		// empty path: the default workdir, else the home
		res, err = c.Stat(ctx, req(&pb.StatRequest{}, ""))
		must(t, err)
		if res.Msg.Entry.Path != e.home {
			t.Fatalf("empty path stat %q, want home", res.Msg.Entry.Path)
		}

		_, err = c.Stat(ctx, req(&pb.StatRequest{Path: "missing"}, ""))
		wantCode(t, err, connect.CodeNotFound)
		_, err = c.Stat(ctx, req(&pb.StatRequest{Path: "dir/a.txt/below"}, ""))
		wantCode(t, err, connect.CodeNotFound)
		_, err = c.Stat(ctx, req(&pb.StatRequest{Path: "x"}, "nobody"))
		wantCode(t, err, connect.CodeUnauthenticated)
	}
}

func TestStatDefaultWorkdir(t *testing.T) {
	e := newEnv(t, Config{DefaultWorkdir: os.TempDir()})
	res, err := e.client(true).Stat(context.Background(), req(&pb.StatRequest{}, ""))
	must(t, err)
	if res.Msg.Entry.Path != os.TempDir() {
		t.Fatalf("empty path = %q, want the workdir", res.Msg.Entry.Path)
	}
}

func TestListDir(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	e.write(e.h("proj", "a.txt"), "a", 0o644, testUID)
	e.write(e.h("proj", "sub", "b.txt"), "b", 0o644, testUID)
	e.write(e.h("proj", "sub", "deep", "c.txt"), "c", 0o644, testUID)
	must(t, os.Symlink(e.h("proj", "sub"), e.h("proj", "ln")))

	names := func(es []*pb.EntryInfo) []string {
		var n []string
		for _, x := range es {
			r, _ := filepath.Rel(e.h("proj"), x.Path)
			n = append(n, r)
		}
		sort.Strings(n)
		return n
	}
	c := e.client(true)
	res, err := c.ListDir(ctx, req(&pb.ListDirRequest{Path: "proj"}, ""))
	must(t, err)
	if got := names(res.Msg.Entries); !equal(got, []string{"a.txt", "ln", "sub"}) {
		t.Fatalf("depth default: %v", got)
	}
	res, err = c.ListDir(ctx, req(&pb.ListDirRequest{Path: "proj", Depth: 2}, ""))
	must(t, err)
	if got := names(res.Msg.Entries); !equal(got, []string{"a.txt", "ln", "sub", "sub/b.txt", "sub/deep"}) {
		t.Fatalf("depth 2: %v", got)
	}
	res, err = e.client(false).ListDir(ctx, req(&pb.ListDirRequest{Path: e.h("proj"), Depth: 10}, "root"))
	must(t, err)
	if got := names(res.Msg.Entries); !equal(got, []string{"a.txt", "ln", "sub", "sub/b.txt", "sub/deep", "sub/deep/c.txt"}) {
		t.Fatalf("depth 10: %v", got)
	}
	for _, en := range res.Msg.Entries {
		if en.Name == "ln" && (en.Type != pb.FileType_FILE_TYPE_SYMLINK || en.GetSymlinkTarget() != e.h("proj", "sub")) {
			t.Fatalf("symlink entry %v", en)
		}
	}
	// a symlink to a directory as the path is followed
	res, err = c.ListDir(ctx, req(&pb.ListDirRequest{Path: "proj/ln"}, ""))
	must(t, err)
	if len(res.Msg.Entries) != 2 {
		t.Fatalf("list through symlink: %v", res.Msg.Entries)
	}

	_, err = c.ListDir(ctx, req(&pb.ListDirRequest{Path: "proj/a.txt"}, ""))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = c.ListDir(ctx, req(&pb.ListDirRequest{Path: "nope"}, ""))
	wantCode(t, err, connect.CodeNotFound)
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMakeDir(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	c := e.client(true)
	res, err := c.MakeDir(ctx, req(&pb.MakeDirRequest{Path: "a/b/c"}, ""))
	must(t, err)
	if en := res.Msg.Entry; en.Path != e.h("a", "b", "c") || en.Type != pb.FileType_FILE_TYPE_DIRECTORY || en.Owner != "user" {
		t.Fatalf("entry %v", en)
	}
	for _, d := range []string{"a", "a/b", "a/b/c"} {
		if uid, gid := owner(t, e.h(d)); uid != testUID || gid != testUID {
			t.Fatalf("%s owned by %d:%d", d, uid, gid)
		}
	}
	_, err = c.MakeDir(ctx, req(&pb.MakeDirRequest{Path: "a/b/c"}, ""))
	wantCode(t, err, connect.CodeAlreadyExists)
	e.write(e.h("file"), "x", 0o644, testUID)
	_, err = c.MakeDir(ctx, req(&pb.MakeDirRequest{Path: "file"}, ""))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = c.MakeDir(ctx, req(&pb.MakeDirRequest{Path: "file/sub"}, ""))
	wantCode(t, err, connect.CodeInvalidArgument)

	// root-owned directory: user may not create in it, root may
	must(t, os.Mkdir(e.p("rootdir"), 0o755))
	_, err = c.MakeDir(ctx, req(&pb.MakeDirRequest{Path: e.p("rootdir", "x")}, ""))
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = e.client(false).MakeDir(ctx, req(&pb.MakeDirRequest{Path: e.p("rootdir", "x")}, "root"))
	must(t, err)
	if uid, _ := owner(t, e.p("rootdir", "x")); uid != 0 {
		t.Fatalf("root's dir owned by %d", uid)
	}
}

func TestMove(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	c := e.client(true)
	e.write(e.h("a.txt"), "A", 0o644, testUID)
	res, err := c.Move(ctx, req(&pb.MoveRequest{Source: "a.txt", Destination: "new/dir/b.txt"}, ""))
	must(t, err)
	if res.Msg.Entry.Path != e.h("new", "dir", "b.txt") || readFile(t, e.h("new", "dir", "b.txt")) != "A" {
		t.Fatalf("move: %v", res.Msg.Entry)
	}
	if _, err := os.Stat(e.h("a.txt")); !os.IsNotExist(err) {
		t.Fatalf("source still there: %v", err)
	}
	if uid, _ := owner(t, e.h("new", "dir")); uid != testUID {
		t.Fatalf("created parent owned by %d", uid)
	}
	// directories move too, and replace an existing file target
	e.write(e.h("d", "x"), "x", 0o644, testUID)
	_, err = c.Move(ctx, req(&pb.MoveRequest{Source: "d", Destination: "d2"}, ""))
	must(t, err)
	if readFile(t, e.h("d2", "x")) != "x" {
		t.Fatal("dir move")
	}
	_, err = c.Move(ctx, req(&pb.MoveRequest{Source: "missing", Destination: "x"}, ""))
	wantCode(t, err, connect.CodeNotFound)
	_, err = c.Move(ctx, req(&pb.MoveRequest{Source: "d2", Destination: "d2/inside"}, ""))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = c.Move(ctx, req(&pb.MoveRequest{Source: "", Destination: "x"}, ""))
	wantCode(t, err, connect.CodeInvalidArgument)

	// user cannot move a root-owned file out of a root-owned dir
	e.write(e.p("rootdir", "secret"), "s", 0o600, 0)
	_, err = c.Move(ctx, req(&pb.MoveRequest{Source: e.p("rootdir", "secret"), Destination: "stolen"}, ""))
	wantCode(t, err, connect.CodePermissionDenied)
}

func TestMoveAcrossFilesystems(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	mnt := e.h("mnt")
	mountTmpfs(t, mnt, "4m")
	e.write(e.h("tree", "f.txt"), "F", 0o640, testUID)
	must(t, os.Symlink("f.txt", e.h("tree", "ln")))
	must(t, os.Lchown(e.h("tree"), testUID, testUID))
	must(t, os.Lchown(e.h("tree", "ln"), testUID, testUID))
	res, err := e.client(true).Move(ctx, req(&pb.MoveRequest{Source: "tree", Destination: "mnt/tree"}, ""))
	must(t, err)
	if res.Msg.Entry.Type != pb.FileType_FILE_TYPE_DIRECTORY {
		t.Fatalf("entry %v", res.Msg.Entry)
	}
	if readFile(t, e.h("mnt", "tree", "f.txt")) != "F" || modeOf(t, e.h("mnt", "tree", "f.txt")).Perm() != 0o640 {
		t.Fatal("copied file")
	}
	if l, err := os.Readlink(e.h("mnt", "tree", "ln")); err != nil || l != "f.txt" {
		t.Fatalf("copied symlink %q %v", l, err)
	}
	if uid, _ := owner(t, e.h("mnt", "tree", "f.txt")); uid != testUID {
		t.Fatalf("copy owned by %d", uid)
	}
	if _, err := os.Lstat(e.h("tree")); !os.IsNotExist(err) {
		t.Fatalf("source left: %v", err)
	}
}

func TestRemove(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	c := e.client(false)
	e.write(e.h("tree", "a", "b", "c.txt"), "c", 0o644, testUID)
	for _, d := range []string{"tree", "tree/a", "tree/a/b"} {
		must(t, os.Chown(e.h(d), testUID, testUID))
	}
	_, err := c.Remove(ctx, req(&pb.RemoveRequest{Path: "tree"}, ""))
	must(t, err)
	if _, err := os.Lstat(e.h("tree")); !os.IsNotExist(err) {
		t.Fatalf("not removed: %v", err)
	}
	// gone already: no error, as on envd
	_, err = c.Remove(ctx, req(&pb.RemoveRequest{Path: "tree"}, ""))
	must(t, err)

	// a symlink is removed, not its target
	e.write(e.h("target.txt"), "t", 0o644, testUID)
	must(t, os.Symlink("target.txt", e.h("ln")))
	_, err = c.Remove(ctx, req(&pb.RemoveRequest{Path: "ln"}, ""))
	must(t, err)
	if readFile(t, e.h("target.txt")) != "t" {
		t.Fatal("target gone")
	}
}

// TestPermissionDenied: uid 1000 against a root-owned 0600 file in a
// root-owned directory, through every entry point.
func TestPermissionDenied(t *testing.T) {
	e := newEnv(t, Config{})
	ctx := context.Background()
	secret := e.p("rootdir", "secret")
	e.write(secret, "top secret", 0o600, 0)
	must(t, os.Mkdir(e.p("private"), 0o700))
	c := e.client(true)

	_, err := c.Remove(ctx, req(&pb.RemoveRequest{Path: secret}, ""))
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = c.ListDir(ctx, req(&pb.ListDirRequest{Path: e.p("private")}, ""))
	wantCode(t, err, connect.CodePermissionDenied)
	_, err = c.Stat(ctx, req(&pb.StatRequest{Path: e.p("private", "x")}, ""))
	wantCode(t, err, connect.CodePermissionDenied)

	resp, body := e.do(e.h2, "GET", e.url("/files", "path", secret), nil)
	wantStatus(t, resp, body, 403)
	resp, body = e.do(e.h2, "POST", e.url("/files", "path", secret), stringsReader("pwned"), "Content-Type", "application/octet-stream")
	wantStatus(t, resp, body, 403)
	resp, body = e.do(e.h2, "GET", e.url("/tar", "path", e.p("private")), nil)
	wantStatus(t, resp, body, 403)
	resp, body = e.do(e.h2, "POST", e.url("/tar", "path", e.p("rootdir")), bytesReader(mkTar(t, tarEnt{name: "x", typ: '0', body: "x"})))
	wantStatus(t, resp, body, 403)
	if readFile(t, secret) != "top secret" {
		t.Fatal("secret changed")
	}
	if _, err := os.Lstat(e.p("rootdir", "x")); !os.IsNotExist(err) {
		t.Fatal("tar wrote into root's dir")
	}

	// root may
	resp, body = e.do(e.h2, "GET", e.url("/files", "path", secret, "username", "root"), nil)
	wantStatus(t, resp, body, 200)
	if string(body) != "top secret" {
		t.Fatalf("root read %q", body)
	}
	_, err = c.Remove(ctx, req(&pb.RemoveRequest{Path: secret}, "root"))
	must(t, err)
}

// TestWireJSON speaks the Connect JSON protocol by hand, as the E2B JS SDK
// does, and checks the field names and encodings it relies on.
func TestWireJSON(t *testing.T) {
	e := newEnv(t, Config{})
	e.write(e.h("w.txt"), "hello", 0o644, testUID)
	e.write(e.h("numeric"), "", 0o644, 4242)
	resp, body := e.do(e.h2, "POST", e.srv.URL+"/filesystem.Filesystem/Stat", stringsReader(`{"path":"w.txt"}`),
		"Content-Type", "application/json", "Connect-Protocol-Version", "1", "Authorization", "Basic dXNlcjo=")
	wantStatus(t, resp, body, 200)
	var v struct {
		Entry map[string]any `json:"entry"`
	}
	must(t, jsonUnmarshal(body, &v))
	for k, want := range map[string]any{"name": "w.txt", "type": "FILE_TYPE_FILE", "size": "5", "permissions": "-rw-r--r--", "owner": "user", "group": "user", "mode": float64(0o644)} {
		if v.Entry[k] != want {
			t.Errorf("%s = %#v, want %#v (body %s)", k, v.Entry[k], want, body)
		}
	}
	if _, ok := v.Entry["modifiedTime"].(string); !ok {
		t.Errorf("modifiedTime missing: %s", body)
	}

	// unknown ids have no names: the number is shown
	resp, body = e.do(e.h2, "POST", e.srv.URL+"/filesystem.Filesystem/Stat", stringsReader(`{"path":"numeric"}`),
		"Content-Type", "application/json")
	wantStatus(t, resp, body, 200)
	must(t, jsonUnmarshal(body, &v))
	if v.Entry["owner"] != "4242" || v.Entry["group"] != "4242" {
		t.Errorf("numeric owner: %s", body)
	}

	// errors: {"code":"not_found",...} with HTTP 404
	resp, body = e.do(e.h1, "POST", e.srv.URL+"/filesystem.Filesystem/Stat", stringsReader(`{"path":"nope"}`),
		"Content-Type", "application/json")
	wantStatus(t, resp, body, 404)
	var ev struct{ Code, Message string }
	must(t, jsonUnmarshal(body, &ev))
	if ev.Code != "not_found" || ev.Message != "stat "+e.h("nope")+": no such file or directory" {
		t.Errorf("error body %s", body)
	}
	resp, body = e.do(e.h1, "POST", e.srv.URL+"/filesystem.Filesystem/MakeDir", stringsReader(`{"path":"w.txt"}`),
		"Content-Type", "application/json")
	wantStatus(t, resp, body, 400)
	resp, body = e.do(e.h1, "POST", e.srv.URL+"/filesystem.Filesystem/MakeDir", stringsReader(`{"path":"~"}`),
		"Content-Type", "application/json")
	wantStatus(t, resp, body, 409)
}
