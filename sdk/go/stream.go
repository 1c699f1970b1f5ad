package warden

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ErrEventTooLarge is returned when a stream line is longer than the client's limit (see
// [WithMaxEventSize]).
var ErrEventTooLarge = errors.New("stream event too large")

// lineDecoder reads an NDJSON body one JSON object per line, with a bounded line size.
type lineDecoder struct {
	body io.ReadCloser
	sc   *bufio.Scanner
	max  int
}

func newLineDecoder(body io.ReadCloser, max int) *lineDecoder {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, min(64<<10, max)), max)
	return &lineDecoder{body: body, sc: sc, max: max}
}

// next decodes the next non-empty line into v. It returns io.EOF at the end of the body.
func (d *lineDecoder) next(v any) error {
	for d.sc.Scan() {
		line := bytes.TrimSpace(d.sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := json.Unmarshal(line, v); err != nil {
			return fmt.Errorf("decode stream event: %w", err)
		}
		return nil
	}
	if err := d.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%w: over %d bytes", ErrEventTooLarge, d.max)
		}
		return fmt.Errorf("read stream: %w", err)
	}
	return io.EOF
}

func (d *lineDecoder) close() error { return d.body.Close() }
