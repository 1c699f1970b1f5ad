package warden

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func TestPTYUpgradeErrorIsDecoded(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusConflict, CodeConflict, "sandbox sb-1 is stopped")
	}))
	_, err := c.PTY(context.Background(), "sb-1", PTYOptions{})
	var e *Error
	if !errors.As(err, &e) || !IsConflict(err) || e.Message != "sandbox sb-1 is stopped" {
		t.Fatalf("err = %v", err)
	}
}

func TestPTYConnectionLostBeforeExit(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		conn.Write(r.Context(), websocket.MessageBinary, []byte("hi"))
		conn.CloseNow() // no exit frame, no close handshake
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := c.PTY(ctx, "sb-1", PTYOptions{Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out, err := io.ReadAll(p)
	if string(out) != "hi" || err == nil {
		t.Errorf("read %q, %v; want hi and an error", out, err)
	}
	if _, err := p.Wait(); err == nil {
		t.Error("Wait succeeded without an exit frame")
	}
}
