package backendtest

import (
	"os"
	"strconv"
	"time"
)

// timeScale is WARDEN_TEST_TIME_SCALE, or 1: scripts/cgroup2-vm.sh runs the
// suite in an emulated VM (QEMU's TCG), many times slower than the machines
// the suite's deadlines are made for, and stretches them by this factor.
func timeScale() float64 {
	if ts, err := strconv.ParseFloat(os.Getenv("WARDEN_TEST_TIME_SCALE"), 64); err == nil && ts > 1 {
		return ts
	}
	return 1
}

// scaled is d stretched by timeScale.
func scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * timeScale())
}
