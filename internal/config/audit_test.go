package config

import (
	"strings"
	"testing"
	"time"
)

func TestAuditAndUsageRetention(t *testing.T) {
	for _, tc := range []struct {
		audit, usage, checkpoints time.Duration
		want                      string // "" when accepted
	}{
		{0, 0, 0, ""},
		{8760 * time.Hour, 0, 0, ""},
		{24 * time.Hour, 32 * 24 * time.Hour, time.Hour, ""},
		{time.Hour, 0, 0, "audit.retention 1h0m0s"},
		{-time.Hour, 0, 0, "audit.retention"},
		{48 * time.Hour, 0, -1, "needs the signed checkpoints"},
		{0, 7 * 24 * time.Hour, 0, "usage.retention 168h0m0s"},
	} {
		c := Default()
		c.Audit.Retention, c.Usage.Retention, c.Usage.CheckpointInterval = tc.audit, tc.usage, tc.checkpoints
		err := c.Validate()
		if tc.want == "" && err != nil {
			t.Errorf("%+v: %v", tc, err)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: got %v, want a refusal with %q", tc, err, tc.want)
		}
	}
}
