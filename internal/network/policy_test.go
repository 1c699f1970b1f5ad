package network

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestPolicyValidate(t *testing.T) {
	good := []Policy{
		{},
		{Mode: ModeNone},
		{Mode: ModeOpen},
		{Mode: ModeAllowlist},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "pypi.org"}, {Host: "*.github.com", Ports: []int{443, 22}}, {Host: "Files.PythonHosted.org."}}},
		{Mode: ModeAllowlist, Allow: []Rule{{CIDR: "203.0.113.0/24", Ports: []int{53}}, {CIDR: "2001:db8::1"}, {CIDR: "::ffff:198.51.100.0/120"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "_acme-challenge.example.com"}, {Host: "xn--bcher-kva.example"}}},
	}
	for _, p := range good {
		if err := p.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", p, err)
		}
	}
	bad := []Policy{
		{Mode: "closed"},
		{Mode: ModeOpen, Allow: []Rule{{Host: "a.test"}}},
		{Mode: ModeNone, Allow: []Rule{{Host: "a.test"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "a.test", CIDR: "1.2.3.4/32"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "*"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "*.*.a.test"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "a*.test"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "localhost"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "1.2.3.4"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "2130706433"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "0x7f.1"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "[::1]"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "a..test"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "-a.test"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "a.test/x"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "bücher.example"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "a.1test"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: strings.Repeat("a", 64) + ".test"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "a.test", Ports: []int{0}}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "a.test", Ports: []int{65536}}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "dns.test", Ports: []int{53}}}},
		{Mode: ModeAllowlist, Allow: []Rule{{Host: "dns.test", Ports: []int{853}}}},
		{Mode: ModeAllowlist, Allow: []Rule{{CIDR: "10.0.0.0/33"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{CIDR: "fe80::1%eth0"}}},
		{Mode: ModeAllowlist, Allow: []Rule{{CIDR: "example.com"}}},
		{Mode: ModeAllowlist, Allow: make([]Rule, MaxRules+1)},
	}
	for _, p := range bad {
		if err := p.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted a bad policy", p)
		}
	}
}

func TestPolicyJSONAndNormalized(t *testing.T) {
	var p Policy
	if err := json.Unmarshal([]byte(`{"mode":"allowlist","allow":[{"host":"PyPI.org."},{"cidr":"203.0.113.7"},{"host":"*.github.com","ports":[443,443,22]}]}`), &p); err != nil {
		t.Fatal(err)
	}
	n, err := p.Normalized()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(n)
	want := `{"mode":"allowlist","allow":[{"host":"pypi.org","ports":[80,443]},{"cidr":"203.0.113.7/32","ports":[80,443]},{"host":"*.github.com","ports":[22,443]}]}`
	if string(b) != want {
		t.Fatalf("normalised = %s\nwant %s", b, want)
	}
	if n, _ := (Policy{}).Normalized(); n.Mode != ModeNone {
		t.Fatalf("empty policy normalises to mode %q", n.Mode)
	}
}

