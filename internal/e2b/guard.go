package e2b

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"strconv"
	"strings"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
)

// The guard at the E2B door's uploads (docs/guardrails.md): when a policy's
// guard screens file writes, POST /files is spooled whole (decompressed
// when it is gzip-encoded) and every file it writes, the raw body or each
// multipart file part, is decided with its first govern.MaxGuardBody bytes
// as the guard's payload. A block refuses the whole upload before anything
// reaches the agent; a mask forwards the upload rebuilt with the masked
// contents (a file over the limit is refused rather than masked in part);
// a flag forwards it unchanged with the findings in the audit record.
// Without such a guard uploads are described as before (describeFiles).

// guardsWrites reports whether a guard screens file writes.
func (s *Server) guardsWrites() bool {
	return s.cfg.Govern != nil && s.cfg.Govern.Guards(govern.KindFileWrite)
}

// spoolFile is an unlinked temporary file: nothing is left behind
// whatever happens.
func spoolFile() (*os.File, error) {
	f, err := os.CreateTemp("", "warden-e2b-upload-")
	if err != nil {
		return nil, fmt.Errorf("spool upload: %w", err)
	}
	os.Remove(f.Name())
	return f, nil
}

// readHead reads up to govern.MaxGuardBody+1 bytes of r (raw, what was
// read) and returns the guard payload of them: the first MaxGuardBody,
// Truncated when there is more.
func readHead(r io.Reader) (pl *govern.Payload, raw []byte, err error) {
	raw, err = io.ReadAll(io.LimitReader(r, govern.MaxGuardBody+1))
	if err != nil {
		return nil, nil, err
	}
	pl = &govern.Payload{Body: raw}
	if len(raw) > govern.MaxGuardBody {
		pl.Body, pl.Truncated = raw[:govern.MaxGuardBody], true
	}
	return pl, raw, nil
}

