package mw

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/warden-sandbox/warden/internal/govern"
)

// StageName is the govern stage's name.
const StageName = "middleware"

// Stage returns the govern stage that runs s's pre hooks after the rules
// (govern.Config.After). A block, or a failure of a closed middleware,
// denies with the middleware's message. A modify rewrites the action in
// place (mcp.call arguments, exec and pty argv, code.run code): doors
// that forward the payload read it back from the Action after Decide. The
// stage governs (govern.KindedStage) only the kinds some installed
// middleware runs for, so that egress flows stay undecided without one.
func Stage(s *Set) govern.Stage {
	return govern.KindedStageFunc(StageName, func(ctx context.Context, a *govern.Action) (govern.Decision, error) {
		vs, blocked := s.Pre(ctx, a)
		if blocked {
			v := vs[len(vs)-1]
			msg := fmt.Sprintf("blocked by middleware %s: %s", v.Middleware, v.Message)
			if v.Action == "error" {
				msg = fmt.Sprintf("middleware %s failed (on_error closed): %s", v.Middleware, v.Error)
			}
			return govern.Decision{Outcome: govern.Deny, Message: msg}, nil
		}
		var mod []string
		for _, v := range vs {
			if v.Action == "modify" {
				mod = append(mod, v.Middleware)
			}
		}
		d := govern.Decision{Outcome: govern.Allow}
		if len(mod) > 0 {
			d.Message = "modified by middleware " + strings.Join(mod, ", ")
		}
		return d, nil
	}, s.runsAny)
}

// PostJSON is Post for a door holding the result as JSON bytes (an MCP
// tools/call result): out is the result to forward (result itself when no
// middleware changed it); blocked means the door must refuse with msg.
func (s *Set) PostJSON(ctx context.Context, a *govern.Action, result []byte) (out []byte, blocked bool, msg string) {
	if !s.runsAny(a.Kind) {
		return result, false, ""
	}
	var r any
	if err := json.Unmarshal(result, &r); err != nil {
		return nil, true, "middleware: result is not JSON"
	}
	got, vs, blocked := s.Post(ctx, a, r)
	if blocked {
		v := vs[len(vs)-1]
		if v.Action == "error" {
			return nil, true, fmt.Sprintf("middleware %s failed (on_error closed): %s", v.Middleware, v.Error)
		}
		return nil, true, fmt.Sprintf("blocked by middleware %s: %s", v.Middleware, v.Message)
	}
	for _, v := range vs {
		if v.Action == "modify" {
			b, err := json.Marshal(got)
			if err != nil {
				return nil, true, "middleware: encode result failed"
			}
			return b, false, ""
		}
	}
	return result, false, ""
}

// runsAny reports whether some installed middleware runs for k.
func (s *Set) runsAny(k govern.Kind) bool {
	for _, c := range *s.mws.Load() {
		if c.runsFor(k) {
			return true
		}
	}
	return false
}
