package ginit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The memory watchdog.
//
// gVisor keeps every page of the sandbox in one host memory file charged to
// the sandbox's host cgroup, and has no OOM killer of its own. When that
// cgroup reaches its limit the host's OOM killer can only kill a process of
// the sentry (the sandbox's kernel): the whole sandbox dies, agent included.
// So the backend sets the host cgroup's limit above the sandbox's memory limit
// (headroom for the sentry and gofer themselves) and this watchdog enforces
// the sandbox's limit from inside, the way Linux's OOM killer does inside a
// memory cgroup: when the memory gVisor accounts to the sandbox (anonymous
// memory, tmpfs and shared memory, memfds, page cache, the in-memory
// writable layers) goes over the limit, it SIGKILLs the user process with
// the highest badness, never the agent, and counts an OOM event in a file
// the host reads.
//
// Badness is a process's resident memory plus the memfds it holds open
// (pages in a memfd show in no process's RSS), raised by a positive
// oom_score_adj as Linux does (the agent gives every process it starts 500).
// Negative values count as zero: gVisor has no OOM killer to honour them,
// and Warden's runsc patch only stops unprivileged processes lowering theirs.

// Polling. Every wake-up inside gVisor costs a few hundred microseconds of
// CPU, so on its own the watchdog looks only every pollIdle. The host wakes
// it through its socket whenever the sandbox's host cgroup charge crosses one
// of a ladder of thresholds (see the backend's memwatch.go), after which it
// polls closely for a while: so it looks again after at most a sixteenth of
// the limit of growth. While the
// memory grows it polls again at a quarter of the time the growth would take
// to reach the limit (at least pollMin, at most pollNear above seven eighths
// of the limit). Measured under a half-core CPU limit (the watchdog shares
// the sandbox's CPU with the allocation), memory bombs were stopped between
// 1 and 50 MiB past a 128 MiB limit; the host cgroup's headroom absorbs that.
const (
	pollIdle = time.Second
	pollNear = 100 * time.Millisecond
	pollMin  = 2 * time.Millisecond
	// After a wake-up the watchdog polls every pollAlert for alertFor: the
	// next crossing may come late (the wake-up crosses the host's and the
	// sandbox's schedulers), and a memory bomb fills a gigabyte a second.
	pollAlert = 5 * time.Millisecond
	alertFor  = 250 * time.Millisecond
	// exitWait bounds the wait for a victim to exit; settled, settle and
	// settleMax bound the wait for its memory to show as freed (see kill);
	// settlePoll is the pace of both.
	exitWait   = 5 * time.Second
	settled    = 100 * time.Millisecond
	settle     = 500 * time.Millisecond
	settleMax  = 3 * time.Second
	settlePoll = 5 * time.Millisecond
)

type watchdog struct {
	limit   int64
	current *os.File // the cgroup2 root's memory.current, or nil
	out     *os.File // the host-visible counter
	wake    chan struct{}
	events  int64
	buf     []byte

	mu    sync.Mutex
	conns map[net.Conn]bool // the host's wake-up connections
}

func newWatchdog(limit int64, current, out *os.File) *watchdog {
	return &watchdog{limit: limit, current: current, out: out, wake: make(chan struct{}, 1), buf: make([]byte, 4096),
		conns: map[net.Conn]bool{}}
}

// accept serves the host's connections on wakeLn until it is closed.
func (w *watchdog) accept(wakeLn net.Listener) {
	for {
		c, err := wakeLn.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(pollMin)
			continue
		}
		w.mu.Lock()
		w.conns[c] = true
		w.mu.Unlock()
		go w.serveWakes(c)
	}
}

// closeWakes closes the host's connections (before a checkpoint).
func (w *watchdog) closeWakes() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for c := range w.conns {
		c.Close()
		delete(w.conns, c)
	}
}

