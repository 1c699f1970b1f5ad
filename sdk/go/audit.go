package warden

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
)

// ListAudit returns one page of audit events with Seq greater than q.After. See
// [Client.AllAuditEvents] to iterate over every page.
func (c *Client) ListAudit(ctx context.Context, q AuditQuery) (AuditPage, error) {
	v := url.Values{}
	if q.After > 0 {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Target != "" {
		v.Set("target", q.Target)
	}
	if q.Principal != "" {
		v.Set("principal", q.Principal)
	}
	var page AuditPage
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/audit", query: v, idempotent: true}, &page); err != nil {
		return AuditPage{}, fmt.Errorf("list audit events: %w", err)
	}
	return page, nil
}

// AllAuditEvents iterates over every audit event matching q, from q.After on, fetching
// pages until one is empty. It stops after yielding an error.
func (c *Client) AllAuditEvents(ctx context.Context, q AuditQuery) iter.Seq2[AuditEvent, error] {
	return func(yield func(AuditEvent, error) bool) {
		for {
			page, err := c.ListAudit(ctx, q)
			if err != nil {
				yield(AuditEvent{}, err)
				return
			}
			for _, ev := range page.Events {
				if !yield(ev, nil) {
					return
				}
			}
			if len(page.Events) == 0 || page.NextAfter <= q.After {
				return
			}
			q.After = page.NextAfter
		}
	}
}

// VerifyAudit recomputes the audit log's hash chain and reports any problem.
func (c *Client) VerifyAudit(ctx context.Context) (VerifyReport, error) {
	var r VerifyReport
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/audit/verify", idempotent: true}, &r); err != nil {
		return VerifyReport{}, fmt.Errorf("verify audit log: %w", err)
	}
	return r, nil
}

// AuditAnchor returns where the retained audit log starts: the anchor audit
// retention left for the events it deleted (Size 0 when none were). Check
// it with auditcheck.ParseAnchor and your copy of the checkpoints' public
// key; the daemon's word alone proves nothing.
func (c *Client) AuditAnchor(ctx context.Context) (AuditAnchor, error) {
	var a AuditAnchor
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/audit/anchor", idempotent: true}, &a); err != nil {
		return AuditAnchor{}, fmt.Errorf("get audit anchor: %w", err)
	}
	return a, nil
}
