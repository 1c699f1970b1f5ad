package cli

func principalsCmd() *command {
	return &command{
		name:  "principals",
		short: "Create and list principals (users and agents)",
		long: "Manage principals: the users and agents that API keys belong to. Every principals\n" +
			"command needs an admin key.",
		subs: []*command{
			principalsCreateCmd(),
			principalsLsCmd(),
		},
	}
}
