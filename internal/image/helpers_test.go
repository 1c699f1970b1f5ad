package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"
)

// requireRoot skips tests that need root (chown, mknod, overlay mounts).
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: THIS TEST NEEDS ROOT (chown to arbitrary ids, mknod of whiteouts, mounts); " +
			"run `go test ./internal/image/` as root — CI does")
	}
}

var testTime = time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)

// ent is one entry of a hand-built layer tar.
type ent struct {
	name     string
	typ      byte
	body     string
	mode     int64
	uid, gid int
	link     string
	pax      map[string]string
	mtime    time.Time
	major    int64
}

func dirE(name string, mode int64) ent { return ent{name: name, typ: tar.TypeDir, mode: mode} }
func fileE(name, body string) ent      { return ent{name: name, typ: tar.TypeReg, body: body, mode: 0o644} }
func symE(name, target string) ent {
	return ent{name: name, typ: tar.TypeSymlink, link: target, mode: 0o777}
}
func linkE(name, target string) ent {
	return ent{name: name, typ: tar.TypeLink, link: target, mode: 0o644}
}
func whE(name string) ent { return ent{name: name, typ: tar.TypeReg, mode: 0o600} }

// tarBytes builds an uncompressed tar from entries, in order.
func tarBytes(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		mt := e.mtime
		if mt.IsZero() {
			mt = testTime
		}
		hdr := &tar.Header{
			Name:       e.name,
			Typeflag:   e.typ,
			Mode:       e.mode,
			Uid:        e.uid,
			Gid:        e.gid,
			Linkname:   e.link,
			ModTime:    mt,
			PAXRecords: e.pax,
			Devmajor:   e.major,
		}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if len(e.pax) > 0 {
			hdr.Format = tar.FormatPAX
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar header %q: %v", e.name, err)
		}
		if e.typ == tar.TypeReg {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// tarLayer makes a gzip-compressed ggcr layer from entries.
func tarLayer(t testing.TB, ents ...ent) v1.Layer {
	t.Helper()
	data := tarBytes(t, ents...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// dirStore is a simple LayerStore on disk: layers live in base/<hex>,
// filled in base/.tmp-* and renamed into place.
type dirStore struct {
	base string
	mu   sync.Mutex
	puts int
}

func newDirStore(t testing.TB) *dirStore {
	return &dirStore{base: t.TempDir()}
}

func (s *dirStore) path(id string) string {
	return filepath.Join(s.base, strings.TrimPrefix(id, "sha256:"))
}

func (s *dirStore) Has(id string) bool {
	_, err := os.Lstat(s.path(id))
	return err == nil
}

func (s *dirStore) Put(id string, fill func(dir string) error) error {
	s.mu.Lock()
	s.puts++
	s.mu.Unlock()
	tmp, err := os.MkdirTemp(s.base, ".tmp-")
	if err != nil {
		return err
	}
	if err := fill(tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, s.path(id)); err != nil {
		os.RemoveAll(tmp)
		if errors.Is(err, os.ErrExist) || errors.Is(err, unix.ENOTEMPTY) {
			return nil // someone else stored it first
		}
		return err
	}
	return nil
}

// entries lists the names in dir (non-recursive), sorted.
func entries(t testing.TB, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func lstat(t testing.TB, p string) *unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatalf("lstat %s: %v", p, err)
	}
	return &st
}

func getxattr(p, name string) (string, error) {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(p, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func describeTree(root string) string {
	var sb strings.Builder
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			fmt.Fprintf(&sb, "%s: %v\n", p, err)
			return nil
		}
		fmt.Fprintf(&sb, "%s %v\n", p, d.Type())
		return nil
	})
	return sb.String()
}

// rawHeader encodes a ustar header block by hand, for headers archive/tar
// refuses to write (PAX records it manages itself, odd type flags).
func rawHeader(name string, typ byte, size int) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	copy(b[100:108], "0000644\x00")
	copy(b[108:116], "0000000\x00")
	copy(b[116:124], "0000000\x00")
	copy(b[124:136], fmt.Sprintf("%011o\x00", size))
	copy(b[136:148], fmt.Sprintf("%011o\x00", testTime.Unix()))
	b[156] = typ
	copy(b[257:263], "ustar\x00")
	copy(b[263:265], "00")
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// rawPAX returns a PAX extended header (type 'x') carrying records verbatim;
// it applies to the next entry.
func rawPAX(records ...[2]string) []byte {
	var body []byte
	for _, kv := range records {
		rec := " " + kv[0] + "=" + kv[1] + "\n"
		n := len(rec) + 1
		for len(fmt.Sprint(n))+len(rec) != n {
			n = len(fmt.Sprint(n)) + len(rec)
		}
		body = append(body, fmt.Sprintf("%d%s", n, rec)...)
	}
	out := rawHeader("PaxHeaders/x", 'x', len(body))
	out = append(out, body...)
	if pad := len(body) % 512; pad != 0 {
		out = append(out, make([]byte, 512-pad)...)
	}
	return out
}
