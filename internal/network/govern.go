package network

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/warden-sandbox/warden/internal/govern"
)

// Flow is a new outbound flow that the sandbox's network policy allowed, as
// the governed path (docs/governance.md) is asked about it.
type Flow struct {
	Sandbox string
	Proto   string         // tcp or udp
	Dst     netip.AddrPort // the address dialled
	// Host is the name the flow is for: a name the client sent in its first
	// bytes (TLS server name, HTTP Host or absolute-form target), else a
	// name Warden's DNS resolved to Dst's address for this sandbox, else ""
	// (the address alone).
	Host string
	SNI  string // the TLS server name, when the client sent one
	Mode Mode
}

// Governor decides flows through the governed path, after the network
// policy (the access stage of egress) allowed them.
type Governor interface {
	// Governs reports whether DecideFlow may refuse anything now: false
	// skips it, and the inspection of first bytes it needs. It is called
	// for every flow and must be cheap.
	Governs() bool
	// DecideFlow returns nil to let the flow through, or an error to refuse
	// it, whose text a plain HTTP client is answered with. It runs on the
	// flow's own goroutine, never on the packet path; it may write to the
	// store (an approval, an audit event) but never waits for an approval.
	DecideFlow(ctx context.Context, f Flow) error
}

// EgressGovernor is the Governor over a govern.Engine: each flow is an
// egress.connect action (surface egress) of the sandbox's owner, with host,
// port, proto, mode and sni. A decision other than a plain allow (deny,
// require_approval, log_only, an allow by an approval) is audited as one
// egress.connect event with the governed record, at most once a second per
// sandbox, target, outcome and rule (a client retrying in a loop would
// otherwise write an event per attempt); allowed flows are counted, not
// audited, as before. require_approval refuses the flow and opens (or finds)
// the approval: the identical flow (same actor, sandbox, host, port, proto,
// mode and sni) passes once it is approved.
type EgressGovernor struct {
	Engine *govern.Engine
	// Actor resolves a sandbox to its owner; an error refuses the flow
	// (fail closed).
	Actor govern.SandboxActor
	// Audit, if set, receives the events (the governed path's AuditLog).
	Audit *govern.AuditLog
	Log   *slog.Logger

	lim auditLimiter
}

// Governs reports whether the engine has anything that decides egress.connect.
func (g *EgressGovernor) Governs() bool {
	return g.Engine != nil && g.Engine.Governs(govern.KindEgressConnect)
}

// DecideFlow decides one flow.
func (g *EgressGovernor) DecideFlow(ctx context.Context, f Flow) error {
	host := f.Host
	if host == "" {
		host = f.Dst.Addr().String()
	}
	target := fmt.Sprintf("%s %s (%s)", f.Proto, f.Dst, host)
	principal, sb, err := g.Actor(ctx, f.Sandbox)
	if err != nil {
		g.log().Warn("egress: cannot resolve the sandbox's owner; refusing the flow", "sandbox", f.Sandbox, "err", err)
		return fmt.Errorf("egress to %s refused: the sandbox's owner is unknown: %w", host, err)
	}
	a := &govern.Action{Kind: govern.KindEgressConnect, Surface: govern.SurfaceEgress, Principal: principal,
		SandboxID: f.Sandbox, Sandbox: sb,
		Egress: &govern.Egress{Host: host, Port: int64(f.Dst.Port()), Proto: f.Proto, Mode: string(f.Mode), SNI: f.SNI}}
	d, err := g.Engine.Decide(ctx, a)
	if err != nil {
		g.audit(ctx, a, d, target, err)
		return fmt.Errorf("egress to %s: %w", host, err)
	}
	if d.Outcome != govern.Allow || d.ApprovalID != "" {
		g.audit(ctx, a, d, target, nil)
	}
	return d.Err()
}

func (g *EgressGovernor) log() *slog.Logger {
	if g.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return g.Log
}

