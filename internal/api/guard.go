package api

import (
	"encoding/json"
	"net/http"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
)

// maxGuardTest bounds the content POST /v1/guard/test inspects.
const maxGuardTest = 1 << 20

// guardTest is POST /v1/guard/test: what the guard's detectors find in a
// text or a JSON document (docs/guardrails.md). Findings carry the
// detector, the kind, the JSON path and the byte span, never the value.
func (s *Server) guardTest(w http.ResponseWriter, r *http.Request) error {
	var q struct {
		Text      *string         `json:"text"`
		JSON      json.RawMessage `json:"json"`
		Detectors []string        `json:"detectors"`
	}
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	var data []byte
	asJSON := false
	switch {
	case q.Text != nil && q.JSON != nil:
		return apierr.Validation("give text or json, not both")
	case q.Text != nil:
		data = []byte(*q.Text)
	case q.JSON != nil:
		data, asJSON = q.JSON, true
	default:
		return apierr.Validation("text or json is required")
	}
	if len(data) > maxGuardTest {
		return apierr.Validation("content: %d bytes, over the limit of %d", len(data), maxGuardTest)
	}
	fs, err := govern.GuardScan(data, asJSON, q.Detectors)
	if err != nil {
		return apierr.Validation("%s", err.Error())
	}
	stateOf(r).detail["findings"] = len(fs)
	return writeJSON(w, http.StatusOK, struct {
		Findings []govern.GuardFinding `json:"findings"`
	}{fs})
}
