//go:build ignore

// Added to gVisor's runsc/boot/filter/config by Warden's
// scripts/install-runsc.sh: the sentry's seccomp programs for the options
// Warden runs runsc with, compiled at build time.

package config

import (
	"gvisor.dev/gvisor/pkg/seccomp"
	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
)

// WardenPrecompiledPrograms is PrecompiledPrograms for only the options keep
// accepts.
func WardenPrecompiledPrograms(keep func(Options) bool) ([]precompiledseccomp.Program, error) {
	opts, err := optionsToPrecompile()
	if err != nil {
		return nil, err
	}
	var programs []precompiledseccomp.Program
	for _, opt := range opts {
		if !keep(opt) {
			continue
		}
		opt := opt
		var varNames []string
		for varName := range opt.Vars() {
			varNames = append(varNames, varName)
		}
		program, err := precompiledseccomp.Precompile(opt.ConfigKey(), varNames, func(vars precompiledseccomp.Values) *seccomp.Program {
			seccompOpts := SeccompOptions(opt)
			rules, denyRules := rules(opt, vars)
			return &seccomp.Program{
				RuleSets: []seccomp.RuleSet{
					{Rules: denyRules.Copy()},
					{Rules: rules.Copy(), Action: seccomp.Allow},
				},
				Options: seccompOpts,
			}
		})
		if err != nil {
			return nil, err
		}
		programs = append(programs, program)
	}
	return programs, nil
}
