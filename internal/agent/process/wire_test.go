package process

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestWireE2B speaks the Connect JSON protocol by hand, exactly as E2B's JS
// SDK does (shared/protocols/e2b.md §5.1), over HTTP/1.1.
func TestWireE2B(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	body := []byte(`{"process":{"cmd":"/bin/sh","args":["-c","echo hi; exit 1"]},"stdin":false}`)
	var env bytes.Buffer
	env.WriteByte(0)
	binary.Write(&env, binary.BigEndian, uint32(len(body)))
	env.Write(body)
	req, _ := http.NewRequest("POST", e.srv.URL+"/process.Process/Start", &env)
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Keepalive-Ping-Interval", "50")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("status %d, content type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	var msgs []string
	var last byte
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(res.Body, hdr[:]); err != nil {
			break
		}
		msg := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(res.Body, msg); err != nil {
			t.Fatal(err)
		}
		last = hdr[0]
		msgs = append(msgs, string(msg))
	}
	if len(msgs) != 4 || last != 2 || msgs[3] != "{}" {
		t.Fatalf("envelopes %q (last flags %d)", msgs, last)
	}
	var start struct {
		Event struct {
			Start struct{ Pid int } `json:"start"`
		} `json:"event"`
	}
	if err := json.Unmarshal([]byte(msgs[0]), &start); err != nil || start.Event.Start.Pid == 0 {
		t.Errorf("start envelope %s", msgs[0])
	}
	if msgs[1] != `{"event":{"data":{"stdout":"aGkK"}}}` {
		t.Errorf("data envelope %s", msgs[1])
	}
	if !strings.Contains(msgs[2], `"end":{`) || !strings.Contains(msgs[2], `"exitCode":1`) ||
		!strings.Contains(msgs[2], `"exited":true`) || !strings.Contains(msgs[2], `"status":"exit status 1"`) {
		t.Errorf("end envelope %s", msgs[2])
	}

	// Unary error: JSON body with the code.
	req, _ = http.NewRequest("POST", e.srv.URL+"/process.Process/SendSignal",
		strings.NewReader(`{"process":{"pid":999999999},"signal":"SIGNAL_SIGKILL"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 404 || !strings.Contains(string(b), `"code":"not_found"`) {
		t.Errorf("unary not found: %d %s", res.StatusCode, b)
	}
}

// A read whose deadline already passed is failed by the poller without being
// tried; drainNow must still collect what the pipe holds.
func TestDrainNowAfterExpiredDeadline(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	w.Write([]byte("left in the pipe"))
	r.SetReadDeadline(time.Now().Add(-time.Second))
	buf := make([]byte, 4)
	if n, err := r.Read(buf); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past deadline: %d %v (the poller behaviour this guards against changed?)", n, err)
	}
	var got bytes.Buffer
	drainNow(r, buf, func(b []byte) { got.Write(b) })
	if got.String() != "left in the pipe" {
		t.Errorf("drained %q", got.String())
	}
}
