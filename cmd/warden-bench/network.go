package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/benchstat"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// fakeHost is a test host in a network namespace this benchmark makes,
// joined to the host by a veth pair, on 192.31.196.10 (AS112's range, which
// no test host routes; the documentation ranges are taken by the network
// tests' fake internet, which go test may run at the same time): a stand-in
// for a server on the internet that sandboxes may reach by policy. Nothing
// leaves the machine.
type fakeHost struct {
	ns, hostIf string
	addr       string // ip:port of its HTTP server
	srv        *http.Server
}

func ipCmd(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %v: %w: %s", args, err, bytes.TrimSpace(out))
	}
	return nil
}

// newFakeHost sets up the namespace and serves /blob?size=N from inside it.
func newFakeHost() (*fakeHost, error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("iproute2 is not installed (scripts/install-deps.sh installs it): %w", err)
	}
	id := strconv.Itoa(os.Getpid() % 100000)
	f := &fakeHost{ns: "wdbench-" + id, hostIf: "wdbh" + id, addr: "192.31.196.10:8080"}
	nsIf := "wdbn" + id
	steps := [][]string{
		{"netns", "add", f.ns},
		{"link", "add", f.hostIf, "type", "veth", "peer", "name", nsIf, "netns", f.ns},
		{"addr", "add", "192.31.196.1/24", "dev", f.hostIf},
		{"link", "set", f.hostIf, "up"},
		{"-n", f.ns, "addr", "add", "192.31.196.10/24", "dev", nsIf},
		{"-n", f.ns, "link", "set", nsIf, "up"},
		{"-n", f.ns, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			f.close()
			return nil, err
		}
	}
	ln, err := listenIn("/var/run/netns/"+f.ns, f.addr)
	if err != nil {
		f.close()
		return nil, err
	}
	blob := make([]byte, 1<<20)
	f.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		size, _ := strconv.ParseInt(r.URL.Query().Get("size"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		for size > 0 {
			n := min(size, int64(len(blob)))
			if _, err := w.Write(blob[:n]); err != nil {
				return
			}
			size -= n
		}
	}), ReadHeaderTimeout: 10 * time.Second}
	go f.srv.Serve(ln)
	return f, nil
}

// listenIn opens a TCP listener inside the network namespace at nsPath.
func listenIn(nsPath, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // the thread dies with its namespace changed if restoring fails
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer unix.Close(self)
		nsfd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer unix.Close(nsfd)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, err}
			return
		}
		ln, err := net.Listen("tcp", addr)
		if unix.Setns(self, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}

func (f *fakeHost) close() {
	if f.srv != nil {
		f.srv.Close()
	}
	exec.Command("ip", "link", "del", f.hostIf).Run()
	exec.Command("ip", "netns", "del", f.ns).Run()
}

