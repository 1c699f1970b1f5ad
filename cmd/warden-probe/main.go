//go:build linux

// Command warden-probe runs inside a sandbox and tries to break out of it. It
// executes every escape and abuse probe of docs/probes.md that can
// be checked from inside (filesystem and information 1–4, privilege and kernel
// surface 7–15, network 16–21, resources 22–27) and prints one JSON object per
// check on stdout:
//
//	{"id":9,"name":"mount-tmpfs","pass":true,"detail":"EPERM"}
//
// A check passes when the attempt fails the expected way (the errno, or the
// limit holding). Several checks share the id of the probe they belong to. A
// check that cannot run because a facility is truly absent is reported with
// "skip":true and "pass":false (a skip is never a pass) and says why. The
// last line is {"id":0,"name":"complete",...}; its absence means the probe
// runner itself died.
//
// The flags name the canaries the host planted (a token that must be found
// nowhere, a host loopback port, host unix sockets, a sibling sandbox's
// port, abstract socket and SysV IPC key...) and the sandbox's limits. The
// conformance suite (internal/backend/backendtest, subtest Probes) builds this
// program with CGO_ENABLED=0, uploads it into a sandbox and runs it as the
// sandbox's user and again as its root; the host-side half of each probe
// (canaries untouched, template unchanged, clock unchanged, nothing left
// after delete) is checked there.
//
// Modes other than the default:
//
//	-kill-all       kill(-1, SIGKILL) from inside (probe 27); run it last
//	-memfd-bomb     fill a memfd past the memory limit (probe 23); it may take
//	                the sandbox down, so run it in a sandbox of its own
//	-serve-sibling  set up the sibling's canaries (IPC objects, listeners) and serve
//	-check-sibling  verify from inside the sibling that its canaries are intact
//	-report-ids     print the process's uids and capabilities (setuid probe helper)
//	-child KIND     internal: a bounded bomb run in a child process
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Result is one line of output.
type Result struct {
	ID     int    `json:"id"`
	Name   string `json:"name"`
	Pass   bool   `json:"pass"`
	Skip   bool   `json:"skip,omitempty"`
	Note   bool   `json:"note,omitempty"` // an attempt whose verdict the host gives
	Detail string `json:"detail"`
}

// listFlag is a repeatable flag that also splits on commas.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// Options are the parsed flags.
type Options struct {
	Tokens        listFlag // canary tokens that must be found nowhere
	HostPaths     listFlag // host paths that must not exist inside
	HostSockets   listFlag // host unix socket paths that must be unreachable
	HostAbstract  listFlag // host abstract unix socket names (without '@')
	HostPort      int      // a listener on the host's 127.0.0.1
	HostPort6     int      // a listener on the host's ::1
	HostUDPPort   int      // a UDP canary on the host's 127.0.0.1
	HostHostname  string
	ProcMarkers   listFlag // strings no visible process's cmdline may contain
	SiblingIP     string
	SiblingPort   int
	SiblingAbs    string
	IPCKey        int
	SetuidBin     string
	TemplateFiles listFlag // files of the read-only template to try writing
	WriteNonce    string
	MemLimit      int64
	PidsLimit     int64
	DiskLimit     int64
	CPUMillis     int64
	NofileLimit   int64
	Only          listFlag // run only these probe ids
	WalkBudget    time.Duration
	AllowFSTypes  listFlag // filesystem types a backend legitimately mounts (e.g. a microVM's own ext4 root)
	TimeScale     float64  // multiplies every time budget (an emulated VM runs many times slower)
}

// budget scales a time budget by -time-scale.
func budget(d time.Duration) time.Duration {
	if opts.TimeScale > 1 {
		return time.Duration(float64(d) * opts.TimeScale)
	}
	return d
}

var (
	opts       Options
	unsafeHost = flag.Bool("unsafe-host", false, "run even with capabilities (never do this outside a throwaway VM)")
)

