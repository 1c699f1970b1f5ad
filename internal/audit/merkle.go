package audit

import "github.com/warden-sandbox/warden/sdk/go/auditcheck"

// Tree is the RFC 6962 Merkle tree over the events' hashes that signed
// checkpoints commit to. It is the SDK's (sdk/go/auditcheck), which
// verifies those checkpoints: one implementation signs and checks.
type Tree = auditcheck.Tree
