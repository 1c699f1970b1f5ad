package cli

func keysCmd() *command {
	return &command{
		name:  "keys",
		short: "Create, list and revoke API keys",
		long: "Manage API keys. An admin key manages every principal's keys; a key with keys:manage\n" +
			"manages its own principal's keys, granting only scopes it holds itself.",
		subs: []*command{
			keysCreateCmd(),
			keysLsCmd(),
			keysRevokeCmd(),
		},
	}
}
