package monitor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// The LLM gateway's prompts and responses (internal/llmgw content.go)
// reach the timeline through RecordLLM: like tapped audit events they are
// queued without blocking the call and written in batches by one
// goroutine; when the queue is full they are dropped and counted. Their
// content follows the monitor's content retention and can be redacted;
// with Config.NoLLMContent only its digest is kept.

// RecordLLM queues an LLM gateway event (ID and time filled in when empty,
// content cut and digested) without blocking.
func (m *Monitor) RecordLLM(e store.MonitorEvent) {
	if e.ID == "" {
		e.ID = NewID()
	}
	if e.Time.IsZero() {
		e.Time = m.now().UTC()
	}
	if m.cfg.NoLLMContent && e.Content != "" {
		sum := sha256.Sum256([]byte(e.Content))
		e.ContentSHA256, e.Content = hex.EncodeToString(sum[:]), ""
	}
	setContent(&e, e.Content)
	select {
	case m.llm <- e:
	default:
		if m.dropped.Add(1)%1000 == 1 {
			m.log.Warn("monitor buffer full: LLM prompts and responses left off the timeline", "dropped", m.dropped.Load())
		}
	}
}

func (m *Monitor) startLLM() {
	m.llm = make(chan store.MonitorEvent, 1024)
	m.llmWG.Add(1)
	go func() {
		defer m.llmWG.Done()
		batch := make([]store.MonitorEvent, 0, 64)
		for {
			select {
			case e := <-m.llm:
				batch = append(batch[:0], e)
			drain:
				for len(batch) < maxBatch {
					select {
					case e := <-m.llm:
						batch = append(batch, e)
					default:
						break drain
					}
				}
				m.writeLLM(batch)
			case <-m.stop:
				for {
					batch = batch[:0]
				more:
					for len(batch) < maxBatch {
						select {
						case e := <-m.llm:
							batch = append(batch, e)
						default:
							break more
						}
					}
					if len(batch) == 0 {
						return
					}
					m.writeLLM(batch)
				}
			}
		}
	}()
}

func (m *Monitor) writeLLM(batch []store.MonitorEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.st.AppendMonitorEvents(ctx, batch); err != nil {
		m.log.Error("write LLM monitor events", "events", len(batch), "err", err)
		return
	}
	m.notify()
}
