package network

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// The first bytes a client sends on ports 80 and 443 name the site it wants:
// the server_name of a TLS ClientHello, the Host header (or absolute-form
// target) of an HTTP/1 request. Both parsers work on a growing prefix of the
// stream and say whether they need more bytes.

// Limits on what is read before deciding.
const (
	maxClientHello = 64 << 10 // a ClientHello with post-quantum key shares is ~2 KiB
	maxHTTPHead    = 16 << 10
)

var (
	errNeedMore  = errors.New("need more data")
	errMalformed = errors.New("malformed")
)

// sniffKind classifies the first byte of a client stream.
type sniffKind int

const (
	kindOther sniffKind = iota // some other protocol: no name to check
	kindTLS
	kindHTTP
)

func classifyFirst(b byte) sniffKind {
	switch {
	case b == 0x16: // TLS handshake record
		return kindTLS
	case isTchar(b):
		return kindHTTP // maybe: see looksHTTP
	}
	return kindOther
}

// isTchar reports whether c may appear in an HTTP token (a method).
func isTchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

var errNotHTTP = errors.New("not HTTP")

// looksHTTP decides whether a stream starting with a token character is an
// HTTP/1 request, erring towards yes: it is one when its first line (at most
// maxHTTPHead bytes) starts with a token followed by a space or tab (a
// server might accept either) or mentions "HTTP/" anywhere. The decision
// depends on that bounded first line only, so more bytes never change it.
// It returns nil (HTTP: parse it strictly), errNotHTTP, or errNeedMore.
func looksHTTP(b []byte) error {
	p, complete := b, false
	if j := bytes.IndexByte(b, '\n'); j >= 0 && j < maxHTTPHead {
		p, complete = b[:j], true
	} else if len(b) >= maxHTTPHead {
		p, complete = b[:maxHTTPHead], true
	}
	i := 0
	for i < len(p) && isTchar(p[i]) {
		i++
	}
	if i < len(p) && (p[i] == ' ' || p[i] == '\t') {
		return nil
	}
	if bytes.Contains(bytes.ToUpper(p), []byte("HTTP/")) {
		return nil
	}
	if !complete {
		return errNeedMore
	}
	return errNotHTTP
}

// sniffNames parses the client's first bytes. It returns the names the
// client asks for (SNI; Host and absolute-form authority), errNeedMore when
// buf is an incomplete prefix, or an error when the bytes claim to be TLS or
// HTTP but are malformed or too long (the connection is then refused).
func sniffNames(buf []byte) ([]string, error) {
	if len(buf) == 0 {
		return nil, errNeedMore
	}
	switch classifyFirst(buf[0]) {
	case kindTLS:
		sni, err := parseClientHello(buf)
		if err != nil || sni == "" {
			return nil, err
		}
		return []string{sni}, nil
	case kindHTTP:
		switch looksHTTP(buf) {
		case errNeedMore:
			return nil, errNeedMore
		case nil:
			return parseHTTPHead(buf)
		}
		return nil, nil // some other text protocol ("SSH-2.0-...")
	}
	return nil, nil
}

// parseClientHello returns the server_name of the TLS ClientHello at the
// start of b ("" if it has none), reassembling a handshake message split
// over several records.
func parseClientHello(b []byte) (string, error) {
	var hs []byte // handshake bytes gathered from the records
	for {
		if len(b) < 5 {
			return "", errNeedMore
		}
		if b[0] != 0x16 {
			return "", fmt.Errorf("%w: record type %d inside a ClientHello", errMalformed, b[0])
		}
		if b[1] != 3 {
			return "", fmt.Errorf("%w: record version %d.%d", errMalformed, b[1], b[2])
		}
		n := int(b[3])<<8 | int(b[4])
		if n == 0 || n > 1<<14 {
			return "", fmt.Errorf("%w: record length %d", errMalformed, n)
		}
		if len(b) < 5+n {
			if len(hs)+len(b) > maxClientHello+5 {
				return "", fmt.Errorf("%w: ClientHello too long", errMalformed)
			}
			return "", errNeedMore
		}
		hs = append(hs, b[5:5+n]...)
		b = b[5+n:]
		if len(hs) < 4 {
			continue
		}
		if hs[0] != 1 {
			return "", fmt.Errorf("%w: handshake type %d, not ClientHello", errMalformed, hs[0])
		}
		mlen := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
		if mlen > maxClientHello {
			return "", fmt.Errorf("%w: ClientHello of %d bytes", errMalformed, mlen)
		}
		if len(hs) >= 4+mlen {
			return parseClientHelloBody(hs[4 : 4+mlen])
		}
	}
}

