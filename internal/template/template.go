// Package template provides the sandbox templates Warden boots from.
//
// The built-in template is "base": a read-only root filesystem assembled
// from the host's own userland, so it needs no download. It is two layers:
//
//   - a small generated tree, <root>/base/<version>/rootfs, mounted at "/". It
//     holds the merged-usr symlinks (bin -> usr/bin and so on), empty
//     mount-point directories, the sandbox user's home and a generated /etc:
//     fresh passwd, group, shadow (locked entries only), hosts, hostname,
//     machine-id and friends, plus a whitelist of harmless host files
//     (ld.so.cache, CA certificates, alternatives, profile, apt's sources
//     and keys, ...). Host secrets and identity (shadow hashes, ssh keys,
//     sudoers, machine-id, private keys, credentials) are never copied. It
//     also holds the host's package database (/var/lib/dpkg) and apt's empty
//     lists and caches, so apt-get works in a build step FROM base, and
//     /etc/warden-base-packages, the installed packages.
//   - <root>/base/<version>/usr, mounted at "/usr": a hard-link snapshot of
//     the host's /usr taken when the version was built (see snapshotUsr), so
//     a host upgrade does not change a base, or the templates built on it,
//     under running sandboxes. It is never written: every sandbox writes to
//     its own overlay. Only when the store is on another file system than
//     /usr is the host's /usr used in place (Template.Warning says so).
//
// EnsureBase builds the version once, atomically (build in a temporary
// directory beside the final one, then rename) and under a file lock, so
// concurrent callers in one or several processes never see a half-built tree.
// The version in the path combines baseVersion, bumped whenever the builder
// changes, with a fingerprint of the host files the builder reads, so a
// changed builder, a changed host /etc (new alternatives, a new ld.so.cache,
// updated CA certificates) or a changed package set (dpkg's status file, the
// directories of /usr/local) gets a fresh version while an unchanged one is
// reused at the cost of a few stat calls. Old versions are left in place:
// sandboxes that still run and templates built on them use them; template
// GC removes those nothing references.
package template

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/errkind"
)

// baseVersion names the layout the builder produces. Bump it whenever the
// builder changes what it writes, so hosts build a fresh tree.
const baseVersion = "v2"

// BaseName is the name of the built-in template.
const BaseName = "base"

// Names of the files beside the rootfs of a built tree.
const (
	stampName  = "complete" // written last: its presence marks a complete tree
	rootfsName = "rootfs"
	lockName   = ".lock"
	tmpPrefix  = ".tmp-"
)

// DefaultPath is the PATH every process of a base sandbox starts with.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Default user of the base template.
const (
	UserName = "user"
	UserID   = 1000
	UserHome = "/home/user"
)

// Template is a template ready to boot sandboxes from.
type Template struct {
	Name    string            // "base", "python:3.12"
	Version string            // identifies the built tree, e.g. "v1-3fa2c0d1e9ab", or the manifest id
	ID      string            // content id sandboxes record ("base:<version>" or "sha256:...")
	Layers  []backend.Layer   // top-first per target
	Env     map[string]string // PATH and LANG; HOME is set per user by the agent
	User    string            // default user, "user"
	Workdir string            // default working directory, "/home/user"
	Start   *Start            // start command and ready check, or nil
	Limits  backend.Limits    // resource defaults; zero fields take the daemon's
	Warning string            // set when the base could not pin /usr and uses the host's in place
}

// Spec returns a sandbox spec with id that boots from t: its layers,
// environment, user and working directory. The caller fills in the rest
// (hostname, limits). The returned spec shares no memory with t.
func (t *Template) Spec(id string) backend.Spec {
	return backend.Spec{
		ID:      id,
		Layers:  slices.Clone(t.Layers),
		Env:     maps.Clone(t.Env),
		User:    t.User,
		Workdir: t.Workdir,
	}
}

// EnsureBase returns the base template whose generated tree lives under root
// (for example /var/lib/warden/templates), building the tree first when it
// is missing. Building needs root. EnsureBase is safe to call concurrently,
// from goroutines and from separate processes.
func EnsureBase(root string) (*Template, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("template root %q is not an absolute path", root)
	}
	root = filepath.Clean(root)
	fp, err := hostFingerprint()
	if err != nil {
		return nil, fmt.Errorf("fingerprint host files: %w", err)
	}
	baseDir := filepath.Join(root, BaseName)
	// A host upgrade while the tree is built would pin a /usr that does not
	// match the package database copied with it: buildLocked then refuses
	// to publish, and the new fingerprint gets a fresh try.
	for try := 0; ; try++ {
		version := baseVersion + "-" + fp
		dir := filepath.Join(baseDir, version)
		if complete(dir) {
			return baseTemplate(dir, version), nil
		}
		err := buildLocked(baseDir, version)
		if err == nil {
			return baseTemplate(dir, version), nil
		}
		if !errors.Is(err, errHostChanged) || try == 2 {
			return nil, fmt.Errorf("build base template %s: %w", version, err)
		}
		if fp, err = hostFingerprint(); err != nil {
			return nil, fmt.Errorf("fingerprint host files: %w", err)
		}
	}
}

