package template

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// maxCopySize bounds the host files the builder reads into memory. /etc holds
// nothing near it; a bigger file is skipped rather than copied.
const maxCopySize = 64 << 20

// copyTree copies the host entry src to dst without following symlinks.
// Everything it creates is owned by root. It skips: names in denied, special
// files, directories and files the host keeps from other users (a file that
// is not world-readable is treated as a secret), and files holding a private
// key.
func copyTree(src, dst string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed while we walk
	}
	if err != nil {
		return fmt.Errorf("stat host %s: %w", src, err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return fmt.Errorf("read link %s: %w", src, err)
		}
		return symlink(target, dst)
	case fi.IsDir():
		if fi.Mode().Perm()&0o005 != 0o005 {
			return nil
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return fmt.Errorf("read host %s: %w", src, err)
		}
		if err := mkdir(dst, fi.Mode().Perm(), 0, 0); err != nil {
			return err
		}
		for _, e := range entries {
			if isDenied(e.Name()) {
				continue
			}
			if err := copyTree(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		if fi.Mode().Perm()&0o004 == 0 || fi.Size() > maxCopySize {
			return nil
		}
		data, err := os.ReadFile(src)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read host %s: %w", src, err)
		}
		if isPrivateKey(data) || urlCredentialRE.Match(data) {
			return nil
		}
		return writeFile(dst, data, fi.Mode().Perm(), 0, 0)
	default:
		return nil // devices, sockets, fifos
	}
}

// urlCredentialRE matches a URL with a user and password in it
// ("http://user:pass@proxy"), as apt.conf proxy settings may hold.
var urlCredentialRE = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^/\s"'@:]+:[^/\s"'@]*@`)

// isPrivateKey reports whether data looks like it holds a private key.
func isPrivateKey(data []byte) bool {
	return bytes.Contains(data, []byte("-----BEGIN")) && bytes.Contains(data, []byte("PRIVATE KEY")) ||
		bytes.Contains(data, []byte("PuTTY-User-Key-File"))
}

// copyFiltered copies host /etc/name into etc through filter. Nothing is
// written when the host has no such file or the filter leaves nothing.
func copyFiltered(etc, name string, filter func([]byte) []byte) error {
	src := filepath.Join(hostEtc, name)
	fi, err := os.Stat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat host %s: %w", src, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o004 == 0 || fi.Size() > maxCopySize {
		return nil
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read host %s: %w", src, err)
	}
	out := filter(data)
	if out == nil || isPrivateKey(out) {
		return nil
	}
	return writeFile(filepath.Join(etc, name), out, 0o644, 0, 0)
}

// filterEnvironment keeps the locale and time zone settings of
// /etc/environment and drops everything else (PATH pointing at host-only
// directories, proxies with passwords, tokens).
func filterEnvironment(data []byte) []byte {
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, _, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		key = strings.TrimSpace(key)
		if ok && (key == "LANG" || key == "LANGUAGE" || key == "TZ" || strings.HasPrefix(key, "LC_")) {
			out.WriteString(line + "\n")
		}
	}
	return append([]byte{}, out.Bytes()...) // never nil: the host has the file
}

// Sections and keys of a git config that may carry credentials or point at
// host-only helpers.
var (
	gitDropSections = []string{"credential", "http", "https", "url", "include", "includeif"}
	gitDropKeys     = []string{"helper", "extraheader", "cookiefile", "sslkey", "sslcert", "askpass", "sshcommand", "proxy"}
)

// filterGitconfig copies the system git config without credential helpers,
// http settings (extra headers carry tokens), url rewrites (often carry
// tokens) and includes of host files. It returns nil when nothing is left.
func filterGitconfig(data []byte) []byte {
	var out bytes.Buffer
	header := ""
	drop := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			name := strings.ToLower(line[1:])
			if i := strings.IndexAny(name, " \t\".]"); i >= 0 {
				name = name[:i]
			}
			drop = slices.Contains(gitDropSections, name)
			header = raw
			continue
		}
		if drop || header == "" {
			continue
		}
		key, _, _ := strings.Cut(line, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		if slices.Contains(gitDropKeys, key) || strings.Contains(line, "://") && strings.Contains(line, "@") {
			continue
		}
		if header != "-" {
			out.WriteString(header + "\n")
			header = "-" // written
		}
		out.WriteString(raw + "\n")
	}
	if out.Len() == 0 {
		return nil
	}
	return out.Bytes()
}