// reader is a bounds-checked big-endian cursor.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) n(k int) []byte {
	if r.bad || k < 0 || len(r.b) < k {
		r.bad = true
		return nil
	}
	v := r.b[:k]
	r.b = r.b[k:]
	return v
}

func (r *reader) u8() int {
	v := r.n(1)
	if v == nil {
		return 0
	}
	return int(v[0])
}

func (r *reader) u16() int {
	v := r.n(2)
	if v == nil {
		return 0
	}
	return int(v[0])<<8 | int(v[1])
}

func parseClientHelloBody(body []byte) (string, error) {
	r := &reader{b: body}
	r.n(2)         // legacy_version
	r.n(32)        // random
	r.n(r.u8())    // legacy_session_id
	cs := r.u16()  // cipher_suites
	if cs%2 != 0 { // whole suites only
		return "", fmt.Errorf("%w: cipher suites", errMalformed)
	}
	r.n(cs)
	r.n(r.u8()) // legacy_compression_methods
	if r.bad {
		return "", fmt.Errorf("%w: truncated ClientHello", errMalformed)
	}
	if len(r.b) == 0 {
		return "", nil // no extensions
	}
	exts := &reader{b: r.n(r.u16())}
	if r.bad || len(r.b) != 0 {
		return "", fmt.Errorf("%w: extensions length", errMalformed)
	}
	sni, seen := "", false
	for len(exts.b) > 0 {
		typ := exts.u16()
		data := exts.n(exts.u16())
		if exts.bad {
			return "", fmt.Errorf("%w: truncated extension", errMalformed)
		}
		if typ != 0 {
			continue
		}
		if seen {
			return "", fmt.Errorf("%w: two server_name extensions", errMalformed)
		}
		seen = true
		d := &reader{b: data}
		list := &reader{b: d.n(d.u16())}
		if d.bad || len(d.b) != 0 {
			return "", fmt.Errorf("%w: server_name list", errMalformed)
		}
		for len(list.b) > 0 {
			nt := list.u8()
			name := list.n(list.u16())
			if list.bad {
				return "", fmt.Errorf("%w: server_name entry", errMalformed)
			}
			if nt != 0 {
				continue
			}
			if sni != "" {
				return "", fmt.Errorf("%w: two host names in server_name", errMalformed)
			}
			if len(name) == 0 {
				return "", fmt.Errorf("%w: empty server_name", errMalformed)
			}
			sni = string(name)
		}
	}
	return sni, nil
}

// parseHTTPHead returns the names an HTTP/1 request head asks for: the
// authority of an absolute-form or authority-form (CONNECT) target and the
// Host header, without ports. A request without either (HTTP/1.0, or the
// HTTP/2 preface) yields none.
func parseHTTPHead(b []byte) ([]string, error) {
	// The head ends at the first empty line, CRLF or bare LF.
	end := bytes.Index(b, []byte("\r\n\r\n"))
	if lf := bytes.Index(b, []byte("\n\n")); lf >= 0 && (end < 0 || lf < end) {
		end = lf
	}
	if end < 0 {
		if len(b) > maxHTTPHead {
			return nil, fmt.Errorf("%w: request head longer than %d bytes", errMalformed, maxHTTPHead)
		}
		// Reject early what cannot be a request line.
		line, full := b, false
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, full = bytes.TrimSuffix(b[:i], []byte("\r")), true
		}
		if _, _, err := splitRequestLine(line, full); err != nil {
			return nil, err
		}
		return nil, errNeedMore
	}
	if end > maxHTTPHead {
		return nil, fmt.Errorf("%w: request head longer than %d bytes", errMalformed, maxHTTPHead)
	}
	lines := strings.Split(string(b[:end]), "\n")
	method, target, err := splitRequestLine([]byte(strings.TrimSuffix(lines[0], "\r")), true)
	if err != nil {
		return nil, err
	}
	var names []string
	if method == "PRI" && target == "*" {
		return nil, nil // HTTP/2 prior-knowledge preface: no name in clear
	}
	if auth, ok := targetAuthority(method, target); ok {
		h, err := stripPort(auth)
		if err != nil {
			return nil, err
		}
		names = append(names, h)
	} else if target != "*" && !strings.HasPrefix(target, "/") {
		return nil, fmt.Errorf("%w: request target %q", errMalformed, target)
	}
	hosts := 0
	for _, l := range lines[1:] {
		l = strings.TrimSuffix(l, "\r")
		if l == "" {
			continue
		}
		if l[0] == ' ' || l[0] == '\t' {
			return nil, fmt.Errorf("%w: folded header line", errMalformed)
		}
		name, val, ok := strings.Cut(l, ":")
		if !ok {
			return nil, fmt.Errorf("%w: header line without a colon", errMalformed)
		}
		if strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("%w: whitespace in header name %q", errMalformed, name)
		}
		if !strings.EqualFold(name, "host") {
			continue
		}
		hosts++
		if hosts > 1 {
			return nil, fmt.Errorf("%w: more than one Host header", errMalformed)
		}
		h, err := stripPort(strings.Trim(val, " \t"))
		if err != nil {
			return nil, err
		}
		names = append(names, h)
	}
	return names, nil
}

