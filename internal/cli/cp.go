package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func cpCmd() *command {
	var (
		tarMode bool
		user    string
	)
	c := &command{
		name:  "cp",
		args:  "SRC DST",
		short: "Copy files and directories between here and a sandbox",
		long: "Copy a file or a directory between the local machine and a sandbox, or between two\n" +
			"sandboxes. A path in a sandbox is written ID:/path; anything else is local (write\n" +
			"./a:b for a local name with a colon). \"-\" is stdin as SRC and stdout as DST.\n" +
			"\n" +
			"Like docker cp: a file copied to an existing directory, or to a path ending in \"/\",\n" +
			"lands inside it under its own name. A directory copied to a path that does not exist\n" +
			"becomes that path; copied to an existing directory it lands inside it under its own\n" +
			"name, unless SRC ends in \"/.\" (or is \".\"), which copies its contents instead.\n" +
			"Directories travel as tar archives; unpacking one locally never writes outside the\n" +
			"destination (absolute names, \"..\" and paths through symlinks that lead out are\n" +
			"refused). Symlinks are copied as symlinks, never followed, except a local SRC.\n" +
			"\n" +
			"\"-\" carries a file's raw content, or a tar archive when the remote side is a directory\n" +
			"or with --tar (which also makes \"-\" as SRC a tar to unpack into the directory DST).",
		examples: []string{
			"warden cp ./main.py sb-01hzx3k9q2:/home/user/",
			"warden cp sb-01hzx3k9q2:/home/user/out ./out",
			"warden cp ./src/. sb-01hzx3k9q2:/app",
			"warden cp sb-01hzx3k9q2:/etc/os-release -",
			"tar -c . | warden cp --tar - sb-01hzx3k9q2:/app",
		},
	}
	c.flags = func(fs *flagSet) {
		fs.Bool(&tarMode, "tar", `with "-", stdin or stdout is a tar archive even for a file`)
		fs.String(&user, "user", "U", "sandbox user whose permissions apply to a file, and who owns one\nwritten (default: the sandbox's; directories use the sandbox's)")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want SRC and DST, got %d arguments", len(args))
		}
		src, err := splitRemote(args[0])
		if err != nil {
			return usageErr(c, "SRC %v", err)
		}
		dst, err := splitRemote(args[1])
		if err != nil {
			return usageErr(c, "DST %v", err)
		}
		if !src.remote() && !dst.remote() {
			return usageErr(c, "one of SRC and DST must be ID:/path in a sandbox")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		cp := &copier{ctx: ctx, r: r, cl: cl, tar: tarMode, user: user}
		switch {
		case src.remote() && dst.remote():
			return cp.between(src, dst)
		case dst.remote():
			return cp.upload(src.path, dst)
		default:
			return cp.download(src, dst.path)
		}
	}
	return c
}

// copier runs one `warden cp`.
type copier struct {
	ctx  context.Context
	r    *runner
	cl   *warden.Client
	tar  bool
	user string // --user, for single files
}

func (cp *copier) warn(format string, args ...any) {
	fmt.Fprintf(cp.r.env.Stderr, "warden: "+format+"\n", args...)
}

// contentsOnly reports whether a directory SRC asks for its contents: "." or ".../.".
func contentsOnly(src string) bool {
	return src == "." || strings.HasSuffix(src, "/.") || strings.HasSuffix(src, `\.`)
}

// remoteFileTarget returns where a file named base copied to dst lands.
func (cp *copier) remoteFileTarget(dst remotePath, base string) (string, error) {
	if strings.HasSuffix(dst.path, "/") {
		return path.Join(dst.path, base), nil
	}
	e, err := cp.cl.Stat(cp.ctx, dst.id, dst.path)
	switch {
	case warden.IsNotFound(err):
		return dst.path, nil
	case err != nil:
		return "", err
	case e.IsDir():
		return path.Join(dst.path, base), nil
	}
	return dst.path, nil
}

// remoteDirTarget returns the directory that a directory SRC (whose last element is base)
// copied to dst fills.
func (cp *copier) remoteDirTarget(dst remotePath, base string, contents bool) (string, error) {
	e, err := cp.cl.Stat(cp.ctx, dst.id, dst.path)
	switch {
	case warden.IsNotFound(err):
		return dst.path, nil
	case err != nil:
		return "", err
	case !e.IsDir():
		return "", fmt.Errorf("cannot copy a directory onto %s, which is not a directory", dst)
	case contents:
		return dst.path, nil
	}
	return path.Join(dst.path, base), nil
}

