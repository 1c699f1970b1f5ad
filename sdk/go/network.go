package warden

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Network modes.
const (
	NetworkNone      = "none"      // loopback only (the default)
	NetworkAllowlist = "allowlist" // egress only to the rules' hosts, CIDRs and ports
	NetworkOpen      = "open"      // egress to any public address
)

// NetworkRule allows egress to a host name (exact or "*.example.com") or a CIDR, on ports
// (default 80 and 443).
type NetworkRule struct {
	Host  string `json:"host,omitempty"`
	CIDR  string `json:"cidr,omitempty"`
	Ports []int  `json:"ports,omitempty"`
}

// NetworkPolicy is a sandbox's network policy. Whatever the mode, the host's loopback,
// private ranges, cloud metadata addresses and other sandboxes stay unreachable.
type NetworkPolicy struct {
	Mode  string        `json:"mode"`
	Allow []NetworkRule `json:"allow,omitempty"`
}

// NetworkStats are a sandbox's traffic counters.
type NetworkStats struct {
	Mode           string          `json:"mode"`
	BytesOut       uint64          `json:"bytes_out"`
	BytesIn        uint64          `json:"bytes_in"`
	TCPConnections uint64          `json:"tcp_connections"`
	UDPFlows       uint64          `json:"udp_flows"`
	ActiveFlows    int64           `json:"active_flows"`
	DialErrors     uint64          `json:"dial_errors"`
	Denied         uint64          `json:"denied"`
	RecentDenials  []NetworkDenial `json:"recent_denials,omitempty"`
	DNSQueries     uint64          `json:"dns_queries"`
	DNSDenied      uint64          `json:"dns_denied"`
	DNSFiltered    uint64          `json:"dns_filtered"`
}

// NetworkDenial is one refused connection or lookup.
type NetworkDenial struct {
	Time   time.Time `json:"time"`
	Proto  string    `json:"proto"` // tcp, udp or dns
	Target string    `json:"target"`
	Reason string    `json:"reason"`
}

// NetworkStatus is a sandbox's policy and, while it runs, its traffic.
type NetworkStatus struct {
	Policy NetworkPolicy `json:"policy"`
	Stats  *NetworkStats `json:"stats,omitempty"`
}

// GetNetwork returns a sandbox's network policy and traffic counters.
func (c *Client) GetNetwork(ctx context.Context, id string) (NetworkStatus, error) {
	var st NetworkStatus
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/sandboxes/%s/network", id), idempotent: true}, &st); err != nil {
		return st, fmt.Errorf("get network of sandbox %s: %w", id, err)
	}
	return st, nil
}

// SetNetwork replaces a running sandbox's network policy; new connections follow it at once.
func (c *Client) SetNetwork(ctx context.Context, id string, p NetworkPolicy) (NetworkStatus, error) {
	var st NetworkStatus
	if err := c.do(ctx, &request{method: http.MethodPut, path: pathf("/v1/sandboxes/%s/network", id), json: p, idempotent: true}, &st); err != nil {
		return st, fmt.Errorf("set network of sandbox %s: %w", id, err)
	}
	return st, nil
}
