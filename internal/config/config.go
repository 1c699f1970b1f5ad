// Package config is wardend's configuration: defaults, a YAML file
// (/etc/warden/wardend.yaml by default), WARDEN_* environment overrides and
// command-line flags, applied in that order, then validated.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Version is the config file format this build reads.
const Version = 1

// DefaultE2BListen is where the E2B-compatible API listens unless told
// otherwise, so that E2B's SDKs work against a fresh wardend.
const DefaultE2BListen = "127.0.0.1:3000"

// DefaultFile is where wardend looks for its config file.
const DefaultFile = "/etc/warden/wardend.yaml"

// Config is wardend's configuration.
type Config struct {
	Version int `yaml:"version"`
	// Listen is the TCP address of the HTTP API ("" disables TCP).
	Listen string `yaml:"listen"`
	// Socket is the unix socket of the HTTP API ("" disables it).
	Socket string `yaml:"socket"`
	// SocketGroup is the group that may use the socket (mode 0660,
	// root:SocketGroup; created as a system group when missing); ""
	// keeps it root-only (0600).
	SocketGroup string `yaml:"socket_group"`
	// E2BListen is the TCP address of the E2B-compatible API (control
	// plane and sandbox traffic on one port; default 127.0.0.1:3000, ""
	// disables it).
	E2BListen string `yaml:"e2b_listen"`
	// E2BDomain, when set, turns on E2B's host routing: requests to
	// {port}-{sandboxID}.{E2BDomain} on the E2B listener reach that
	// sandbox's port (for users with wildcard DNS), and create/connect
	// responses carry it as "domain".
	E2BDomain string `yaml:"e2b_domain"`
	// PreviewDomain, when set, serves sandbox ports by host on the API
	// listener: requests for {port}-{sandboxID}.{PreviewDomain} reach that
	// port of the sandbox (for users with wildcard DNS pointing at wardend),
	// and preview URLs come in that form as well as by path.
	PreviewDomain string `yaml:"preview_domain"`
	// Network configures sandbox networking (see docs/networking.md).
	Network NetworkConfig `yaml:"network"`
	// Registries lists the registries image pulls may reach on internal
	// addresses or over plain HTTP (see RegistriesConfig).
	Registries RegistriesConfig `yaml:"registries"`
	// Images bounds what one image import may download and write.
	Images ImagesConfig `yaml:"images"`
	// MCP configures the MCP gateway's reach (docs/mcp.md).
	MCP MCPConfig `yaml:"mcp"`
	// LLM configures the LLM gateway (docs/llm.md).
	LLM LLMConfig `yaml:"llm"`
	// Webhooks are the signed outgoing webhooks (docs/webhooks.md).
	Webhooks WebhooksConfig `yaml:"webhooks"`
	// Monitor configures the Agent Monitor's retention (docs/monitor.md).
	Monitor MonitorConfig `yaml:"monitor"`
	// Usage configures the signed audit checkpoints (docs/security.md).
	Usage UsageConfig `yaml:"usage"`
	// Audit configures the audit log's retention (docs/security.md).
	Audit AuditConfig `yaml:"audit"`
	// Agents configures hosted agents' runs (docs/agents.md).
	Agents AgentsConfig `yaml:"agents"`
	// DebugListen, when set, serves Go's profiler (net/http/pprof) on
	// this address, for profiling the daemon. Keep it on loopback: it has
	// no authentication.
	DebugListen string `yaml:"debug_listen"`
	// PublicURL is the base of presigned URLs (default http://<listen>).
	PublicURL string `yaml:"public_url"`
	// StateDir holds the database, keys, audit checkpoint and templates.
	StateDir string `yaml:"state_dir"`
	// RunDir holds per-sandbox runtime state.
	RunDir string `yaml:"run_dir"`
	// Backend is the default isolation backend of new sandboxes: one this
	// build registers, native or gvisor (a create may ask for another with
	// "isolation").
	Backend string `yaml:"backend"`
	// Backends holds each backend's own section (backends.<id>), which the
	// backend decodes itself (see backends.go and BackendDecoder).
	Backends map[string]yaml.Node `yaml:"backends"`
	// GVisor is the older form of backends.gvisor (disabled, directfs);
	// it still loads.
	GVisor GVisorConfig `yaml:"gvisor"`
	// AgentPath is the warden-agent binary (default: next to wardend).
	AgentPath string `yaml:"agent_path"`
	// Landlock: require, best-effort or off; the older form of
	// backends.native.landlock, which it overrides when set (native's
	// default is best-effort).
	Landlock string `yaml:"landlock"`
	// DefaultTimeout and MaxTimeout bound sandbox lifetimes.
	DefaultTimeout time.Duration `yaml:"default_timeout"`
	MaxTimeout     time.Duration `yaml:"max_timeout"`
	// PausedRetention deletes a sandbox paused that long, unless its
	// create asked for its own retention (docs/persistence.md); 0 keeps
	// paused sandboxes until killed.
	PausedRetention time.Duration `yaml:"paused_retention"`
	// MaxSandboxes bounds sandboxes running at once (0: backend limit).
	MaxSandboxes int `yaml:"max_sandboxes"`
	// PoolSize is how many base-template sandboxes are kept started for
	// creates with default settings to claim (0 disables the warm pool).
	PoolSize int `yaml:"pool_size"`
	// LogLevel is debug, info, warn or error; LogFormat json or text.
	LogLevel  string `yaml:"log_level"`
	LogFormat string `yaml:"log_format"`
	// RateLimit is each principal's sustained requests per second (0: the
	// API's default; negative: no limit) and RateBurst its burst.
	RateLimit float64 `yaml:"rate_limit"`
	RateBurst int     `yaml:"rate_burst"`
	// HeaderTimeout bounds how long a client may take to send a request's
	// headers (slow clients, slowloris); IdleTimeout how long a keep-alive
	// connection may sit idle.
	HeaderTimeout time.Duration `yaml:"header_timeout"`
	IdleTimeout   time.Duration `yaml:"idle_timeout"`
	// ShutdownTimeout bounds how long open requests may finish at shutdown.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// Limits bounds what clients may hold open on the TCP listeners.
	Limits LimitsConfig `yaml:"limits"`
	// Metrics configures GET /metrics.
	Metrics MetricsConfig `yaml:"metrics"`
	// Governance configures policies and approvals (governance.go).
	Governance GovernanceConfig `yaml:"governance"`
	// Tracing configures OpenTelemetry traces (tracing.go, docs/tracing.md).
	Tracing TracingConfig `yaml:"tracing"`
}

