package api

import (
	"sync"
	"time"
)

// anonAudit bounds the audit events that callers without an API key can
// cause: preview traffic refused or flagged by a rule, and presigned-link
// refusals, are audited whoever sends them, so without a bound a client on
// the internet could grow the audit log at its request rate. One event a
// second per key (action and target) is written; the next one written
// carries the number left out ("suppressed" in its detail). The zero value
// is ready to use.
type anonAudit struct {
	mu   sync.Mutex
	keys map[string]*anonEntry
}

type anonEntry struct {
	at         time.Time // when the last event for the key was written
	suppressed int       // events left out since
}

// anonAuditEvery is the interval between audited events of one key.
const anonAuditEvery = time.Second

// anonAuditKeys bounds the keys remembered; past it, keys idle for the
// interval are forgotten, and if that is not enough, all of them (which
// lets one more event per key through: the bound on the log's growth
// stays one event per key per interval, over at most this many keys).
const anonAuditKeys = 4096

// allow reports whether an event for key may be written at now, and how
// many were left out since the last one.
func (l *anonAudit) allow(key string, now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[string]*anonEntry{}
	}
	e := l.keys[key]
	if e != nil && now.Sub(e.at) < anonAuditEvery && !now.Before(e.at) {
		e.suppressed++
		return 0, false
	}
	if e == nil {
		if len(l.keys) >= anonAuditKeys {
			for k, o := range l.keys {
				if now.Sub(o.at) >= anonAuditEvery {
					delete(l.keys, k)
				}
			}
			if len(l.keys) >= anonAuditKeys {
				clear(l.keys)
			}
		}
		e = &anonEntry{}
		l.keys[key] = e
	}
	n := e.suppressed
	e.at, e.suppressed = now, 0
	return n, true
}