func TestPolicyMatch(t *testing.T) {
	c, err := compile(Policy{Mode: ModeAllowlist, Allow: []Rule{
		{Host: "pypi.org"},
		{Host: "*.github.com", Ports: []int{443}},
		{CIDR: "203.0.113.0/24", Ports: []int{5432}},
		{CIDR: "2001:db8::/32"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	names := []struct {
		name string
		port uint16
		want bool
	}{
		{"pypi.org", 80, true}, {"pypi.org", 443, true}, {"pypi.org", 0, true}, {"pypi.org", 22, false},
		{"www.pypi.org", 443, false}, {"pypi.org.evil.test", 443, false}, {"xpypi.org", 443, false},
		{"api.github.com", 443, true}, {"a.b.github.com", 443, true}, {"api.github.com", 80, false},
		{"github.com", 443, false}, {"evilgithub.com", 443, false}, {"github.com.evil.test", 443, false},
	}
	for _, n := range names {
		if got := c.nameAllowed(n.name, n.port); got != n.want {
			t.Errorf("nameAllowed(%q, %d) = %v", n.name, n.port, got)
		}
	}
	cidrs := []struct {
		ip   string
		port uint16
		want bool
	}{
		{"203.0.113.9", 5432, true}, {"::ffff:203.0.113.9", 5432, true}, {"203.0.113.9", 443, false},
		{"203.0.114.1", 5432, false}, {"2001:db8::5", 443, true}, {"2001:db9::5", 443, false},
	}
	for _, x := range cidrs {
		if got := c.cidrAllowed(netip.MustParseAddr(x.ip), x.port); got != x.want {
			t.Errorf("cidrAllowed(%s, %d) = %v", x.ip, x.port, got)
		}
	}
	open, _ := compile(Policy{Mode: ModeOpen})
	none, _ := compile(Policy{})
	if !open.nameAllowed("anything.test", 1) || none.nameAllowed("pypi.org", 443) || open.cidrAllowed(netip.MustParseAddr("203.0.113.9"), 5432) {
		t.Error("open/none matching")
	}
}

func TestAddrDeny(t *testing.T) {
	hostIP := netip.MustParseAddr("198.51.100.1")
	a := &addrPolicy{isHost: func(ip netip.Addr) bool { return ip == hostIP || ip == netip.MustParseAddr("10.9.9.9") }}
	denied := []string{
		"0.0.0.0", "0.1.2.3", "10.0.0.5", "10.255.255.255", "100.64.0.1", "100.127.255.255", "127.0.0.1", "127.255.255.254",
		"169.254.169.254", "169.254.0.1", "172.16.0.1", "172.31.255.255", "192.0.0.8", "192.168.1.1", "198.18.0.1", "198.19.255.255",
		"224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255", "10.254.0.1", "10.254.0.2", "192.88.99.1",
		"::", "::1", "::127.0.0.1", "::8.8.8.8", "::ffff:127.0.0.1", "::ffff:10.0.0.5", "::ffff:169.254.169.254", "::ffff:0:0",
		"64:ff9b::7f00:1", "64:ff9b::a00:5", "64:ff9b::a9fe:a9fe", "64:ff9b:1::1", "2002:7f00:1::", "2002:a00:5::1",
		"fe80::1", "fe80::1%eth0", "febf::1", "fc00::1", "fd00::2", "fd7a:7761:7264::1", "ff02::1", "ff05::2", "fec0::1",
		"100::1", "2001::1", "2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001:10::1", "2001:20::1",
		"198.51.100.1", "::ffff:198.51.100.1", "64:ff9b::c633:6401", "10.9.9.9",
	}
	for _, s := range denied {
		if r := a.check(netip.MustParseAddr(s)); r == "" {
			t.Errorf("%s: allowed", s)
		}
	}
	allowed := []string{"198.51.100.10", "203.0.113.5", "192.0.2.1", "8.8.8.8", "1.1.1.1", "::ffff:8.8.8.8",
		"2001:db8::1", "2606:4700::1111", "64:ff9b::808:808", "2002:808:808::1", "172.32.0.1", "100.128.0.1", "11.0.0.1"}
	for _, s := range allowed {
		if r := a.check(netip.MustParseAddr(s)); r != "" {
			t.Errorf("%s: denied (%s)", s, r)
		}
	}
	op := &addrPolicy{deny: []netip.Prefix{netip.MustParsePrefix("203.0.113.7/32")}}
	if op.check(netip.MustParseAddr("203.0.113.7")) != reasonOperator || op.check(netip.MustParseAddr("::ffff:203.0.113.7")) == "" ||
		op.check(netip.MustParseAddr("64:ff9b::cb00:7107")) == "" || op.check(netip.MustParseAddr("203.0.113.8")) != "" {
		t.Error("operator deny list")
	}
	if r := a.check(netip.MustParseAddr("127.0.0.1")); r != reasonLoopback {
		t.Errorf("127.0.0.1: %q", r)
	}
	if r := a.check(netip.Addr{}); r == "" {
		t.Error("the zero address is allowed")
	}

	// allow_private opens private ranges only.
	p := &addrPolicy{allowPrivate: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}, isHost: a.isHost}
	for _, s := range []string{"10.0.0.5", "::ffff:10.0.0.5", "64:ff9b::a00:5", "fd00::5"} {
		if r := p.check(netip.MustParseAddr(s)); r != "" {
			t.Errorf("allow_private: %s denied (%s)", s, r)
		}
	}
	for _, s := range []string{"10.254.0.1", "10.9.9.9", "127.0.0.1", "192.168.1.1", "fd7a:7761:7264::1", "169.254.169.254"} {
		if r := p.check(netip.MustParseAddr(s)); r == "" {
			t.Errorf("allow_private: %s allowed", s)
		}
	}
	for _, bad := range []string{"127.0.0.0/8", "0.0.0.0/0", "169.254.0.0/16", "::/0", "fe80::/10", "::ffff:10.0.0.0/104"} {
		if err := checkAllowPrivate(netip.MustParsePrefix(bad)); err == nil {
			t.Errorf("allow_private %s accepted", bad)
		}
	}
	for _, ok := range []string{"10.0.0.0/16", "10.254.0.0/16", "172.16.0.0/12", "fd00::/8", "100.64.0.0/10"} {
		if err := checkAllowPrivate(netip.MustParsePrefix(ok)); err != nil {
			t.Errorf("allow_private %s: %v", ok, err)
		}
	}
}

func TestParseHostIP(t *testing.T) {
	cases := map[string]string{
		"127.0.0.1": "127.0.0.1", "2130706433": "127.0.0.1", "0x7f.1": "127.0.0.1", "0x7F000001": "127.0.0.1",
		"0177.0.0.1": "127.0.0.1", "017700000001": "127.0.0.1", "127.1": "127.0.0.1", "127.0.1": "127.0.0.1",
		"127.0.0.1.": "127.0.0.1", "0": "0.0.0.0", "0x": "0.0.0.0", "169.254.43518": "169.254.169.254",
		"0xa9.0xfe.0xa9.0xfe": "169.254.169.254", "[::1]": "::1", "::ffff:127.0.0.1": "::ffff:127.0.0.1",
		"[::ffff:7f00:1]": "::ffff:127.0.0.1", "0300.0250.0.1": "192.168.0.1", "4294967295": "255.255.255.255",
	}
	for in, want := range cases {
		got, ok := parseHostIP(in)
		if !ok || got.String() != want {
			t.Errorf("parseHostIP(%q) = %v %v, want %s", in, got, ok, want)
		}
	}
	for _, in := range []string{"", ".", "1.2.3.4.5", "256.1.1.1", "1.2.3.256", "1.2.65536", "4294967296", "08", "0x1g",
		"a.b", "example.com", "1..2", "[fe80::1%eth0]", "fe80::1%25eth0", "1.2.3.-4", "+1", " 1", "1e3", "[1.2.3.4]"} {
		if got, ok := parseHostIP(in); ok {
			t.Errorf("parseHostIP(%q) = %v, want no address", in, got)
		}
	}
}

// clientHello captures the first flight of a real crypto/tls client.
func clientHello(t testing.TB, sni string) []byte {
	c1, c2 := net.Pipe()
	go func() {
		tls.Client(c1, &tls.Config{ServerName: sni, InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}).Handshake()
	}()
	buf := make([]byte, 64<<10)
	var out []byte
	c2.SetReadDeadline(time.Now().Add(2 * time.Second))
	for {
		n, err := c2.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) >= 5 && len(out) >= 5+int(out[3])<<8|int(out[4]) {
			break
		}
	}
	c2.Close()
	c1.Close()
	return out
}

func TestSniffTLS(t *testing.T) {
	hello := clientHello(t, "allowed.test")
	names, err := sniffNames(hello)
	if err != nil || len(names) != 1 || names[0] != "allowed.test" {
		t.Fatalf("sniff = %v %v", names, err)
	}
	for i := 0; i < len(hello); i++ {
		if _, err := sniffNames(hello[:i]); err != errNeedMore {
			t.Fatalf("prefix %d: %v, want errNeedMore", i, err)
		}
	}
	// The same handshake message split over three records.
	body := hello[5:]
	var split []byte
	for _, part := range [][]byte{body[:3], body[3:100], body[100:]} {
		split = append(split, 0x16, 3, 1, byte(len(part)>>8), byte(len(part)))
		split = append(split, part...)
	}
	if names, err := sniffNames(split); err != nil || len(names) != 1 || names[0] != "allowed.test" {
		t.Fatalf("fragmented: %v %v", names, err)
	}
	// No SNI (an address as ServerName sends none).
	if names, err := sniffNames(clientHello(t, "198.51.100.10")); err != nil || len(names) != 0 {
		t.Fatalf("no sni: %v %v", names, err)
	}
	// Malformed.
	for _, b := range [][]byte{
		{0x16, 3, 1, 0, 0},
		{0x16, 2, 0, 0, 4, 1, 0, 0, 0},
		{0x16, 3, 1, 0, 4, 2, 0, 0, 0},
		append([]byte{0x16, 3, 1, 0, 6, 1, 0, 0, 2}, 3, 3),
		{0x16, 3, 1, 0x48, 0x01},
	} {
		if _, err := sniffNames(b); err == nil || err == errNeedMore {
			t.Errorf("malformed %x: %v", b, err)
		}
	}
}

func TestSniffHTTP(t *testing.T) {
	cases := []struct {
		in    string
		names []string
		bad   bool
	}{
		{"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", []string{"allowed.test"}, false},
		{"GET / HTTP/1.1\r\nhOsT:allowed.test:8080 \r\nX: y\r\n\r\nbody", []string{"allowed.test"}, false},
		{"GET / HTTP/1.1\nHost: allowed.test\n\n", []string{"allowed.test"}, false},
		{"GET /x HTTP/1.0\r\n\r\n", nil, false},
		{"GET http://other.test/x HTTP/1.1\r\nHost: allowed.test\r\n\r\n", []string{"other.test", "allowed.test"}, false},
		{"GET http://u:p@other.test:81/x HTTP/1.1\r\n\r\n", []string{"other.test"}, false},
		{"CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n", []string{"other.test", "other.test"}, false},
		{"GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", []string{"[::1]"}, false},
		{"GET / HTTP/1.1\r\nHost: 2130706433\r\n\r\n", []string{"2130706433"}, false},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", nil, false},
		{"OPTIONS * HTTP/1.1\r\nHost: a.test\r\n\r\n", []string{"a.test"}, false},
		{"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", nil, true},
		{"GET / HTTP/1.1\r\nHost : a.test\r\n\r\n", nil, true},
		{"GET / HTTP/1.1\r\nHost:\r\n\r\n", nil, true},
		{"GET / HTTP/1.1\r\n Host: a.test\r\n\r\n", nil, true},
		{"GET / HTTP/1.1\r\nHost: a.test:x\r\n\r\n", nil, true},
		{"GET / HTTP/1.1\r\nHost: a:b:c\r\n\r\n", nil, true},
		{"GET / HTTP/1.1\r\nnocolon\r\n\r\n", nil, true},
		{"GET / HTTP/9\r\n\r\n", nil, true},
		{"GET relative HTTP/1.1\r\n\r\n", nil, true},
		{"GETX", nil, false}, // need more
		{"Get / HTTP/1.1\r\n\r\n", nil, true},
		{"G@T / HTTP/1.1\r\n\r\n", nil, true},
	}
	for _, c := range cases {
		names, err := sniffNames([]byte(c.in))
		if c.bad {
			if err == nil || err == errNeedMore {
				t.Errorf("%q: %v %v, want malformed", c.in, names, err)
			}
			continue
		}
		if c.in == "GETX" {
			if err != errNeedMore {
				t.Errorf("%q: %v", c.in, err)
			}
			continue
		}
		if err != nil || strings.Join(names, ",") != strings.Join(c.names, ",") {
			t.Errorf("%q: %v %v, want %v", c.in, names, err, c.names)
		}
	}
	// Incomplete heads ask for more; an endless one is refused.
	if _, err := sniffNames([]byte("GET / HTTP/1.1\r\nHost: a")); err != errNeedMore {
		t.Errorf("partial head: %v", err)
	}
	long := append([]byte("GET / HTTP/1.1\r\nX: "), bytes.Repeat([]byte("a"), maxHTTPHead+1)...)
	if _, err := sniffNames(long); err == nil || err == errNeedMore {
		t.Errorf("endless head: %v", err)
	}
	// Other protocols carry no name.
	if names, err := sniffNames([]byte("SSH-2.0-x\r\n")); err != nil || names != nil {
		t.Errorf("ssh: %v %v", names, err)
	}
	if names, err := sniffNames([]byte{0, 1, 2}); err != nil || names != nil {
		t.Errorf("binary: %v %v", names, err)
	}
}

func TestCheckNames(t *testing.T) {
	c, _ := compile(Policy{Mode: ModeAllowlist, Allow: []Rule{{Host: "allowed.test"}, {Host: "*.wild.test", Ports: []int{443}}}})
	dst := netip.MustParseAddrPort("198.51.100.10:443")
	for names, ok := range map[string]bool{
		"allowed.test": true, "ALLOWED.TEST.": true, "a.wild.test": true, "198.51.100.10": true, "": true,
		"other.test": false, "wild.test": false, "127.0.0.1": false, "2130706433": false, "[::ffff:127.0.0.1]": false,
		"allowed.test,other.test": false, "allowed.test evil": false, "198.51.100.11": false, "[::ffff:198.51.100.10]": true,
	} {
		var list []string
		if names != "" {
			list = strings.Split(names, ",")
		}
		if got := checkNames(c, dst, list) == ""; got != ok {
			t.Errorf("checkNames(%q) allowed=%v, want %v", names, got, ok)
		}
	}
}