// LimitsConfig bounds what clients may hold open on the TCP listeners (the
// API, which also serves previews, and the E2B API), before and after
// authentication. The unix socket (root only) is exempt from the
// connection caps.
type LimitsConfig struct {
	// MaxConns caps the connections open at once on the TCP listeners
	// together, MaxConnsPerIP those from one client address (an IPv4
	// address or IPv6 /64; loopback counts like any other: raise it or set
	// 0 behind a reverse proxy on the same host). 0: no cap. Over a cap a
	// connection gets 503 (global) or 429 (per address) and is closed.
	MaxConns      int `yaml:"max_conns"`
	MaxConnsPerIP int `yaml:"max_conns_per_ip"`
	// BodyTimeout and BodyMinRate are the minimum rate of request bodies:
	// within every BodyTimeout, at least BodyMinRate bytes per second of
	// it (or the rest of the body) must arrive, else the request fails and
	// its connection is closed. StreamBodyTimeout replaces it for
	// authenticated uploads (files, archives, templates, stdin, preview
	// requests with an API key): any progress every StreamBodyTimeout.
	BodyTimeout       time.Duration `yaml:"body_timeout"`
	BodyMinRate       int64         `yaml:"body_min_rate"`
	StreamBodyTimeout time.Duration `yaml:"stream_body_timeout"`
	// PreviewWebSocketsPerPort and PreviewWebSocketsPerClient cap the
	// upgraded (WebSocket) connections held at once through the preview
	// proxy to one sandbox port, and from one client address to all
	// ports. 0: no cap. Over a cap the upgrade is refused with 429.
	PreviewWebSocketsPerPort   int `yaml:"preview_websockets_per_port"`
	PreviewWebSocketsPerClient int `yaml:"preview_websockets_per_client"`
}

