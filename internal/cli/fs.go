package cli

func fsCmd() *command {
	return &command{
		name:  "fs",
		short: "List, read, move, remove and watch files in a sandbox",
		long:  "Work with files in a sandbox. Paths are absolute paths in the sandbox.",
		subs: []*command{
			fsLsCmd(),
			fsCatCmd(),
			fsStatCmd(),
			fsMkdirCmd(),
			fsMvCmd(),
			fsRmCmd(),
			fsWatchCmd(),
		},
	}
}
