package agents

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// MaxLogBytes bounds one run's kept log; output beyond it is dropped
// (with one line saying so).
const MaxLogBytes = 16 << 20

// LogLine is one line of a run's log (NDJSON).
type LogLine struct {
	Time   time.Time `json:"time"`
	Stream string    `json:"stream"` // stdout, stderr or system
	Data   string    `json:"data"`
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// appendLog appends one line to a run's log file.
func (s *Service) appendLog(runID, stream, data string) {
	p := s.logPath(runID)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		s.log.Warn("agents: open a run log", "run", runID, "err", err)
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() >= MaxLogBytes {
		return
	} else if err == nil && fi.Size()+int64(len(data)) > MaxLogBytes {
		stream, data = "system", fmt.Sprintf("log limit of %d bytes reached: further output is dropped\n", MaxLogBytes)
	}
	b, _ := json.Marshal(LogLine{Time: s.now().UTC(), Stream: stream, Data: data})
	f.Write(append(b, '\n'))
}

// logWriter appends a process stream to the run's log.
type logWriter struct {
	s      *Service
	run    string
	stream string
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.s.appendLog(w.run, w.stream, string(p))
	return len(p), nil
}

// Logs calls fn with each line of the run's log; with follow it waits for
// more until the run ends (or ctx does).
func (s *Service) Logs(ctx context.Context, runID string, follow bool, fn func(LogLine) error) error {
	var off int64
	for {
		// Whether it ended is read before the file, so that nothing
		// written before the end is missed.
		ended := true
		if follow {
			r, err := s.cfg.Store.GetAgentRun(ctx, runID)
			if err != nil {
				return err
			}
			ended = store.RunTerminal(r.State)
		}
		n, err := s.readLog(runID, off, fn)
		off += n
		if err != nil {
			return err
		}
		if ended {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// readLog passes the complete lines from off on; it returns the bytes read.
func (s *Service) readLog(runID string, off int64, fn func(LogLine) error) (int64, error) {
	f, err := os.Open(s.logPath(runID))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return 0, err
	}
	br := bufio.NewReaderSize(f, 64<<10)
	var n int64
	for {
		line, err := br.ReadBytes('\n')
		if err != nil { // a partial line is read again next time
			return n, nil
		}
		n += int64(len(line))
		var l LogLine
		if json.Unmarshal(line, &l) != nil {
			continue
		}
		if err := fn(l); err != nil {
			return n, err
		}
	}
}
