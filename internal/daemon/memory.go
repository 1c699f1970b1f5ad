package daemon

import (
	"context"
	"fmt"

	"github.com/warden-sandbox/warden/internal/mcpgw"
	"github.com/warden-sandbox/warden/internal/memory"
	"github.com/warden-sandbox/warden/internal/store"
)

// buildMemory builds agents' memory (docs/memory.md): writes decided as
// memory.write by the governed path and audited; served to agents by the
// MCP gateway's memory tools and to reviewers by the API.
func (d *daemon) buildMemory() error {
	ms, ok := d.st.(store.MemoryStore)
	if !ok {
		return fmt.Errorf("agent memory: the store does not keep memory")
	}
	svc, err := memory.New(memory.Config{Store: ms, Govern: d.gov, Audit: d.audits})
	if err != nil {
		return err
	}
	d.memory = svc
	return nil
}

// wireMemoryRuns names the hosted-agent run of each memory write: each
// run has its own key (internal/agents).
func (d *daemon) wireMemoryRuns() {
	if d.memory == nil || d.agents == nil {
		return
	}
	agents := d.agents
	d.memory.SetRunLookup(func(ctx context.Context, keyID string) (string, bool) {
		r, ok := agents.RunForKey(ctx, keyID)
		return r.ID, ok
	})
	d.memory.SetTeamLookup(agents.TeamOf)
}

// memoryTools is the MCP gateway's memory (nil when there is none).
func (d *daemon) memoryTools() mcpgw.MemoryTools {
	if d.memory == nil {
		return nil
	}
	return d.memory
}