// MetricsConfig configures GET /metrics, which needs an API key with the
// metrics:read scope on the API listener.
type MetricsConfig struct {
	// Listen, when set, also serves /metrics without authentication on
	// this address (keep it on loopback or a private network).
	Listen string `yaml:"listen"`
	// PerSandboxLabels labels the per-sandbox series (network) with the
	// sandbox's id; by default they are summed over sandboxes, so that
	// a metrics reader does not learn every tenant's sandbox ids.
	PerSandboxLabels bool `yaml:"per_sandbox_labels"`
}

// Default returns the defaults.
func Default() Config {
	return Config{
		Version:         Version,
		Listen:          "127.0.0.1:7070",
		Socket:          "/run/warden/wardend.sock",
		E2BListen:       DefaultE2BListen,
		SocketGroup:     "warden",
		StateDir:        "/var/lib/warden",
		RunDir:          "/run/warden",
		Backend:         "native",
		DefaultTimeout:  5 * time.Minute,
		MaxTimeout:      24 * time.Hour,
		PoolSize:        2,
		LogLevel:        "info",
		LogFormat:       "text",
		ShutdownTimeout: 10 * time.Second,
		HeaderTimeout:   10 * time.Second,
		IdleTimeout:     2 * time.Minute,
		Images:          DefaultImages(),
		Limits: LimitsConfig{
			MaxConns: 1024, MaxConnsPerIP: 64,
			BodyTimeout: 30 * time.Second, BodyMinRate: 1024, StreamBodyTimeout: 5 * time.Minute,
			PreviewWebSocketsPerPort: 256, PreviewWebSocketsPerClient: 32,
		},
	}
}

// NetworkConfig is the operator's part of sandbox networking.
// GVisorConfig configures the gvisor backend. It is used when runsc (built
// by scripts/install-runsc.sh) is installed, unless Disabled.
type GVisorConfig struct {
	Disabled bool `yaml:"disabled"`
	// DirectFS lets gVisor's sentry open files itself: faster, with a
	// larger blast radius if the sentry falls (see the gvisor backend's
	// package documentation).
	DirectFS bool `yaml:"directfs"`
}

// MCPConfig configures the MCP gateway (docs/mcp.md).
type MCPConfig struct {
	// AllowHosts are the administrator's exceptions to the refusals of the
	// dialer remote connectors use (loopback, link-local and metadata,
	// private, the host's own addresses): "host", "host:port" or a CIDR.
	AllowHosts []string `yaml:"allow_hosts"`
	// AllowHTTP lets remote connectors use plain http:// URLs (default:
	// https only).
	AllowHTTP bool `yaml:"allow_http"`
	// AllowedOrigins are browser origins (scheme://host[:port]) that may
	// call /mcp/v/{server} besides wardend's own.
	AllowedOrigins []string `yaml:"allowed_origins"`
}

type NetworkConfig struct {
	// Disabled turns sandbox networking off: every sandbox has loopback
	// only, whatever it asks for.
	Disabled bool `yaml:"disabled"`
	// DNSUpstream is the resolver Warden's DNS forwards allowed names to
	// ("host[:port]", comma-separated); default: the host's resolv.conf.
	DNSUpstream string `yaml:"dns_upstream"`
	// AllowPrivate lists private ranges (CIDRs) sandboxes may reach when
	// their policy allows them; by default none is reachable.
	AllowPrivate []string `yaml:"allow_private"`
	// Deny lists more ranges no sandbox may reach.
	Deny []string `yaml:"deny"`
}

