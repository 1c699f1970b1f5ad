package gvisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/gvisor/ginit/gwire"
	"github.com/warden-sandbox/warden/internal/isolation/diskimg"
)

// Volumes (Spec.Volumes, Capabilities.Volumes).
//
// A volume is a host directory (a mounted ext4 image, internal/volume). The
// bundle binds the i-th at gwire.VolumeDir/<i> (nosuid, nodev, "ro" when
// read-only), and the init moves it to its target once the layers'
// overlays, /tmp and /dev/shm are mounted, so that none covers it (a volume
// may be under a deeper target such as /usr), then sets nosuid, nodev and,
// when asked, read-only on the mount (ginit's mountVolumes).
//
// runsc's --overlay2=root:... puts gVisor's overlay on the root mount only:
// bind mounts such as these are served by the gofer as they are, so every
// write reaches the host's file (--file-access-mounts defaults to shared:
// no caching of their contents in the sentry), and the volume's own
// filesystem enforces its size (ENOSPC reaches the writer). A read-only
// volume is refused by the gofer (it opens the mount read-only) as well as
// by the sentry's mount flag.
//
// Ids: the sentry's user namespace is the host's (wardend drives runsc as
// root), and the gofer creates files with the ids of the process inside,
// so a file the sandbox's user (uid 1000) writes is owned by uid 1000 on
// the host, as on the native backend, whose idmapped volume mounts map the
// sandbox's ids to the same host ids: a volume moves between backends.
//
// A sandbox with volumes cannot be forked (each fork would write to the
// same volumes, which the daemon attached to the source only): Snapshot
// refuses it. Its pause and resume keep the volumes (the bundle is the
// same); a resume checks, like a start, that each source is still a
// mounted filesystem, never a bare mount point on the host's disk.

// checkVolumeTargets refuses a volume at or under the backend's own
// directory in the sandbox (/.warden: the control directory's mount point,
// hidden once the init is done).
func checkVolumeTargets(vols []backend.VolumeMount) error {
	for _, v := range vols {
		if v.Target == gwire.Dir || strings.HasPrefix(v.Target, gwire.Dir+"/") {
			return fmt.Errorf("%w: volume path %q is under %s, the backend's own directory", backend.ErrInvalidSpec, v.Target, gwire.Dir)
		}
	}
	return nil
}

// volumePoints makes the mount points of n volumes in the scaffold.
func volumePoints(scaffold string, n int) error {
	for i := 0; i < n; i++ {
		if err := os.MkdirAll(filepath.Join(scaffold, strings.TrimPrefix(gwire.VolumeDir, "/"), strconv.Itoa(i)), 0o700); err != nil {
			return err
		}
	}
	return nil
}

// volumeMounts are the bundle's bind mounts of vols.
func volumeMounts(vols []backend.VolumeMount) []specs.Mount {
	var out []specs.Mount
	for i, v := range vols {
		mode := "rw"
		if v.ReadOnly {
			mode = "ro"
		}
		out = append(out, specs.Mount{Destination: gwire.VolumeDir + "/" + strconv.Itoa(i), Type: "bind", Source: v.Source,
			Options: []string{"bind", mode, "nosuid", "nodev"}})
	}
	return out
}

// volumeConfig tells the init where each volume goes.
func volumeConfig(vols []backend.VolumeMount) []gwire.Volume {
	var out []gwire.Volume
	for i, v := range vols {
		out = append(out, gwire.Volume{Target: v.Target, Source: gwire.VolumeDir + "/" + strconv.Itoa(i), ReadOnly: v.ReadOnly})
	}
	return out
}

// checkVolumes refuses to boot or restore bx while a volume's source is not
// a mounted filesystem: its bare mount point (after a host reboot, say)
// would put the sandbox's writes on the host's disk, past any quota.
func (b *Backend) checkVolumes(bx *box) error {
	spec, err := b.specOf(bx)
	if err != nil {
		return err
	}
	for _, v := range spec.Volumes {
		if !diskimg.Mounted(v.Source) {
			return fmt.Errorf("volume at %s: %s is not mounted on the host", v.Target, v.Source)
		}
	}
	return nil
}
