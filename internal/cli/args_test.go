package cli

import (
	"slices"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func TestSplitRemote(t *testing.T) {
	for _, tc := range []struct {
		in       string
		id, path string
		err      bool
	}{
		{in: "sb-1:/home/user/a.txt", id: "sb-1", path: "/home/user/a.txt"},
		{in: "sb-1:relative/x", id: "sb-1", path: "relative/x"},
		{in: "sb-1:/a:b", id: "sb-1", path: "/a:b"},
		{in: "sb-1:", err: true},
		{in: "", err: true},
		{in: "-", path: "-"},
		{in: "a.txt", path: "a.txt"},
		{in: "/tmp/a:b", path: "/tmp/a:b"},
		{in: "./a:b", path: "./a:b"},
		{in: "dir/sb-1:/x", path: "dir/sb-1:/x"},
		{in: ":/x", path: ":/x"},
		{in: ".hidden:x", path: ".hidden:x"},
	} {
		got, err := splitRemote(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("splitRemote(%q): error %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if err == nil && (got.id != tc.id || got.path != tc.path) {
			t.Errorf("splitRemote(%q) = %q, %q; want %q, %q", tc.in, got.id, got.path, tc.id, tc.path)
		}
	}
}

func TestParseKV(t *testing.T) {
	for _, tc := range []struct {
		in, k, v string
		err      bool
	}{
		{in: "K=V", k: "K", v: "V"},
		{in: "K=", k: "K", v: ""},
		{in: "K=a=b", k: "K", v: "a=b"},
		{in: "K= spaced ", k: "K", v: " spaced "},
		{in: "=V", err: true},
		{in: "K", err: true},
		{in: "", err: true},
		{in: "K=a\x00b", err: true},
	} {
		k, v, err := parseKV(tc.in)
		if (err != nil) != tc.err || k != tc.k || v != tc.v {
			t.Errorf("parseKV(%q) = %q, %q, %v; want %q, %q, error %v", tc.in, k, v, err, tc.k, tc.v, tc.err)
		}
	}
}

func TestKVFlag(t *testing.T) {
	var f kvFlag
	for _, s := range []string{"a=1", "b=2", "a=3"} {
		if err := f.Set(s); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.String(); got != "a=3,b=2" {
		t.Errorf("later key should win: %q", got)
	}
	if err := f.Set("bare"); err == nil {
		t.Error("a bare key without allowBare should fail")
	}

	env := kvFlag{allowBare: true}
	for _, s := range []string{"HOME", "X=1"} {
		if err := env.Set(s); err != nil {
			t.Fatal(err)
		}
	}
	getenv := func(k string) string { return map[string]string{"HOME": "/root"}[k] }
	if err := env.resolve(getenv); err != nil || env.m["HOME"] != "/root" || env.m["X"] != "1" {
		t.Errorf("resolve: %v %v", err, env.m)
	}
	missing := kvFlag{allowBare: true}
	missing.Set("NOPE")
	if err := missing.resolve(getenv); err == nil || !strings.Contains(err.Error(), "NOPE is not set") {
		t.Errorf("resolve of an unset key: %v", err)
	}

	filter := kvFlag{check: checkMetadataFilter}
	for _, bad := range []string{"a:b=1", "a=1,2", "a,b=1"} {
		if err := filter.Set(bad); err == nil {
			t.Errorf("metadata filter %q should be refused", bad)
		}
	}
	if err := filter.Set("team=a:b"); err != nil {
		t.Errorf("a colon in a filter value is fine: %v", err)
	}
}

func TestListFlag(t *testing.T) {
	var f listFlag
	f.Set("sandboxes:read,files:read")
	f.Set(" admin ")
	f.Set(",")
	if want := []string{"sandboxes:read", "files:read", "admin"}; !slices.Equal(f, want) {
		t.Errorf("got %q, want %q", f, want)
	}
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{in: "300", want: 300 * time.Second},
		{in: "90s", want: 90 * time.Second},
		{in: "5m", want: 5 * time.Minute},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "2d", want: 48 * time.Hour},
		{in: "1.5s", want: 1500 * time.Millisecond},
		{in: "0", err: true},
		{in: "0s", err: true},
		{in: "-5m", err: true},
		{in: "", err: true},
		{in: "soon", err: true},
		{in: "5 m", err: true},
		{in: "99999999999999999999", err: true},
	} {
		got, err := parseDuration(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
	if n, err := durationSeconds("1h"); err != nil || n != 3600 {
		t.Errorf("durationSeconds(1h) = %d, %v", n, err)
	}
	if _, err := durationSeconds("1.5s"); err == nil {
		t.Error("durationSeconds(1.5s) should fail: not whole seconds")
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]warden.Signal{
		"SIGTERM": warden.SIGTERM, "TERM": warden.SIGTERM, "term": warden.SIGTERM, "15": warden.SIGTERM,
		"9": warden.SIGKILL, "kill": warden.SIGKILL, "SIGUSR1": warden.SIGUSR1, "hup": warden.SIGHUP,
	} {
		if got, err := parseSignal(in); err != nil || got != want {
			t.Errorf("parseSignal(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"SIGWINCH", "", "99", "SIG"} {
		if _, err := parseSignal(bad); err == nil {
			t.Errorf("parseSignal(%q) should fail", bad)
		}
	}
}

func TestParsePID(t *testing.T) {
	if n, err := parsePID("12"); err != nil || n != 12 {
		t.Errorf("parsePID(12) = %d, %v", n, err)
	}
	for _, bad := range []string{"0", "-1", "x", ""} {
		if _, err := parsePID(bad); err == nil {
			t.Errorf("parsePID(%q) should fail", bad)
		}
	}
}

func TestParseExecArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // ID then the command
		i, t bool
		cwd  string
		err  string
	}{
		{args: []string{"sb-1", "--", "ls", "-l"}, want: []string{"sb-1", "ls", "-l"}},
		{args: []string{"sb-1", "ls", "-l"}, want: []string{"sb-1", "ls", "-l"}},
		{args: []string{"-i", "sb-1", "--", "cat"}, want: []string{"sb-1", "cat"}, i: true},
		{args: []string{"-it", "sb-1"}, want: []string{"sb-1"}, i: true, t: true},
		{args: []string{"-ti", "--cwd", "/x", "sb-1", "bash"}, want: []string{"sb-1", "bash"}, i: true, t: true, cwd: "/x"},
		{args: []string{"sb-1", "--cwd", "/x", "-i", "--", "sh", "-c", "echo -- hi"}, want: []string{"sb-1", "sh", "-c", "echo -- hi"}, i: true, cwd: "/x"},
		{args: []string{"sb-1", "-it", "--", "bash"}, want: []string{"sb-1", "bash"}, i: true, t: true},
		{args: []string{"sb-1", "--", "grep", "--", "x"}, want: []string{"sb-1", "grep", "--", "x"}},
		{args: []string{"--", "sb-1", "ls"}, want: []string{"sb-1", "ls"}},
		{args: []string{"sb-1", "--cwd", "/x", "ls"}, err: `must end with "--"`},
		{args: []string{"sb-1", "--cwd", "/x", "stray", "--", "ls"}, err: `unexpected argument "stray"`},
		{args: []string{"--bogus", "sb-1", "--", "ls"}, err: "not defined"},
	} {
		c := execCmd()
		c.build(&globalFlags{})
		got, err := c.parseArgs(c.fs, tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one containing %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		i, _ := c.fs.fs.Lookup("i").Value.(*boolValue)
		tt, _ := c.fs.fs.Lookup("t").Value.(*boolValue)
		cwd := c.fs.fs.Lookup("cwd").Value.String()
		if !slices.Equal(got, tc.want) || bool(*i) != tc.i || bool(*tt) != tc.t || cwd != tc.cwd {
			t.Errorf("%q: got %q i=%v t=%v cwd=%q; want %q i=%v t=%v cwd=%q", tc.args, got, *i, *tt, cwd, tc.want, tc.i, tc.t, tc.cwd)
		}
	}
}

func TestFlagsAnywhere(t *testing.T) {
	fs := newFlagSet("x")
	var json, r bool
	var depth int
	fs.Bool(&json, "json", "")
	fs.Bool(&r, "recursive", "", "r")
	fs.Int(&depth, "depth", "N", "")
	pos, err := fs.parse([]string{"sb-1", "--json", "/a", "-r", "--depth=3", "--", "--not-a-flag"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pos, []string{"sb-1", "/a", "--not-a-flag"}) || !json || !r || depth != 3 {
		t.Errorf("pos %q json %v r %v depth %d", pos, json, r, depth)
	}
}
