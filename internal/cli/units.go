package cli

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// parseCPU reads a CPU amount as people write it: a number of CPUs ("2", "0.5") or
// millicores with an "m" suffix ("500m"), and returns thousandths of a CPU.
func parseCPU(s string) (int, error) {
	t := strings.TrimSpace(s)
	if m, ok := strings.CutSuffix(t, "m"); ok {
		n, err := strconv.Atoi(m)
		if err != nil || n <= 0 {
			return 0, errors.New("want a number of CPUs such as 2 or 0.5, or millicores such as 500m")
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) || f > 1<<20 {
		return 0, errors.New("want a number of CPUs such as 2 or 0.5, or millicores such as 500m")
	}
	millis := f * 1000
	if millis != math.Trunc(millis) {
		return 0, errors.New("finer than a thousandth of a CPU")
	}
	return int(millis), nil
}

// sizeUnits are the suffixes parseMiB accepts, in MiB. They are binary (1g = 1024 MiB),
// as the API's sizes are MiB; "gb" and "gib" mean the same.
var sizeUnits = []struct {
	suffix string
	mib    float64
}{
	{"tib", 1 << 20}, {"tb", 1 << 20}, {"ti", 1 << 20}, {"t", 1 << 20},
	{"gib", 1 << 10}, {"gb", 1 << 10}, {"gi", 1 << 10}, {"g", 1 << 10},
	{"mib", 1}, {"mb", 1}, {"mi", 1}, {"m", 1},
}

// parseMiB reads a size such as 512, 512m, 1g, 1.5G or 10GiB and returns it in MiB. A
// bare number is MiB.
func parseMiB(s string) (int, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range sizeUnits {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(num), u.mib
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, errors.New("want a size such as 512m, 1g or 10G (a bare number is MiB)")
	}
	mib := f * mult
	if mib > 1<<30 {
		return 0, errors.New("too large")
	}
	if mib != math.Trunc(mib) {
		return 0, errors.New("not a whole number of MiB")
	}
	return int(mib), nil
}

// cpuFlag is a CPU amount flag held in thousandths of a CPU.
type cpuFlag struct{ millis int }

func (f *cpuFlag) String() string {
	if f.millis == 0 {
		return ""
	}
	return strconv.FormatFloat(float64(f.millis)/1000, 'f', -1, 64)
}

func (f *cpuFlag) Set(s string) error {
	n, err := parseCPU(s)
	if err != nil {
		return err
	}
	f.millis = n
	return nil
}

// sizeFlag is a size flag held in MiB.
type sizeFlag struct{ mib int }

func (f *sizeFlag) String() string {
	if f.mib == 0 {
		return ""
	}
	return strconv.Itoa(f.mib) + "m"
}

func (f *sizeFlag) Set(s string) error {
	n, err := parseMiB(s)
	if err != nil {
		return err
	}
	f.mib = n
	return nil
}

// apiFields maps request fields of the API to the flags that set them, for errors.
var apiFields = []struct{ field, flag string }{
	{"cpu_millis", "--cpu"},
	{"memory_mb", "--memory"},
	{"disk_mb", "--disk"},
	{"timeout_seconds", "--timeout"},
}

// flagWords rewrites the API field names in err's message as the flags that set them
// (cpu_millis: must be between 100 and 1024000 -> --cpu: must be between 0.1 and 1024
// CPUs), keeping err wrapped.
func flagWords(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	out := msg
	out = strings.ReplaceAll(out, "cpu_millis: must be between 100 and 1024000", "--cpu: must be between 0.1 and 1024 CPUs")
	out = strings.ReplaceAll(out, "cpu_millis must be between 100 and 1024000", "--cpu must be between 0.1 and 1024 CPUs")
	for _, m := range []string{"memory_mb", "disk_mb"} {
		out = strings.ReplaceAll(out, m+": must be between 16 and 1048576", m+": must be between 16m and 1024g")
		out = strings.ReplaceAll(out, m+" must be between 16 and 1048576", m+" must be between 16m and 1024g")
	}
	for _, f := range apiFields {
		out = strings.ReplaceAll(out, f.field, f.flag)
	}
	if out == msg {
		return err
	}
	return &rewordedError{msg: out, err: err}
}

// rewordedError is err with a message in the CLI's words.
type rewordedError struct {
	msg string
	err error
}

func (e *rewordedError) Error() string { return e.msg }
func (e *rewordedError) Unwrap() error { return e.err }
