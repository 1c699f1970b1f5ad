// Package connguard bounds what clients may hold open on wardend's HTTP
// listeners, before any authentication:
//
//   - a Limiter caps the connections accepted at once, in all and per client
//     address, across every listener wrapped with it (Limiter.Listen); a
//     connection over a cap gets a short JSON error response and is closed
//     at once, and its slot is freed when the server (or the handler that
//     hijacked it) closes it;
//   - BodyLimits.Handler enforces a minimum rate on request bodies, like
//     nginx's client_body_timeout: in every window of Timeout, at least
//     MinRate×Timeout bytes (or the rest of the body) must arrive, else the
//     body read fails and the connection is closed after the response.
//     Authenticated streaming requests may be relaxed (Relax) to the longer
//     StreamTimeout with any progress at all.
//
// Header read and idle timeouts are the http.Server's own
// (ReadHeaderTimeout, IdleTimeout).
package connguard

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Limiter counts the open connections of the listeners it wraps. Its zero
// value is not usable: make one with NewLimiter.
type Limiter struct {
	max, perIP int
	log        *slog.Logger

	mu    sync.Mutex
	total int
	byIP  map[string]int

	refusedGlobal, refusedIP atomic.Uint64
	lastLog                  atomic.Int64 // unix seconds of the last refusal logged
}

// NewLimiter makes a Limiter allowing max connections at once in all and
// perIP from one client address (an IPv4 address or an IPv6 /64); 0 means
// no cap. log, if not nil, gets a warning when connections are refused (at
// most one a minute).
func NewLimiter(max, perIP int, log *slog.Logger) *Limiter {
	return &Limiter{max: max, perIP: perIP, log: log, byIP: map[string]int{}}
}

// Over-cap responses: status and message.
const (
	msgGlobal = "the daemon has too many open connections; try again later"
	msgPerIP  = "too many open connections from your address; close some and try again"
)

// Reject renders the response a refused connection gets, from a status and
// a message; nil means close without a response.
type Reject func(status int, message string) []byte

// APIReject renders Warden API errors: {"error":{"code","message"}}.
func APIReject(status int, message string) []byte {
	code := "unavailable"
	if status == 429 {
		code = "rate_limited"
	}
	return httpResponse(status, fmt.Sprintf(`{"error":{"code":%q,"message":%q}}`, code, message))
}

// E2BReject renders E2B API errors: {"code":status,"message"}.
func E2BReject(status int, message string) []byte {
	return httpResponse(status, fmt.Sprintf(`{"code":%d,"message":%q}`, status, message))
}

func httpResponse(status int, body string) []byte {
	text := "Service Unavailable"
	if status == 429 {
		text = "Too Many Requests"
	}
	return []byte("HTTP/1.1 " + strconv.Itoa(status) + " " + text + "\r\nContent-Type: application/json\r\nConnection: close\r\n" +
		"Retry-After: 1\r\nContent-Length: " + strconv.Itoa(len(body)+1) + "\r\n\r\n" + body + "\n")
}

// Listen wraps ln: Accept returns only connections within the caps. Every
// listener wrapped by one Limiter shares its counts.
func (l *Limiter) Listen(ln net.Listener, reject Reject) net.Listener {
	return &listener{Listener: ln, lim: l, reject: reject}
}

// clientKey is the per-client bucket of a remote address: the IPv4 address,
// or the /64 of an IPv6 one (one host easily has a whole /64). ok is false
// for addresses that are not IP (unix sockets), which only the global cap
// counts.
func clientKey(a net.Addr) (string, bool) {
	var ap netip.AddrPort
	switch t := a.(type) {
	case *net.TCPAddr:
		ap = t.AddrPort()
	default:
		p, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return "", false
		}
		ap = p
	}
	ip := ap.Addr().Unmap()
	if !ip.IsValid() {
		return "", false
	}
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String(), true
	}
	return ip.String(), true
}

// ClientBucket is the per-client bucket of a request's RemoteAddr
// ("ip:port"), as the connection caps count it: the address itself, or
// the /64 of an IPv6 one. It is remote itself when it is not an address.
func ClientBucket(remote string) string {
	p, err := netip.ParseAddrPort(remote)
	if err != nil {
		return remote
	}
	k, _ := clientKey(net.TCPAddrFromAddrPort(p))
	return k
}

// acquire takes a slot for a connection from key; when refused it returns
// the status and message of the response.
func (l *Limiter) acquire(key string, perIP bool) (bool, int, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && l.total >= l.max {
		l.refusedGlobal.Add(1)
		return false, 503, msgGlobal
	}
	if perIP && l.perIP > 0 && l.byIP[key] >= l.perIP {
		l.refusedIP.Add(1)
		return false, 429, msgPerIP
	}
	l.total++
	if perIP {
		l.byIP[key]++
	}
	return true, 0, ""
}

func (l *Limiter) release(key string, perIP bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if perIP {
		if l.byIP[key]--; l.byIP[key] <= 0 {
			delete(l.byIP, key)
		}
	}
}

// Open returns the number of connections held now, in all and from the
// client bucket of addr.
func (l *Limiter) Open(addr net.Addr) (total, fromAddr int) {
	key, _ := clientKey(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total, l.byIP[key]
}

type listener struct {
	net.Listener
	lim    *Limiter
	reject Reject
}

func (ln *listener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key, perIP := clientKey(c.RemoteAddr())
		ok, status, msg := ln.lim.acquire(key, perIP)
		if ok {
			return &conn{Conn: c, release: func() { ln.lim.release(key, perIP) }}, nil
		}
		ln.refuse(c, status, msg)
	}
}

// refuse answers an over-cap connection without reading from it and closes
// it. The write goes to an empty socket buffer, so it does not block; the
// deadline makes sure of it.
func (ln *listener) refuse(c net.Conn, status int, msg string) {
	if ln.reject != nil {
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		c.Write(ln.reject(status, msg))
	}
	c.Close()
	now := time.Now().Unix()
	if last := ln.lim.lastLog.Load(); ln.lim.log != nil && now-last >= 60 && ln.lim.lastLog.CompareAndSwap(last, now) {
		ln.lim.log.Warn("refusing connections over the connection caps", "remote", c.RemoteAddr().String(),
			"status", status, "max_conns", ln.lim.max, "max_conns_per_ip", ln.lim.perIP)
	}
}

// conn frees its slot when closed, once.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite passes a half-close through (http.Server uses it to close
// connections gracefully).
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ReadFrom keeps the TCP connection's sendfile/splice path.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// Unwrap returns the underlying connection.
func (c *conn) Unwrap() net.Conn { return c.Conn }

var (
	descOpen = prometheus.NewDesc("warden_http_open_connections",
		"HTTP connections held open now on the TCP listeners (API, E2B).", nil, nil)
	descRefused = prometheus.NewDesc("warden_http_connections_refused_total",
		"HTTP connections refused over the connection caps, by cap (global, per_ip).", []string{"cap"}, nil)
)

// Describe implements prometheus.Collector.
func (l *Limiter) Describe(ch chan<- *prometheus.Desc) {
	ch <- descOpen
	ch <- descRefused
}

// Collect implements prometheus.Collector.
func (l *Limiter) Collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	n := l.total
	l.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descOpen, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(l.refusedGlobal.Load()), "global")
	ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(l.refusedIP.Load()), "per_ip")
}
