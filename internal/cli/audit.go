package cli

func auditCmd() *command {
	return &command{
		name:  "audit",
		short: "List, verify and export the audit log",
		long:  "Read the daemon's hash-chained audit log. Needs a key with the audit:read scope.",
		subs: []*command{
			auditLsCmd(),
			auditVerifyCmd(),
			auditExportCmd(),
		},
	}
}
