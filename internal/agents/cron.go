package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// Schedule is a parsed cron schedule.
type Schedule struct {
	every time.Duration // "@every": fixed interval
	loc   *time.Location
	// Bit sets of the five fields.
	min, hour, dom, month, dow uint64
	domStar, dowStar           bool
}

var cronAliases = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
	"@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

// ParseSchedule parses a five-field cron spec (minute hour day-of-month
// month day-of-week; *, lists, ranges and steps; names of months and days
// not supported) or "@every <duration>" (at least one second) or an alias
// (@hourly, @daily, ...), in the time zone tz ("" UTC).
func ParseSchedule(spec, tz string) (*Schedule, error) {
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return nil, fmt.Errorf("time zone %q: %w", tz, err)
		}
		loc = l
	}
	spec = strings.TrimSpace(spec)
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		every, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %w", spec, err)
		}
		if every < time.Second {
			return nil, fmt.Errorf("schedule %q: the interval must be at least 1s", spec)
		}
		return &Schedule{every: every, loc: loc}, nil
	}
	if a, ok := cronAliases[spec]; ok {
		spec = a
	}
	f := strings.Fields(spec)
	if len(f) != 5 {
		return nil, fmt.Errorf("schedule %q: want 5 fields (minute hour day-of-month month day-of-week)", spec)
	}
	s := &Schedule{loc: loc}
	var err error
	bounds := [5][2]int{{0, 59}, {0, 23}, {1, 31}, {1, 12}, {0, 7}}
	sets := [5]*uint64{&s.min, &s.hour, &s.dom, &s.month, &s.dow}
	for i := range f {
		if *sets[i], err = parseField(f[i], bounds[i][0], bounds[i][1]); err != nil {
			return nil, fmt.Errorf("schedule %q: field %d: %w", spec, i+1, err)
		}
	}
	if s.dow&(1<<7) != 0 { // 7 is Sunday too
		s.dow |= 1
	}
	s.domStar, s.dowStar = f[2] == "*" || strings.HasPrefix(f[2], "*/"), f[4] == "*" || strings.HasPrefix(f[4], "*/")
	return s, nil
}

func parseField(f string, lo, hi int) (uint64, error) {
	var set uint64
	for part := range strings.SplitSeq(f, ",") {
		rng, stepS, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepS)
			if err != nil || n < 1 {
				return 0, fmt.Errorf("bad step %q", stepS)
			}
			step = n
		}
		a, b := lo, hi
		if rng != "*" {
			x, y, isRange := strings.Cut(rng, "-")
			n, err := strconv.Atoi(x)
			if err != nil {
				return 0, fmt.Errorf("bad value %q", x)
			}
			a, b = n, n
			if isRange {
				if b, err = strconv.Atoi(y); err != nil {
					return 0, fmt.Errorf("bad value %q", y)
				}
			} else if hasStep {
				b = hi
			}
		}
		if a < lo || b > hi || a > b {
			return 0, fmt.Errorf("%q is out of %d-%d", part, lo, hi)
		}
		for v := a; v <= b; v += step {
			set |= 1 << uint(v)
		}
	}
	if set == 0 {
		return 0, errors.New("empty field")
	}
	return set, nil
}

// Next returns the first time after t the schedule fires (the zero time
// if none within five years).
func (s *Schedule) Next(t time.Time) time.Time {
	if s.every > 0 {
		return t.Add(s.every).Truncate(time.Second)
	}
	t = t.In(s.loc).Truncate(time.Minute).Add(time.Minute)
	end := t.AddDate(5, 0, 0)
	for t.Before(end) {
		if s.month&(1<<uint(t.Month())) == 0 {
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, s.loc)
			continue
		}
		if !s.dayMatches(t) {
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, s.loc)
			continue
		}
		if s.hour&(1<<uint(t.Hour())) == 0 {
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour()+1, 0, 0, 0, s.loc)
			continue
		}
		if s.min&(1<<uint(t.Minute())) == 0 {
			t = t.Add(time.Minute)
			continue
		}
		return t
	}
	return time.Time{}
}

// dayMatches follows cron: when both day fields are restricted, either
// matching is enough.
func (s *Schedule) dayMatches(t time.Time) bool {
	d := s.dom&(1<<uint(t.Day())) != 0
	w := s.dow&(1<<uint(t.Weekday())) != 0
	if s.domStar || s.dowStar {
		return d && w
	}
	return d || w
}

// forgetCron drops the agent's computed cron times (its spec changed);
// s.mu held.
func (s *Service) forgetCron(agentID string) {
	for k := range s.cron {
		if len(k) > len(agentID) && k[:len(agentID)] == agentID && k[len(agentID)] == '/' {
			delete(s.cron, k)
		}
	}
}

// CronTick fires the cron triggers due at now. A trigger's first tick
// takes its next time kept by an earlier daemon (catchup.go) or computes
// it; a tick after it fires once. A kept time that passed while the
// daemon was down fires once at the first tick if the trigger has
// catch_up, else it is skipped.
func (s *Service) CronTick(now time.Time) {
	ctx := s.ctx
	agents, err := s.cfg.Store.ListAgents(ctx)
	if err != nil {
		s.log.Warn("agents: cron: list agents", "err", err)
		return
	}
	for _, a := range agents {
		spec, err := ParseSpec(a.Spec)
		if err != nil || len(spec.Triggers.Cron) == 0 {
			continue
		}
		for i, c := range spec.Triggers.Cron {
			sched, err := ParseSchedule(c.Schedule, c.TimeZone)
			if err != nil {
				continue
			}
			key := fmt.Sprintf("%s/%d", a.ID, i)
			s.mu.Lock()
			next, ok := s.cron[key]
			missed := false
			if !ok {
				s.mu.Unlock()
				next, missed = s.keptCron(ctx, a.ID, i, c, sched, now)
				s.mu.Lock()
				s.cron[key] = next
			}
			// Due: a known time that came, or a kept one missed while
			// wardend was down (catch_up). A first tick fires nothing else.
			if due := (ok && !now.Before(next)) || missed; !due {
				s.mu.Unlock()
				continue
			}
			after := sched.Next(now)
			s.cron[key] = after
			fire := s.mayFire(ctx, a, c)
			s.mu.Unlock()
			s.keepCron(ctx, a.ID, i, c, after)
			if !fire {
				s.log.Info("agents: cron: skipped by the overlap policy", "agent", a.Name, "schedule", c.Schedule, "overlap", c.Overlap)
				continue
			}
			input := c.Input
			if len(input) == 0 {
				in := map[string]any{"schedule": c.Schedule, "time": next.UTC()}
				if missed {
					in["catch_up"] = true
				}
				b, _ := json.Marshal(in)
				input = b
			}
			if _, err := s.Trigger(ctx, a, TriggerCron, "system", input); err != nil {
				s.log.Warn("agents: cron: trigger", "agent", a.Name, "err", err)
			}
		}
	}
}

// mayFire applies a cron trigger's overlap policy; s.mu held.
func (s *Service) mayFire(ctx context.Context, a store.Agent, c CronTrigger) bool {
	queued, _ := s.cfg.Store.ListAgentRuns(ctx, store.AgentRunFilter{AgentID: a.ID, States: []string{store.RunQueued}, Trigger: TriggerCron})
	switch c.Overlap {
	case OverlapQueue:
		return len(queued) == 0 // one waits behind the live ones
	case OverlapParallel:
		return len(queued)+s.activeFor(a.ID, TriggerCron) < c.MaxParallel
	default: // skip
		return len(queued) == 0 && s.activeFor(a.ID, "") == 0
	}
}