func main() {
	var (
		killAll      = flag.Bool("kill-all", false, "probe 27: kill(-1, SIGKILL) from inside, then report")
		cpuHog       = flag.Bool("cpu-hog", false, "probe 26: keep every CPU busy for 2s and note the CPU share seen inside (the host judges it by the sandbox's cgroup)")
		memfdBomb    = flag.Bool("memfd-bomb", false, "probe 23: fill a memfd past -mem-limit (may take the whole sandbox down; run it in a sandbox of its own)")
		serveSibling = flag.Bool("serve-sibling", false, "set up a sibling sandbox's canaries and serve until killed")
		checkSibling = flag.Bool("check-sibling", false, "verify the sibling's canaries from inside the sibling")
		reportIDs    = flag.Bool("report-ids", false, "print uids and capabilities, then wait for stdin to close")
		child        = flag.String("child", "", "internal: run a bounded bomb (mem-anon, fill, memfd, forkbomb, fds)")
	)
	flag.Var(&opts.Tokens, "canary-token", "canary token(s) that must be found nowhere (repeatable, comma-separated)")
	flag.Var(&opts.HostPaths, "host-path", "host path(s) that must not exist inside the sandbox (repeatable)")
	flag.Var(&opts.HostSockets, "host-socket", "host unix socket path(s) that must be unreachable (repeatable)")
	flag.Var(&opts.HostAbstract, "host-abstract", "host abstract unix socket name(s), without '@' (repeatable)")
	flag.IntVar(&opts.HostPort, "host-port", 0, "port of a canary listener on the host's 127.0.0.1")
	flag.IntVar(&opts.HostPort6, "host-port6", 0, "port of a canary listener on the host's ::1")
	flag.IntVar(&opts.HostUDPPort, "host-udp-port", 0, "port of a UDP canary on the host's 127.0.0.1 (the host checks nothing arrives)")
	flag.StringVar(&opts.HostHostname, "host-hostname", "", "the host's hostname (must not be the sandbox's)")
	flag.Var(&opts.ProcMarkers, "proc-marker", "string(s) no visible process's command line may contain (repeatable)")
	flag.StringVar(&opts.SiblingIP, "sibling-ip", "", "a sibling sandbox's IP address, if sandboxes have one")
	flag.IntVar(&opts.SiblingPort, "sibling-port", 0, "TCP port a sibling sandbox listens on (on its own 127.0.0.1 and on -sibling-ip)")
	flag.StringVar(&opts.SiblingAbs, "sibling-abstract", "", "abstract unix socket name a sibling listens on, without '@'")
	flag.IntVar(&opts.IPCKey, "ipc-key", 0, "SysV IPC key of a sibling's shm segment, message queue and semaphore set")
	flag.StringVar(&opts.SetuidBin, "setuid-bin", "", "a setuid-root copy of this program inside the sandbox")
	flag.Var(&opts.TemplateFiles, "template-file", "file(s) of the read-only template the probe tries to write (repeatable)")
	flag.StringVar(&opts.WriteNonce, "write-nonce", "", "suffix of the files the template-write probe creates")
	flag.Int64Var(&opts.MemLimit, "mem-limit", 0, "the sandbox's memory limit in bytes (0: skip the bounds that need it)")
	flag.Int64Var(&opts.PidsLimit, "pids-limit", 0, "the sandbox's pids limit")
	flag.Int64Var(&opts.DiskLimit, "disk-limit", 0, "the sandbox's disk limit in bytes")
	flag.Int64Var(&opts.CPUMillis, "cpu-millis", 0, "the sandbox's CPU limit in millicores")
	flag.Int64Var(&opts.NofileLimit, "nofile-limit", 0, "the sandbox's open-files limit (RLIMIT_NOFILE)")
	flag.Var(&opts.Only, "only", "run only these probe ids (repeatable, comma-separated)")
	flag.Var(&opts.AllowFSTypes, "allow-fstype", "filesystem type(s) this backend legitimately mounts inside (repeatable)")
	flag.DurationVar(&opts.WalkBudget, "walk-budget", 25*time.Second, "time budget of the canary-token walk")
	flag.Float64Var(&opts.TimeScale, "time-scale", 1, "multiply every time budget by this (>= 1; for slow emulated hosts, such as a TCG VM)")
	flag.Parse()
	opts.WalkBudget = budget(opts.WalkBudget)

	switch {
	case *child != "":
		os.Exit(runChild(*child, flag.Args()))
	case *reportIDs:
		os.Exit(runReportIDs())
	case *serveSibling:
		os.Exit(runServeSibling())
	case *checkSibling:
		os.Exit(runCheckSibling())
	case *killAll:
		probeKillAll(newReporter())
		return
	case *memfdBomb:
		probeMemfdBomb(newReporter())
		return
	case *cpuHog:
		probeCPU(newReporter())
		return
	}
	runAll()
}

// reporter writes results as JSON lines, at once (a crash keeps what was said).
type reporter struct {
	mu    sync.Mutex
	enc   *json.Encoder
	count int
	fails int
	skips int
}

func newReporter() *reporter { return &reporter{enc: json.NewEncoder(os.Stdout)} }

func (r *reporter) emit(res Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count++
	switch {
	case res.Skip:
		r.skips++
	case !res.Pass:
		r.fails++
	}
	r.enc.Encode(res)
}

func (r *reporter) pass(id int, name, detail string) {
	r.emit(Result{ID: id, Name: name, Pass: true, Detail: detail})
}

func (r *reporter) fail(id int, name, detail string) {
	r.emit(Result{ID: id, Name: name, Pass: false, Detail: detail})
}

func (r *reporter) check(id int, name string, ok bool, detail string) {
	r.emit(Result{ID: id, Name: name, Pass: ok, Detail: detail})
}

// skip reports a check that cannot run here; the reason must say why. A
// skipped check did not pass: it is written with "pass":false, so a reader
// that looks only at "pass" never counts it as one, and the reporter's
// failure count leaves it out (the host decides whether a skip is allowed).
func (r *reporter) skip(id int, name, why string) {
	r.emit(Result{ID: id, Name: name, Pass: false, Skip: true, Detail: "SKIPPED: " + why})
}