// splitRequestLine checks "METHOD SP target SP HTTP/1.x"; with full false it
// accepts a prefix of such a line.
func splitRequestLine(line []byte, full bool) (method, target string, err error) {
	bad := func(why string) (string, string, error) {
		return "", "", fmt.Errorf("%w: request line: %s", errMalformed, why)
	}
	i := 0
	for i < len(line) && line[i] >= 'A' && line[i] <= 'Z' {
		i++
	}
	if i == len(line) && !full {
		if i > 32 {
			return bad("method too long")
		}
		return "", "", nil
	}
	if i == 0 || i > 32 || i >= len(line) || line[i] != ' ' {
		return bad("method")
	}
	method = string(line[:i])
	rest := line[i+1:]
	sp := bytes.IndexByte(rest, ' ')
	if sp < 0 {
		if !full {
			return method, "", nil
		}
		return bad("no version")
	}
	target = string(rest[:sp])
	if target == "" || strings.ContainsAny(target, "\t\r") {
		return bad("target")
	}
	ver := string(rest[sp+1:])
	if full {
		if ver != "HTTP/1.1" && ver != "HTTP/1.0" && ver != "HTTP/2.0" {
			return bad("version")
		}
	} else if !strings.HasPrefix("HTTP/1.1", ver) && !strings.HasPrefix("HTTP/1.0", ver) && !strings.HasPrefix("HTTP/2.0", ver) {
		return bad("version")
	}
	return method, target, nil
}

// targetAuthority returns the authority of an absolute-form target
// ("http://user@host:port/path") or of CONNECT's authority-form.
func targetAuthority(method, target string) (string, bool) {
	if method == "CONNECT" {
		return target, true
	}
	i := strings.Index(target, "://")
	if i <= 0 || strings.HasPrefix(target, "/") {
		return "", false
	}
	auth := target[i+3:]
	if j := strings.IndexAny(auth, "/?#"); j >= 0 {
		auth = auth[:j]
	}
	if j := strings.LastIndexByte(auth, '@'); j >= 0 {
		auth = auth[j+1:]
	}
	return auth, true
}

// stripPort removes a ":port" from a host (keeping an IPv6 literal's
// brackets off too).
func stripPort(h string) (string, error) {
	if h == "" {
		return "", fmt.Errorf("%w: empty host", errMalformed)
	}
	if h[0] == '[' {
		i := strings.IndexByte(h, ']')
		if i < 0 {
			return "", fmt.Errorf("%w: host %q", errMalformed, h)
		}
		rest := h[i+1:]
		if rest != "" && !isPortSuffix(rest) {
			return "", fmt.Errorf("%w: host %q", errMalformed, h)
		}
		return h[:i+1], nil
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		if strings.Count(h, ":") > 1 || !isPortSuffix(h[i:]) {
			return "", fmt.Errorf("%w: host %q", errMalformed, h)
		}
		h = h[:i]
	}
	if h == "" {
		return "", fmt.Errorf("%w: empty host", errMalformed)
	}
	return h, nil
}

func isPortSuffix(s string) bool {
	if len(s) < 1 || s[0] != ':' {
		return false
	}
	if len(s) > 6 {
		return false
	}
	for _, c := range []byte(s[1:]) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