// mkdir creates dir with mode and owner (umask does not apply).
func mkdir(dir string, mode fs.FileMode, uid, gid int) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("chown directory: %w", err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		return fmt.Errorf("chmod directory: %w", err)
	}
	return nil
}

// symlink creates a root-owned symlink at path pointing to target.
func symlink(target, path string) error {
	if err := os.Symlink(target, path); err != nil {
		return fmt.Errorf("create symlink: %w", err)
	}
	if err := os.Lchown(path, 0, 0); err != nil {
		return fmt.Errorf("chown symlink: %w", err)
	}
	return nil
}

// writeFile creates path, which must not exist, with data, mode and owner.
func writeFile(path string, data []byte, mode fs.FileMode, uid, gid int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create file: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chown(uid, gid)
	}
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// hostFingerprint summarises the host files the builder reads: the stat data
// of the merged-usr links, of every whitelisted /etc entry and of the
// directories directly below whitelisted directories (where
// update-alternatives, ldconfig and update-ca-certificates leave their
// traces), of the dpkg status file and of the directories of /usr/local. It
// changes whenever a rebuild would copy or snapshot something different, and
// costs one read of /etc and /usr/local and a few dozen stat calls.
func hostFingerprint() (string, error) {
	buf := make([]byte, 0, 8<<10)
	buf = append(buf, baseVersion...)
	for _, d := range usrDirs {
		buf, _ = appendStat(buf, filepath.Join(hostRoot, d.name), false)
		buf, _ = appendStat(buf, filepath.Join(hostUsr, d.name), true)
	}
	entries, err := os.ReadDir(hostEtc)
	if err != nil {
		return "", fmt.Errorf("read host /etc: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !(matchAny(etcCopy, name) && !isDenied(name)) && !slices.Contains(etcFiltered, name) {
			continue
		}
		p := filepath.Join(hostEtc, name)
		var fi fs.FileInfo
		buf, fi = appendStat(buf, p, true)
		if fi == nil || !fi.IsDir() {
			continue
		}
		// A directory's link count is 2 plus its subdirectories on the
		// usual Linux file systems: skip listing those without any (such
		// as /etc/alternatives with its hundreds of links).
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink == 2 {
			continue
		}
		children, err := os.ReadDir(p)
		if err != nil {
			buf = append(buf, err.Error()...)
			continue
		}
		for _, c := range children {
			if c.IsDir() {
				buf, _ = appendStat(buf, filepath.Join(p, c.Name()), false)
			}
		}
	}
	// The package set (every dpkg run rewrites status) and what was
	// installed beside it in /usr/local, two directory levels deep.
	buf, _ = appendStat(buf, filepath.Join(hostDpkg, "status"), true)
	buf, _ = appendStat(buf, hostLocal, true)
	if top, err := os.ReadDir(hostLocal); err == nil {
		for _, e := range top {
			if !e.IsDir() {
				continue
			}
			p := filepath.Join(hostLocal, e.Name())
			buf, _ = appendStat(buf, p, false)
			sub, err := os.ReadDir(p)
			if err != nil {
				continue
			}
			for _, c := range sub {
				if c.IsDir() {
					buf, _ = appendStat(buf, filepath.Join(p, c.Name()), false)
				}
			}
		}
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:6]), nil
}

// appendStat appends the identity of path (mode, size, mtime, inode, link
// target) to buf and returns its FileInfo, or nil when it cannot be stat'ed.
func appendStat(buf []byte, path string, follow bool) ([]byte, fs.FileInfo) {
	stat := os.Lstat
	if follow {
		stat = os.Stat
	}
	buf = append(buf, '\n')
	buf = append(buf, path...)
	fi, err := stat(path)
	if err != nil {
		return append(buf, " -"...), nil
	}
	buf = append(buf, ' ')
	buf = strconv.AppendUint(buf, uint64(fi.Mode()), 8)
	buf = append(buf, ' ')
	buf = strconv.AppendInt(buf, fi.Size(), 10)
	buf = append(buf, ' ')
	buf = strconv.AppendInt(buf, fi.ModTime().UnixNano(), 10)
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		// No ctime: hard-linking a file into a base snapshot changes it
		// (the link count), and /etc links into /usr are followed.
		for _, n := range []uint64{st.Dev, st.Ino} {
			buf = append(buf, ' ')
			buf = strconv.AppendUint(buf, n, 10)
		}
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(path)
		buf = append(buf, " -> "...)
		buf = append(buf, target...)
	}
	return buf, fi
}
