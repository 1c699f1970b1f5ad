//go:build linux

package main

// Probes 1–4: host secrets, writes outside designated paths, /proc
// visibility, /proc/sys and /sys writes.

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Paths where a Warden daemon keeps its database, configuration, state and
// sockets by default; none may exist inside a sandbox.
var daemonPaths = []string{"/var/lib/warden", "/etc/warden", "/run/warden", "/var/run/warden"}

// socketsFound are unix sockets met by the token walk, checked by probe 21.
var socketsFound []string

func probeHostSecrets(r *reporter) {
	const id = 1
	// Host paths (canary file, daemon state, backend run directory) are absent.
	for _, p := range append(append([]string{}, daemonPaths...), opts.HostPaths...) {
		var st unix.Stat_t
		err := unix.Lstat(p, &st)
		r.expect(id, "absent:"+p, err, unix.ENOENT, unix.EACCES)
	}
	// The sandbox is not the host: another hostname.
	if opts.HostHostname != "" {
		var u unix.Utsname
		unix.Uname(&u)
		got := unix.ByteSliceToString(u.Nodename[:])
		r.check(id, "hostname", got != opts.HostHostname, fmt.Sprintf("sandbox hostname %q, host %q", got, opts.HostHostname))
	}
	// /etc/shadow: unreadable, or the template's own without password hashes.
	if b, err := os.ReadFile("/etc/shadow"); err != nil {
		r.check(id, "shadow", isOneOf(err, unix.EACCES, unix.ENOENT), "read /etc/shadow: "+describe(err))
	} else {
		var hashed []string
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Split(line, ":")
			if len(f) > 1 && (strings.HasPrefix(f[1], "$") || len(f[1]) >= 13) {
				hashed = append(hashed, f[0])
			}
		}
		r.check(id, "shadow", len(hashed) == 0, fmt.Sprintf("readable (%d bytes); entries with a password hash: %v", len(b), hashed))
	}
	// Host paths must not show in the sandbox's mount table either.
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err != nil {
		r.fail(id, "mountinfo", "read /proc/self/mountinfo: "+describe(err))
	} else {
		var leaked []string
		for _, p := range opts.HostPaths {
			if strings.Contains(string(mi), p) {
				leaked = append(leaked, p)
			}
		}
		r.check(id, "mountinfo-host-paths", len(leaked) == 0, fmt.Sprintf("%d mounts; host paths shown: %v", bytes.Count(mi, []byte("\n")), leaked))
	}
	mounts := probeMounts(r, id)
	tokenWalk(r, id, mounts)
}

// mount is one line of /proc/self/mountinfo.
type mount struct {
	root, point, fstype, source string
}

