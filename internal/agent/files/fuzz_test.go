package files

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
)

// The fuzz targets check the extraction invariant: whatever the archive,
// Extract does not panic, changes nothing outside the target directory, and
// leaves no device, FIFO, setuid or setgid file inside it.
//
// Seed corpora live in testdata/fuzz/<target>/. Run one with
//
//	go test -run='^$' -fuzz=FuzzTarExtract -fuzztime=20s ./internal/agent/files/

// decodeEntries turns fuzz bytes into tar entries, one per line:
// <type byte><name>|<link>|<octal mode>|<body>. Structured input reaches the
// extraction logic far more often than raw bytes, which mostly fail the tar
// header checksum.
func decodeEntries(data []byte) []tarEnt {
	var ents []tarEnt
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		f := strings.SplitN(string(line[1:]), "|", 4)
		for len(f) < 4 {
			f = append(f, "")
		}
		mode, err := strconv.ParseInt(f[2], 8, 64)
		if err != nil {
			mode = 0o644
		}
		ents = append(ents, tarEnt{typ: line[0], name: f[0], link: f[1], mode: mode & 0o7777, body: f[3]})
		if len(ents) >= 64 {
			break
		}
	}
	return ents
}

func encodeEntries(ents ...tarEnt) []byte {
	var b bytes.Buffer
	for _, e := range ents {
		b.WriteByte(e.typ)
		b.WriteString(e.name + "|" + e.link + "|" + strconv.FormatInt(e.mode, 8) + "|" + e.body + "\n")
	}
	return b.Bytes()
}

// buildTar writes what archive/tar accepts of ents, in the smallest format
// that holds them (USTAR where possible: small inputs minimize fast).
func buildTar(ents []tarEnt) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, ModTime: time.Unix(1700000000, 0)}
		if e.typ == tar.TypeReg || e.typ == tar.TypeCont || e.typ == tar.TypeGNUSparse {
			hdr.Size = int64(len(e.body))
		}
		if tw.WriteHeader(hdr) != nil {
			continue
		}
		if hdr.Size > 0 {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

// box is a directory tree an extraction target lives in, built once per
// fuzz worker: extracting into box/outer/tN must leave the rest unchanged.
type box struct {
	base   string
	outer  string
	before map[string]string
	n      int
}

func newBox(tb testing.TB) *box {
	base, err := os.MkdirTemp("", "warden-fuzz-")
	must(tb, err)
	tb.Cleanup(func() { os.RemoveAll(base) })
	b := &box{base: base, outer: filepath.Join(base, "outer")}
	must(tb, os.MkdirAll(filepath.Join(b.outer, "sibling"), 0o755))
	must(tb, os.WriteFile(filepath.Join(b.outer, "sibling", "keep"), []byte("keep"), 0o644))
	must(tb, os.WriteFile(filepath.Join(base, "keep"), []byte("keep"), 0o644))
	must(tb, os.Symlink("/", filepath.Join(b.outer, "rootlink")))
	b.before = snapshot(tb, base)
	return b
}

// extract extracts archive into a fresh target and checks the invariant.
func (b *box) extract(t *testing.T, archive []byte, names []string) {
	b.n++
	target := filepath.Join(b.outer, "t"+strconv.Itoa(b.n))
	must(t, os.Mkdir(target, 0o755))
	defer os.RemoveAll(target)

	// Paths the names could reach beyond base: they must not appear.
	var far []string
	for _, n := range names {
		for _, p := range []string{path.Join("/", n), path.Join(target, n)} {
			if p != b.base && !strings.HasPrefix(p, b.base+"/") {
				if _, err := os.Lstat(p); os.IsNotExist(err) {
					far = append(far, p)
				}
			}
		}
	}

	root, err := os.OpenRoot(target)
	must(t, err)
	Extract(context.Background(), root, bytes.NewReader(archive), Limits{MaxEntries: 1000, MaxBytes: 1 << 20})
	root.Close()

	after := snapshot(t, b.base)
	if d := diffSnapshots(b.before, after, target); len(d) > 0 {
		t.Fatalf("changed outside the target: %v", d)
	}
	for _, p := range far {
		if _, err := os.Lstat(p); err == nil {
			os.Remove(p)
			t.Fatalf("created %s outside the target", p)
		}
	}
	for p := range after {
		if p != target && !strings.HasPrefix(p, target+"/") {
			continue
		}
		fi, err := os.Lstat(p)
		if err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky|os.ModeDevice|os.ModeCharDevice|os.ModeNamedPipe|os.ModeSocket) != 0 {
			t.Fatalf("special file extracted: %s %v", p, fi.Mode())
		}
	}
}

