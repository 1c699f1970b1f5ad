package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/warden-sandbox/warden/internal/agentclient"
)

// ErrAgentDial marks a failure to reach a sandbox's agent when dialling one
// of its ports, as opposed to the agent's refusal (an
// *agentclient.PortError) or the program's own failure.
var ErrAgentDial = errors.New("reach the sandbox agent")

// PortTransport returns the HTTP transport shared by the daemon's reverse
// proxies (preview URLs, E2B user ports). A request's URL host is
// "{sandbox id}:{port}"; its connection goes to that port on the sandbox's
// loopback through the agent (agentclient.DialPort), pooled per sandbox
// and port.
func (m *Manager) PortTransport() *http.Transport {
	m.portOnce.Do(func() {
		m.ports = &http.Transport{
			Proxy: nil, // never an environment proxy: the target is inside the sandbox
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				id, ps, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				port, err := strconv.Atoi(ps)
				if err != nil {
					return nil, err
				}
				agent, err := m.Agent(ctx, id)
				if err != nil {
					return nil, fmt.Errorf("%w: %w", ErrAgentDial, err)
				}
				c, err := agent.DialPort(ctx, port)
				var pe *agentclient.PortError
				if err != nil && !errors.As(err, &pe) {
					err = fmt.Errorf("%w: %w", ErrAgentDial, err)
				}
				return c, err
			},
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   8,
			IdleConnTimeout:       30 * time.Second,
			ExpectContinueTimeout: time.Second,
			// Pass the program's encoding through untouched.
			DisableCompression: true,
		}
	})
	return m.ports
}