// note reports an attempt whose outcome only the host can judge (a datagram
// sent towards a host canary); it is not a verdict and never fails here.
func (r *reporter) note(id int, name, detail string) {
	r.emit(Result{ID: id, Name: name, Pass: true, Note: true, Detail: detail})
}

// group is one probe of probes.md: a function emitting one or more checks.
type group struct {
	id      int
	name    string
	budget  time.Duration
	run     func(r *reporter)
	destroy bool // stresses the sandbox (run after the others)
}

func groups() []group {
	return []group{
		{1, "host-secrets", opts.WalkBudget + 10*time.Second, probeHostSecrets, false},
		{2, "template-writes", 10 * time.Second, probeTemplateWrites, false},
		{3, "proc-visibility", 10 * time.Second, probeProc, false},
		{4, "proc-sys-writes", 10 * time.Second, probeProcSys, false},
		{7, "credentials", 5 * time.Second, probeCreds, false},
		{8, "setuid", 15 * time.Second, probeSetuid, false},
		{9, "mount", 5 * time.Second, probeMount, false},
		{10, "namespaces", 5 * time.Second, probeNamespaces, false},
		{11, "ptrace", 10 * time.Second, probePtrace, false},
		{12, "kernel-features", 5 * time.Second, probeKernelFeatures, false},
		{13, "kernel-admin", 5 * time.Second, probeKernelAdmin, false},
		{14, "clock", 5 * time.Second, probeClock, false},
		{15, "devices", 10 * time.Second, probeDevices, false},
		{16, "no-network", 15 * time.Second, probeNoNetwork, false},
		{17, "raw-sockets", 5 * time.Second, probeRawSockets, false},
		{18, "cloud-metadata", 15 * time.Second, probeMetadata, false},
		{19, "host-loopback", 10 * time.Second, probeHostLoopback, false},
		{20, "sibling", 10 * time.Second, probeSibling, false},
		{21, "host-unix-sockets", 10 * time.Second, probeUnixSockets, false},
		{22, "fork-bomb", 30 * time.Second, probeForkBomb, true},
		{23, "memory-bomb", 60 * time.Second, probeMemoryBomb, true},
		{24, "disk-fill", 30 * time.Second, probeDiskFill, true},
		{25, "fd-exhaustion", 20 * time.Second, probeFDs, true},
	}
}

func runAll() {
	r := newReporter()
	// Fail closed: with capabilities this is not a working sandbox (or not a
	// sandbox at all), and several probes would then really mount, set the
	// clock or load modules. Report it instead of trying.
	if st, err := readStatus("self"); err == nil && strings.Trim(st["CapEff"], "0") != "" && !*unsafeHost {
		r.fail(7, "CapEff", "CapEff = "+st["CapEff"]+": this process holds capabilities; refusing to run the other probes (-unsafe-host overrides)")
		r.emit(Result{ID: 0, Name: "complete", Pass: false, Detail: "refused: capabilities present"})
		os.Exit(1)
	}
	only := map[int]bool{}
	for _, s := range opts.Only {
		n, err := strconv.Atoi(s)
		if err != nil {
			fmt.Fprintf(os.Stderr, "warden-probe: -only %q: not a probe id\n", s)
			os.Exit(2)
		}
		only[n] = true
	}
	gs := groups()
	sort.SliceStable(gs, func(i, j int) bool { return !gs[i].destroy && gs[j].destroy })
	start := time.Now()
	for _, g := range gs {
		if len(only) > 0 && !only[g.id] {
			continue
		}
		runGroup(r, g)
	}
	r.mu.Lock()
	n, f, sk := r.count, r.fails, r.skips
	r.mu.Unlock()
	var slow []string
	for _, g := range gs {
		if d := took[g.id]; d >= time.Second {
			slow = append(slow, fmt.Sprintf("%d %s %.1fs", g.id, g.name, d.Seconds()))
		}
	}
	r.emit(Result{ID: 0, Name: "complete", Pass: true,
		Detail: fmt.Sprintf("%d checks, %d failed, %d skipped, %.1fs, uid %d, GOMAXPROCS %d; slowest: %s", n, f, sk, time.Since(start).Seconds(), os.Getuid(), runtime.GOMAXPROCS(0), strings.Join(slow, ", "))})
}

// took records how long each probe group ran.
var took = map[int]time.Duration{}

// runGroup runs one probe with its time budget; a probe that overruns fails.
func runGroup(r *reporter, g group) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				r.fail(g.id, g.name+"/panic", fmt.Sprint(p))
			}
		}()
		g.run(r)
	}()
	t0 := time.Now()
	defer func() { took[g.id] = time.Since(t0) }()
	select {
	case <-done:
	case <-time.After(budget(g.budget)):
		r.fail(g.id, g.name+"/timeout", fmt.Sprintf("did not finish within %s", budget(g.budget)))
	}
}
