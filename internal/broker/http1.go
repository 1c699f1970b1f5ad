package broker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// A strict HTTP/1.1 message-head parser that keeps the bytes: a request
// goes upstream exactly as the sandbox sent it except for the value of the
// granted header (and Accept-Encoding, see prepare and beginLLM). Anything ambiguous
// about framing (both Content-Length and Transfer-Encoding, differing
// Content-Lengths, a transfer coding other than chunked, folded or
// malformed lines, bare CR or LF) is refused rather than guessed at, so the
// broker and the upstream cannot disagree about where a request ends.
// Errors never quote message bytes: an upstream's could hold a secret, and
// errors end up in logs.

const (
	maxHeadBytes  = 64 << 10
	maxHeadLines  = 256
	maxChunkLine  = 4 << 10
	maxTrailBytes = 16 << 10
)

var (
	errMalformed = errors.New("malformed HTTP message")
	errTooLarge  = errors.New("HTTP message head too large")
)

type headerLine struct {
	raw      []byte // the line as received, CRLF included
	name     string
	value    string // without surrounding whitespace
	modified bool   // value changed: rebuild the line
	dropped  bool
}

type msgHead struct {
	first []byte // start line, without line ending
	lines []*headerLine
}

// bytes returns the head as it goes on the wire.
func (h *msgHead) bytes() []byte {
	var b bytes.Buffer
	b.Write(h.first)
	b.WriteString("\r\n")
	for _, l := range h.lines {
		switch {
		case l.dropped:
		case l.modified:
			b.WriteString(l.name)
			b.WriteString(": ")
			b.WriteString(l.value)
			b.WriteString("\r\n")
		default:
			b.Write(l.raw)
		}
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

func (h *msgHead) values(name string) []string {
	var out []string
	for _, l := range h.lines {
		if !l.dropped && strings.EqualFold(l.name, name) {
			out = append(out, l.value)
		}
	}
	return out
}

func (h *msgHead) drop(name string) {
	for _, l := range h.lines {
		if strings.EqualFold(l.name, name) {
			l.dropped = true
		}
	}
}

func (h *msgHead) add(name, value string) {
	h.lines = append(h.lines, &headerLine{name: name, value: value, modified: true})
}

// hasToken reports whether a comma-separated header has token t.
func (h *msgHead) hasToken(name, t string) bool {
	for _, v := range h.values(name) {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), t) {
				return true
			}
		}
	}
	return false
}

// readLine reads one line. Strict: it must end in CRLF and hold no other CR.
// Lenient (upstream responses): a bare LF ends a line too.
func readLine(r *bufio.Reader, limit int, strict bool) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) || len(line) > limit {
		return nil, errTooLarge
	}
	if err != nil {
		if errors.Is(err, io.EOF) && len(line) > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	body := line[:len(line)-1]
	if n := len(body); n > 0 && body[n-1] == '\r' {
		body = body[:n-1]
	} else if strict {
		return nil, fmt.Errorf("%w: line not ended by CRLF", errMalformed)
	}
	if bytes.IndexByte(body, '\r') >= 0 || bytes.IndexByte(body, 0) >= 0 {
		return nil, fmt.Errorf("%w: CR or NUL inside a line", errMalformed)
	}
	return line, nil
}

func trimEOL(line []byte) []byte {
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r"))
}

