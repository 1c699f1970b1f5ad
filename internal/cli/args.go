package cli

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// parseInt parses a decimal integer.
func parseInt(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("not a whole number: %q", s)
	}
	return n, nil
}

// parseKV splits "K=V" at the first "=". The key must not be empty; the value may be
// empty and may contain "=".
func parseKV(s string) (key, value string, err error) {
	k, v, ok := strings.Cut(s, "=")
	switch {
	case !ok:
		return "", "", fmt.Errorf("%q is not KEY=VALUE", s)
	case k == "":
		return "", "", fmt.Errorf("%q has an empty key", s)
	case strings.ContainsRune(s, 0):
		return "", "", fmt.Errorf("%q contains a NUL byte", s)
	}
	return k, v, nil
}

// kvFlag is a repeatable KEY=VALUE flag collected into a map; a later key wins.
type kvFlag struct {
	m map[string]string
	// allowBare lets a bare KEY take its value from the local environment (like docker
	// run --env KEY); see resolve.
	allowBare bool
	bare      []string
	// check validates a pair beyond the KEY=VALUE form.
	check func(k, v string) error
}

func (f *kvFlag) String() string {
	if f == nil || len(f.m) == 0 {
		return ""
	}
	keys := slices.Sorted(maps.Keys(f.m))
	for i, k := range keys {
		keys[i] = k + "=" + f.m[k]
	}
	return strings.Join(keys, ",")
}

func (f *kvFlag) Set(s string) error {
	if f.allowBare && s != "" && !strings.ContainsAny(s, "=\x00") {
		f.bare = append(f.bare, s)
		return nil
	}
	k, v, err := parseKV(s)
	if err != nil {
		return err
	}
	if f.check != nil {
		if err := f.check(k, v); err != nil {
			return err
		}
	}
	if f.m == nil {
		f.m = map[string]string{}
	}
	f.m[k] = v
	return nil
}

// resolve gives bare keys their values from getenv; a key that is not set is an error.
func (f *kvFlag) resolve(getenv func(string) string) error {
	for _, k := range f.bare {
		v := getenv(k)
		if v == "" {
			return fmt.Errorf("%s is not set in the local environment; write %s=VALUE", k, k)
		}
		if f.m == nil {
			f.m = map[string]string{}
		}
		f.m[k] = v
	}
	f.bare = nil
	return nil
}

// checkMetadataFilter refuses pairs that the list filter's k1:v1,k2:v2 form cannot carry.
func checkMetadataFilter(k, v string) error {
	if strings.ContainsAny(k, ":,") || strings.Contains(v, ",") {
		return fmt.Errorf("%s=%s: a metadata filter cannot contain ',' (nor ':' in the key)", k, v)
	}
	return nil
}

// listFlag is a repeatable flag whose values may also be comma-separated.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*f = append(*f, v)
		}
	}
	return nil
}

// parseDuration reads a positive duration: a Go duration ("90s", "5m", "1h30m"), a
// number of days ("2d"), or a bare number of seconds ("300").
func parseDuration(s string) (time.Duration, error) {
	var d time.Duration
	switch {
	case s == "":
		return 0, errors.New("empty duration")
	case isDigits(s):
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n > 1<<31 {
			return 0, fmt.Errorf("duration %q is too long", s)
		}
		d = time.Duration(n) * time.Second
	case strings.HasSuffix(s, "d") && isDigits(s[:len(s)-1]):
		n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
		if err != nil || n > 1<<16 {
			return 0, fmt.Errorf("duration %q is too long", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	default:
		var err error
		d, err = time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("bad duration %q: want a number of seconds or a duration such as 90s, 5m, 1h30m, 2d", s)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("duration %q must be positive", s)
	}
	return d, nil
}

// durationSeconds parses a duration that must be a whole number of seconds.
func durationSeconds(s string) (int, error) {
	d, err := parseDuration(s)
	if err != nil {
		return 0, err
	}
	if d%time.Second != 0 {
		return 0, fmt.Errorf("duration %q is not a whole number of seconds", s)
	}
	secs := d / time.Second
	if secs > 1<<31-1 {
		return 0, fmt.Errorf("duration %q is too long", s)
	}
	return int(secs), nil
}

// durationFlag is a flag holding a whole number of seconds, written as a duration.
type durationFlag struct {
	secs int
	raw  string
}

func (f *durationFlag) String() string { return f.raw }

func (f *durationFlag) Set(s string) error {
	n, err := durationSeconds(s)
	if err != nil {
		return err
	}
	f.secs, f.raw = n, s
	return nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// remotePath is one side of `warden cp`: a local path, "-", or ID:/path in a sandbox.
type remotePath struct {
	id   string // sandbox ID; empty for a local path
	path string
}

func (p remotePath) remote() bool { return p.id != "" }
func (p remotePath) stdio() bool  { return p.id == "" && p.path == "-" }

func (p remotePath) String() string {
	if p.id == "" {
		return p.path
	}
	return p.id + ":" + p.path
}

// splitRemote parses a cp argument. ID:PATH names PATH in sandbox ID when ID is not empty
// and has no "/"; anything else is a local path (write ./a:b for a local file with a
// colon in its name).
func splitRemote(arg string) (remotePath, error) {
	if arg == "" {
		return remotePath{}, errors.New("empty path")
	}
	id, p, ok := strings.Cut(arg, ":")
	if !ok || id == "" || strings.ContainsAny(id, `/\`) || strings.HasPrefix(id, ".") {
		return remotePath{path: arg}, nil
	}
	if p == "" {
		return remotePath{}, fmt.Errorf("%q: no path after %q", arg, id+":")
	}
	return remotePath{id: id, path: p}, nil
}

// parsePID parses a process ID argument.
func parsePID(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("bad process ID %q: want a positive number", s)
	}
	return n, nil
}

// signalNumbers maps the Linux numbers of the signals the API accepts.
var signalNumbers = map[string]warden.Signal{
	"1": warden.SIGHUP, "2": warden.SIGINT, "3": warden.SIGQUIT, "9": warden.SIGKILL,
	"10": warden.SIGUSR1, "12": warden.SIGUSR2, "15": warden.SIGTERM, "18": warden.SIGCONT,
	"19": warden.SIGSTOP,
}

// parseSignal reads a signal as SIGTERM, TERM, term or 15.
func parseSignal(s string) (warden.Signal, error) {
	if sig, ok := signalNumbers[s]; ok {
		return sig, nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	for _, sig := range signalNumbers {
		if string(sig) == name {
			return sig, nil
		}
	}
	return "", fmt.Errorf("unknown signal %q: want one of HUP, INT, QUIT, KILL, USR1, USR2, TERM, CONT, STOP", s)
}
