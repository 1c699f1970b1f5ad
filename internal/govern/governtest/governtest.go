// Package governtest has helpers for the tests of packages that audit
// through the governed path (*govern.AuditLog), which may not import
// internal/audit themselves (TestDoorsDoNotImportAudit).
package governtest

import (
	"context"
	"testing"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
)

// AuditLog returns the governed path's AuditLog writing to w, a test's
// recorder of appended events.
func AuditLog(t testing.TB, w govern.Auditor) *govern.AuditLog {
	t.Helper()
	f := auditFake{w}
	l, err := govern.NewAuditLog(f, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// auditFake adds the reading half an AuditLog needs to a recorder.
type auditFake struct{ govern.Auditor }

func (auditFake) Verify(context.Context) (audit.Report, error) { return audit.Report{}, nil }

func (auditFake) LastAudit(context.Context) (store.AuditEvent, error) {
	return store.AuditEvent{}, store.ErrNotFound
}

func (auditFake) ListAudit(context.Context, store.AuditFilter) ([]store.AuditEvent, error) {
	return nil, nil
}
