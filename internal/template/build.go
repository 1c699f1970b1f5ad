package template

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Host paths the builder reads.
const hostRoot = "/"

// hostUsrRef is the layer reference of the host /usr used in place: what
// templates built before base snapshots existed (and bases on a host whose
// /usr cannot be hard-linked into the store) record.
const hostUsrRef = "host:/usr"

// Host trees the builder reads; variables so tests can build from planted
// ones. hostUsr is snapshotted into the base (see snapshotUsr), hostDpkg is
// the package database copied with it, hostLocal (normally hostUsr/local)
// holds what was installed outside the package manager.
var (
	hostEtc   = "/etc"
	hostUsr   = "/usr"
	hostDpkg  = "/var/lib/dpkg"
	hostLocal = "/usr/local"
)

// usrDirs are the top-level directories a merged-usr system keeps under /usr
// and links from /. bin, sbin and lib must exist; the others are linked when
// the host has them.
var usrDirs = []struct {
	name     string
	required bool
}{
	{"bin", true}, {"sbin", true}, {"lib", true},
	{"lib64", false}, {"lib32", false}, {"libx32", false},
}

// Empty directories of the rootfs, created in order (parents first).
var rootDirs = []struct {
	path string
	mode fs.FileMode
}{
	{"usr", 0o755}, {"proc", 0o555}, {"dev", 0o755}, {"sys", 0o555},
	{"tmp", fs.ModeSticky | 0o777}, {"run", 0o755}, {"mnt", 0o755}, {"opt", 0o755},
	{"srv", 0o755}, {"var", 0o755}, {"var/tmp", fs.ModeSticky | 0o777}, {"var/lib", 0o755},
	{"var/cache", 0o755}, {"var/log", 0o755}, {"home", 0o755},
	{"root", 0o700}, {"etc", 0o755},
}

// rootLinks are the symlinks of a Debian root besides the merged-usr ones.
var rootLinks = []struct{ path, target string }{
	{"var/run", "../run"},
	{"var/lock", "../run/lock"},
	{"etc/mtab", "../proc/self/mounts"},
}

// etcCopy lists the host /etc entries copied as they are (patterns match
// top-level names). Everything below them still passes through denied and the
// private-key and readability checks of copyTree.
var etcCopy = []string{
	"alternatives", // symlinks into /usr; without them java, editor, ... break
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d",
	"ssl", "ca-certificates", "ca-certificates.conf",
	"bash.bashrc", "profile", "profile.d", "skel", "inputrc",
	"localtime", "timezone", "mime.types", "debian_version", "login.defs",
	"python3*", "perl", "terminfo", "magic", "magic.mime",
	// Plain data that libc and common tools read; no host identity in them.
	"shells", "services", "protocols", "networks", "gai.conf", "host.conf",
	"locale.alias",
	// Java reads its configuration through symlinks from /usr/lib/jvm.
	"java-*",
	// R's configuration (ldpaths, Renviron, Rprofile.site), linked from
	// /usr/lib/R/etc: without it R does not start.
	"R",
	// The package manager: sources and keys (credentials are denied below),
	// dpkg's configuration and the files its maintainer scripts read, so
	// that apt-get works in a build step FROM base.
	"apt", "dpkg", "debconf.conf", "ucf.conf", "adduser.conf", "deluser.conf",
}

// etcFiltered are host /etc files copied only in part (see filterEnvironment
// and filterGitconfig); os-release is copied by content.
var etcFiltered = []string{"environment", "gitconfig", "os-release"}

// denied names are never copied, at any depth below a whitelisted entry.
// Patterns are matched against the lower-cased base name.
var denied = []string{
	"shadow*", "gshadow*", "passwd*", "group", "group-", "subuid*", "subgid*",
	"ssh", "sudoers*", "opasswd", "machine-id", "hostname", "docker",
	"private", "*.key", "*.p12", "*.pfx", "id_rsa*", "id_dsa*", "id_ecdsa*",
	"id_ed25519*", ".netrc", ".git-credentials", "*credential*", "*secret*",
	"*password*", "*token*", "auth.conf*",
}

func isDenied(name string) bool {
	return matchAny(denied, strings.ToLower(name))
}

