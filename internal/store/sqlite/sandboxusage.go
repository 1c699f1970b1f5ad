package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

var _ store.SandboxUsageStore = (*Store)(nil)

// RecordSandboxUsage implements store.SandboxUsageStore.
func (s *Store) RecordSandboxUsage(ctx context.Context, buckets []store.SandboxUsage, meters []store.SandboxMeter, ended []string) error {
	for _, b := range buckets {
		if b.SandboxID == "" || b.Hour.IsZero() {
			return fmt.Errorf("record sandbox usage: sandbox and hour are required: %w", store.ErrInvalid)
		}
	}
	for _, m := range meters {
		if m.SandboxID == "" {
			return fmt.Errorf("record sandbox usage: a meter needs its sandbox: %w", store.ErrInvalid)
		}
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		for _, b := range buckets {
			if _, err := tx.ExecContext(ctx, `INSERT INTO sandbox_usage (sandbox_id, hour, principal_id, agent, template,
					cpu_nanos, memory_byte_seconds, egress_bytes_out, egress_bytes_in, running_millis, paused_millis, disk_bytes)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (sandbox_id, hour) DO UPDATE SET
					cpu_nanos = cpu_nanos + excluded.cpu_nanos,
					memory_byte_seconds = memory_byte_seconds + excluded.memory_byte_seconds,
					egress_bytes_out = egress_bytes_out + excluded.egress_bytes_out,
					egress_bytes_in = egress_bytes_in + excluded.egress_bytes_in,
					running_millis = running_millis + excluded.running_millis,
					paused_millis = paused_millis + excluded.paused_millis,
					disk_bytes = max(disk_bytes, excluded.disk_bytes)`,
				b.SandboxID, b.Hour.UTC().Truncate(time.Hour).Unix(), b.PrincipalID, b.Agent, b.Template,
				b.CPUNanos, b.MemoryByteSeconds, b.EgressBytesOut, b.EgressBytesIn, b.RunningMillis, b.PausedMillis, b.DiskBytes); err != nil {
				return err
			}
		}
		for _, m := range meters {
			if _, err := tx.ExecContext(ctx, `INSERT INTO sandbox_usage_meter (sandbox_id, principal_id, agent, template, state, at,
					cpu_nanos, memory_bytes, egress_bytes_out, egress_bytes_in)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (sandbox_id) DO UPDATE SET principal_id = excluded.principal_id, agent = excluded.agent,
					template = excluded.template, state = excluded.state, at = excluded.at, cpu_nanos = excluded.cpu_nanos,
					memory_bytes = excluded.memory_bytes, egress_bytes_out = excluded.egress_bytes_out,
					egress_bytes_in = excluded.egress_bytes_in`,
				m.SandboxID, m.PrincipalID, m.Agent, m.Template, m.State, m.At.UnixNano(),
				m.CPUNanos, m.MemoryBytes, m.EgressBytesOut, m.EgressBytesIn); err != nil {
				return err
			}
		}
		for _, id := range ended {
			if _, err := tx.ExecContext(ctx, `DELETE FROM sandbox_usage_meter WHERE sandbox_id = ?`, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record sandbox usage: %w", err)
	}
	return nil
}

// ListSandboxMeters implements store.SandboxUsageStore.
func (s *Store) ListSandboxMeters(ctx context.Context) ([]store.SandboxMeter, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT sandbox_id, principal_id, agent, template, state, at,
		cpu_nanos, memory_bytes, egress_bytes_out, egress_bytes_in FROM sandbox_usage_meter ORDER BY sandbox_id`)
	if err != nil {
		return nil, fmt.Errorf("list sandbox meters: %w", err)
	}
	defer rows.Close()
	var out []store.SandboxMeter
	for rows.Next() {
		var m store.SandboxMeter
		var at int64
		if err := rows.Scan(&m.SandboxID, &m.PrincipalID, &m.Agent, &m.Template, &m.State, &at,
			&m.CPUNanos, &m.MemoryBytes, &m.EgressBytesOut, &m.EgressBytesIn); err != nil {
			return nil, fmt.Errorf("list sandbox meters: %w", err)
		}
		m.At = time.Unix(0, at).UTC()
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sandbox meters: %w", err)
	}
	return out, nil
}

// ListSandboxUsage implements store.SandboxUsageStore.
func (s *Store) ListSandboxUsage(ctx context.Context, f store.SandboxUsageFilter) ([]store.SandboxUsage, error) {
	var conds []string
	var args []any
	if f.Sandbox != "" {
		conds = append(conds, "sandbox_id = ?")
		args = append(args, f.Sandbox)
	}
	if len(f.Principals) > 0 {
		conds = append(conds, "principal_id IN (?"+strings.Repeat(", ?", len(f.Principals)-1)+")")
		for _, p := range f.Principals {
			args = append(args, p)
		}
	}
	if f.Agent != "" {
		conds = append(conds, "agent = ?")
		args = append(args, f.Agent)
	}
	if !f.From.IsZero() {
		conds = append(conds, "hour >= ?")
		args = append(args, f.From.UTC().Truncate(time.Hour).Unix())
	}
	if !f.To.IsZero() {
		conds = append(conds, "hour < ?")
		args = append(args, f.To.Unix())
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT sandbox_id, hour, principal_id, agent, template, cpu_nanos, memory_byte_seconds,
		egress_bytes_out, egress_bytes_in, running_millis, paused_millis, disk_bytes FROM sandbox_usage`+where+
		` ORDER BY hour, sandbox_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list sandbox usage: %w", err)
	}
	defer rows.Close()
	var out []store.SandboxUsage
	for rows.Next() {
		var u store.SandboxUsage
		var hour int64
		if err := rows.Scan(&u.SandboxID, &hour, &u.PrincipalID, &u.Agent, &u.Template, &u.CPUNanos, &u.MemoryByteSeconds,
			&u.EgressBytesOut, &u.EgressBytesIn, &u.RunningMillis, &u.PausedMillis, &u.DiskBytes); err != nil {
			return nil, fmt.Errorf("list sandbox usage: %w", err)
		}
		u.Hour = time.Unix(hour, 0).UTC()
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sandbox usage: %w", err)
	}
	return out, nil
}
