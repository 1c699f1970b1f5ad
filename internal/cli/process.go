package cli

func processCmd() *command {
	return &command{
		name:  "process",
		short: "List, attach to and signal processes in a sandbox",
		long: "Work with the processes started in a sandbox through the API ('warden exec'). They keep\n" +
			"running when the client that started them goes away.",
		subs: []*command{
			processLsCmd(),
			processAttachCmd(),
			processSignalCmd(),
		},
	}
}
