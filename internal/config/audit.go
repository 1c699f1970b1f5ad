package config

import (
	"fmt"
	"time"
)

// AuditConfig configures the audit log's retention (docs/security.md,
// "Audit retention").
type AuditConfig struct {
	// Retention is how long audit events are kept; older ones are
	// deleted (hourly, and at start) up to a signed checkpoint, leaving
	// an anchor that keeps the chain and every checkpoint verifiable.
	// Zero keeps them forever; at least MinAuditRetention otherwise. It
	// needs the signed checkpoints (usage.checkpoint_interval not
	// negative).
	Retention time.Duration `yaml:"retention"`
}

// MinAuditRetention is the shortest audit.retention accepted.
const MinAuditRetention = 24 * time.Hour

// MinUsageRetention is the shortest usage.retention accepted: monthly LLM
// budgets sum the rows of the whole UTC month.
const MinUsageRetention = 32 * 24 * time.Hour

func (c *Config) validateAudit() error {
	if r := c.Audit.Retention; r != 0 && r < MinAuditRetention {
		return fmt.Errorf("config: audit.retention %s: want 0 (keep forever) or at least %s", r, MinAuditRetention)
	}
	if c.Audit.Retention > 0 && c.Usage.CheckpointInterval < 0 {
		return fmt.Errorf("config: audit.retention needs the signed checkpoints (usage.checkpoint_interval must not be negative)")
	}
	if r := c.Usage.Retention; r != 0 && r < MinUsageRetention {
		return fmt.Errorf("config: usage.retention %s: want 0 (keep forever) or at least %s", r, MinUsageRetention)
	}
	return nil
}