// errHostChanged reports that the host's files changed while a base version
// was being built from them.
var errHostChanged = errors.New("the host's packages changed during the build")

// usrLayer returns the /usr layer of the base version in dir and its layer
// reference: the version's snapshot, or the host's /usr in place when the
// version has none.
func usrLayer(dir, version string) (path, ref string) {
	p := filepath.Join(dir, usrName)
	if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
		return p, "base-usr:" + version
	}
	return hostUsr, hostUsrRef
}

func baseTemplate(dir, version string) *Template {
	usr, _ := usrLayer(dir, version)
	t := &Template{
		Name:    BaseName,
		Version: version,
		ID:      "base:" + version,
		Layers: []backend.Layer{
			{Target: "/", Path: filepath.Join(dir, rootfsName)},
			{Target: "/usr", Path: usr},
		},
		Env: map[string]string{
			"PATH": DefaultPath,
			"LANG": "C.UTF-8",
		},
		User:    UserName,
		Workdir: UserHome,
	}
	if usr == hostUsr {
		t.Warning = fmt.Sprintf("the base template uses the host's %s in place: the template store (%s) is on another file system, so /usr cannot be pinned with hard links; a host upgrade changes the base, and templates built on it, under running sandboxes", hostUsr, filepath.Dir(filepath.Dir(dir)))
	}
	return t
}

// complete reports whether dir holds a finished tree.
func complete(dir string) bool {
	fi, err := os.Lstat(filepath.Join(dir, stampName))
	return err == nil && fi.Mode().IsRegular()
}

// buildLocked builds baseDir/version unless another caller did so while this
// one waited for the lock.
func buildLocked(baseDir, version string) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("building the base template needs root (files are owned by uid 0 and 1000)")
	}
	// Parents as usual (0755: the run directory may sit beside them, and
	// sandboxes exec the agent from there), the base directory itself 0700.
	if err := os.MkdirAll(filepath.Dir(baseDir), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(baseDir), err)
	}
	if err := os.Mkdir(baseDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s: %w", baseDir, err)
	}
	// Root only: the snapshots hold hard links to set-user-ID binaries that
	// a host upgrade may have replaced for a security fix.
	if err := os.Chmod(baseDir, 0o700); err != nil {
		return fmt.Errorf("chmod %s: %w", baseDir, err)
	}
	unlock, err := lock(filepath.Join(baseDir, lockName))
	if err != nil {
		return err
	}
	defer unlock()

	dir := filepath.Join(baseDir, version)
	if complete(dir) {
		return nil // built by another caller while we waited
	}
	// We hold the lock, so nobody else is building: temporary directories
	// are leftovers of a crashed build, and a final directory without its
	// stamp can only be damage. Clear both.
	entries, err := os.ReadDir(baseDir)
	if err != nil {
		return fmt.Errorf("read %s: %w", baseDir, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			if err := os.RemoveAll(filepath.Join(baseDir, e.Name())); err != nil {
				return fmt.Errorf("remove stale build: %w", err)
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove incomplete tree: %w", err)
	}

	tmp, err := os.MkdirTemp(baseDir, tmpPrefix+version+"-")
	if err != nil {
		return fmt.Errorf("create build directory: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("chmod build directory: %w", err)
	}
	if err := buildRootfs(filepath.Join(tmp, rootfsName)); err != nil {
		return err
	}
	if _, err := snapshotUsr(filepath.Join(tmp, usrName)); err != nil {
		return err
	}
	if fp, err := hostFingerprint(); err != nil {
		return fmt.Errorf("fingerprint host files: %w", err)
	} else if baseVersion+"-"+fp != version {
		return errHostChanged
	}
	// Flush the tree before the stamp and the rename make it visible, so a
	// crash cannot leave a stamped tree with empty files.
	if err := syncfs(tmp); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(tmp, stampName), []byte(version+"\n"), 0o644, 0, 0); err != nil {
		return err
	}
	if err := syncfs(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("publish tree: %w", err)
	}
	return syncDir(baseDir)
}

// lock takes an exclusive flock on path and returns the function that
// releases it. Each call opens its own file description, so the lock also
// excludes goroutines of one process.
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

func syncfs(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", path, err)
	}
	return nil
}

func syncDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}

// ErrUnknown is returned for a template name the registry does not know.
var ErrUnknown = errkind.New(errkind.Invalid, "unknown template")