// serveWakes reads wake-ups from the host: one byte each, on a connection
// the host keeps open.
func (w *watchdog) serveWakes(c net.Conn) {
	defer func() {
		w.mu.Lock()
		delete(w.conns, c)
		w.mu.Unlock()
		c.Close()
	}()
	buf := make([]byte, 64)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (w *watchdog) run() {
	w.publish()
	var last int64
	var alertUntil time.Time
	lastAt := time.Now()
	t := time.NewTimer(pollIdle)
	for {
		used, err := w.used()
		now := time.Now()
		if err != nil {
			slog.Warn("memory watchdog: read usage", "err", err)
			time.Sleep(time.Second)
			continue
		}
		if used > w.limit {
			w.kill(used)
			last, lastAt = 0, time.Now()
			continue
		}
		d := w.interval(used, last, now.Sub(lastAt))
		if now.Before(alertUntil) {
			d = min(d, pollAlert)
		}
		// Reset needs no draining (Go 1.23 timers): no stale tick.
		t.Reset(d)
		select {
		case <-w.wake:
			alertUntil = time.Now().Add(alertFor)
		case <-t.C:
		}
		last, lastAt = used, now
	}
}

// interval is how long to wait at usage used, given the usage last seen
// elapsed ago.
func (w *watchdog) interval(used, last int64, elapsed time.Duration) time.Duration {
	d := pollIdle
	if used > w.limit/8*7 {
		d = pollNear
	}
	if grew := used - last; grew > 0 && last > 0 && elapsed > 0 {
		// Time to reach the limit at the rate just seen, by a quarter.
		eta := time.Duration(float64(elapsed) * float64(w.limit-used) / float64(grew) / 4)
		d = min(d, max(eta, pollMin))
	}
	return d
}

// used is the sandbox's memory use as gVisor accounts it: the root memory
// cgroup's memory.current (every memory cgroup of the sandbox), counted
// when asked; /proc/meminfo's figure (updated only every few milliseconds,
// more rarely while gVisor's accounting scans are slow) if that is missing.
func (w *watchdog) used() (int64, error) {
	if w.current != nil {
		n, err := w.current.ReadAt(w.buf, 0)
		if n > 0 {
			if v, perr := strconv.ParseInt(strings.TrimSpace(string(w.buf[:n])), 10, 64); perr == nil {
				return v, nil
			}
		}
		if err != nil && err != io.EOF {
			return 0, err
		}
	}
	fd, err := unix.Open("/proc/meminfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	n, err := unix.Read(fd, w.buf)
	unix.Close(fd)
	if err != nil {
		return 0, err
	}
	var total, free int64 = -1, -1
	sc := bufio.NewScanner(bytes.NewReader(w.buf[:n]))
	for sc.Scan() && (total < 0 || free < 0) {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "MemTotal":
			total = kb << 10
		case "MemFree":
			free = kb << 10
		}
	}
	if total < 0 || free < 0 {
		return 0, fmt.Errorf("unexpected /proc/meminfo: %q", w.buf[:n])
	}
	return total - free, nil
}

// kill ends the worst process and waits for its memory to come back: first
// for the victim to be gone (a process holding a lot of memory takes a while
// to exit), then briefly for the freed memory to show. Only then may the
// next look choose another victim, so one excess never costs two processes.
func (w *watchdog) kill(used int64) {
	pid, score := victim(w.limit)
	if pid <= 1 {
		// Nothing to kill but the agent: the host cgroup's limit is the
		// backstop. Look again later.
		time.Sleep(pollNear)
		return
	}
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		time.Sleep(pollMin)
		return
	}
	w.events++
	w.publish()
	slog.Warn("memory limit reached: killed a process", "pid", pid, "badness_bytes", score, "used", used, "limit", w.limit)
	deadline := time.Now().Add(exitWait)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(settlePoll)
	}
	// gVisor returns a dead process's pages to its accounting gradually:
	// wait while the figure keeps falling (up to settleMax) and return once
	// it is under the limit and has stopped falling (settled), or once it
	// has not moved for settle while still over the limit (then another
	// victim may be chosen).
	lowest := used
	lastDrop := time.Now()
	end := lastDrop.Add(settleMax)
	for time.Now().Before(end) {
		u, err := w.used()
		if err == nil && u < lowest-(1<<20) {
			lowest, lastDrop = u, time.Now()
		}
		quiet := time.Since(lastDrop)
		if lowest <= w.limit && quiet >= settled || quiet >= settle {
			return
		}
		time.Sleep(settlePoll)
	}
}

// alive reports whether process pid still runs (not gone, not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	state := s[i+2]
	return state != 'Z' && state != 'X'
}

// publish writes the event count for the host.
func (w *watchdog) publish() {
	if w.out == nil {
		return
	}
	b := []byte(strconv.FormatInt(w.events, 10) + "\n")
	w.out.WriteAt(b, 0)
	w.out.Truncate(int64(len(b)))
}

// victim returns the process with the highest badness, never pid 1.
func victim(limit int64) (int, int64) {
	d, err := os.Open("/proc")
	if err != nil {
		return 0, 0
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	page := int64(os.Getpagesize())
	best, bestScore := 0, int64(-1)
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 1 {
			continue
		}
		if !alive(pid) {
			continue // exiting already
		}
		statm, err := os.ReadFile("/proc/" + name + "/statm")
		if err != nil {
			continue
		}
		f := strings.Fields(string(statm))
		if len(f) < 2 {
			continue
		}
		rss, _ := strconv.ParseInt(f[1], 10, 64)
		score := rss*page + memfdBytes(name)
		if b, err := os.ReadFile("/proc/" + name + "/oom_score_adj"); err == nil {
			if adj, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && adj > 0 {
				score += adj * limit / 1000
			}
		}
		if score > bestScore {
			best, bestScore = pid, score
		}
	}
	return best, bestScore
}

// memfdBytes sums the allocated size of the memfds process pid holds open.
func memfdBytes(pid string) int64 {
	dir := "/proc/" + pid + "/fd"
	d, err := os.Open(dir)
	if err != nil {
		return 0
	}
	fds, _ := d.Readdirnames(-1)
	d.Close()
	var sum int64
	for _, fd := range fds {
		l, err := os.Readlink(dir + "/" + fd)
		if err != nil || !strings.HasPrefix(l, "/memfd:") {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(dir+"/"+fd, &st) == nil {
			sum += st.Blocks * 512
		}
	}
	return sum
}
