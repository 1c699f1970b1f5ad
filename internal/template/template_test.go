package template

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/backend"
)

// helperEnv makes the test binary act as a separate EnsureBase caller.
const helperEnv = "WARDEN_TEMPLATE_TEST_ROOT"

func TestMain(m *testing.M) {
	if root := os.Getenv(helperEnv); root != "" {
		t, err := EnsureBase(root)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(t.Version)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("building the base template needs root")
	}
}

func rootfsOf(t *testing.T, tp *Template) string {
	t.Helper()
	for _, l := range tp.Layers {
		if l.Target == "/" {
			return l.Path
		}
	}
	t.Fatalf("template has no root layer: %+v", tp.Layers)
	return ""
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func buildDirs(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, BaseName))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != lockName {
			names = append(names, e.Name())
		}
	}
	return names
}

func TestEnsureBaseReuses(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	start := time.Now()
	t1, err := EnsureBase(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first build took %v", time.Since(start))
	if t1.Name != "base" || t1.User != "user" || t1.Workdir != "/home/user" ||
		t1.Env["PATH"] != DefaultPath || t1.Env["LANG"] != "C.UTF-8" {
		t.Fatalf("unexpected template %+v", t1)
	}
	if len(t1.Layers) != 2 || t1.Layers[0].Target != "/" || t1.Layers[1] != (backend.Layer{Target: "/usr", Path: filepath.Join(root, "base", t1.Version, "usr")}) {
		t.Fatalf("unexpected layers %+v", t1.Layers)
	}
	want := filepath.Join(root, "base", t1.Version, "rootfs")
	if t1.Layers[0].Path != want || !strings.HasPrefix(t1.Version, baseVersion+"-") {
		t.Fatalf("root layer %q, version %q; want %q", t1.Layers[0].Path, t1.Version, want)
	}
	ino := inode(t, want)
	stamp := filepath.Join(root, "base", t1.Version, stampName)
	stampIno := inode(t, stamp)

	start = time.Now()
	t2, err := EnsureBase(root)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second call took %v", took)
	if t2.Version != t1.Version || !slices.Equal(t2.Layers, t1.Layers) {
		t.Fatalf("second call returned %+v, first %+v", t2, t1)
	}
	if inode(t, want) != ino || inode(t, stamp) != stampIno {
		t.Fatal("second call rebuilt the tree")
	}
	if took > 100*time.Millisecond {
		t.Fatalf("second call took %v, want a reuse without rebuild", took)
	}
	if d := buildDirs(t, root); !slices.Equal(d, []string{t1.Version}) {
		t.Fatalf("base dir holds %v, want only %s", d, t1.Version)
	}
}

func TestEnsureBaseConcurrent(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	const goroutines, processes = 6, 3

	var wg sync.WaitGroup
	versions := make([]string, goroutines+processes)
	errs := make([]error, goroutines+processes)
	for i := range goroutines {
		wg.Go(func() {
			tp, err := EnsureBase(root)
			if err == nil {
				versions[i] = tp.Version
			}
			errs[i] = err
		})
	}
	for i := goroutines; i < goroutines+processes; i++ {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+root)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				err = fmt.Errorf("helper process: %w: %s", err, stderr.String())
			}
			versions[i] = strings.TrimSpace(string(out))
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		if v != versions[0] {
			t.Fatalf("callers saw different versions: %v", versions)
		}
	}
	if d := buildDirs(t, root); !slices.Equal(d, []string{versions[0]}) {
		t.Fatalf("base dir holds %v, want only %s", d, versions[0])
	}
	checkTree(t, filepath.Join(root, "base", versions[0], "rootfs"))
}

func TestEnsureBaseRecoversFromCrash(t *testing.T) {
	needRoot(t)
	root := t.TempDir()
	fp, err := hostFingerprint()
	if err != nil {
		t.Fatal(err)
	}
	version := baseVersion + "-" + fp
	base := filepath.Join(root, "base")
	// A crashed build left a temporary tree, and a damaged final tree has
	// lost its stamp.
	for _, d := range []string{tmpPrefix + version + "-123", filepath.Join(version, "rootfs", "etc")} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, version, "rootfs", "etc", "junk"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tp, err := EnsureBase(root)
	if err != nil {
		t.Fatal(err)
	}
	if tp.Version != version {
		t.Fatalf("version %s, want %s", tp.Version, version)
	}
	if d := buildDirs(t, root); !slices.Equal(d, []string{version}) {
		t.Fatalf("base dir holds %v, want only %s", d, version)
	}
	if _, err := os.Stat(filepath.Join(rootfsOf(t, tp), "etc", "junk")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("damaged tree was reused: %v", err)
	}
	checkTree(t, rootfsOf(t, tp))
}

