package gvisor

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Host memory for a filesystem capture.
//
// gVisor's tar of the upper layer (tmpfs TarUpperLayer) reads each regular
// file whole into the sentry's Go heap before writing it out. The sentry is
// charged to the sandbox's host cgroup, whose limit is the sandbox's memory
// plus Config.MemoryHeadroom: a file larger than the headroom would have the
// host's OOM killer end the sandbox in the middle of its snapshot (seen:
// a 300 MB file in a 128 MiB sandbox). So for the copy the host cgroup may
// use captureAllowance more (twice the disk limit, the largest file the
// layer can hold, as garbage from one file may outlive the next's
// allocation, plus 64 MiB), and the limit goes back to the sandbox's once
// the sentry has handed that memory back: lowerMemory waits, in the
// background, until the memory the host cannot reclaim (anonymous and
// shared memory: the sentry's heap and the sandbox's own memory file) fits
// under the limit with a margin, so the write never makes the host kill
// anything (cgroup v2 would, v1 refuses with EBUSY). A daemon that
// restarts lowers a limit it finds raised (Recover). The sandbox's own
// memory limit is unaffected throughout: its watchdog enforces it inside.

// captureAllowance is the extra host memory a capture may use.
func captureAllowance(diskBytes int64) int64 { return 2*diskBytes + 64<<20 }

// lowerMargin is how far under the limit the unreclaimable memory must be
// before the limit is lowered back.
const lowerMargin = 16 << 20

// memFiles are the cgroup files of bx's memory limit, from its usage file:
// v2 memory.max, or v1 memory.limit_in_bytes and (when swap is accounted)
// memory.memsw.limit_in_bytes.
type memFiles struct {
	dir string
	v2  bool
}

func (b *Backend) memFilesOf(bx *box) (memFiles, error) {
	cg, err := bx.group()
	if err != nil {
		return memFiles{}, err
	}
	usage := cg.MemoryUsageFile()
	return memFiles{dir: filepath.Dir(usage), v2: filepath.Base(usage) == "memory.current"}, nil
}

// hostLimit is the limit the sandbox's host cgroup has when no capture
// raised it.
func (b *Backend) hostLimit(bx *box) (int64, error) {
	spec, err := b.specOf(bx)
	if err != nil {
		return 0, err
	}
	return spec.Limits.MemoryBytes + b.cfg.MemoryHeadroom, nil
}

// setLimit writes limit; raising, v1's memsw limit goes first (it may never
// be below limit_in_bytes), lowering, last.
func (m memFiles) setLimit(limit int64, raise bool) error {
	v := strconv.FormatInt(limit, 10)
	if m.v2 {
		return os.WriteFile(filepath.Join(m.dir, "memory.max"), []byte(v), 0o644)
	}
	memsw := filepath.Join(m.dir, "memory.memsw.limit_in_bytes")
	_, err := os.Stat(memsw)
	hasSw := err == nil
	if raise && hasSw {
		if err := os.WriteFile(memsw, []byte(v), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(m.dir, "memory.limit_in_bytes"), []byte(v), 0o644); err != nil {
		return err
	}
	if !raise && hasSw {
		return os.WriteFile(memsw, []byte(v), 0o644)
	}
	return nil
}

// limit reads the current limit (v2 "max": -1).
func (m memFiles) limit() (int64, error) {
	name := "memory.limit_in_bytes"
	if m.v2 {
		name = "memory.max"
	}
	raw, err := os.ReadFile(filepath.Join(m.dir, name))
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(raw))
	if s == "max" {
		return -1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// pinned is the memory of the group the host cannot reclaim without swap:
// anonymous and shared (memfd, tmpfs) pages.
func (m memFiles) pinned() (int64, error) {
	f, err := os.Open(filepath.Join(m.dir, "memory.stat"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	keys := map[string]bool{"total_rss": true, "total_shmem": true} // v1, hierarchical
	if m.v2 {
		keys = map[string]bool{"anon": true, "shmem": true}
	}
	var n int64
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !keys[k] {
			continue
		}
		x, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, err
		}
		n += x
		found++
	}
	if found == 0 {
		return 0, errors.New("memory.stat has no anonymous or shared memory counts")
	}
	return n, sc.Err()
}

// raiseMemory lets bx's host cgroup use extra bytes more for a capture.
func (b *Backend) raiseMemory(bx *box, extra int64) error {
	m, err := b.memFilesOf(bx)
	if err != nil {
		return err
	}
	base, err := b.hostLimit(bx)
	if err != nil {
		return err
	}
	cur, err := m.limit()
	if err != nil {
		return err
	}
	if cur < 0 || cur >= base+extra {
		return nil
	}
	return m.setLimit(base+extra, true)
}

// lowerMemoryPoll is how often lowerMemory looks; lowerMemoryFor how long
// it keeps trying before it leaves the limit raised (logged).
const (
	lowerMemoryPoll = time.Second
	lowerMemoryFor  = 30 * time.Minute
)

// lowerMemory returns bx's host cgroup to its limit once what the host
// cannot reclaim fits under it. Run it in its own goroutine; it ends with
// the sandbox. Only one runs per sandbox.
func (b *Backend) lowerMemory(bx *box) {
	if !bx.lowering.CompareAndSwap(false, true) {
		return
	}
	defer bx.lowering.Store(false)
	deadline := time.Now().Add(lowerMemoryFor)
	for {
		done, err := b.tryLower(bx)
		if done {
			return
		}
		if time.Now().After(deadline) {
			b.logf(bx, "the host memory limit raised for a filesystem capture stays raised: %v", err)
			return
		}
		select {
		case <-bx.gone:
			return
		case <-time.After(lowerMemoryPoll):
		}
	}
}

// tryLower lowers the limit if it can now; done when it is (or need not be).
func (b *Backend) tryLower(bx *box) (bool, error) {
	bx.memMu.Lock()
	defer bx.memMu.Unlock()
	if bx.capturing {
		return false, errors.New("a capture is running")
	}
	m, err := b.memFilesOf(bx)
	if err != nil {
		return true, err // no cgroup: nothing to lower
	}
	base, err := b.hostLimit(bx)
	if err != nil || base <= b.cfg.MemoryHeadroom {
		return true, err // limits unknown: leave it
	}
	cur, err := m.limit()
	if err != nil {
		return true, err
	}
	if cur >= 0 && cur <= base {
		return true, nil
	}
	p, err := m.pinned()
	if err != nil {
		return false, err
	}
	if p+lowerMargin > base {
		return false, errors.New("the sandbox's host memory is still above its limit")
	}
	if err := m.setLimit(base, false); err != nil {
		return false, err
	}
	return true, nil
}
