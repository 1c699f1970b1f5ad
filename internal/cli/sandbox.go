package cli

func sandboxCmd() *command {
	return &command{
		name:  "sandbox",
		short: "Create, list, inspect, pause and kill sandboxes",
		long: "Manage sandboxes: isolated Linux environments that run commands for agents.\n" +
			"Every command that takes a sandbox ID also takes the name given with 'create --name'\n" +
			"while that sandbox is live.",
		subs: []*command{
			sandboxCreateCmd(),
			sandboxLsCmd(),
			sandboxInspectCmd(),
			sandboxKillCmd(),
			sandboxTimeoutCmd(),
			sandboxPauseCmd(),
			sandboxForkCmd(),
			sandboxResumeCmd(),
			sandboxUsageCmd(),
			sandboxNetCmd(),
			sandboxURLCmd(),
		},
	}
}