// networkBench measures, through the daemon, the create-path cost of each
// network mode, and a download from the fake host through a sandbox's
// network (wardend's userspace stack) beside the same download made
// directly from the host.
func networkBench(ctx context.Context, c *warden.Client, n int, size int64) ([]*benchstat.Series, []string, error) {
	fh, err := newFakeHost()
	if err != nil {
		return nil, nil, err
	}
	defer fh.close()
	allow := &warden.NetworkPolicy{Mode: warden.NetworkAllowlist, Allow: []warden.NetworkRule{{CIDR: "192.31.196.0/24", Ports: []int{8080}}}}
	modes := []struct {
		name string
		p    *warden.NetworkPolicy
	}{{"none", nil}, {"allowlist", allow}, {"open", &warden.NetworkPolicy{Mode: warden.NetworkOpen}}}
	var series []*benchstat.Series
	var notes []string
	url := "http://" + fh.addr + "/blob?size=" + strconv.FormatInt(size, 10)
	direct := &benchstat.Series{Name: fmt.Sprintf("download %d MiB from the fake host, directly from the host", size>>20)}
	proxied := map[string]*benchstat.Series{}
	for _, iso := range []string{"native", "gvisor"} {
		suffix, reps := "", n
		if iso != "native" {
			suffix, reps = " ("+iso+")", min(n, 20)
		}
		for _, m := range modes {
			s := &benchstat.Series{Name: "api: create → first output, network " + m.name + suffix}
			for i := 0; i < reps; i++ {
				t0 := time.Now()
				sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 120, Network: m.p, Isolation: iso})
				if warden.IsValidationFailed(err) && iso != "native" {
					notes = append(notes, "network: "+iso+" is not available on this daemon; no figures for it")
					break
				}
				if err != nil {
					return nil, nil, fmt.Errorf("create (%s, network %s): %w", iso, m.name, err)
				}
				var out bytes.Buffer
				_, err = c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"echo", "hi"}}, warden.ExecIO{Stdout: &out})
				s.Add(time.Since(t0))
				c.KillSandbox(ctx, sb.ID)
				if err != nil || out.String() != "hi\n" {
					return nil, nil, fmt.Errorf("first command (%s, network %s): %q %v", iso, m.name, out.String(), err)
				}
				time.Sleep(20 * time.Millisecond) // let the pool refill
			}
			if len(s.Samples) == 0 {
				break
			}
			series = append(series, s)
		}
		if len(series) == 0 || !strings.HasSuffix(series[len(series)-1].Name, suffix) {
			continue
		}
		px := &benchstat.Series{Name: fmt.Sprintf("download %d MiB from the fake host, in a sandbox (allowlist)%s", size>>20, suffix)}
		if err := download(ctx, c, iso, allow, url, size, px, direct); err != nil {
			return nil, nil, err
		}
		proxied[iso] = px
	}
	rate := func(s *benchstat.Series) float64 { return float64(size) / 1e6 / s.Quantile(0.5).Seconds() }
	series = append(series, direct)
	for _, iso := range []string{"native", "gvisor"} {
		if px, ok := proxied[iso]; ok {
			notes = append(notes, fmt.Sprintf("network: %d MiB download from a fake host in a test namespace: %.0f MB/s through a %s sandbox's network (wardend's userspace stack), %.0f MB/s directly from the host (medians of 3)",
				size>>20, rate(px), iso, rate(direct)))
			series = append(series, px)
		}
	}
	return series, notes, nil
}

// download times, three times, a download of size bytes from url in an
// isolation sandbox under policy allow (timed inside the sandbox, around
// the transfer only), each beside the same download made directly from the
// host (into direct, on the first call only).
func download(ctx context.Context, c *warden.Client, iso string, allow *warden.NetworkPolicy, url string, size int64, proxied, direct *benchstat.Series) error {
	sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 600, Network: allow, Isolation: iso})
	if err != nil {
		return err
	}
	defer c.KillSandbox(context.WithoutCancel(ctx), sb.ID)
	script := "import time, urllib.request\nt=time.monotonic()\nr=urllib.request.urlopen('" + url + "')\nn=0\nwhile True:\n    b=r.read(1<<20)\n    if not b: break\n    n+=len(b)\nprint(n, time.monotonic()-t)\n"
	measureDirect := len(direct.Samples) == 0
	for i := 0; i < 3; i++ {
		if measureDirect {
			t0 := time.Now()
			resp, err := http.Get(url)
			if err != nil {
				return err
			}
			got, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if got != size {
				return fmt.Errorf("direct download: %d bytes", got)
			}
			direct.Add(time.Since(t0))
		}
		var out bytes.Buffer
		if _, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"python3", "-c", script}}, warden.ExecIO{Stdout: &out}); err != nil {
			return err
		}
		var bytesIn int64
		var secs float64
		if _, err := fmt.Sscan(out.String(), &bytesIn, &secs); err != nil || bytesIn != size {
			return fmt.Errorf("download in the %s sandbox: %q", iso, out.String())
		}
		proxied.Add(time.Duration(secs * float64(time.Second)))
	}
	return nil
}