// matchAny reports whether name matches one of patterns. Patterns are plain
// names with at most a leading and a trailing '*' ("python3*", "*.key",
// "*secret*"); this is all the lists above need and far cheaper than
// filepath.Match on the fast path of EnsureBase.
func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if match(p, name) {
			return true
		}
	}
	return false
}

func match(pattern, name string) bool {
	lead := strings.HasPrefix(pattern, "*")
	trail := len(pattern) > 1 && strings.HasSuffix(pattern, "*")
	core := strings.TrimSuffix(strings.TrimPrefix(pattern, "*"), "*")
	switch {
	case lead && trail:
		return strings.Contains(name, core)
	case lead:
		return strings.HasSuffix(name, core)
	case trail:
		return strings.HasPrefix(name, core)
	default:
		return name == core
	}
}

// buildRootfs writes the generated root layer to dst, which must not exist.
func buildRootfs(dst string) error {
	if err := mkdir(dst, 0o755, 0, 0); err != nil {
		return err
	}
	for _, d := range usrDirs {
		ok, err := mergedUsr(d.name)
		if err != nil {
			return err
		}
		if !ok {
			if d.required {
				return fmt.Errorf("host has no %s", filepath.Join(hostUsr, d.name))
			}
			continue
		}
		if err := symlink("usr/"+d.name, filepath.Join(dst, d.name)); err != nil {
			return err
		}
	}
	for _, d := range rootDirs {
		if err := mkdir(filepath.Join(dst, d.path), d.mode, 0, 0); err != nil {
			return err
		}
	}
	if err := mkdir(filepath.Join(dst, UserHome), 0o755, UserID, UserID); err != nil {
		return err
	}
	for _, l := range rootLinks {
		if err := symlink(l.target, filepath.Join(dst, l.path)); err != nil {
			return err
		}
	}
	etc := filepath.Join(dst, "etc")
	if err := generateEtc(etc); err != nil {
		return err
	}
	if err := copyHostEtc(etc); err != nil {
		return err
	}
	return setupPackageManager(dst)
}

// mergedUsr reports whether /usr/name exists, and fails when the host keeps a
// separate /name directory whose contents the sandbox would miss.
func mergedUsr(name string) (bool, error) {
	fi, err := os.Stat(filepath.Join(hostUsr, name))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat host /usr/%s: %w", name, err)
	}
	if !fi.IsDir() {
		return false, nil
	}
	top := filepath.Join(hostRoot, name)
	li, err := os.Lstat(top)
	if err == nil && li.IsDir() {
		return false, fmt.Errorf("host %s is a directory, not a link into /usr: only merged-usr hosts are supported", top)
	}
	return true, nil
}

// generateEtc writes the files of /etc that describe the sandbox, not the host.
func generateEtc(etc string) error {
	day := time.Now().Unix() / 86400
	type gen struct {
		name     string
		content  string
		mode     fs.FileMode
		uid, gid int
	}
	const shadowGID = 42
	files := []gen{
		{"passwd", "root:x:0:0:root:/root:/bin/bash\n" +
			"user:x:1000:1000:user:/home/user:/bin/bash\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", 0o644, 0, 0},
		{"group", groupFile(false), 0o644, 0, 0},
		{"shadow", fmt.Sprintf("root:*:%d:0:99999:7:::\n"+
			"user:*:%d:0:99999:7:::\n"+
			"nobody:*:%d:0:99999:7:::\n", day, day, day), 0o640, 0, shadowGID},
		{"gshadow", groupFile(true), 0o640, 0, shadowGID},
		{"hosts", "127.0.0.1\tlocalhost\n" +
			"::1\tlocalhost ip6-localhost ip6-loopback\n" +
			"ff02::1\tip6-allnodes\n" +
			"ff02::2\tip6-allrouters\n", 0o644, 0, 0},
		{"hostname", "sandbox\n", 0o644, 0, 0},
		{"resolv.conf", "# No network by default. The sandbox runtime replaces this file\n" +
			"# when it gives the sandbox a network.\n", 0o644, 0, 0},
		// Files only, so no NSS module talks to a host daemon. hosts keeps
		// dns (built into libc) so name resolution works once the runtime
		// provides a resolv.conf; without one it fails at once.
		{"nsswitch.conf", "passwd:         files\n" +
			"group:          files\n" +
			"shadow:         files\n" +
			"gshadow:        files\n" +
			"hosts:          files dns\n" +
			"networks:       files\n" +
			"protocols:      files\n" +
			"services:       files\n" +
			"ethers:         files\n" +
			"rpc:            files\n" +
			"netgroup:       files\n", 0o644, 0, 0},
	}
	// The host's system accounts (ids 1-999: man, _apt, messagebus, ...),
	// locked and without comments or members: the packages in /usr and
	// their maintainer scripts (run by apt-get in a build step) expect them.
	sys := systemAccounts(day)
	for i := range files {
		files[i].content += sys[files[i].name]
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(etc, f.name), []byte(f.content), f.mode, f.uid, f.gid); err != nil {
			return err
		}
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return fmt.Errorf("generate machine-id: %w", err)
	}
	return writeFile(filepath.Join(etc, "machine-id"), []byte(hex.EncodeToString(id)+"\n"), 0o444, 0, 0)
}

