package api

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/warden-sandbox/warden/internal/api/apierr"
)

// Default per-principal request rate and burst.
const (
	DefaultRateLimit = 100 // requests per second
	DefaultRateBurst = 200
)

// limiters holds one token bucket per principal.
type limiters struct {
	mu    sync.Mutex
	r     rate.Limit
	burst int
	m     map[string]*entry
	now   func() time.Time
}

type entry struct {
	l    *rate.Limiter
	seen time.Time
}

func newLimiters(perSecond float64, burst int) *limiters {
	if perSecond < 0 {
		return nil // disabled
	}
	if perSecond == 0 {
		perSecond = DefaultRateLimit
	}
	if burst <= 0 {
		burst = DefaultRateBurst
	}
	return &limiters{r: rate.Limit(perSecond), burst: burst, m: map[string]*entry{}, now: time.Now}
}

// allow takes a token for principal, or returns how long to wait.
func (ls *limiters) allow(principal string) (bool, time.Duration) {
	if ls == nil {
		return true, 0
	}
	now := ls.now()
	ls.mu.Lock()
	e, ok := ls.m[principal]
	if !ok {
		if len(ls.m) > 10000 { // forget idle principals
			for k, v := range ls.m {
				if now.Sub(v.seen) > time.Minute {
					delete(ls.m, k)
				}
			}
		}
		e = &entry{l: rate.NewLimiter(ls.r, ls.burst)}
		ls.m[principal] = e
	}
	e.seen = now
	ls.mu.Unlock()
	r := e.l.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// rateLimited answers 429 with Retry-After in whole seconds.
func rateLimited(w http.ResponseWriter, wait time.Duration) error {
	secs := int(math.Ceil(wait.Seconds()))
	if secs < 1 {
		secs = 1
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	return apierr.New(apierr.CodeRateLimited, "too many requests for this principal; retry after "+strconv.Itoa(secs)+"s")
}