// Load builds the configuration from args (flags) and getenv. The file is
// the one named by --config or WARDEN_CONFIG, else DefaultFile if it exists.
func Load(args []string, getenv func(string) string, fs *flag.FlagSet) (Config, error) {
	c := Default()
	file := fs.String("config", "", "config file (YAML; default "+DefaultFile+" if it exists; env WARDEN_CONFIG)")
	listen := fs.String("listen", "", "TCP address of the HTTP API, \"\" to disable (default 127.0.0.1:7070; env WARDEN_LISTEN)")
	socket := fs.String("socket", "", "unix socket of the HTTP API, \"\" to disable (default /run/warden/wardend.sock; env WARDEN_SOCKET)")
	socketGroup := fs.String("socket-group", "", "group allowed to use the unix socket (0660), created when missing; \"\" keeps it root-only (default warden; env WARDEN_SOCKET_GROUP)")
	stateDir := fs.String("state-dir", "", "state directory: database, keys, templates (default /var/lib/warden; env WARDEN_STATE_DIR)")
	runDir := fs.String("run-dir", "", "runtime directory (default /run/warden; env WARDEN_RUN_DIR)")
	agent := fs.String("agent", "", "warden-agent binary (default: next to wardend; env WARDEN_AGENT)")
	e2bListen := fs.String("e2b-listen", "", "TCP address of the E2B-compatible API, \"\" to disable (default "+DefaultE2BListen+"; env WARDEN_E2B_LISTEN)")
	e2bDomain := fs.String("e2b-domain", "", "domain of E2B host routing ({port}-{id}.DOMAIN); \"\" (the default) routes by headers only (env WARDEN_E2B_DOMAIN)")
	previewDomain := fs.String("preview-domain", "", "serve sandbox ports at {port}-{id}.DOMAIN as well as by path; \"\" (the default) serves them by path only (env WARDEN_PREVIEW_DOMAIN)")
	debugListen := fs.String("debug-listen", "", "serve Go's profiler (pprof) on this address, such as 127.0.0.1:6060; no authentication (env WARDEN_DEBUG_LISTEN)")
	publicURL := fs.String("public-url", "", "base URL for presigned file URLs (env WARDEN_PUBLIC_URL)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (env WARDEN_LOG_LEVEL)")
	logFormat := fs.String("log-format", "", "text or json (env WARDEN_LOG_FORMAT)")
	landlock := fs.String("landlock", "", "require, best-effort or off (env WARDEN_LANDLOCK)")
	backendFlag := fs.String("backend", "", "default isolation of new sandboxes: native or gvisor (env WARDEN_BACKEND)")
	maxSandboxes := fs.Int("max-sandboxes", -1, "sandboxes running at once, 0 for the backend's limit (env WARDEN_MAX_SANDBOXES)")
	headerTimeout := fs.Duration("header-timeout", 0, "how long a client may take to send request headers (default 10s)")
	metricsListen := fs.String("metrics-listen", "", "also serve /metrics without authentication on this address, such as 127.0.0.1:9090 (env WARDEN_METRICS_LISTEN)")
	poolSize := fs.Int("pool-size", -1, "warm pool: base-template sandboxes kept started for default creates, 0 to disable (default 2; env WARDEN_POOL_SIZE)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	path := first(*file, getenv("WARDEN_CONFIG"))
	if path == "" {
		if _, err := os.Stat(DefaultFile); err == nil {
			path = DefaultFile
		}
	}
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("read config: %w", err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(raw)))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
			return c, fmt.Errorf("parse config %s: %w", path, err)
		}
		if c.Version != Version {
			return c, fmt.Errorf("config %s: version %d is not supported (want %d)", path, c.Version, Version)
		}
	}
	set := func(dst *string, flagVal, env string) {
		if v := getenv(env); v != "" {
			*dst = v
		}
		if flagVal != "" {
			*dst = flagVal
		}
	}
	set(&c.Listen, *listen, "WARDEN_LISTEN")
	set(&c.Socket, *socket, "WARDEN_SOCKET")
	set(&c.SocketGroup, *socketGroup, "WARDEN_SOCKET_GROUP")
	set(&c.StateDir, *stateDir, "WARDEN_STATE_DIR")
	set(&c.RunDir, *runDir, "WARDEN_RUN_DIR")
	set(&c.AgentPath, *agent, "WARDEN_AGENT")
	set(&c.PublicURL, *publicURL, "WARDEN_PUBLIC_URL")
	set(&c.E2BListen, *e2bListen, "WARDEN_E2B_LISTEN")
	set(&c.E2BDomain, *e2bDomain, "WARDEN_E2B_DOMAIN")
	set(&c.PreviewDomain, *previewDomain, "WARDEN_PREVIEW_DOMAIN")
	set(&c.DebugListen, *debugListen, "WARDEN_DEBUG_LISTEN")
	set(&c.LogLevel, *logLevel, "WARDEN_LOG_LEVEL")
	set(&c.LogFormat, *logFormat, "WARDEN_LOG_FORMAT")
	set(&c.Landlock, *landlock, "WARDEN_LANDLOCK")
	set(&c.Backend, *backendFlag, "WARDEN_BACKEND")
	set(&c.Metrics.Listen, *metricsListen, "WARDEN_METRICS_LISTEN")
	// An explicitly empty --listen or --socket disables that endpoint.
	fs.Visit(func(f *flag.Flag) {
		switch {
		case f.Name == "listen" && *listen == "":
			c.Listen = ""
		case f.Name == "socket" && *socket == "":
			c.Socket = ""
		case f.Name == "e2b-listen" && *e2bListen == "":
			c.E2BListen = ""
		case f.Name == "socket-group" && *socketGroup == "":
			c.SocketGroup = ""
		}
	})
	if v := getenv("WARDEN_MAX_SANDBOXES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return c, fmt.Errorf("WARDEN_MAX_SANDBOXES: %w", err)
		}
		c.MaxSandboxes = n
	}
	if *maxSandboxes >= 0 {
		c.MaxSandboxes = *maxSandboxes
	}
	if v := getenv("WARDEN_POOL_SIZE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return c, fmt.Errorf("WARDEN_POOL_SIZE: %w", err)
		}
		c.PoolSize = n
	}
	if *poolSize >= 0 {
		c.PoolSize = *poolSize
	}
	if *headerTimeout > 0 {
		c.HeaderTimeout = *headerTimeout
	}
	return c, c.Validate()
}