func seedEntries() [][]tarEnt {
	var seeds [][]tarEnt
	for _, c := range slipCases() {
		seeds = append(seeds, c.ents("/tmp/warden-fuzz-outside"))
	}
	seeds = append(seeds,
		[]tarEnt{{typ: tar.TypeDir, name: "d/", mode: 0o555}, {typ: tar.TypeReg, name: "d/f", mode: 0o644, body: "x"}},
		[]tarEnt{{typ: tar.TypeSymlink, name: "a", link: "b"}, {typ: tar.TypeSymlink, name: "b", link: "a"}, {typ: tar.TypeReg, name: "a/x", body: "loop"}},
		[]tarEnt{{typ: tar.TypeSymlink, name: "r", link: "../rootlink"}, {typ: tar.TypeReg, name: "r/tmp/x", body: "x"}},
		[]tarEnt{{typ: tar.TypeReg, name: "./x", body: "1"}, {typ: tar.TypeDir, name: "./"}, {typ: tar.TypeLink, name: "y", link: "./x"}},
		[]tarEnt{{typ: tar.TypeSymlink, name: "s", link: "../sibling"}, {typ: tar.TypeLink, name: "h", link: "s/keep"}},
		[]tarEnt{{typ: tar.TypeSymlink, name: "s", link: "../sibling/keep"}, {typ: tar.TypeLink, name: "h", link: "s"}, {typ: tar.TypeReg, name: "h", body: "over"}},
	)
	return seeds
}

func FuzzTarExtract(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("needs root")
	}
	for _, s := range seedEntries() {
		f.Add(encodeEntries(s...))
	}
	b := newBox(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		ents := decodeEntries(data)
		var names []string
		for _, e := range ents {
			names = append(names, e.name, e.link)
		}
		b.extract(t, buildTar(ents), names)
	})
}

func FuzzTarExtractRaw(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("needs root")
	}
	for _, s := range seedEntries() {
		f.Add(buildTar(s))
	}
	b := newBox(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		// Names are only known by reading the archive the way Extract will.
		var names []string
		tr := tar.NewReader(bytes.NewReader(data))
		for i := 0; i < 1000; i++ {
			hdr, err := tr.Next()
			if err != nil {
				break
			}
			names = append(names, hdr.Name, hdr.Linkname)
		}
		b.extract(t, data, names)
	})
}

// FuzzResolve checks path handling: Resolve always gives an absolute, clean
// path; an entry name cleanEntryName accepts stays below any directory.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"", "~", "~/x", "~/../..", "a/../../b", "/abs/../x", "./x/", "..", "a/..", "x/../../../etc/passwd", "\x00", "a//b", "~user", "/", "../"} {
		f.Add(s)
	}
	u := &sysuser.User{Name: "user", UID: 1000, GID: 1000, Home: "/home/user"}
	f.Fuzz(func(t *testing.T, p string) {
		for _, wd := range []string{"", "/work"} {
			r := u.Resolve(p, wd)
			if !path.IsAbs(r) || path.Clean(r) != r {
				t.Fatalf("Resolve(%q, %q) = %q: not absolute and clean", p, wd, r)
			}
		}
		name, err := cleanEntryName(p)
		if err != nil {
			return
		}
		if name != "." && !filepath.IsLocal(name) {
			t.Fatalf("cleanEntryName(%q) = %q: not local", p, name)
		}
		j := path.Join("/target", name)
		if j != "/target" && !strings.HasPrefix(j, "/target/") {
			t.Fatalf("cleanEntryName(%q) = %q escapes: %q", p, name, j)
		}
	})
}

// TestWriteFuzzSeeds regenerates the committed seed corpora under
// testdata/fuzz/ from the hostile archives of the tar-slip table:
//
//	WARDEN_WRITE_FUZZ_SEEDS=1 go test -run=TestWriteFuzzSeeds ./internal/agent/files/
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("WARDEN_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set WARDEN_WRITE_FUZZ_SEEDS=1 to regenerate testdata/fuzz")
	}
	write := func(target, name, value string) {
		dir := filepath.Join("testdata", "fuzz", target)
		must(t, os.MkdirAll(dir, 0o755))
		must(t, os.WriteFile(filepath.Join(dir, name), []byte("go test fuzz v1\n"+value+"\n"), 0o644))
	}
	names := []string{}
	for _, c := range slipCases() {
		names = append(names, c.name)
	}
	names = append(names, "readonly-dir", "symlink-loop", "via-rootlink", "dot-names", "link-via-sibling", "link-to-symlink-then-file")
	for i, s := range seedEntries() {
		write("FuzzTarExtract", "seed-"+names[i], "[]byte("+strconv.Quote(string(encodeEntries(s...)))+")")
		write("FuzzTarExtractRaw", "seed-"+names[i], "[]byte("+strconv.Quote(string(buildTar(s)))+")")
	}
	for i, p := range []string{"../x", "/abs", "a/../../b", "~/../..", "x/./y/", "", "\x00", "~", "l/etc/passwd", "./"} {
		write("FuzzResolve", "seed-"+strconv.Itoa(i), "string("+strconv.Quote(p)+")")
	}
}
