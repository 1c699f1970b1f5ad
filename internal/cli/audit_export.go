package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func auditExportCmd() *command {
	var (
		format = "jsonl"
		after  int64
		out    string
	)
	c := &command{
		name:  "export",
		short: "Export the audit log as JSON lines",
		long: "Write every audit event (after --after) as one JSON object per line: the daemon's own\n" +
			"form with its hashes (--format jsonl), or OCSF-style API Activity events (--format\n" +
			"ocsf, class_uid 6003; the hashes and detail under \"unmapped\"). When audit retention\n" +
			"deleted the oldest events, a line on standard error says where the export starts.",
		examples: []string{
			"warden audit export > audit.jsonl",
			"warden audit export --format ocsf --after 1200 --output audit-ocsf.jsonl",
		},
	}
	c.flags = func(fs *flagSet) {
		fs.String(&format, "format", "F", "jsonl or ocsf (default jsonl)")
		fs.Var((*int64Value)(&after), "after", "N", "only events with a sequence number greater than N")
		fs.String(&out, "output", "FILE", "write to FILE instead of standard output")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "unexpected argument %q", args[0])
		}
		if format != "jsonl" && format != "ocsf" {
			return usageErr(c, "--format must be jsonl or ocsf")
		}
		if after < 0 {
			return usageErr(c, "--after must not be negative")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		var w io.Writer = r.env.Stdout
		if out != "" {
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				return fmt.Errorf("export: %w", err)
			}
			defer f.Close()
			w = f
		}
		// Say where the retained log starts (audit retention).
		if a, err := cl.AuditAnchor(ctx); err == nil && a.Size > 0 && after < a.Size {
			fmt.Fprintf(r.env.Stderr, "events 1 to %d were deleted by audit retention: the export starts at seq %d\n", a.Size, a.Size+1)
		}
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		n := 0
		for ev, err := range cl.AllAuditEvents(ctx, warden.AuditQuery{After: after, Limit: 1000}) {
			if err != nil {
				return err
			}
			var v any = ev
			if format == "ocsf" {
				v = ocsfEvent(ev)
			}
			if err := enc.Encode(v); err != nil {
				return fmt.Errorf("export: %w", err)
			}
			n++
		}
		if f, ok := w.(*os.File); ok && out != "" {
			if err := f.Close(); err != nil {
				return fmt.Errorf("export: %w", err)
			}
			fmt.Fprintf(r.env.Stderr, "%d events written to %s\n", n, out)
		}
		return nil
	}
	return c
}

// ocsfEvent maps an audit event to an OCSF API Activity (6003) event.
func ocsfEvent(ev warden.AuditEvent) map[string]any {
	status, statusID := "Success", 1
	if ev.Outcome != "success" {
		status, statusID = "Failure", 2
	}
	return map[string]any{
		"class_uid": 6003, "class_name": "API Activity", "category_uid": 6, "category_name": "Application Activity",
		"activity_id": 99, "activity_name": ev.Action, "type_uid": 600399,
		"time": ev.Time.UnixMilli(), "severity_id": 1, "status": status, "status_id": statusID,
		"status_detail": ev.Outcome,
		"metadata":      map[string]any{"version": "1.1.0", "uid": fmt.Sprint(ev.Seq), "correlation_uid": ev.RequestID, "product": map[string]any{"name": "Warden", "vendor_name": "Warden"}},
		"actor":         map[string]any{"user": map[string]any{"uid": ev.PrincipalID}},
		"api":           map[string]any{"operation": ev.Action, "request": map[string]any{"uid": ev.RequestID}},
		"resources":     []map[string]any{{"uid": ev.Target}},
		"unmapped":      map[string]any{"seq": ev.Seq, "hash": ev.Hash, "prev_hash": ev.PrevHash, "detail": ev.Detail},
	}
}
