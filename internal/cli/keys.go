package cli

func keysCmd() *command {
	return &command{
		name:  "keys",
		short: "Create, list and revoke API keys",
		long:  "Manage API keys. Every keys command needs an admin key.",
		subs: []*command{
			keysCreateCmd(),
			keysLsCmd(),
			keysRevokeCmd(),
		},
	}
}
