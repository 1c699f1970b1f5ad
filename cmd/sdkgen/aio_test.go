package main

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestPythonAsyncClientIsCurrent fails when sdk/python/warden/aio.py's generated part (the
// asyncio copies of client.py's request building, written by sdk/python/tools/gen_aio.py)
// is out of date, so the Python SDK's two clients cannot drift apart.
func TestPythonAsyncClientIsCurrent(t *testing.T) {
	var py string
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil && exec.Command(path, "-c", "import sys; assert sys.version_info >= (3, 11)").Run() == nil {
			py = path
			break
		}
	}
	if py == "" {
		t.Skip("SKIP: no python3 3.11+ to run sdk/python/tools/gen_aio.py --check (the SDK suite runs it too)")
	}
	cmd := exec.Command(py, filepath.Join("..", "..", "sdk", "python", "tools", "gen_aio.py"), "--check")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}