func TestEnsureBaseRelativeRoot(t *testing.T) {
	if _, err := EnsureBase("relative/dir"); err == nil {
		t.Fatal("EnsureBase accepted a relative root")
	}
}

func TestFingerprintStable(t *testing.T) {
	a, err := hostFingerprint()
	if err != nil {
		t.Fatal(err)
	}
	b, err := hostFingerprint()
	if err != nil {
		t.Fatal(err)
	}
	if a != b || len(a) != 12 {
		t.Fatalf("fingerprints %q, %q", a, b)
	}
}

// checkTree verifies the layout of a built rootfs.
func checkTree(t *testing.T, rootfs string) {
	t.Helper()
	for name, target := range map[string]string{"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "etc/mtab": "../proc/self/mounts"} {
		if got, err := os.Readlink(filepath.Join(rootfs, name)); err != nil || got != target {
			t.Errorf("%s -> %q (%v), want %q", name, got, err, target)
		}
	}
	if _, err := os.Stat("/usr/lib64"); err == nil {
		if got, _ := os.Readlink(filepath.Join(rootfs, "lib64")); got != "usr/lib64" {
			t.Errorf("lib64 -> %q, want usr/lib64", got)
		}
	}
	modes := map[string]fs.FileMode{
		".": fs.ModeDir | 0o755, "usr": fs.ModeDir | 0o755, "proc": fs.ModeDir | 0o555,
		"dev": fs.ModeDir | 0o755, "sys": fs.ModeDir | 0o555, "run": fs.ModeDir | 0o755,
		"tmp": fs.ModeDir | fs.ModeSticky | 0o777, "var/tmp": fs.ModeDir | fs.ModeSticky | 0o777,
		"var/lib": fs.ModeDir | 0o755, "var/cache": fs.ModeDir | 0o755, "var/log": fs.ModeDir | 0o755,
		"mnt": fs.ModeDir | 0o755, "opt": fs.ModeDir | 0o755, "srv": fs.ModeDir | 0o755,
		"home": fs.ModeDir | 0o755, "root": fs.ModeDir | 0o700, "home/user": fs.ModeDir | 0o755,
		"etc/passwd": 0o644, "etc/group": 0o644, "etc/shadow": 0o640, "etc/gshadow": 0o640,
		"etc/machine-id": 0o444, "etc/hosts": 0o644, "etc/hostname": 0o644,
		"etc/resolv.conf": 0o644, "etc/nsswitch.conf": 0o644,
	}
	for name, want := range modes {
		fi, err := os.Lstat(filepath.Join(rootfs, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
		} else if fi.Mode() != want {
			t.Errorf("%s has mode %v, want %v", name, fi.Mode(), want)
		}
	}
	entries, err := os.ReadDir(filepath.Join(rootfs, "usr"))
	if err != nil || len(entries) != 0 {
		t.Errorf("usr mount point holds %v (%v)", entries, err)
	}
}

func TestBaseContents(t *testing.T) {
	needRoot(t)
	tp, err := EnsureBase(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rootfs := rootfsOf(t, tp)
	etc := filepath.Join(rootfs, "etc")
	checkTree(t, rootfs)

	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(etc, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := fields(read("passwd"), 0); len(got) < 3 || !slices.Equal(got[:3], []string{"root", "user", "nobody"}) {
		t.Errorf("passwd users %v, want root, user, nobody, then the host's system users", got)
	}
	for _, line := range strings.Split(strings.TrimSpace(read("passwd")), "\n")[3:] {
		f := strings.Split(line, ":")
		if id, err := strconv.Atoi(f[2]); err != nil || id < 1 || id > 999 || f[4] != "" {
			t.Errorf("passwd line %q is not a host system user without comment", line)
		}
	}
	for _, want := range []string{
		"root:x:0:0:root:/root:/bin/bash",
		"user:x:1000:1000:user:/home/user:/bin/bash",
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
	} {
		if !strings.Contains(read("passwd"), want+"\n") {
			t.Errorf("passwd lacks %q", want)
		}
	}
	for _, want := range []string{"root:x:0:", "tty:x:5:", "users:x:100:user", "user:x:1000:", "nogroup:x:65534:"} {
		if !strings.Contains(read("group"), want+"\n") {
			t.Errorf("group lacks %q", want)
		}
	}
	if got := fields(read("shadow"), 1); len(got) != len(fields(read("passwd"), 0)) || slices.ContainsFunc(got, func(pw string) bool { return pw != "*" }) {
		t.Errorf("shadow passwords %v, want all locked, one per user", got)
	}
	for _, pw := range fields(read("gshadow"), 1) {
		if pw != "*" {
			t.Errorf("gshadow password %q, want *", pw)
		}
	}
	if got := read("hostname"); got != "sandbox\n" {
		t.Errorf("hostname %q", got)
	}
	if h := read("hosts"); !strings.Contains(h, "127.0.0.1\tlocalhost\n") || !strings.Contains(h, "::1\tlocalhost") {
		t.Errorf("hosts %q", h)
	}
	if strings.Contains(read("resolv.conf"), "nameserver") {
		t.Error("resolv.conf names a nameserver")
	}
	for _, line := range strings.Split(strings.TrimSpace(read("nsswitch.conf")), "\n") {
		if _, srcs, _ := strings.Cut(line, ":"); strings.TrimSpace(srcs) != "files" && !strings.HasPrefix(line, "hosts:") {
			t.Errorf("nsswitch.conf line %q uses more than files", line)
		}
	}
	mid := read("machine-id")
	if !regexp.MustCompile(`^[0-9a-f]{32}\n$`).MatchString(mid) {
		t.Errorf("machine-id %q", mid)
	}
	if host, err := os.ReadFile("/etc/machine-id"); err == nil && string(host) == mid {
		t.Error("machine-id copied from the host")
	}
	if host, err := os.ReadFile("/etc/os-release"); err == nil && read("os-release") != string(host) {
		t.Error("os-release differs from the host's")
	}
	if host, err := os.ReadFile("/etc/ld.so.cache"); err == nil && read("ld.so.cache") != string(host) {
		t.Error("ld.so.cache differs from the host's")
	}
	// Whitelisted symlinks stay symlinks with the host's targets.
	for _, name := range []string{"localtime", "alternatives/editor", "alternatives/python", "ssl/certs/ca-certificates.crt"} {
		host, herr := os.Readlink(filepath.Join("/etc", name))
		if herr != nil {
			continue
		}
		if got, err := os.Readlink(filepath.Join(etc, name)); err != nil || got != host {
			t.Errorf("%s -> %q (%v), host has %q", name, got, err, host)
		}
	}
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		if _, err := os.Stat(filepath.Join(etc, "ssl/certs/ca-certificates.crt")); err != nil {
			t.Errorf("CA bundle not copied: %v", err)
		}
	}

	// Ownership: root everywhere but home/user (and group shadow on the
	// shadow files).
	err = filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		rel, _ := filepath.Rel(rootfs, p)
		wantUID, wantGID := uint32(0), uint32(0)
		switch rel {
		case "home/user":
			wantUID, wantGID = 1000, 1000
		case "etc/shadow", "etc/gshadow":
			wantGID = 42
		}
		if st.Uid != wantUID || st.Gid != wantGID {
			t.Errorf("%s owned by %d:%d, want %d:%d", rel, st.Uid, st.Gid, wantUID, wantGID)
		}
		if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			t.Errorf("%s is setuid or setgid", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// fields returns field i of every line of a colon-separated file.
func fields(content string, i int) []string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(content), "\n") {
		f := strings.Split(line, ":")
		if i < len(f) {
			out = append(out, f[i])
		}
	}
	return out
}

func TestBaseHoldsNoSecrets(t *testing.T) {
	needRoot(t)
	tp, err := EnsureBase(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rootfs := rootfsOf(t, tp)

	// Password hashes of the host, locked ones included.
	var hashes []string
	for _, f := range []string{"/etc/shadow", "/etc/gshadow"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, h := range fields(string(b), 1) {
			if strings.Trim(h, "!*") != "" {
				hashes = append(hashes, strings.Trim(h, "!*"))
			}
		}
	}
	t.Logf("checking against %d host password hashes", len(hashes))
	hostID, _ := os.ReadFile("/etc/machine-id")
	hostID = bytes.TrimSpace(hostID)

	generated := []string{"etc/passwd", "etc/group", "etc/shadow", "etc/gshadow", "etc/hostname", "etc/machine-id"}
	err = filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(rootfs, p)
		name := strings.ToLower(d.Name())
		if !slices.Contains(generated, rel) {
			for _, bad := range []string{"ssh", "sudoers", "sudoers.d", "shadow", "gshadow", "shadow-", "gshadow-",
				"passwd-", "group-", "private", "opasswd", "docker", "machine-id", "security/opasswd", ".git-credentials"} {
				if name == bad {
					t.Errorf("tree holds %s", rel)
				}
			}
			if strings.HasSuffix(name, ".key") {
				t.Errorf("tree holds key file %s", rel)
			}
		}
		if rel == "etc/security" || rel == "root" && d.IsDir() && !isEmptyDir(p) || strings.HasPrefix(rel, "home/") && rel != "home/user" {
			t.Errorf("tree holds %s", rel)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if isPrivateKey(b) {
			t.Errorf("%s holds a private key", rel)
		}
		for _, h := range hashes {
			if bytes.Contains(b, []byte(h)) {
				t.Errorf("%s holds a host password hash", rel)
			}
		}
		if len(hostID) > 0 && bytes.Contains(b, hostID) {
			t.Errorf("%s holds the host machine-id", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(rootfs, "home/user")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("home/user not owned by 1000: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(rootfs, "home/user")); len(entries) != 0 {
		t.Errorf("home/user is not empty: %v", entries)
	}
	// The host's system git config may name credential helpers.
	if b, err := os.ReadFile(filepath.Join(rootfs, "etc/gitconfig")); err == nil {
		if s := strings.ToLower(string(b)); strings.Contains(s, "credential") || strings.Contains(s, "helper") || strings.Contains(s, "extraheader") {
			t.Errorf("gitconfig keeps credentials settings:\n%s", b)
		}
	}
}

func isEmptyDir(p string) bool {
	entries, err := os.ReadDir(p)
	return err == nil && len(entries) == 0
}

func TestSpec(t *testing.T) {
	tp := baseTemplate("/var/lib/warden/templates/base/v1-x", "v1-x")
	s := tp.Spec("sb-1")
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.ID != "sb-1" || s.User != "user" || s.Workdir != "/home/user" || s.Env["PATH"] != DefaultPath ||
		!slices.Equal(s.Layers, tp.Layers) {
		t.Fatalf("spec %+v", s)
	}
	s.Env["PATH"] = "/x"
	s.Layers[0].Path = "/x"
	if tp.Env["PATH"] != DefaultPath || tp.Layers[0].Path == "/x" {
		t.Fatal("spec shares memory with the template")
	}
}

func TestCopyTreeFilters(t *testing.T) {
	needRoot(t)
	src := filepath.Join(t.TempDir(), "src")
	dst := filepath.Join(t.TempDir(), "dst")
	write := func(name, content string, mode fs.FileMode) {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("conf", "ok\n", 0o644)
	write("exec.sh", "#!/bin/sh\n", 0o755)
	write("restricted", "secret\n", 0o640)
	write("certs/ca.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", 0o644)
	write("certs/server.pem", "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n", 0o644)
	write("certs/server.key", "anything\n", 0o644)
	write("ssh/ssh_host_ed25519_key.pub", "ssh-ed25519 AAAA\n", 0o644)
	write("sudoers.d/x", "ALL\n", 0o644)
	write("shadow", "root:$6$x:1:::::\n", 0o644)
	write("api-token", "t\n", 0o644)
	write("private/x", "x\n", 0o644)
	write("locked/x", "x\n", 0o644)
	if err := os.Chmod(filepath.Join(src, "locked"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/share/thing", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(src, "conf"), 1234, 1234); err != nil {
		t.Fatal(err)
	}
	if err := copyTree(src, dst); err != nil {
		t.Fatal(err)
	}
	var got []string
	filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dst, p)
		fi, _ := os.Lstat(p)
		st := fi.Sys().(*syscall.Stat_t)
		got = append(got, fmt.Sprintf("%s %v %d:%d", rel, fi.Mode(), st.Uid, st.Gid))
		return nil
	})
	want := []string{
		". drwxr-xr-x 0:0",
		"certs drwxr-xr-x 0:0",
		"certs/ca.pem -rw-r--r-- 0:0",
		"conf -rw-r--r-- 0:0",
		"exec.sh -rwxr-xr-x 0:0",
		"link Lrwxrwxrwx 0:0",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("copied:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if target, _ := os.Readlink(filepath.Join(dst, "link")); target != "/usr/share/thing" {
		t.Fatalf("link -> %q", target)
	}
}

func TestFilterGitconfig(t *testing.T) {
	in := `# system config
[user]
	name = Someone
[credential "https://source.developers.google.com"]
	helper = gcloud.sh
[http]
	extraHeader = Authorization: Bearer abc
[url "https://tok:x@github.com/"]
	insteadOf = https://github.com/
[include]
	path = /root/.gitconfig-extra
[core]
	editor = vi
	sshCommand = ssh -i /root/.ssh/id_rsa
	askPass = /usr/bin/x
[remote "origin"]
	url = https://user:pw@example.com/repo
[safe]
	directory = *
`
	want := "[user]\n\tname = Someone\n[core]\n\teditor = vi\n[safe]\n\tdirectory = *\n"
	if got := string(filterGitconfig([]byte(in))); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	if got := filterGitconfig([]byte("[credential]\n\thelper = store\n")); got != nil {
		t.Fatalf("credential-only config gave %q, want nothing", got)
	}
}

func TestFilterEnvironment(t *testing.T) {
	in := "# c\nPATH=\"/root/bin:/usr/bin\"\nLANG=en_US.UTF-8\nexport LC_ALL=C\nhttp_proxy=http://u:p@proxy\nAPI_TOKEN=x\nTZ=UTC\n"
	want := "LANG=en_US.UTF-8\nexport LC_ALL=C\nTZ=UTC\n"
	if got := string(filterEnvironment([]byte(in))); got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := filterEnvironment(nil); got == nil || len(got) != 0 {
		t.Fatalf("empty environment gave %q", got)
	}
}

func TestDenied(t *testing.T) {
	for _, name := range []string{"shadow", "gshadow-", "ssh", "sudoers", "sudoers.d", "server.KEY", "private",
		"aws_credentials", "client-secret.json", "id_ed25519", ".netrc", "machine-id", "passwd-"} {
		if !isDenied(name) {
			t.Errorf("%s is not denied", name)
		}
	}
	for _, name := range []string{"profile", "ca-certificates.crt", "editor", "python3.11", "ld.so.cache", "java.security"} {
		if isDenied(name) {
			t.Errorf("%s is denied", name)
		}
	}
	for _, name := range []string{"python3", "python3.11", "java-17-openjdk", "ssl", "magic.mime"} {
		if !matchAny(etcCopy, name) {
			t.Errorf("%s not whitelisted", name)
		}
	}
	for _, name := range []string{"shadow", "passwd", "ssh", "sudoers", "security", "docker", "hostname", "machine-id", "pip.conf", "npmrc"} {
		if matchAny(etcCopy, name) {
			t.Errorf("%s whitelisted", name)
		}
	}
}

// TestBaseRuns boots the template the way the native backend does, minus the
// overlay: the rootfs read-only at /, the host /usr read-only at /usr, in a
// private mount namespace, and runs the toolchain as uid 1000 with a clean
// environment.
func TestBaseRuns(t *testing.T) {
	needRoot(t)
	for _, tool := range []string{"unshare", "setpriv", "chroot"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	if err := exec.Command("unshare", "-m", "--propagation", "private", "true").Run(); err != nil {
		t.Skipf("cannot create a mount namespace: %v", err)
	}
	tp, err := EnsureBase(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()

	// Each check prints one line we compare.
	type check struct{ tool, cmd, want string }
	checks := []check{
		{"bash", `echo ok`, "ok"},
		{"python3", `python3 -c "print(2+2)"`, "4"},
		{"node", `node -e "console.log(1+1)"`, "2"},
		{"git", `git --version | cut -d" " -f1,2`, "git version"},
		{"bash", `ls -A /home/user | wc -l`, "0"},
		{"bash", `echo "$(id -un) $(id -u) $(id -gn) $HOME $PWD"`, "user 1000 user /home/user /home/user"},
		{"bash", `touch /etc/x 2>/dev/null && echo writable || echo read-only`, "read-only"},
		{"bash", `cat /etc/hostname`, "sandbox"},
		{"bash", `test -r /etc/shadow && echo readable || echo unreadable`, "unreadable"},
		{"python3", `python3 -c "import ssl,os; print(os.path.exists(ssl.get_default_verify_paths().cafile))"`, "True"},
		{"getent", `getent passwd nobody | cut -d: -f1,3`, "nobody:65534"},
		{"bash", `env | cut -d= -f1 | sort | tr "\n" " "`, ""}, // checked below
	}
	var script []string
	var want []string
	for _, c := range checks {
		if _, err := os.Stat(filepath.Join("/usr/bin", c.tool)); err != nil {
			t.Logf("host has no /usr/bin/%s: skipping %q", c.tool, c.cmd)
			continue
		}
		script = append(script, c.cmd)
		want = append(want, c.want)
	}
	inner := strings.Join(script, "; ")
	outer := `set -eu
M=$1; R=$2; shift 2
mount --bind "$R" "$M"
mount --bind /usr "$M/usr"
mount -o remount,bind,ro "$M/usr"
mount -t proc proc "$M/proc"
mount -t tmpfs -o mode=755 tmpfs "$M/dev"
for n in null zero full random urandom; do
	touch "$M/dev/$n"
	mount --bind "/dev/$n" "$M/dev/$n"
done
mount -t tmpfs -o mode=1777 tmpfs "$M/tmp"
mount -o remount,bind,ro "$M"
cd "$M"
exec /usr/bin/env -i /usr/sbin/chroot "$M" /usr/bin/setpriv --reuid=1000 --regid=1000 --clear-groups \
	/usr/bin/env -i PATH="$PATH_IN" LANG=C.UTF-8 HOME=/home/user \
	/bin/bash -c 'cd "$HOME" && '"$1"
`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
		strings.ReplaceAll(outer, "$PATH_IN", tp.Env["PATH"]), "sh", mnt, rootfsOf(t, tp), inner)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sandbox run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var got []string
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		got = append(got, strings.TrimSpace(sc.Text()))
	}
	t.Logf("sandbox output:\n%s", strings.Join(got, "\n"))
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d; stderr:\n%s", len(got), len(want), stderr.String())
	}
	for i := range want {
		if i == len(want)-1 {
			// Clean environment: only what we passed plus what bash sets.
			for _, v := range strings.Fields(got[i]) {
				if !slices.Contains([]string{"HOME", "LANG", "PATH", "PWD", "OLDPWD", "SHLVL", "_"}, v) {
					t.Errorf("unexpected variable %s in the sandbox", v)
				}
			}
			continue
		}
		if got[i] != want[i] {
			t.Errorf("%q printed %q, want %q", script[i], got[i], want[i])
		}
	}
	// Nothing leaked: the mounts lived in the child's namespace.
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && bytes.Contains(b, []byte(mnt)) {
		t.Errorf("mounts leaked into the test's namespace")
	}
}

// TestBuildFromPlantedHost builds from a fake host /etc full of secrets and
// checks that none of them reaches the tree while the harmless files do.
func TestBuildFromPlantedHost(t *testing.T) {
	needRoot(t)
	etc := t.TempDir()
	const marker = "PLANTED-SECRET-7f3a"
	key := "-----BEGIN OPENSSH PRIVATE KEY-----\n" + marker + "\n-----END OPENSSH PRIVATE KEY-----\n"
	files := map[string]struct {
		content string
		mode    fs.FileMode
	}{
		"shadow":                      {"root:$6$" + marker + ":19000:0:99999:7:::\n", 0o640},
		"shadow-":                     {"root:$6$" + marker + ":19000:0:99999:7:::\n", 0o600},
		"gshadow":                     {"root:$6$" + marker + "::\n", 0o640},
		"passwd":                      {"alice-" + marker + ":x:1001:1001::/home/alice:/bin/sh\n", 0o644},
		"group":                       {"alice-" + marker + ":x:1001:\n", 0o644},
		"subuid":                      {"alice-" + marker + ":100000:65536\n", 0o644},
		"hostname":                    {marker + "\n", 0o644},
		"machine-id":                  {"0123456789abcdef0123456789abcdef\n", 0o444},
		"ssh/sshd_config":             {marker + "\n", 0o644},
		"ssh/ssh_host_ed25519_key":    {key, 0o600},
		"sudoers":                     {marker + "\n", 0o440},
		"sudoers.d/admins":            {marker + "\n", 0o440},
		"security/opasswd":            {marker + "\n", 0o600},
		"docker/key.json":             {marker + "\n", 0o644},
		"ssl/private/host.key":        {key, 0o640},
		"ssl/certs/leaked.pem":        {key, 0o644},
		"ssl/certs/server.key":        {marker, 0o644},
		"ssl/certs/ca.pem":            {"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", 0o644},
		"ssl/openssl.cnf":             {"# openssl\n", 0o644},
		"profile":                     {"# profile\n", 0o644},
		"profile.d/local.sh":          {"export A=1\n", 0o644},
		"profile.d/tokens.sh":         {"export TOKEN=" + marker + "\n", 0o600},
		"profile.d/gh_token":          {marker + "\n", 0o644},
		"skel/.bashrc":                {"# bashrc\n", 0o644},
		"skel/.netrc":                 {"machine x password " + marker + "\n", 0o644},
		"ld.so.cache":                 {"ld-cache\n", 0o644},
		"python3.11/sitecustomize.py": {"# site\n", 0o644},
		"gitconfig":                   {"[credential]\n\thelper = store --file /root/" + marker + "\n[core]\n\teditor = vi\n", 0o644},
		"environment":                 {"LANG=C.UTF-8\nAWS_SECRET_ACCESS_KEY=" + marker + "\n", 0o644},
		"os-release":                  {"ID=planted\n", 0o644},
		"npmrc":                       {"//registry/:_authToken=" + marker + "\n", 0o644},
		"pip.conf":                    {"index-url = https://u:" + marker + "@pypi\n", 0o644},
	}
	for name, f := range files {
		p := filepath.Join(etc, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.content), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(etc, "alternatives"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin/vim.basic", filepath.Join(etc, "alternatives", "editor")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/shadow", filepath.Join(etc, "alternatives", "pager")); err != nil {
		t.Fatal(err)
	}

	old := hostEtc
	hostEtc = etc
	t.Cleanup(func() { hostEtc = old })
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if err := buildRootfs(rootfs); err != nil {
		t.Fatal(err)
	}

	var present []string
	err := filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(rootfs, p)
		if strings.HasPrefix(rel, "etc/") {
			present = append(present, strings.TrimPrefix(rel, "etc/"))
		}
		if strings.Contains(rel, marker) {
			t.Errorf("path %s carries the secret", rel)
		}
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if bytes.Contains(b, []byte(marker)) {
				t.Errorf("%s carries the secret:\n%s", rel, b)
			}
			if bytes.Contains(b, []byte("0123456789abcdef0123456789abcdef")) {
				t.Errorf("%s carries the host machine-id", rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ssl/certs/ca.pem", "ssl/openssl.cnf", "profile", "profile.d/local.sh",
		"skel/.bashrc", "ld.so.cache", "python3.11/sitecustomize.py", "gitconfig", "environment", "os-release",
		"alternatives/editor", "alternatives/pager"} {
		if !slices.Contains(present, want) {
			t.Errorf("etc/%s was not copied", want)
		}
	}
	for _, bad := range []string{"ssh", "sudoers", "sudoers.d", "security", "docker", "ssl/private", "ssl/certs/leaked.pem",
		"ssl/certs/server.key", "profile.d/tokens.sh", "profile.d/gh_token", "skel/.netrc", "shadow-", "subuid", "npmrc", "pip.conf"} {
		if slices.Contains(present, bad) {
			t.Errorf("etc/%s was copied", bad)
		}
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(rootfs, "etc", name))
		return string(b)
	}
	if got := read("gitconfig"); got != "[core]\n\teditor = vi\n" {
		t.Errorf("gitconfig %q", got)
	}
	if got := read("environment"); got != "LANG=C.UTF-8\n" {
		t.Errorf("environment %q", got)
	}
	if got := read("os-release"); got != "ID=planted\n" {
		t.Errorf("os-release %q", got)
	}
	if got := fields(read("passwd"), 0); !slices.Equal(got, []string{"root", "user", "nobody"}) {
		t.Errorf("passwd users %v", got)
	}
}
