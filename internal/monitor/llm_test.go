package monitor

import (
	"context"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
)

// TestRecordLLM: the LLM gateway's prompts and responses reach the
// timeline (content kept, or only its digest with NoLLMContent), written
// by Close at the latest, and can be redacted.
func TestRecordLLM(t *testing.T) {
	for _, noContent := range []bool{false, true} {
		st := openStore(t)
		m, err := New(Config{Store: st, NoLLMContent: noContent})
		if err != nil {
			t.Fatal(err)
		}
		m.RecordLLM(store.MonitorEvent{Kind: "llm.prompt", Source: "llm", Principal: "prn_a", Agent: "prn_a", Content: `{"messages":[{"content":"hello"}]}`})
		m.RecordLLM(store.MonitorEvent{Kind: "llm.response", Source: "llm", Principal: "prn_a", Agent: "prn_a", Content: strings.Repeat("x", MaxContent+10)})
		m.Close()
		evs, err := st.ListMonitorEvents(context.Background(), store.MonitorFilter{Agent: "prn_a", Kinds: []string{"llm."}})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2 || evs[0].Kind != "llm.prompt" || evs[1].Kind != "llm.response" || evs[0].ContentSHA256 == "" || evs[0].ID == "" {
			t.Fatalf("no_llm_content=%v: events %+v", noContent, evs)
		}
		if noContent {
			if evs[0].Content != "" || evs[1].Content != "" {
				t.Fatalf("content kept with NoLLMContent: %+v", evs)
			}
			continue
		}
		if !strings.Contains(evs[0].Content, "hello") || len(evs[1].Content) != MaxContent {
			t.Fatalf("content %q / %d bytes", evs[0].Content, len(evs[1].Content))
		}
		r, err := st.RedactMonitorEvent(context.Background(), evs[0].ID, evs[0].Time)
		if err != nil || r.Content != "" || r.ContentSHA256 == "" {
			t.Fatalf("redact: %+v %v", r, err)
		}
	}
}