// systemAccounts returns the lines the host's system users and groups
// (ids 1-999 that the generated files lack) add to passwd, shadow, group and
// gshadow: no password (locked), no comment, no group members.
func systemAccounts(day int64) map[string]string {
	out := map[string]string{}
	taken := map[string]bool{"root": true, UserName: true, "nobody": true}
	for _, line := range strings.Split(groupFile(false), "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok {
			taken["g:"+name] = true
		}
	}
	read := func(name string) [][]string {
		b, err := os.ReadFile(filepath.Join(hostEtc, name))
		if err != nil {
			return nil
		}
		var recs [][]string
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Split(line, ":")
			if len(f) < 4 || f[0] == "" || strings.ContainsAny(f[0], " \t+") {
				continue
			}
			if id, err := strconv.Atoi(f[2]); err == nil && id >= 1 && id <= 999 {
				recs = append(recs, f)
			}
		}
		return recs
	}
	for _, f := range read("passwd") {
		if len(f) != 7 || taken[f[0]] {
			continue
		}
		taken[f[0]] = true
		out["passwd"] += fmt.Sprintf("%s:x:%s:%s::%s:%s\n", f[0], f[2], f[3], f[5], f[6])
		out["shadow"] += fmt.Sprintf("%s:*:%d:0:99999:7:::\n", f[0], day)
	}
	for _, f := range read("group") {
		if taken["g:"+f[0]] {
			continue
		}
		taken["g:"+f[0]] = true
		out["group"] += fmt.Sprintf("%s:x:%s:\n", f[0], f[2])
		out["gshadow"] += fmt.Sprintf("%s:*::\n", f[0])
	}
	return out
}

// groupFile returns /etc/group, or /etc/gshadow with locked entries.
func groupFile(gshadow bool) string {
	groups := []struct {
		name    string
		gid     int
		members string
	}{
		{"root", 0, ""}, {"daemon", 1, ""}, {"adm", 4, ""}, {"tty", 5, ""},
		{"shadow", 42, ""}, {"staff", 50, ""}, {"users", 100, UserName},
		{"nogroup", 65534, ""}, {UserName, UserID, ""},
	}
	var b strings.Builder
	for _, g := range groups {
		if gshadow {
			fmt.Fprintf(&b, "%s:*::%s\n", g.name, g.members)
		} else {
			fmt.Fprintf(&b, "%s:x:%d:%s\n", g.name, g.gid, g.members)
		}
	}
	return b.String()
}

// copyHostEtc copies the whitelisted parts of the host /etc into etc.
func copyHostEtc(etc string) error {
	entries, err := os.ReadDir(hostEtc)
	if err != nil {
		return fmt.Errorf("read host /etc: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !matchAny(etcCopy, name) || isDenied(name) {
			continue
		}
		if err := copyTree(filepath.Join(hostEtc, name), filepath.Join(etc, name)); err != nil {
			return err
		}
	}

	// os-release by content: on Debian it is a link to ../usr/lib/os-release.
	if b, err := os.ReadFile(filepath.Join(hostEtc, "os-release")); err == nil {
		if err := writeFile(filepath.Join(etc, "os-release"), b, 0o644, 0, 0); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read host os-release: %w", err)
	}
	if err := copyFiltered(etc, "environment", filterEnvironment); err != nil {
		return err
	}
	return copyFiltered(etc, "gitconfig", filterGitconfig)
}
