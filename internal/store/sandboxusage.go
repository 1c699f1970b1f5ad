package store

import (
	"context"
	"time"
)

// SandboxUsageStore persists the sandbox usage meter's figures
// (internal/usage): what each sandbox used per UTC hour, and the meter's
// last reading of each live sandbox. *sqlite.Store implements it; it is
// not part of Store.
type SandboxUsageStore interface {
	// RecordSandboxUsage, in one transaction, adds each bucket to the row
	// of its (sandbox, hour) (creating it; DiskBytes keeps the larger),
	// replaces the meter row of each of meters, and deletes those of
	// ended.
	RecordSandboxUsage(ctx context.Context, buckets []SandboxUsage, meters []SandboxMeter, ended []string) error
	// ListSandboxMeters returns every meter row, ordered by sandbox.
	ListSandboxMeters(ctx context.Context) ([]SandboxMeter, error)
	// ListSandboxUsage returns the hourly rows the filter matches, ordered
	// by hour then sandbox.
	ListSandboxUsage(ctx context.Context, f SandboxUsageFilter) ([]SandboxUsage, error)
}

// SandboxUsage is what one sandbox used in one UTC hour.
type SandboxUsage struct {
	SandboxID   string
	Hour        time.Time // the hour's start, UTC
	PrincipalID string    // the owner
	Agent       string    // the owner's agent name; "" when a user owns it
	Template    string
	CPUNanos    int64
	// MemoryByteSeconds is the integral of the sandbox's memory charge
	// over time.
	MemoryByteSeconds int64
	EgressBytesOut    int64 // sandbox to the internet
	EgressBytesIn     int64
	RunningMillis     int64
	PausedMillis      int64
	DiskBytes         int64 // the most seen in the hour
}

// SandboxMeter is the usage meter's last reading of a live sandbox: its
// counters (as the backend and the network link report them) and when.
type SandboxMeter struct {
	SandboxID      string
	PrincipalID    string
	Agent          string
	Template       string
	State          string // running or paused
	At             time.Time
	CPUNanos       int64
	MemoryBytes    int64
	EgressBytesOut int64
	EgressBytesIn  int64
}

// SandboxUsageFilter selects hourly rows: empty fields match everything;
// rows of the hours from From (the hour it falls in) to before To.
type SandboxUsageFilter struct {
	Sandbox    string
	Principals []string
	Agent      string
	From, To   time.Time
}
