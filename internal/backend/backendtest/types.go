package backendtest

import (
	"net"

	processpb "github.com/warden-sandbox/warden/internal/agentpb/process"
)

type netConn = net.Conn

type processReq = processpb.ConnectRequest

func newConnectRequest(pid uint32) *processpb.ConnectRequest {
	return &processpb.ConnectRequest{
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}},
		Replay:  true,
	}
}
