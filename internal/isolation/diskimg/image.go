package diskimg

// MountImage attaches an existing ext4 image file to a free loop device
// (autoclear: it detaches with the last unmount) and mounts it on target,
// nosuid, nodev, noatime. Persistent volumes (internal/volume) use it for
// images they format and keep themselves. On failure nothing is attached.
func MountImage(img, target string) error { return attachAndMount(img, target) }