// readHead reads a message head. It returns io.EOF if the stream ends
// before its first byte.
func readHead(r *bufio.Reader, strict bool) (*msgHead, error) {
	total := 0
	var h *msgHead
	for blank := 0; ; {
		line, err := readLine(r, maxHeadBytes, strict)
		if err != nil {
			if errors.Is(err, io.EOF) && (h != nil || total > 0) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		total += len(line)
		if total > maxHeadBytes {
			return nil, errTooLarge
		}
		body := trimEOL(line)
		if h == nil {
			if len(body) == 0 && blank < 4 { // stray CRLF after a previous body
				blank++
				continue
			}
			h = &msgHead{first: bytes.Clone(body)}
			continue
		}
		if len(body) == 0 {
			return h, nil
		}
		if len(h.lines) >= maxHeadLines {
			return nil, errTooLarge
		}
		if body[0] == ' ' || body[0] == '\t' {
			return nil, fmt.Errorf("%w: folded header line", errMalformed)
		}
		name, value, ok := bytes.Cut(body, []byte(":"))
		if !ok || !isToken(name) {
			return nil, fmt.Errorf("%w: header line", errMalformed)
		}
		h.lines = append(h.lines, &headerLine{
			raw:   append(bytes.Clone(body), '\r', '\n'), // CRLF even where a lenient read took LF
			name:  string(name),
			value: string(bytes.Trim(value, " \t")),
		})
	}
}

func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

type request struct {
	head          *msgHead
	method        string
	target        string
	proto         string // HTTP/1.1 or HTTP/1.0
	host          string // Host header as sent ("" if none)
	contentLength int64  // -1: none
	chunked       bool
	close         bool // the connection ends after this exchange
}

func (r *request) hasBody() bool { return r.chunked || r.contentLength > 0 }

func readRequest(br *bufio.Reader) (*request, error) {
	h, err := readHead(br, true)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(string(h.first), " ")
	if len(parts) != 3 || !isToken([]byte(parts[0])) || parts[1] == "" {
		return nil, fmt.Errorf("%w: request line", errMalformed)
	}
	req := &request{head: h, method: parts[0], target: parts[1], proto: parts[2], contentLength: -1}
	for _, c := range []byte(req.target) {
		if c <= ' ' || c >= 0x7f {
			return nil, fmt.Errorf("%w: request target", errMalformed)
		}
	}
	if req.proto != "HTTP/1.1" && req.proto != "HTTP/1.0" {
		return nil, fmt.Errorf("%w: version (HTTP/1.x only)", errMalformed)
	}
	hosts := h.values("Host")
	if len(hosts) > 1 || len(hosts) == 0 && req.proto == "HTTP/1.1" {
		return nil, fmt.Errorf("%w: want exactly one Host header", errMalformed)
	}
	if len(hosts) == 1 {
		req.host = hosts[0]
	}
	te := h.values("Transfer-Encoding")
	cl := h.values("Content-Length")
	if len(te) > 0 {
		if len(cl) > 0 {
			return nil, fmt.Errorf("%w: both Content-Length and Transfer-Encoding", errMalformed)
		}
		if len(te) != 1 || !strings.EqualFold(te[0], "chunked") || req.proto != "HTTP/1.1" {
			return nil, fmt.Errorf("%w: transfer coding other than chunked", errMalformed)
		}
		req.chunked = true
	} else if len(cl) > 0 {
		n, err := parseContentLength(cl)
		if err != nil {
			return nil, err
		}
		req.contentLength = n
	}
	req.close = req.proto == "HTTP/1.0" || h.hasToken("Connection", "close")
	return req, nil
}

func parseContentLength(vals []string) (int64, error) {
	var n int64 = -1
	for _, v := range vals {
		for f := range strings.SplitSeq(v, ",") {
			f = strings.TrimSpace(f)
			if f == "" || len(f) > 18 || strings.Trim(f, "0123456789") != "" {
				return 0, fmt.Errorf("%w: Content-Length", errMalformed)
			}
			m, _ := strconv.ParseInt(f, 10, 64)
			if n >= 0 && m != n {
				return 0, fmt.Errorf("%w: conflicting Content-Length", errMalformed)
			}
			n = m
		}
	}
	return n, nil
}

type bodyKind int

const (
	bodyNone bodyKind = iota
	bodyLength
	bodyChunked
	bodyUntilClose
)

type response struct {
	head   *msgHead
	proto  string
	code   int
	reason string
	body   bodyKind
	length int64
	close  bool
}

func readResponse(br *bufio.Reader, req *request) (*response, error) {
	h, err := readHead(br, false)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	first := string(h.first)
	proto, rest, _ := strings.Cut(first, " ")
	codeStr, reason, _ := strings.Cut(rest, " ")
	code, err := strconv.Atoi(codeStr)
	if !strings.HasPrefix(proto, "HTTP/1.") || len(proto) != 8 || len(codeStr) != 3 || err != nil || code < 100 {
		return nil, fmt.Errorf("%w: status line", errMalformed)
	}
	resp := &response{head: h, proto: proto, code: code, reason: reason}
	resp.close = proto == "HTTP/1.0" && !h.hasToken("Connection", "keep-alive") || h.hasToken("Connection", "close")
	te := h.values("Transfer-Encoding")
	cl := h.values("Content-Length")
	switch {
	case req.method == "HEAD" || code < 200 || code == 204 || code == 304:
		resp.body = bodyNone
	case len(te) > 0:
		// Only plain chunked: a transfer coding such as gzip would hide a
		// secret from the scrubber.
		if len(te) != 1 || !strings.EqualFold(te[0], "chunked") {
			return nil, fmt.Errorf("%w: transfer coding other than chunked", errMalformed)
		}
		resp.body = bodyChunked
	case len(cl) > 0:
		n, err := parseContentLength(cl)
		if err != nil {
			return nil, err
		}
		resp.body, resp.length = bodyLength, n
	default:
		resp.body = bodyUntilClose
	}
	if resp.body == bodyUntilClose {
		resp.close = true
	}
	return resp, nil
}

// readChunked reads a chunked body from r, passing each framing line (size
// lines, the CRLF after each chunk's data) to framing, data to data and
// each trailer line, then the final empty line, to trailer.
func readChunked(r *bufio.Reader, strict bool, framing, data, trailer func([]byte) error) error {
	buf := make([]byte, 32<<10)
	for {
		line, err := readLine(r, maxChunkLine, strict)
		if err != nil {
			return eofIsUnexpected(err)
		}
		size, err := parseChunkSize(trimEOL(line))
		if err != nil {
			return err
		}
		if err := framing(line); err != nil {
			return err
		}
		if size == 0 {
			break
		}
		for size > 0 {
			n, err := r.Read(buf[:min(int64(len(buf)), size)])
			if n > 0 {
				if werr := data(buf[:n]); werr != nil {
					return werr
				}
				size -= int64(n)
			}
			if err != nil && size > 0 {
				return eofIsUnexpected(err)
			}
		}
		line, err = readLine(r, 2, strict)
		if err != nil {
			return eofIsUnexpected(err)
		}
		if len(trimEOL(line)) != 0 {
			return fmt.Errorf("%w: chunk data longer than its size", errMalformed)
		}
		if err := framing(line); err != nil {
			return err
		}
	}
	total := 0
	for {
		line, err := readLine(r, maxTrailBytes, strict)
		if err != nil {
			return eofIsUnexpected(err)
		}
		total += len(line)
		if total > maxTrailBytes {
			return errTooLarge
		}
		if err := trailer(line); err != nil {
			return err
		}
		if len(trimEOL(line)) == 0 {
			return nil
		}
		if b := trimEOL(line); b[0] == ' ' || b[0] == '\t' || bytes.IndexByte(b, ':') <= 0 {
			return fmt.Errorf("%w: trailer line", errMalformed)
		}
	}
}

func eofIsUnexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func parseChunkSize(line []byte) (int64, error) {
	hexPart, _, _ := bytes.Cut(line, []byte(";"))
	hexPart = bytes.TrimRight(hexPart, " \t")
	if len(hexPart) == 0 || len(hexPart) > 15 {
		return 0, fmt.Errorf("%w: chunk size", errMalformed)
	}
	var n int64
	for _, c := range hexPart {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, fmt.Errorf("%w: chunk size", errMalformed)
		}
		n = n<<4 | int64(d)
	}
	return n, nil
}