func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.Listen == "" && c.Socket == "" {
		return errors.New("config: neither listen nor socket is set: the API would be unreachable")
	}
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			return fmt.Errorf("config: listen %q: %w", c.Listen, err)
		}
	}
	if c.E2BDomain != "" && (strings.ContainsAny(c.E2BDomain, "/: ") || strings.HasPrefix(c.E2BDomain, ".") || !strings.Contains(c.E2BDomain, ".") && c.E2BDomain != "localhost") {
		return fmt.Errorf("config: e2b_domain %q is not a domain name", c.E2BDomain)
	}
	for _, list := range [][]string{c.Network.AllowPrivate, c.Network.Deny} {
		for _, cidr := range list {
			if _, err := netip.ParsePrefix(cidr); err != nil {
				return fmt.Errorf("config: network: %q is not a CIDR: %w", cidr, err)
			}
		}
	}
	if c.PreviewDomain != "" && !domainName(c.PreviewDomain) {
		return fmt.Errorf("config: preview_domain %q is not a domain name", c.PreviewDomain)
	}
	if c.E2BListen != "" {
		if _, _, err := net.SplitHostPort(c.E2BListen); err != nil {
			return fmt.Errorf("config: e2b_listen %q: %w", c.E2BListen, err)
		}
		if c.E2BListen == c.Listen {
			return fmt.Errorf("config: e2b_listen %q is the same address as listen", c.E2BListen)
		}
	}
	if c.SocketGroup != "" && !groupName(c.SocketGroup) {
		return fmt.Errorf("config: socket_group %q is not a group name", c.SocketGroup)
	}
	if c.StateDir == "" || c.RunDir == "" {
		return errors.New("config: state_dir and run_dir must be set")
	}
	if err := c.validateBackends(); err != nil {
		return err
	}
	switch c.Landlock {
	case "", "require", "best-effort", "off":
	default:
		return fmt.Errorf("config: landlock must be require, best-effort or off, not %q", c.Landlock)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("config: log_level %q is not debug, info, warn or error", c.LogLevel)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("config: log_format %q is not text or json", c.LogFormat)
	}
	if c.PausedRetention < 0 {
		return fmt.Errorf("config: paused_retention must not be negative")
	}
	if c.DefaultTimeout <= 0 || c.MaxTimeout < c.DefaultTimeout {
		return errors.New("config: default_timeout must be positive and at most max_timeout")
	}
	if c.MaxSandboxes < 0 {
		return errors.New("config: max_sandboxes must not be negative")
	}
	if c.HeaderTimeout <= 0 || c.IdleTimeout <= 0 {
		return errors.New("config: header_timeout and idle_timeout must be positive")
	}
	if c.PoolSize < 0 || c.PoolSize > 1000 {
		return errors.New("config: pool_size must be between 0 and 1000")
	}
	if err := c.validateTracing(); err != nil {
		return err
	}
	if err := c.validateAudit(); err != nil {
		return err
	}
	if err := c.Agents.validate(); err != nil {
		return err
	}
	if err := c.validateGovernance(); err != nil {
		return err
	}
	if err := c.validateImages(); err != nil {
		return err
	}
	if l := c.Limits; l.MaxConns < 0 || l.MaxConnsPerIP < 0 || l.PreviewWebSocketsPerPort < 0 || l.PreviewWebSocketsPerClient < 0 {
		return errors.New("config: limits: connection caps must not be negative (0: no cap)")
	}
	if l := c.Limits; l.BodyTimeout <= 0 || l.StreamBodyTimeout <= 0 || l.BodyMinRate < 0 {
		return errors.New("config: limits: body_timeout and stream_body_timeout must be positive, body_min_rate not negative")
	}
	if c.Metrics.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Metrics.Listen); err != nil {
			return fmt.Errorf("config: metrics.listen %q: %w", c.Metrics.Listen, err)
		}
		if c.Metrics.Listen == c.Listen || c.Metrics.Listen == c.E2BListen {
			return fmt.Errorf("config: metrics.listen %q is the address of another listener", c.Metrics.Listen)
		}
	}
	return nil
}

// domainName reports whether d looks like a domain name (for the host
// routing domains): no scheme, port, path or space, not starting with a dot,
// and with a dot unless it is localhost.
func domainName(d string) bool {
	return !strings.ContainsAny(d, "/: ") && !strings.HasPrefix(d, ".") && (strings.Contains(d, ".") || d == "localhost")
}

// groupName reports whether g is a portable group name (what groupadd
// accepts without complaint): a lower-case letter or underscore, then
// lower-case letters, digits, underscores or dashes.
func groupName(g string) bool {
	if len(g) == 0 || len(g) > 32 {
		return false
	}
	for i, r := range g {
		ok := r >= 'a' && r <= 'z' || r == '_' || i > 0 && (r >= '0' && r <= '9' || r == '-')
		if !ok {
			return false
		}
	}
	return true
}