// audit writes the decision's event unless an identical one was written in
// the last second.
func (g *EgressGovernor) audit(ctx context.Context, a *govern.Action, d govern.Decision, target string, derr error) {
	if g.Audit == nil || !g.lim.allow(a.SandboxID+"\x00"+target+"\x00"+string(d.Outcome)+"\x00"+d.PolicyID+"/"+d.RuleID, time.Now()) {
		return
	}
	outcome := govern.AuditSuccess
	reason := ""
	if err := d.Err(); err != nil || derr != nil {
		outcome = govern.AuditDenied
		if derr == nil {
			derr = err
		}
		reason = derr.Error()
	}
	// AuditLog.Write logs a failure itself.
	_ = g.Audit.Write(ctx, govern.AuditEvent{Principal: a.Principal.ID, Name: string(govern.KindEgressConnect),
		Target: a.SandboxID, Outcome: outcome, Detail: map[string]any{"target": target, "reason": reason},
		Governed: []govern.Decided{{Action: a, Decision: d}}})
}

// auditLimiter lets one event a second through per key.
type auditLimiter struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func (l *auditLimiter) allow(key string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string]time.Time{}
	}
	if t, ok := l.seen[key]; ok && now.Sub(t) < reportEvery {
		return false
	}
	if len(l.seen) >= maxReported {
		for k, t := range l.seen {
			if now.Sub(t) >= reportEvery {
				delete(l.seen, k)
			}
		}
		if len(l.seen) >= maxReported {
			return false
		}
	}
	l.seen[key] = now
	return true
}

// governs reports whether this link's flows go through the Governor now.
func (l *Link) governs() bool {
	g := l.m.cfg.Govern
	return g != nil && g.Governs()
}

// governFlow asks the Governor about a flow to dst for each of hosts (one
// decision each; none: the address alone). A refusal is recorded as a
// denial of the link (counted and listed, not reported to OnDeny: the
// Governor audits it) and returned.
func (n *netstack) governFlow(proto string, dst netip.AddrPort, hosts []string, sni string) error {
	l := n.l
	f := Flow{Sandbox: l.id, Proto: proto, Dst: dst, SNI: sni, Mode: l.pol.Load().mode}
	if len(hosts) == 0 {
		hosts = []string{""}
	}
	for _, h := range hosts {
		f.Host = h
		if err := l.m.cfg.Govern.DecideFlow(n.ctx, f); err != nil {
			target := proto + " " + dst.String()
			if h != "" {
				target += " (" + h + ")"
			}
			l.recordDenial(proto, target, err.Error())
			return err
		}
	}
	return nil
}

// flowHosts returns the distinct names a flow is for: the names the client
// sent (normalised; one that is not a valid name as sent, lowercased), else
// the names Warden's DNS resolved to dst for this sandbox.
func (l *Link) flowHosts(dst netip.AddrPort, sent []string) []string {
	var out []string
	add := func(h string) {
		for _, o := range out {
			if o == h {
				return
			}
		}
		out = append(out, h)
	}
	for _, raw := range sent {
		if ip, ok := parseHostIP(raw); ok {
			add(ip.Unmap().String())
			continue
		}
		if name, err := canonicalName(raw); err == nil {
			add(name)
		} else {
			add(strings.ToLower(raw))
		}
	}
	if len(out) > 0 {
		return out
	}
	return l.names.lookup(dst.Addr(), time.Now())
}

// tlsAccessDenied is a fatal TLS alert record, access_denied (49): what a
// TLS client refused by a rule reads in place of a ServerHello.
var tlsAccessDenied = []byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31}

// refuseGoverned answers a client whose first bytes (first) were read and
// whose flow a rule refused, then closes: a TLS client gets a fatal
// access_denied alert, an HTTP client a 403 with the refusal's text and the
// header X-Warden-Denied: policy, anything else a reset.
func refuseGoverned(c interface {
	Write([]byte) (int, error)
	SetWriteDeadline(time.Time) error
}, first []byte, err error) bool {
	if len(first) == 0 {
		return false
	}
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	switch classifyFirst(first[0]) {
	case kindTLS:
		_, werr := c.Write(tlsAccessDenied)
		return werr == nil
	case kindHTTP:
		if looksHTTP(first) != nil {
			return false
		}
		body := "warden: " + strings.ReplaceAll(err.Error(), "\n", " ") + "\n"
		_, werr := fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nX-Warden-Denied: policy\r\n"+
			"Content-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		return werr == nil
	}
	return false
}