// upload copies the local file or directory src (or stdin) to dst.
func (cp *copier) upload(src string, dst remotePath) error {
	ctx, cl := cp.ctx, cp.cl
	if src == "-" {
		if cp.tar {
			return cl.UploadArchive(ctx, dst.id, dst.path, cp.r.env.Stdin)
		}
		if strings.HasSuffix(dst.path, "/") {
			return usageErr(cp.r.cmd, "with - as SRC, DST names the file to write, not a directory")
		}
		_, err := cl.WriteFile(ctx, dst.id, dst.path, cp.r.env.Stdin, warden.WriteOptions{User: cp.user})
		return err
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	switch {
	case st.Mode().IsRegular():
		target, err := cp.remoteFileTarget(dst, filepath.Base(src))
		if err != nil {
			return err
		}
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = cl.WriteFile(ctx, dst.id, target, f, warden.WriteOptions{Mode: st.Mode().Perm(), User: cp.user})
		return err
	case st.IsDir():
		abs, err := filepath.Abs(src)
		if err != nil {
			return err
		}
		target, err := cp.remoteDirTarget(dst, filepath.Base(abs), contentsOnly(src))
		if err != nil {
			return err
		}
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeTar(ctx, pw, src, cp.warn)) }()
		err = cl.UploadArchive(ctx, dst.id, target, pr)
		pr.CloseWithError(errors.New("upload ended"))
		return err
	}
	return fmt.Errorf("%s: not a regular file or directory", src)
}

// remoteIsDir reports whether the path in the sandbox is a directory (or a symlink to one).
func (cp *copier) remoteIsDir(p remotePath) (warden.Entry, bool, error) {
	e, err := cp.cl.Stat(cp.ctx, p.id, p.path)
	if err != nil {
		return e, false, err
	}
	if e.Type == warden.EntrySymlink {
		_, lerr := cp.cl.List(cp.ctx, p.id, p.path, 1)
		return e, lerr == nil, nil
	}
	return e, e.IsDir(), nil
}

// download copies the file or directory src to the local path dst (or stdout).
func (cp *copier) download(src remotePath, dst string) error {
	ctx, cl := cp.ctx, cp.cl
	e, isDir, err := cp.remoteIsDir(src)
	if err != nil {
		return err
	}
	if dst == "-" {
		var rc io.ReadCloser
		if isDir || cp.tar {
			rc, err = cl.DownloadArchive(ctx, src.id, src.path)
		} else {
			rc, err = cl.ReadFile(ctx, src.id, src.path, warden.ReadOptions{User: cp.user})
		}
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = io.Copy(cp.r.env.Stdout, rc)
		return err
	}
	if !isDir {
		target := dst
		if st, err := os.Stat(dst); (err == nil && st.IsDir()) || strings.HasSuffix(dst, string(filepath.Separator)) {
			target = filepath.Join(dst, path.Base(src.path))
		}
		mode := fs.FileMode(0o644)
		if m, err := e.FileMode(); err == nil && e.Type == warden.EntryFile {
			mode = m.Perm()
		}
		rc, err := cl.ReadFile(ctx, src.id, src.path, warden.ReadOptions{User: cp.user})
		if err != nil {
			return err
		}
		defer rc.Close()
		return writeLocalFile(target, rc, mode)
	}
	target := dst
	st, err := os.Stat(dst)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case !st.IsDir():
		return fmt.Errorf("cannot copy a directory onto %s, which is not a directory", dst)
	case !contentsOnly(src.path):
		target = filepath.Join(dst, path.Base(src.path))
	}
	rc, err := cl.DownloadArchive(ctx, src.id, src.path)
	if err != nil {
		return err
	}
	defer rc.Close()
	return extractTar(ctx, rc, target, extractOptions{warn: cp.warn})
}

// between copies src in one sandbox to dst in another (or the same) one.
func (cp *copier) between(src, dst remotePath) error {
	ctx, cl := cp.ctx, cp.cl
	e, isDir, err := cp.remoteIsDir(src)
	if err != nil {
		return err
	}
	if !isDir {
		target, err := cp.remoteFileTarget(dst, path.Base(src.path))
		if err != nil {
			return err
		}
		opts := warden.WriteOptions{User: cp.user}
		if m, err := e.FileMode(); err == nil && e.Type == warden.EntryFile {
			opts.Mode = m.Perm()
		}
		rc, err := cl.ReadFile(ctx, src.id, src.path, warden.ReadOptions{User: cp.user})
		if err != nil {
			return err
		}
		defer rc.Close()
		_, err = cl.WriteFile(ctx, dst.id, target, rc, opts)
		return err
	}
	target, err := cp.remoteDirTarget(dst, path.Base(src.path), contentsOnly(src.path))
	if err != nil {
		return err
	}
	rc, err := cl.DownloadArchive(ctx, src.id, src.path)
	if err != nil {
		return err
	}
	defer rc.Close()
	return cl.UploadArchive(ctx, dst.id, target, rc)
}

// writeLocalFile writes r to path through a temporary file renamed into place, so that
// path is never left half-written and a symlink at path is replaced, not followed.
func writeLocalFile(target string, r io.Reader, mode fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".warden-*")
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, r); err != nil {
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), target); err != nil {
		return err
	}
	ok = true
	return nil
}
