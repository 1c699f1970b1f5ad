package api

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
)

// The guard on the native door's other writes (docs/guardrails.md):
// presigned uploads (their rules were decided when the URL was signed; the
// guard screens the body when it arrives) and archive uploads (each regular
// file of the tar is screened as a write under the destination). A block
// refuses the upload before anything is written; a mask writes the masked
// content (an archive is rebuilt, uncompressed, with the masked files); a
// flag writes it unchanged and records the findings.

// guardsWrites reports whether a guard screens file writes.
func (s *Server) guardsWrites() bool {
	return s.cfg.Govern != nil && s.cfg.Govern.Guards(govern.KindFileWrite)
}

// guardPayload reads up to govern.MaxGuardBody+1 bytes of r (raw) and
// returns the guard's payload of them.
func guardPayload(r io.Reader) (*govern.Payload, []byte, error) {
	raw, err := io.ReadAll(io.LimitReader(r, govern.MaxGuardBody+1))
	if err != nil {
		return nil, nil, err
	}
	pl := &govern.Payload{Body: raw}
	if len(raw) > govern.MaxGuardBody {
		pl.Body, pl.Truncated = raw[:govern.MaxGuardBody], true
	}
	return pl, raw, nil
}

// screenWrite screens one written file (the guard stage only) as the
// request's sandbox; the decision is returned with its error for the caller.
func (s *Server) screenWrite(r *http.Request, sandboxID, p string, size int64, pl *govern.Payload) (govern.Decided, error) {
	st := stateOf(r)
	a := &govern.Action{Kind: govern.KindFileWrite, File: govern.NewFile("write", p, "", size), Payload: pl}
	s.fillAction(st, a)
	if a.SandboxID == "" {
		a.SandboxID = sandboxID
		if sb, err := s.mgr.Get(r.Context(), sandboxID); err == nil {
			a.Sandbox = sandboxInfo(sb)
		}
	}
	d := s.cfg.Govern.ScreenWrite(r.Context(), a)
	if d.Outcome == govern.LogOnly {
		st.audited = true
	}
	return govern.Decided{Action: a, Decision: d}, policyError(d)
}

// screenPresignedWrite screens a presigned upload's body; r's body is then
// what must be written (masked or as sent).
func (s *Server) screenPresignedWrite(r *http.Request, sandboxID, p string) error {
	if !s.guardsWrites() {
		return nil
	}
	pl, raw, err := guardPayload(r.Body)
	if err != nil {
		return apierr.BadRequest("read body: %v", err)
	}
	size := int64(len(raw))
	if r.ContentLength > size {
		size = r.ContentLength
	}
	g, err := s.screenWrite(r, sandboxID, p, size, pl)
	st := stateOf(r)
	st.governed = []govern.Decided{g}
	if err != nil {
		return err
	}
	if g.Decision.Masked != nil {
		st.detail["guard_masked"] = true
		r.Body = io.NopCloser(bytes.NewReader(g.Decision.Masked))
		return nil
	}
	rest := r.Body
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(raw), rest), rest}
	return nil
}

// screenArchive screens every regular file of an archive upload to dst
// (a tar, gzip-compressed or not). The archive is spooled to an unlinked
// temporary file; the returned reader is what to extract (the archive as
// sent, or rebuilt with masked files) and close releases it. The archive's
// own decision stays first in the call's governed actions; a refusing or
// finding entry's follows it (a refusal first).
func (s *Server) screenArchive(r *http.Request, sandboxID, dst string) (io.Reader, func(), error) {
	in, err := tempSpool()
	if err != nil {
		return nil, nil, err
	}
	out, err := tempSpool()
	if err != nil {
		in.Close()
		return nil, nil, err
	}
	closeAll := func() { in.Close(); out.Close() }
	fail := func(err error) (io.Reader, func(), error) {
		closeAll()
		return nil, nil, err
	}
	if _, err := io.Copy(in, r.Body); err != nil {
		return fail(apierr.BadRequest("read body: %v", err))
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return fail(fmt.Errorf("spool archive: %w", err))
	}
	br := bufio.NewReaderSize(in, 64<<10)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fail(apierr.BadRequest("bad gzip body: %v", err))
		}
		src = zr
	}
	st := stateOf(r)
	tr, tw := tar.NewReader(src), tar.NewWriter(out)
	masked := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(apierr.BadRequest("read archive: %v", err))
		}
		if h.Typeflag != tar.TypeReg {
			if err := tw.WriteHeader(h); err == nil {
				_, err = io.Copy(tw, tr)
			}
			if err != nil {
				return fail(fmt.Errorf("spool archive: %w", err))
			}
			continue
		}
		pl, raw, err := guardPayload(tr)
		if err != nil {
			return fail(apierr.BadRequest("read archive: %v", err))
		}
		g, derr := s.screenWrite(r, sandboxID, path.Join(dst, path.Clean("/"+h.Name)), h.Size, pl)
		if derr != nil {
			st.governed = append([]govern.Decided{g}, st.governed...)
			return fail(derr)
		}
		if len(g.Decision.Findings) > 0 {
			st.governed = append(st.governed, g)
		}
		if g.Decision.Masked != nil {
			masked = true
			h.Size = int64(len(g.Decision.Masked))
			if err = tw.WriteHeader(h); err == nil {
				_, err = tw.Write(g.Decision.Masked)
			}
		} else if err = tw.WriteHeader(h); err == nil {
			if _, err = tw.Write(raw); err == nil {
				_, err = io.Copy(tw, tr)
			}
		}
		if err != nil {
			return fail(fmt.Errorf("spool archive: %w", err))
		}
	}
	if err := tw.Close(); err != nil {
		return fail(fmt.Errorf("spool archive: %w", err))
	}
	fwd := in
	if masked {
		st.detail["guard_masked"] = true
		fwd = out
		in.Close()
	} else {
		out.Close()
	}
	if _, err := fwd.Seek(0, io.SeekStart); err != nil {
		fwd.Close()
		return nil, nil, fmt.Errorf("spool archive: %w", err)
	}
	return fwd, func() { fwd.Close() }, nil
}

// tempSpool is an unlinked temporary file: nothing is left behind.
func tempSpool() (*os.File, error) {
	f, err := os.CreateTemp("", "warden-guard-")
	if err != nil {
		return nil, fmt.Errorf("spool upload: %w", err)
	}
	os.Remove(f.Name())
	return f, nil
}
