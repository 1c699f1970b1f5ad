package govern

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/warden-sandbox/warden/internal/telemetry"
)

// Attributes of the governed decision's span (docs/tracing.md).
const (
	attrKind     = attribute.Key("warden.govern.kind")
	attrSurface  = attribute.Key("warden.govern.surface")
	attrOutcome  = attribute.Key("warden.govern.outcome")
	attrStage    = attribute.Key("warden.govern.stage")
	attrRule     = attribute.Key("warden.govern.rule_id")
	attrPolicy   = attribute.Key("warden.govern.policy_id")
	attrApproval = attribute.Key("warden.govern.approval_id")
	attrFindings = attribute.Key("warden.govern.findings")
)

// Decide runs the action through the stages (decide) and, while tracing
// is on, records the decision as a span "govern.decide", a child of the
// door's request span: the kind, the outcome, the deciding stage, rule,
// policy and approval, and how many guard findings there were (never the
// action's content).
func (e *Engine) Decide(ctx context.Context, a *Action) (Decision, error) {
	if !telemetry.Enabled() {
		return e.decide(ctx, a)
	}
	ctx, span := telemetry.Start(ctx, "govern.decide")
	d, err := e.decide(ctx, a)
	if span.IsRecording() {
		attrs := []attribute.KeyValue{attrKind.String(string(a.Kind)), attrOutcome.String(string(d.Outcome))}
		if a.Surface != "" {
			attrs = append(attrs, attrSurface.String(string(a.Surface)))
		}
		for _, kv := range []struct {
			k attribute.Key
			v string
		}{{attrStage, d.Stage}, {attrRule, d.RuleID}, {attrPolicy, d.PolicyID}, {attrApproval, d.ApprovalID}} {
			if kv.v != "" {
				attrs = append(attrs, kv.k.String(kv.v))
			}
		}
		if n := len(d.Findings); n > 0 {
			attrs = append(attrs, attrFindings.Int(n))
		}
		span.SetAttributes(attrs...)
		if err != nil {
			span.SetStatus(codes.Error, "the decision failed")
		}
	}
	span.End()
	return d, err
}
