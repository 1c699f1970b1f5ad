package usage

import (
	"time"

	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
)

// delta is what a sandbox used between two readings.
type delta struct {
	cpuNanos          int64
	memoryByteSeconds int64
	egressOut         int64
	egressIn          int64
	runningMillis     int64
	pausedMillis      int64
	diskBytes         int64 // the latest reading's; 0 when unknown
}

// counter is the increase of a counter from prev to cur; a counter that
// went down started again from zero (a new cgroup or network link).
func counter(prev, cur int64) int64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// initial is the meter's start for a sandbox it has not read before: every
// counter at zero when it started running (its cgroup and link count from
// their creation, which is the sandbox's).
func initial(r sandbox.Reading, principal, agent string) store.SandboxMeter {
	at := r.Started
	if at.IsZero() || at.After(r.At) {
		at = r.At
	}
	return store.SandboxMeter{SandboxID: r.ID, PrincipalID: principal, Agent: agent, Template: r.Template,
		State: string(sandbox.StateRunning), At: at}
}

// advance takes a sandbox from its previous reading to r: what it used in
// between (time counted in the state it was in at prev: a pause or resume
// is read at once, see Meter.Changed), and the meter's next reading.
func advance(prev store.SandboxMeter, r sandbox.Reading) (delta, store.SandboxMeter) {
	next := prev
	next.At = r.At
	if s := r.State; s == sandbox.StateRunning || s == sandbox.StatePaused {
		next.State = string(s)
	}
	var d delta
	dt := r.At.Sub(prev.At)
	if dt < 0 {
		dt = 0
	}
	curMem := int64(0)
	if r.HasUsage {
		d.cpuNanos = counter(prev.CPUNanos, max(r.Usage.CPUNanos, 0))
		next.CPUNanos = max(r.Usage.CPUNanos, 0)
		curMem = max(r.Usage.MemoryBytes, 0)
		d.diskBytes = max(r.Usage.DiskBytes, 0)
	}
	next.MemoryBytes = curMem
	// The memory charge between two readings: the mean of both (a
	// sandbox's memory moves slowly next to the sampling interval).
	d.memoryByteSeconds = int64((float64(prev.MemoryBytes) + float64(curMem)) / 2 * dt.Seconds())
	if r.HasNet {
		out, in := int64(r.Net.BytesOut), int64(r.Net.BytesIn)
		d.egressOut, d.egressIn = counter(prev.EgressBytesOut, out), counter(prev.EgressBytesIn, in)
		next.EgressBytesOut, next.EgressBytesIn = out, in
	} else {
		// No link (none, or a cold pause closed it): the next one counts
		// from zero.
		next.EgressBytesOut, next.EgressBytesIn = 0, 0
	}
	if prev.State == string(sandbox.StatePaused) {
		d.pausedMillis = dt.Milliseconds()
	} else {
		d.runningMillis = dt.Milliseconds()
	}
	return d, next
}

// split spreads d over the UTC hours from `from` to `to` in proportion to
// the time in each (the counters' sums are kept exact: the last hour takes
// what rounding leaves); the disk reading goes to each hour.
func split(d delta, m store.SandboxMeter, from, to time.Time) []store.SandboxUsage {
	mk := func(h time.Time) store.SandboxUsage {
		return store.SandboxUsage{SandboxID: m.SandboxID, Hour: h, PrincipalID: m.PrincipalID, Agent: m.Agent,
			Template: m.Template, DiskBytes: d.diskBytes}
	}
	from, to = from.UTC(), to.UTC()
	h := from.Truncate(time.Hour)
	if !to.After(from) || !to.After(h.Add(time.Hour)) {
		u := mk(h)
		u.CPUNanos, u.MemoryByteSeconds, u.EgressBytesOut, u.EgressBytesIn = d.cpuNanos, d.memoryByteSeconds, d.egressOut, d.egressIn
		u.RunningMillis, u.PausedMillis = d.runningMillis, d.pausedMillis
		return []store.SandboxUsage{u}
	}
	total := to.Sub(from).Seconds()
	var out []store.SandboxUsage
	var done delta
	for t := from; t.Before(to); h = h.Add(time.Hour) {
		end := h.Add(time.Hour)
		if end.After(to) {
			end = to
		}
		u := mk(h)
		if !end.Before(to) { // the last hour: what is left
			u.CPUNanos, u.MemoryByteSeconds = d.cpuNanos-done.cpuNanos, d.memoryByteSeconds-done.memoryByteSeconds
			u.EgressBytesOut, u.EgressBytesIn = d.egressOut-done.egressOut, d.egressIn-done.egressIn
			u.RunningMillis, u.PausedMillis = d.runningMillis-done.runningMillis, d.pausedMillis-done.pausedMillis
		} else {
			f := end.Sub(t).Seconds() / total
			part := func(v int64, acc *int64) int64 { p := int64(float64(v) * f); *acc += p; return p }
			u.CPUNanos = part(d.cpuNanos, &done.cpuNanos)
			u.MemoryByteSeconds = part(d.memoryByteSeconds, &done.memoryByteSeconds)
			u.EgressBytesOut = part(d.egressOut, &done.egressOut)
			u.EgressBytesIn = part(d.egressIn, &done.egressIn)
			u.RunningMillis = part(d.runningMillis, &done.runningMillis)
			u.PausedMillis = part(d.pausedMillis, &done.pausedMillis)
		}
		out = append(out, u)
		t = end
	}
	return out
}
