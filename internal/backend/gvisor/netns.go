package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/sbinit"
)

// makeNetNS creates a network namespace with its loopback up and binds it
// at path. gVisor's kernel (runsc --network=sandbox) takes the devices it
// finds there when it boots; wardend adds its TUN device (NetNS) between
// Create and Start. The work happens on a locked thread of a goroutine of
// its own; were the switch back to fail, the thread dies with it.
func makeNetNS(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o600)
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: own namespace: %w", err)
			return
		}
		defer unix.Close(self)
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: unshare: %w", err)
			return
		}
		err = sbinit.LoopbackUp()
		if err == nil {
			err = unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, "")
		}
		if serr := unix.Setns(self, unix.CLONE_NEWNET); serr != nil {
			errc <- errors.Join(err, fmt.Errorf("netns: return to own namespace: %w", serr)) // the thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	if err := <-errc; err != nil {
		unix.Unmount(path, unix.MNT_DETACH)
		os.Remove(path)
		return fmt.Errorf("netns: %w", err)
	}
	return nil
}

// ErrNoNetNS is NetNS's error for a sandbox created without Spec.Network.
var ErrNoNetNS = errors.New("the sandbox was created without a network namespace of its own")

// NetNS returns the sandbox's network namespace (an fd the caller owns) for
// the daemon to set its devices up before Start, or ErrNoNetNS.
func (b *Backend) NetNS(ctx context.Context, h backend.Handle) (*os.File, error) {
	bx, err := b.lookup(h)
	if err != nil {
		return nil, err
	}
	if !bx.state.Network {
		return nil, fmt.Errorf("%s: %w", bx.id, ErrNoNetNS)
	}
	f, err := os.OpenFile(bx.state.netns(), os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: netns: %w", bx.id, err)
	}
	return f, nil
}