func readMounts() ([]mount, error) {
	lines, err := readLines("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var ms []mount
	for _, l := range lines {
		pre, post, ok := strings.Cut(l, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 2 {
			continue
		}
		ms = append(ms, mount{root: unescapeMount(f[3]), point: unescapeMount(f[4]), fstype: g[0], source: g[1]})
	}
	return ms, nil
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// Filesystems that hold host (or shared network) data: none may be mounted
// in a sandbox, whose files live in overlays of its template and in tmpfs.
var hostFSTypes = map[string]bool{
	"ext2": true, "ext3": true, "ext4": true, "xfs": true, "btrfs": true, "zfs": true, "f2fs": true,
	"vfat": true, "exfat": true, "ntfs": true, "ntfs3": true, "iso9660": true, "squashfs": true,
	"9p": true, "virtiofs": true, "nfs": true, "nfs4": true, "cifs": true, "smb3": true, "ceph": true,
	"fuse": true, "fuseblk": true, "cgroup": true, "cgroup2": true, "bpf": true, "debugfs": true,
	"tracefs": true, "securityfs": true, "configfs": true, "hugetlbfs": true, "binfmt_misc": true,
	"autofs": true, "pstore": true, "efivarfs": true, "rpc_pipefs": true, "nsfs": true,
}

// probeMounts checks the sandbox's mount table: no host disk or kernel
// filesystem, and no bind mount of a subtree (a host directory) except the
// masks and device nodes procfs and /dev are made of.
func probeMounts(r *reporter, id int) []mount {
	ms, err := readMounts()
	if err != nil {
		r.fail(id, "mounts", "read /proc/self/mountinfo: "+describe(err))
		return nil
	}
	var bad []string
	for _, m := range ms {
		allowed := false
		for _, a := range opts.AllowFSTypes {
			allowed = allowed || a == m.fstype
		}
		switch {
		case allowed:
		case hostFSTypes[m.fstype] || strings.HasPrefix(m.fstype, "fuse."):
			bad = append(bad, fmt.Sprintf("%s on %s (%s)", m.fstype, m.point, m.source))
		case m.root != "/" && m.fstype != "proc" && m.fstype != "devtmpfs" && !strings.HasPrefix(m.point, "/dev/"):
			bad = append(bad, fmt.Sprintf("subtree %s of %s %s on %s", m.root, m.fstype, m.source, m.point))
		}
	}
	r.check(id, "mounts", len(bad) == 0, fmt.Sprintf("%d mounts; host filesystems or bound subtrees: %v", len(ms), bad))
	return ms
}

// tokenWalk walks / (not /proc, not /sys) without following symlinks and
// looks for every canary token in file and directory names and in the
// contents of regular files (up to 8 MiB each). The mount at /usr is left
// out when it is a plain overlay (the "mounts" check above verified it is no
// bound host subtree): the base template shares the host's /usr there,
// read-only and on purpose, and its 150,000 entries take 20 s to list under
// a half-core CPU limit. Mounts nested below /usr are walked.
func tokenWalk(r *reporter, id int, mounts []mount) {
	if len(opts.Tokens) == 0 {
		r.skip(id, "token-walk", "no -canary-token given")
		return
	}
	toks := make([][]byte, len(opts.Tokens))
	for i, t := range opts.Tokens {
		toks[i] = []byte(t)
	}
	const maxFile = 8 << 20
	var (
		dirs, files, read, unreadable int
		bytesRead                     int64
		found                         []string
		deadline                      = time.Now().Add(opts.WalkBudget)
		incomplete                    bool
		buf                           = make([]byte, maxFile+1)
	)
	skipUsr := false
	var roots = []string{"/"}
	for _, m := range mounts {
		if m.point == "/usr" && m.fstype == "overlay" && m.root == "/" {
			skipUsr = true
		}
	}
	if skipUsr {
		for _, m := range mounts {
			if strings.HasPrefix(m.point, "/usr/") {
				roots = append(roots, m.point)
			}
		}
	}
	start := time.Now()
	walk := func(p string, d fs.DirEntry, err error) error {
		if time.Now().After(deadline) {
			incomplete = true
			return filepath.SkipAll
		}
		for _, t := range opts.Tokens {
			if strings.Contains(d.Name(), t) {
				found = append(found, "name "+p)
			}
		}
		if err != nil {
			unreadable++
			if d != nil && d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			if p == "/proc" || p == "/sys" || (skipUsr && p == "/usr") {
				return filepath.SkipDir
			}
			dirs++
			return nil
		case d.Type()&fs.ModeSocket != 0:
			socketsFound = append(socketsFound, p)
			return nil
		case !d.Type().IsRegular():
			return nil
		}
		files++
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
		if err != nil {
			unreadable++
			return nil
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil
		}
		n := 0
		for n < len(buf) {
			k, err := unix.Read(fd, buf[n:])
			if k <= 0 || err != nil {
				break
			}
			n += k
		}
		read++
		bytesRead += int64(n)
		for i, t := range toks {
			if bytes.Contains(buf[:n], t) {
				found = append(found, fmt.Sprintf("content of %s (token %d)", p, i))
			}
		}
		return nil
	}
	for _, root := range roots {
		filepath.WalkDir(root, walk)
	}
	detail := fmt.Sprintf("%d dirs, %d files, %d read (%s), %d unreadable, in %.1fs",
		dirs, files, read, mib(bytesRead), unreadable, time.Since(start).Seconds())
	if skipUsr {
		detail += fmt.Sprintf("; /usr (the template's shared host /usr overlay) not walked, %d mounts below it walked", len(roots)-1)
	}
	switch {
	case len(found) > 0:
		r.fail(id, "token-walk", "canary token found: "+strings.Join(found, "; ")+" ("+detail+")")
	case incomplete:
		r.fail(id, "token-walk", "walk incomplete after "+opts.WalkBudget.String()+": "+detail)
	case files == 0:
		r.fail(id, "token-walk", "walked no files: "+detail)
	default:
		r.pass(id, "token-walk", "not found: "+detail)
	}
}

// probeTemplateWrites: the user cannot write the template; root's writes
// land in the sandbox's own layer (the host checks the template itself is
// unchanged byte for byte).
func probeTemplateWrites(r *reporter) {
	const id = 2
	if !isRoot() {
		for _, p := range []string{"/usr/bin/warden-probe-write", "/etc/warden-probe-write", "/warden-probe-write", "/usr/lib/warden-probe-write"} {
			fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
			if err == nil {
				unix.Close(fd)
				unix.Unlink(p)
			}
			r.expect(id, "create:"+p, err, unix.EACCES, unix.EROFS)
		}
		for _, p := range append([]string{"/etc/passwd", "/usr/bin/env"}, opts.TemplateFiles...) {
			fd, err := unix.Open(p, unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Close(fd)
			}
			r.expect(id, "open-write:"+p, err, unix.EACCES, unix.EROFS)
		}
		r.expect(id, "mkdir:/usr/warden-probe", unix.Mkdir("/usr/warden-probe", 0o755), unix.EACCES, unix.EROFS)
		return
	}
	// Root: try to change template files and add new ones. Success means the
	// write went to this sandbox's writable layer; the host verifies the
	// template. Anything but success or a clean refusal is a failure.
	for _, p := range opts.TemplateFiles {
		err := appendFile(p, "\n# warden-probe was here\n")
		r.check(id, "modify:"+p, err == nil || isOneOf(err, unix.EROFS, unix.EACCES, unix.EPERM), "append: "+describe(err))
		if opts.WriteNonce != "" {
			np := filepath.Join(filepath.Dir(p), "warden-probe-"+opts.WriteNonce)
			err := os.WriteFile(np, []byte("warden-probe\n"), 0o644)
			r.check(id, "create:"+np, err == nil || isOneOf(err, unix.EROFS, unix.EACCES, unix.EPERM), "create: "+describe(err))
		}
	}
	if len(opts.TemplateFiles) == 0 {
		r.skip(id, "modify-template", "no -template-file given")
	}
}

func appendFile(p, s string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// probeProc: /proc shows only the sandbox's processes.
func probeProc(r *reporter) {
	const id = 3
	ents, err := os.ReadDir("/proc")
	if err != nil {
		r.fail(id, "proc-list", describe(err))
		return
	}
	self := os.Getpid()
	var pids []int
	var hits []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		pids = append(pids, pid)
		if pid == self {
			continue // our own command line carries the markers as flags
		}
		cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		cl = bytes.ReplaceAll(cl, []byte{0}, []byte{' '})
		for _, m := range opts.ProcMarkers {
			if bytes.Contains(cl, []byte(m)) {
				hits = append(hits, fmt.Sprintf("pid %d %q", pid, strings.TrimSpace(string(cl))))
			}
		}
	}
	r.check(id, "foreign-processes", len(hits) == 0, fmt.Sprintf("%d processes visible; with a host or sibling marker: %v", len(pids), hits))
	if opts.PidsLimit > 0 {
		r.check(id, "process-count", int64(len(pids)) <= opts.PidsLimit, fmt.Sprintf("%d processes visible, pids limit %d", len(pids), opts.PidsLimit))
	}
	// PID 1 is the sandbox's own init, and this process is inside a pid
	// namespace (it does not see itself under its host pid).
	cl, err := os.ReadFile("/proc/1/cmdline")
	r.check(id, "pid1", err == nil && !bytes.Contains(cl, []byte("systemd")) && !bytes.HasPrefix(cl, []byte("/sbin/init")),
		fmt.Sprintf("pid 1 is %q (%s)", strings.TrimSpace(string(bytes.ReplaceAll(cl, []byte{0}, []byte{' '}))), describe(err)))
	// The agent's memory, environment, fds and root are closed to the sandbox.
	for _, f := range []string{"environ", "mem", "root/", "cwd/", "map_files", "exe", "auxv", "stack", "syscall", "pagemap", "personality"} {
		var err error
		switch {
		case strings.HasSuffix(f, "/") || f == "map_files":
			_, err = os.ReadDir("/proc/1/" + strings.TrimSuffix(f, "/"))
		case f == "exe":
			_, err = os.Readlink("/proc/1/exe")
		default:
			_, err = os.ReadFile("/proc/1/" + f)
		}
		name := strings.TrimSuffix(f, "/")
		if errors.Is(err, fs.ErrNotExist) {
			// gVisor's procfs has no map_files, stack, syscall, pagemap or
			// personality for any process: absent for this process too,
			// there is nothing of the agent's to read.
			if _, serr := os.Lstat("/proc/self/" + name); errors.Is(serr, fs.ErrNotExist) {
				r.check(id, "proc1-"+name, true, "absent from this kernel's procfs for every process (also /proc/self)")
				continue
			}
		}
		r.expect(id, "proc1-"+name, err, unix.EACCES, unix.EPERM)
	}
	// The agent's descriptors: the sandbox's root may list their numbers
	// (it owns the agent's /proc directory), but neither it nor the user may
	// follow or open one.
	fds, err := os.ReadDir("/proc/1/fd")
	if err != nil {
		r.expect(id, "proc1-fd", err, unix.EACCES, unix.EPERM)
	} else if !isRoot() {
		r.fail(id, "proc1-fd", fmt.Sprintf("the user listed %d agent descriptors", len(fds)))
	} else {
		var opened []string
		for _, fd := range fds {
			p := "/proc/1/fd/" + fd.Name()
			if l, err := os.Readlink(p); err == nil {
				opened = append(opened, p+" -> "+l)
			}
			if f, err := os.Open(p); err == nil {
				opened = append(opened, p+" opened")
				f.Close()
			}
		}
		r.check(id, "proc1-fd", len(opened) == 0, fmt.Sprintf("%d agent descriptors listed; followed or opened: %v", len(fds), opened))
	}
}

// probeProcSys: kernel tunables and sysfs cannot be written.
func probeProcSys(r *reporter) {
	const id = 4
	writes := []struct{ path, val string }{
		{"/proc/sys/kernel/core_pattern", "|/tmp/warden-probe-core"},
		{"/proc/sys/kernel/modprobe", "/tmp/warden-probe-modprobe"},
		{"/proc/sys/kernel/hostname", "warden-probe"},
		{"/proc/sys/kernel/sysrq", "1"},
		{"/proc/sys/vm/drop_caches", "1"},
		{"/proc/sys/vm/overcommit_memory", "1"},
		{"/proc/sys/net/ipv4/ip_forward", "1"},
		{"/proc/sys/fs/binfmt_misc/register", ":warden:E::wpr::/tmp/x:"},
		{"/sys/kernel/uevent_helper", "/tmp/warden-probe"},
		{"/sys/kernel/mm/transparent_hugepage/enabled", "always"},
		{"/sys/power/state", "freeze"},
		{"/sys/fs/cgroup/cgroup.procs", "1"},
		{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "-1"},
	}
	for _, w := range writes {
		err := writeProc(w.path, w.val)
		r.expect(id, "write:"+w.path, err, unix.EROFS, unix.EACCES, unix.EPERM, unix.ENOENT)
	}
	// The agent's OOM score: the user may not touch it. The sandbox's root
	// owns the agent's /proc entries (they belong to root of the user
	// namespace the agent was exec'd in), so it can raise the score and make
	// its own agent the OOM victim; that only harms its own sandbox. It is
	// written back unchanged and noted, not judged.
	cur, err := os.ReadFile("/proc/1/oom_score_adj")
	if err != nil {
		r.fail(id, "agent-oom-score", "read /proc/1/oom_score_adj: "+describe(err))
	} else if err := writeProc("/proc/1/oom_score_adj", strings.TrimSpace(string(cur))); isRoot() {
		r.note(id, "agent-oom-score", "rewrite of the agent's oom_score_adj (unchanged value): "+describe(err))
	} else {
		r.expect(id, "agent-oom-score", err, unix.EACCES, unix.EPERM)
	}
	// sysrq-trigger is either refused or masked by /dev/null.
	fd, err := unix.Open("/proc/sysrq-trigger", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		r.expect(id, "write:/proc/sysrq-trigger", err, unix.EROFS, unix.EACCES, unix.EPERM, unix.ENOENT)
	} else {
		var st unix.Stat_t
		unix.Fstat(fd, &st)
		masked := st.Mode&unix.S_IFMT == unix.S_IFCHR && unix.Major(st.Rdev) == 1 && unix.Minor(st.Rdev) == 3
		if masked {
			r.pass(id, "write:/proc/sysrq-trigger", "opened, but it is /dev/null (masked)")
		} else {
			r.fail(id, "write:/proc/sysrq-trigger", "the real sysrq-trigger is open for writing (nothing written)")
		}
		unix.Close(fd)
	}
	// /sys holds nothing of the host's (absent, empty or read-only).
	if ents, err := os.ReadDir("/sys"); err == nil && len(ents) > 0 {
		var sf unix.Statfs_t
		unix.Statfs("/sys", &sf)
		r.check(id, "sys-readonly", sf.Flags&unix.ST_RDONLY != 0, fmt.Sprintf("/sys has %d entries, statfs flags %#x", len(ents), sf.Flags))
	} else {
		r.pass(id, "sys-empty", fmt.Sprintf("/sys absent or empty (%s)", describe(err)))
	}
}

func writeProc(p, v string) error {
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	_, err = unix.Write(fd, []byte(v))
	if err == nil {
		return nil
	}
	return err
}
