package network

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/warden-sandbox/warden/internal/govern"
)

// The governed path's cost per flow, beside the flow itself (which costs
// a dial and a handshake): go test ./internal/network -run XXX -bench BenchmarkGovernFlow

func benchGovernor(b *testing.B, rules int) *EgressGovernor {
	eng := govern.New(govern.Config{})
	if rules > 0 {
		p := govern.Policy{ID: "bench", Scope: govern.Scope{Kind: govern.ScopeInstallation}}
		for i := range rules {
			p.Rules = append(p.Rules, govern.Rule{ID: fmt.Sprintf("r%d", i), Kinds: []govern.Kind{govern.KindEgressConnect},
				When:    fmt.Sprintf(`egress.host == "blocked-%d.example" || (egress.port == %d && egress.proto == "udp")`, i, 10000+i),
				Outcome: govern.Deny})
		}
		if _, err := eng.CreatePolicy(context.Background(), p, "bench"); err != nil {
			b.Fatal(err)
		}
	}
	return &EgressGovernor{Engine: eng, Actor: func(context.Context, string) (govern.Principal, *govern.SandboxInfo, error) {
		return govern.Principal{ID: "prn-owner", Kind: "user"}, &govern.SandboxInfo{ID: "sb-bench"}, nil
	}}
}

func benchFlow(b *testing.B, rules int) {
	g := benchGovernor(b, rules)
	f := Flow{Sandbox: "sb-bench", Proto: "tcp", Dst: netip.MustParseAddrPort("198.51.100.10:443"), Host: "allowed.example",
		SNI: "allowed.example", Mode: ModeAllowlist}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if !g.Governs() {
			continue // what the stack does: no decision at all
		}
		if err := g.DecideFlow(ctx, f); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGovernFlowNoRules(b *testing.B)  { benchFlow(b, 0) }
func BenchmarkGovernFlow10Rules(b *testing.B)  { benchFlow(b, 10) }
func BenchmarkGovernFlow100Rules(b *testing.B) { benchFlow(b, 100) }
