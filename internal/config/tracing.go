package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// TracingConfig configures OpenTelemetry traces exported over OTLP/HTTP
// (docs/tracing.md). Tracing is off unless Enabled is true or Endpoint is
// set. What the config leaves unset comes from the standard environment
// variables (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_HEADERS, OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_SERVICE_NAME), then from the defaults.
type TracingConfig struct {
	// Enabled turns tracing on with the endpoint from the environment or
	// the default (http://localhost:4318). Setting Endpoint turns it on
	// too.
	Enabled bool `yaml:"enabled"`
	// Endpoint is the collector's OTLP/HTTP base URL, such as
	// http://collector:4318: spans go to its /v1/traces. A URL with a
	// path other than "/" is used as it is.
	Endpoint string `yaml:"endpoint"`
	// Headers are sent with every export (a collector's or a vendor's
	// authentication, say). They replace the environment's headers.
	Headers map[string]string `yaml:"headers"`
	// ServiceName is the resource's service.name (default wardend).
	ServiceName string `yaml:"service_name"`
	// SampleRatio is the share of new traces recorded, 0 to 1 (default
	// 1). A request that arrives with a sampled traceparent is recorded
	// whatever the ratio (the parent decides).
	SampleRatio *float64 `yaml:"sample_ratio"`
	// Timeout bounds one export (default 10s).
	Timeout time.Duration `yaml:"timeout"`
}

// On reports whether the config turns tracing on.
func (t TracingConfig) On() bool { return t.Enabled || t.Endpoint != "" }

// validateTracing checks the tracing block.
func (c *Config) validateTracing() error {
	t := c.Tracing
	if t.Endpoint != "" {
		u, err := url.Parse(t.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			shown := t.Endpoint
			if strings.Contains(shown, "@") {
				shown = "(not shown: it has an @)" // it may hold a credential
			}
			return fmt.Errorf("config: tracing.endpoint %q is not an http:// or https:// URL", shown)
		}
		if u.User != nil {
			return errors.New("config: tracing.endpoint must not carry credentials in the URL: use tracing.headers")
		}
	}
	if r := t.SampleRatio; r != nil && (*r < 0 || *r > 1) {
		return fmt.Errorf("config: tracing.sample_ratio %v is not between 0 and 1", *r)
	}
	if t.Timeout < 0 {
		return errors.New("config: tracing.timeout must not be negative")
	}
	for k := range t.Headers {
		if k == "" || strings.ContainsAny(k, " :\r\n") {
			return fmt.Errorf("config: tracing.headers: %q is not a header name", k)
		}
	}
	return nil
}
