package build

import (
	"archive/tar"
	"bufio"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/template/dockerfile"
)

// upload is one tar stream to extract under one directory of the sandbox.
type upload struct {
	dir  string   // absolute, in the sandbox
	file string   // the tar on the host
	tops []string // top-level names it creates under dir (for --chown)
}

// copyStep runs COPY or ADD: it packs the sources from the build context
// into tar streams (hashing what they hold for the cache key), then unpacks
// them in a build sandbox through the agent, as root.
func (b *Builder) copyStep(ctx context.Context, req Request, st *state, in dockerfile.Instruction, expand func(string) (string, error), emit func(Event)) (stepKind, error) {
	cp := in.Copy
	dest, err := expand(cp.Dest)
	if err != nil {
		return 0, err
	}
	chown, err := expand(cp.Chown)
	if err != nil {
		return 0, err
	}
	var chmod int64 = -1
	if cp.Chmod != "" {
		mode, err := expand(cp.Chmod)
		if err != nil {
			return 0, err
		}
		m, err := strconv.ParseInt(mode, 8, 32)
		if err != nil || m < 0 || m > 0o7777 {
			return 0, errorAt(in.Line, "%s --chmod=%s is not an octal mode", in.Cmd, mode)
		}
		chmod = m
	}
	if chown != "" && strings.ContainsAny(chown, " \t\n;&|$`'\"\\") {
		return 0, errorAt(in.Line, "%s --chown=%q is not user[:group]", in.Cmd, chown)
	}
	destDir := strings.HasSuffix(dest, "/")
	if !path.IsAbs(dest) {
		dest = path.Join(cmp.Or(st.workdir, "/"), dest)
	}
	dest = path.Clean(dest)

	ctxRoot, err := os.OpenRoot(req.Context)
	if err != nil {
		return 0, fmt.Errorf("open build context: %w", err)
	}
	defer ctxRoot.Close()
	var srcs []string
	for _, s := range cp.Sources {
		s, err := expand(s)
		if err != nil {
			return 0, err
		}
		m, err := matchContext(ctxRoot, s)
		if err != nil {
			return 0, errorAt(in.Line, "%s %s: %v", in.Cmd, s, err)
		}
		srcs = append(srcs, m...)
	}
	if len(srcs) > 1 {
		if !destDir {
			return 0, errorAt(in.Line, "%s with several sources needs a destination ending in /", in.Cmd)
		}
	}
	tmp, err := b.Store.TempDir("copy-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	sum := sha256.New()
	var ups []upload
	for i, src := range srcs {
		fi, err := ctxRoot.Lstat(src)
		if err != nil {
			return 0, errorAt(in.Line, "%s %s: %v", in.Cmd, src, errNoMatch)
		}
		u := upload{file: filepath.Join(tmp, strconv.Itoa(i)+".tar")}
		f, err := os.Create(u.file)
		if err != nil {
			return 0, fmt.Errorf("pack %s: %w", src, err)
		}
		tw := tar.NewWriter(f)
		p := &packer{root: ctxRoot, tw: tw, sum: sum, chmod: chmod}
		switch {
		case fi.IsDir():
			// A directory's contents go into dest.
			u.dir = dest
			err = p.dir(src, "")
			u.tops = p.tops
		case in.Cmd == "ADD" && fi.Mode().IsRegular() && isArchive(ctxRoot, src):
			u.dir = dest
			err = p.archive(src)
			u.tops = p.tops
		default:
			name := path.Base(dest)
			u.dir = path.Dir(dest)
			if destDir || len(srcs) > 1 {
				name, u.dir = path.Base(src), dest
			}
			err = p.entry(src, name, fi)
			u.tops = []string{name}
		}
		if cerr := tw.Close(); err == nil {
			err = cerr
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, errorAt(in.Line, "%s %s: %v", in.Cmd, src, err)
		}
		fmt.Fprintf(sum, "upload %q %q\n", u.dir, u.tops)
		ups = append(ups, u)
	}
	key := hash(st.key, in.Cmd, dest, chown, strconv.FormatInt(chmod, 8), hex.EncodeToString(sum.Sum(nil)))
	return b.fsStep(ctx, req, st, in, key, emit, func(c *agentclient.Client) error {
		for _, u := range ups {
			f, err := os.Open(u.file)
			if err != nil {
				return err
			}
			err = c.Upload(ctx, u.dir, "root", f)
			f.Close()
			if err != nil {
				return errorAt(in.Line, "%s into %s: %v", in.Cmd, u.dir, err)
			}
			if chown == "" || len(u.tops) == 0 {
				continue
			}
			args := []string{"chown", "-R", "-h", chown, "--"}
			for _, t := range u.tops {
				args = append(args, path.Join(u.dir, t))
			}
			var out strings.Builder
			res, err := c.Run(ctx, agentclient.Cmd{Args: args, User: "root", Stdout: &out, Stderr: &out})
			if err != nil || res.ExitCode != 0 {
				return errorAt(in.Line, "%s --chown=%s: chown in the image failed (exit %d): %v %s", in.Cmd, chown, res.ExitCode, err, strings.TrimSpace(out.String()))
			}
		}
		return nil
	})
}

// packer writes context files to a tar stream and hashes what the cache
// key depends on: names, types, modes, link targets and contents (not
// times or host owners).
type packer struct {
	root  *os.Root
	tw    *tar.Writer
	sum   io.Writer
	chmod int64
	tops  []string
}

func (p *packer) dir(src, prefix string) error {
	ents, err := fs.ReadDir(p.root.FS(), src)
	if err != nil {
		return err
	}
	for _, e := range ents {
		rel := path.Join(src, e.Name())
		name := path.Join(prefix, e.Name())
		fi, err := p.root.Lstat(rel)
		if err != nil {
			return err
		}
		if prefix == "" {
			p.tops = append(p.tops, name)
		}
		if err := p.entry(rel, name, fi); err != nil {
			return err
		}
		if fi.IsDir() {
			if err := p.dir(rel, name); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *packer) entry(src, name string, fi fs.FileInfo) error {
	hdr := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}
	if p.chmod >= 0 {
		hdr.Mode = p.chmod
	}
	switch {
	case fi.Mode().IsRegular():
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
	case fi.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := p.root.Readlink(src)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
	default:
		return nil // sockets, fifos, devices: not copied
	}
	fmt.Fprintf(p.sum, "%q %c %o %q %d\n", hdr.Name, hdr.Typeflag, hdr.Mode, hdr.Linkname, hdr.Size)
	if err := p.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	f, err := p.root.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(p.tw, h), io.LimitReader(f, hdr.Size)); err != nil {
		return err
	}
	fmt.Fprintf(p.sum, "%x\n", h.Sum(nil))
	return nil
}

// isArchive reports whether a context file is a tar archive, plain or
// gzip-compressed (ADD unpacks those).
func isArchive(root *os.Root, src string) bool {
	f, err := root.Open(src)
	if err != nil {
		return false
	}
	defer f.Close()
	r, err := archiveReader(f)
	if err != nil {
		return false
	}
	_, err = tar.NewReader(r).Next()
	return err == nil
}

func archiveReader(f io.Reader) (io.Reader, error) {
	br := bufio.NewReader(f)
	if m, _ := br.Peek(2); len(m) == 2 && m[0] == 0x1f && m[1] == 0x8b {
		return gzip.NewReader(br)
	}
	return br, nil
}

// archive copies the entries of a local tar archive (ADD) into the stream;
// the agent refuses unsafe ones when it unpacks them.
func (p *packer) archive(src string) error {
	f, err := p.root.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := archiveReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		top := strings.SplitN(strings.TrimPrefix(path.Clean("/"+hdr.Name), "/"), "/", 2)[0]
		if top != "" && !slices.Contains(p.tops, top) {
			p.tops = append(p.tops, top)
		}
		fmt.Fprintf(p.sum, "%q %c %o %q %d\n", hdr.Name, hdr.Typeflag, hdr.Mode, hdr.Linkname, hdr.Size)
		if err := p.tw.WriteHeader(hdr); err != nil {
			return err
		}
		h := sha256.New()
		if _, err := io.Copy(io.MultiWriter(p.tw, h), tr); err != nil {
			return err
		}
		fmt.Fprintf(p.sum, "%x\n", h.Sum(nil))
	}
}
