package native

// SetSudoAttach makes backends attach their sudo fs on the host, as on
// kernels before 6.15, until the returned func is called.
func SetSudoAttach(on bool) (restore func()) {
	old := sudoAttach
	sudoAttach = on
	return func() { sudoAttach = old }
}

// SudoDir is where an attached sudo fs is, under the run directory.
const SudoDir = sudoDir
