package govern

import (
	"context"
	"testing"
)

// TestGovernsAsksKindedStages: a stage after the rules makes Governs true
// for every kind, unless it is a KindedStage, which answers for itself (the
// middleware stage governs only the kinds some middleware runs for, so
// egress flows stay undecided on an installation whose middleware does
// not touch them).
func TestGovernsAsksKindedStages(t *testing.T) {
	allow := func(context.Context, *Action) (Decision, error) { return Decision{Outcome: Allow}, nil }
	plain := New(Config{After: []Stage{StageFunc("plain", allow)}})
	defer plain.Close()
	if !plain.Governs(KindEgressConnect) {
		t.Error("a plain stage after the rules: Governs(egress.connect) is false")
	}
	on := map[Kind]bool{KindExec: true}
	kinded := New(Config{After: []Stage{KindedStageFunc("kinded", allow, func(k Kind) bool { return on[k] })}})
	defer kinded.Close()
	if !kinded.Governs(KindExec) {
		t.Error("a kinded stage that acts on exec: Governs(exec) is false")
	}
	if kinded.Governs(KindEgressConnect) {
		t.Error("a kinded stage that does not act on egress.connect: Governs(egress.connect) is true")
	}
	on[KindEgressConnect] = true // read at each call: a hook added later counts
	if !kinded.Governs(KindEgressConnect) {
		t.Error("after the stage began acting on egress.connect: Governs is false")
	}
	none := New(Config{})
	defer none.Close()
	if none.Governs(KindEgressConnect) {
		t.Error("no stages, rules or defaults: Governs(egress.connect) is true")
	}
}