// governUpload decides a POST /files while a guard screens file writes. It
// returns the decided writes (the refusal last when one was refused) and,
// for an allowed upload, leaves r's body set to what must be forwarded; the
// cleanup closes the spool when the request is refused.
func (s *Server) governUpload(r *http.Request, sb store.Sandbox, ident auth.Identity, user, reqID string) ([]govern.Decided, func(), error) {
	in, err := spoolFile()
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() { in.Close() }
	fail := func(err error) ([]govern.Decided, func(), error) {
		cleanup()
		return nil, nil, err
	}
	var body io.Reader = r.Body
	switch ce := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return fail(ungovernable("gzip: %v", err))
		}
		body = zr
	default:
		return fail(ungovernable("unsupported content encoding %q", ce))
	}
	_, err = io.Copy(in, body)
	r.Body.Close()
	if err != nil {
		return fail(ungovernable("read request body: %v", err))
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return fail(fmt.Errorf("spool upload: %w", err))
	}
	r.Header.Del("Content-Encoding")
	q := r.URL.Query().Get("path")
	var records []govern.Decided
	decide := func(p string, size int64, pl *govern.Payload) (govern.Decision, error) {
		a := &govern.Action{Kind: govern.KindFileWrite, File: govern.NewFile("write", filePath(p, user), "", size), Payload: pl}
		a.Principal, a.RequestID, a.Credential = actorOf(ident), reqID, &govern.Checked{Identity: ident}
		a.SandboxID, a.Sandbox = sb.ID, sandboxInfo(sb)
		gov, err := s.decide(r.Context(), a)
		records = append(records, gov...)
		if len(gov) == 0 {
			return govern.Decision{Outcome: govern.Allow}, err
		}
		return gov[0].Decision, err
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		size, err := in.Seek(0, io.SeekEnd)
		if err == nil {
			_, err = in.Seek(0, io.SeekStart)
		}
		if err != nil {
			return fail(fmt.Errorf("spool upload: %w", err))
		}
		pl, _, err := readHead(in)
		if err != nil {
			return fail(fmt.Errorf("spool upload: %w", err))
		}
		d, err := decide(q, size, pl)
		if err != nil {
			cleanup()
			return records, nil, err
		}
		if d.Masked != nil {
			cleanup()
			setBody(r, io.NopCloser(bytes.NewReader(d.Masked)), int64(len(d.Masked)))
			return records, nil, nil
		}
		if _, err := in.Seek(0, io.SeekStart); err != nil {
			return fail(fmt.Errorf("spool upload: %w", err))
		}
		setBody(r, in, size)
		return records, cleanup, nil
	}
	// Multipart: each file part is decided as it is read and copied, masked
	// or not, into a rebuilt body; the original is forwarded when nothing
	// was masked.
	out, err := spoolFile()
	if err != nil {
		return fail(err)
	}
	cleanup = func() { in.Close(); out.Close() }
	if params["boundary"] == "" {
		return fail(ungovernable("multipart body without boundary"))
	}
	mw := multipart.NewWriter(out)
	if mw.SetBoundary(params["boundary"]) != nil {
		// Keep the writer's own boundary (the Content-Type is rewritten).
		mw = multipart.NewWriter(out)
	}
	mr := multipart.NewReader(in, params["boundary"])
	masked, files := false, 0
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(ungovernable("read multipart body: %v", err))
		}
		hdr := textproto.MIMEHeader{}
		for k, v := range part.Header {
			hdr[k] = v
		}
		pw, err := mw.CreatePart(hdr)
		if err != nil {
			return fail(fmt.Errorf("spool upload: %w", err))
		}
		if part.FormName() != "file" {
			if _, err := io.Copy(pw, part); err != nil {
				return fail(ungovernable("read multipart body: %v", err))
			}
			continue
		}
		if files++; files > maxUploadParts {
			return fail(ungovernable("more than %d file parts", maxUploadParts))
		}
		p := q
		if p == "" {
			_, dp, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			if err != nil || dp["filename"] == "" {
				return fail(ungovernable("file part without a filename and no path query parameter"))
			}
			p = dp["filename"]
		}
		pl, raw, err := readHead(part)
		if err != nil {
			return fail(ungovernable("read multipart body: %v", err))
		}
		// The part's size: its head, and what follows it, copied on.
		rest := &countWriter{w: io.Discard}
		var restBuf *os.File
		if pl.Truncated {
			if restBuf, err = spoolFile(); err != nil {
				return fail(err)
			}
			rest.w = restBuf
		}
		if _, err := io.Copy(rest, part); err != nil {
			if restBuf != nil {
				restBuf.Close()
			}
			return fail(ungovernable("read multipart body: %v", err))
		}
		size := int64(len(raw)) + rest.n
		d, err := decide(p, size, pl)
		if err != nil {
			if restBuf != nil {
				restBuf.Close()
			}
			cleanup()
			return records, nil, err
		}
		if d.Masked != nil {
			masked = true
			_, err = pw.Write(d.Masked)
		} else {
			if _, err = pw.Write(raw); err == nil && restBuf != nil {
				if _, err = restBuf.Seek(0, io.SeekStart); err == nil {
					_, err = io.Copy(pw, restBuf)
				}
			}
		}
		if restBuf != nil {
			restBuf.Close()
		}
		if err != nil {
			return fail(fmt.Errorf("spool upload: %w", err))
		}
	}
	if err := mw.Close(); err != nil {
		return fail(fmt.Errorf("spool upload: %w", err))
	}
	fwd := in
	if masked {
		fwd = out
		in.Close()
		r.Header.Set("Content-Type", mw.FormDataContentType())
	} else {
		out.Close()
	}
	size, err := fwd.Seek(0, io.SeekEnd)
	if err == nil {
		_, err = fwd.Seek(0, io.SeekStart)
	}
	if err != nil {
		fwd.Close()
		return nil, nil, fmt.Errorf("spool upload: %w", err)
	}
	setBody(r, fwd, size)
	return records, func() { fwd.Close() }, nil
}

// setBody makes body (of size bytes) the request's body to forward.
func setBody(r *http.Request, body io.ReadCloser, size int64) {
	r.Body = body
	r.ContentLength = size
	r.Header.Set("Content-Length", strconv.FormatInt(size, 10))
	r.Header.Del("Transfer-Encoding")
	r.TransferEncoding = nil
}

// countWriter counts what it passes on.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
