package agents

import (
	"context"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// cronFingerprint identifies a trigger's timing: a kept next time is used
// only while the trigger at that index still has it.
func cronFingerprint(c CronTrigger) string { return c.Schedule + "\x00" + c.TimeZone }

// keptCron returns a trigger's next fire time at its first tick: the one
// an earlier daemon kept, if the schedule is the same, else the next after
// now (kept). missed reports a kept time that passed while no daemon ran
// and that fires now (the trigger has catch_up); a passed time without
// catch_up is replaced by the next after now.
func (s *Service) keptCron(ctx context.Context, agentID string, i int, c CronTrigger, sched *Schedule, now time.Time) (next time.Time, missed bool) {
	cs, ok := s.cfg.Store.(store.AgentCronStore)
	if ok {
		kept, err := cs.ListAgentCron(ctx, agentID)
		if err != nil {
			s.log.Warn("agents: cron: read kept next times", "agent", agentID, "err", err)
		}
		for _, k := range kept {
			if k.Index != i || k.Schedule != cronFingerprint(c) || k.NextAt.IsZero() {
				continue
			}
			if now.Before(k.NextAt) {
				return k.NextAt, false
			}
			if c.CatchUp {
				s.log.Info("agents: cron: catching up a fire missed while wardend was down", "agent", agentID,
					"schedule", c.Schedule, "missed", k.NextAt)
				return k.NextAt, true
			}
			s.log.Info("agents: cron: skipping fires missed while wardend was down (no catch_up)", "agent", agentID,
				"schedule", c.Schedule, "since", k.NextAt)
		}
	}
	next = sched.Next(now)
	s.keepCron(ctx, agentID, i, c, next)
	return next, false
}

// keepCron records a trigger's next fire time for the next daemon.
func (s *Service) keepCron(ctx context.Context, agentID string, i int, c CronTrigger, next time.Time) {
	cs, ok := s.cfg.Store.(store.AgentCronStore)
	if !ok || next.IsZero() {
		return
	}
	if err := cs.PutAgentCron(context.WithoutCancel(ctx), store.AgentCron{AgentID: agentID, Index: i, Schedule: cronFingerprint(c), NextAt: next}); err != nil {
		s.log.Warn("agents: cron: keep the next time", "agent", agentID, "err", err)
	}
}
