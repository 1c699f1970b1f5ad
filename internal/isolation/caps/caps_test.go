package caps

import (
	"strings"
	"testing"
)

const sampleStatus = `Name:	cat
Umask:	0022
State:	R (running)
Tgid:	4242
Pid:	4242
Uid:	1000	1000	1000	1000
Gid:	1000	1000	1000	1000
CapInh:	0000000000000000
CapPrm:	0000000000000000
CapEff:	0000000000000000
CapBnd:	0000000000000000
CapAmb:	0000000000000000
NoNewPrivs:	1
Seccomp:	2
Seccomp_filters:	1
Speculation_Store_Bypass:	thread vulnerable
`

func TestParse(t *testing.T) {
	s, err := Parse(strings.NewReader(sampleStatus))
	if err != nil {
		t.Fatal(err)
	}
	want := Status{Pid: 4242, Uid: [4]uint32{1000, 1000, 1000, 1000}, Gid: [4]uint32{1000, 1000, 1000, 1000},
		NoNewPrivs: true, Seccomp: 2, SeccompFilters: 1}
	if s != want {
		t.Fatalf("got %+v, want %+v", s, want)
	}
	if !s.Locked() {
		t.Fatal("Locked() = false")
	}
	root := strings.Replace(sampleStatus, "CapBnd:\t0000000000000000", "CapBnd:\t000001ffffffffff", 1)
	s, err = Parse(strings.NewReader(root))
	if err != nil {
		t.Fatal(err)
	}
	if s.CapBnd != 0x1ffffffffff || s.Locked() {
		t.Fatalf("CapBnd %#x Locked %v", s.CapBnd, s.Locked())
	}
}

func TestParseRejects(t *testing.T) {
	for name, text := range map[string]string{
		"empty":         "",
		"no NoNewPrivs": strings.Replace(sampleStatus, "NoNewPrivs:\t1\n", "", 1),
		"no CapAmb":     strings.Replace(sampleStatus, "CapAmb:\t0000000000000000\n", "", 1),
		"bad hex":       strings.Replace(sampleStatus, "CapEff:\t0000000000000000", "CapEff:\tzz", 1),
		"short Uid":     strings.Replace(sampleStatus, "Uid:\t1000\t1000\t1000\t1000", "Uid:\t1000", 1),
	} {
		if _, err := Parse(strings.NewReader(text)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
