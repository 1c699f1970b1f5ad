package govern

import (
	"context"
	"strings"
	"testing"
)

// TestGuardLLMTargets: llm.prompt is screened in Decide (mask rewrites
// the body, JSON staying valid), llm.response through Screen, and a
// response cannot be held for approval.
func TestGuardLLMTargets(t *testing.T) {
	eng := New(Config{})
	t.Cleanup(eng.Close)
	ctx := context.Background()
	if _, err := eng.CreatePolicy(ctx, Policy{ID: "wait", Scope: Scope{Kind: ScopeInstallation},
		Guard: &Guard{Detectors: []string{DetectorSecrets}, Targets: []string{GuardTargetLLMResponse}, Action: GuardApproval}}, "t"); err == nil ||
		!strings.Contains(err.Error(), "llm.response") {
		t.Fatalf("require_approval on llm.response: %v", err)
	}
	if _, err := eng.CreatePolicy(ctx, Policy{ID: "mask", Scope: Scope{Kind: ScopeInstallation},
		Guard: &Guard{Detectors: []string{DetectorSecrets}, Targets: []string{GuardTargetLLMPrompt, GuardTargetLLMResponse}, Action: GuardMask}}, "t"); err != nil {
		t.Fatal(err)
	}
	if !eng.Guards(KindLLMCall) || !eng.GuardsTarget(GuardTargetLLMResponse) || eng.GuardsTarget(GuardTargetExec) {
		t.Fatal("Guards/GuardsTarget do not see the LLM guard")
	}
	body := `{"model":"m","messages":[{"role":"user","content":"key AKIAZ3MSJV4WQXRTY7KD here"}]}`
	a := &Action{Kind: KindLLMCall, Surface: SurfaceLLM, Principal: Principal{ID: "p"}, LLM: &LLMCall{Model: "m"},
		Payload: &Payload{Body: []byte(body)}}
	d, err := eng.Decide(ctx, a)
	if err != nil || d.Outcome != Allow || d.Masked == nil || strings.Contains(string(d.Masked), "AKIA") ||
		!strings.Contains(string(d.Masked), `"model":"m"`) || len(d.Findings) != 1 || d.Findings[0].Where != "prompt.messages[0].content" {
		t.Fatalf("prompt decision %+v %s %v", d, d.Masked, err)
	}
	d, masked, err := eng.Screen(ctx, a, []byte("answer: AKIAZ3MSJV4WQXRTY7KD"))
	if err != nil || d.Outcome != Allow || masked == nil || strings.Contains(string(masked), "AKIA") || d.Findings[0].Target != GuardTargetLLMResponse {
		t.Fatalf("response screen %+v %s %v", d, masked, err)
	}
}
