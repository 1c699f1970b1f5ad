package network

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// The fake internet: what the tests' servers answer. Addresses come from
// the documentation ranges (TEST-NET-2/3, 2001:db8::/32), which are not in
// the deny list.
var fakeRecords = map[string][]string{
	"allowed.test. A":        {"198.51.100.10"},
	"allowed.test. AAAA":     {"2001:db8:1::10"},
	"other.test. A":          {"198.51.100.11"},
	"www.allowed.test. A":    {"CNAME allowed.test.", "198.51.100.10"},
	"rebind.test. A":         {"127.0.0.1", "10.0.0.5", "169.254.169.254"},
	"mapped.test. AAAA":      {"::ffff:127.0.0.1"},
	"partly.test. A":         {"198.51.100.10", "192.168.1.1"},
	"sub.wild.test. A":       {"198.51.100.10"},
	"deep.sub.wild.test. A":  {"198.51.100.10"},
	"udp.test. A":            {"203.0.113.20"},
	"banner.allowed.test. A": {"198.51.100.12"},
}

// dnsHandler answers from fakeRecords and counts queries.
type dnsHandler struct{ queries atomic.Int64 }

func (h *dnsHandler) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	h.queries.Add(1)
	m := new(dns.Msg)
	m.SetReply(r)
	q := r.Question[0]
	key := strings.ToLower(q.Name) + " " + dns.TypeToString[q.Qtype]
	recs, ok := fakeRecords[key]
	if !ok {
		// Known name, other type: NODATA; unknown name: NXDOMAIN.
		known := false
		for k := range fakeRecords {
			if strings.HasPrefix(k, strings.ToLower(q.Name)+" ") {
				known = true
			}
		}
		if !known {
			m.Rcode = dns.RcodeNameError
		}
	}
	owner := q.Name
	for _, v := range recs {
		var rr dns.RR
		var err error
		if t, ok := strings.CutPrefix(v, "CNAME "); ok {
			rr, err = dns.NewRR(fmt.Sprintf("%s 60 IN CNAME %s", owner, t))
			owner = t
		} else {
			rr, err = dns.NewRR(fmt.Sprintf("%s 60 IN %s %s", owner, dns.TypeToString[q.Qtype], v))
		}
		if err != nil {
			panic(err)
		}
		m.Answer = append(m.Answer, rr)
	}
	w.WriteMsg(m)
}

// startDNS serves fakeRecords on both listeners.
func startDNS(t *testing.T, pc net.PacketConn, ln net.Listener) *dnsHandler {
	h := &dnsHandler{}
	su := &dns.Server{PacketConn: pc, Handler: h}
	st := &dns.Server{Listener: ln, Handler: h}
	go su.ActivateAndServe()
	go st.ActivateAndServe()
	t.Cleanup(func() { su.Shutdown(); st.Shutdown() })
	return h
}

// fakeHTTP answers "hello <host>" and /big?n=BYTES with that many bytes.
func fakeHTTP() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		buf := make([]byte, 256<<10)
		for n > 0 {
			k := min(n, int64(len(buf)))
			if _, err := w.Write(buf[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("/sink", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d", n)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.Host)
	})
	return mux
}

func serveHTTP(t *testing.T, ln net.Listener, tlsCfg *tls.Config) {
	srv := &http.Server{Handler: fakeHTTP(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// serveBanner speaks first ("BANNER\n"), then echoes.
func serveBanner(t *testing.T, ln net.Listener) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Write([]byte("BANNER\n"))
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
}

// serveUDPEcho echoes datagrams prefixed with "echo:".
func serveUDPEcho(t *testing.T, pc net.PacketConn) {
	go func() {
		buf := make([]byte, 65536)
		for {
			n, a, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte("echo:"), buf[:n]...), a)
		}
	}()
	t.Cleanup(func() { pc.Close() })
}

// canary is a TCP listener that counts the connections it accepts: a
// sandbox must never reach one.
type canary struct {
	ln   net.Listener
	hits atomic.Int64
}

func newCanary(t *testing.T, ln net.Listener) *canary {
	c := &canary{ln: ln}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.hits.Add(1)
			conn.Write([]byte("CANARY\n"))
			conn.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return c
}

// testCert is a self-signed certificate for the fake sites.
func testCert(t testing.TB) *tls.Config {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "warden test"},
		DNSNames:     []string{"allowed.test", "other.test", "*.allowed.test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}
