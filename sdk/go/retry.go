package warden

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"syscall"
	"time"
)

// RetryPolicy bounds the retries of one call. Zero fields take the values of
// [DefaultRetryPolicy].
type RetryPolicy struct {
	// MaxAttempts is the number of tries, the first included; 1 disables retries.
	MaxAttempts int
	// MinDelay is the backoff before the second try; each later one doubles it.
	MinDelay time.Duration
	// MaxDelay caps the backoff.
	MaxDelay time.Duration
	// MaxRetryAfter is the longest Retry-After the client waits for; a response asking
	// for longer is returned as the error instead.
	MaxRetryAfter time.Duration
}

// DefaultRetryPolicy is used when no [WithRetry] option is given.
var DefaultRetryPolicy = RetryPolicy{
	MaxAttempts:   4,
	MinDelay:      250 * time.Millisecond,
	MaxDelay:      5 * time.Second,
	MaxRetryAfter: 30 * time.Second,
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultRetryPolicy.MaxAttempts
	}
	if p.MinDelay <= 0 {
		p.MinDelay = DefaultRetryPolicy.MinDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = DefaultRetryPolicy.MaxDelay
	}
	if p.MaxDelay < p.MinDelay {
		p.MaxDelay = p.MinDelay
	}
	if p.MaxRetryAfter <= 0 {
		p.MaxRetryAfter = DefaultRetryPolicy.MaxRetryAfter
	}
	return p
}

// backoff returns the wait after failed attempt n (from 1): exponential with "equal
// jitter", between half and all of min(MaxDelay, MinDelay*2^(n-1)).
func (p RetryPolicy) backoff(n int) time.Duration {
	d := p.MinDelay
	for i := 1; i < n && d < p.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, p.MaxDelay)
	half := d / 2
	return half + rand.N(half+1)
}

// delay returns how long to wait after failed attempt n given the response's Retry-After
// header, and false when the server asked for longer than MaxRetryAfter.
func (p RetryPolicy) delay(n int, retryAfter string, now time.Time) (time.Duration, bool) {
	d, ok := parseRetryAfter(retryAfter, now)
	if !ok {
		return p.backoff(n), true
	}
	if d > p.MaxRetryAfter {
		return 0, false
	}
	return d, true
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, 1<<31)) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

func retryableStatus(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable
}

// isRefused reports whether err means the request never reached the daemon: the
// connection was refused, or the unix socket does not exist (yet).
func isRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}
