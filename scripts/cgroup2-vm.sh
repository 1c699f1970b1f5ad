#!/usr/bin/env bash
# Runs the cgroup package's tests and the native backend's conformance suite on
# a pure cgroup v2 host, as stock Debian 12 and Ubuntu hosts are (the CI
# machine is cgroup v1): a Debian 12 VM with Debian 12's own kernel (6.1, the
# cloud flavour), booted by QEMU with cgroup_no_v1=all and cgroup2 mounted
# alone at /sys/fs/cgroup. As root:
#
#   scripts/cgroup2-vm.sh                    # both suites
#   WARDEN_VM_NATIVE_RUN='TestConformance/Probes' scripts/cgroup2-vm.sh
#
# What it does:
#  1. installs qemu-system-x86 from apt when qemu-system-x86_64 is missing;
#  2. builds the guest's root filesystem once (debootstrap of bookworm with
#     linux-image-cloud-amd64 and the userland the base template needs:
#     python3, nodejs, git), as an ext4 image made with mkfs.ext4 -d (no loop
#     mount), cached in $WARDEN_VM_CACHE with the kernel and initrd;
#  3. builds the test binaries, warden-agent and warden-probe on this host
#     (static, CGO_ENABLED=0) into a small read-only payload disk with the
#     guest's script;
#  4. boots the VM (root disk in snapshot mode: the cached image never
#     changes), streams its console here and exits with the tests' status.
#
# The guest's root is an ext4 disk, not a share of this host's files: the
# native backend idmaps its template layers, which 9p and Debian 12's tmpfs
# cannot do. QEMU runs with TCG (software emulation) by default: slow, but it
# needs no /dev/kvm. WARDEN_VM_ACCEL=kvm uses KVM where it works.
#
# Environment:
#   WARDEN_VM_CACHE        image cache (default /var/cache/warden-cgroup2-vm)
#   WARDEN_VM_ACCEL        tcg (default) or kvm
#   WARDEN_VM_TIMEOUT      seconds before the VM is killed (default 1500)
#   WARDEN_VM_CGROUP_RUN   -test.run for the cgroup tests (default: all)
#   WARDEN_VM_NATIVE_RUN   -test.run for the native tests (default: all)
#   WARDEN_VM_MIRROR       Debian mirror (default http://deb.debian.org/debian)
#   WARDEN_VM_LANDLOCK     the native tests' Landlock mode (default best-effort:
#                          Debian 12's kernel lacks the Landlock ABI Warden needs)
#   WARDEN_VM_TIME_SCALE   stretch the security probes' time budgets (default 8
#                          under TCG, 1 under KVM)
set -euo pipefail
# All in a function, read whole before it runs: editing this file while it
# runs (it runs for many minutes) cannot change what runs.
main() {
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "cgroup2-vm: run as root (debootstrap, mkfs of the guest's root): sudo $0" >&2
  exit 1
fi
cache=${WARDEN_VM_CACHE:-/var/cache/warden-cgroup2-vm}
accel=${WARDEN_VM_ACCEL:-tcg}
vm_timeout=${WARDEN_VM_TIMEOUT:-1500}
mirror=${WARDEN_VM_MIRROR:-http://deb.debian.org/debian}
cgroup_run=${WARDEN_VM_CGROUP_RUN:-.}
native_run=${WARDEN_VM_NATIVE_RUN:-.}
landlock=${WARDEN_VM_LANDLOCK:-best-effort}
time_scale=${WARDEN_VM_TIME_SCALE:-}
started=$(date +%s)
say() { echo "cgroup2-vm: $*" >&2; }
case "$accel" in
  tcg) qaccel=(-accel tcg,thread=multi -cpu max); time_scale=${time_scale:-8} ;;
  kvm) qaccel=(-accel kvm -cpu host); time_scale=${time_scale:-1} ;;
  *) say "WARDEN_VM_ACCEL must be tcg or kvm, not $accel"; exit 2 ;;
esac

# 1. QEMU and the tools that build the images.
need=()
for pair in qemu-system-x86_64:qemu-system-x86 debootstrap:debootstrap mkfs.ext4:e2fsprogs; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair##*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
command -v qemu-system-x86_64 >/dev/null || { say "qemu-system-x86_64 is still missing after apt-get install qemu-system-x86"; exit 1; }

# 2. The guest's root filesystem, kernel and initrd (cached).
pkgs=linux-image-cloud-amd64,initramfs-tools,kmod,python3,nodejs,git,iproute2,procps,util-linux,mount,e2fsprogs,coreutils
# /sbin/warden-vm-init, the guest's PID 1 on the image: it mounts what the
# initrd did not move over and hands over to the payload's script, which
# does everything else (so changes to the tests never rebuild the image).
read -r -d '' stub <<'EOF' || true
#!/bin/sh
PATH=/usr/sbin:/usr/bin:/sbin:/bin; export PATH
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /payload
if mount -o ro /dev/vdb /payload; then
  exec /bin/sh /payload/guest.sh
fi
echo "WARDEN-VM-RESULT rc=125 (cannot mount the payload disk)"
echo o > /proc/sysrq-trigger
sleep 60
EOF
key=$(printf '%s\n%s\n%s\n' "v1" "$pkgs" "$stub" | sha256sum | cut -c1-16)
img=$cache/rootfs-$key.img
mkdir -p "$cache"
# One build at a time; a run waits for another's build and then uses it.
exec 9>"$cache/lock"
flock 9
if [ ! -s "$img" ] || [ ! -s "$cache/vmlinuz-$key" ] || [ ! -s "$cache/initrd-$key" ]; then
  # Leftovers of an interrupted build (the lock says none is running).
  rm -rf "$cache"/build.*
  build=$(mktemp -d "$cache/build.XXXXXX")
  trap 'rm -rf "$build"' EXIT
  say "building the guest image (debootstrap bookworm from $mirror: a few minutes, once)"
  t0=$(date +%s)
  if ! debootstrap --variant=minbase --include="$pkgs" bookworm "$build/root" "$mirror" >"$build/debootstrap.log" 2>&1; then
    tail -n 40 "$build/debootstrap.log" >&2
    say "debootstrap failed"
    exit 1
  fi
  printf '%s\n' "$stub" >"$build/root/sbin/warden-vm-init"
  chmod 755 "$build/root/sbin/warden-vm-init"
  echo warden-vm >"$build/root/etc/hostname"
  printf '/dev/vda / ext4 rw 0 1\n' >"$build/root/etc/fstab"
  # Reset the apt cache and logs the image does not need.
  rm -rf "$build/root/var/cache/apt/archives/"*.deb "$build/root/var/lib/apt/lists/"*
  vmlinuz=$(ls "$build"/root/boot/vmlinuz-* | head -n1)
  initrd=$build/root/boot/initrd.img-${vmlinuz##*/vmlinuz-}
  [ -s "$vmlinuz" ] && [ -s "$initrd" ] || { say "no kernel or initrd in the guest's /boot"; exit 1; }
  cp "$vmlinuz" "$build/vmlinuz"
  cp "$initrd" "$build/initrd"
  # 8 GiB, sparse: the base template snapshots /usr by hard links and each
  # sandbox's disk image is sparse too, so little of it is used.
  truncate -s 8G "$build/rootfs.img"
  mkfs.ext4 -q -F -L warden-vm -d "$build/root" "$build/rootfs.img"
  mv "$build/vmlinuz" "$cache/vmlinuz-$key"
  mv "$build/initrd" "$cache/initrd-$key"
  mv "$build/rootfs.img" "$img"
  rm -rf "$build"
  trap - EXIT
  # Older images (another package list or init) are not used any more.
  find "$cache" -maxdepth 1 -type f \( -name 'rootfs-*' -o -name 'vmlinuz-*' -o -name 'initrd-*' \) ! -name "*-$key*" -delete
  say "guest image built in $(( $(date +%s) - t0 ))s: $img ($(basename "$vmlinuz"))"
fi
exec 9>&-

# 3. The payload: test binaries and the guest's script.
work=$(mktemp -d /tmp/warden-cgroup2-vm.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/payload"
say "building the test binaries"
export CGO_ENABLED=0
go test -c -o "$work/payload/cgroup.test" ./internal/isolation/cgroup
go test -c -o "$work/payload/native.test" ./internal/backend/native
go build -o "$work/payload/" ./cmd/warden-agent ./cmd/warden-probe
cat >"$work/payload/guest.sh" <<EOF
#!/bin/sh
# The guest's script (scripts/cgroup2-vm.sh): a pure cgroup v2 host, as
# systemd sets one up, then the tests.
PATH=/usr/sbin:/usr/bin:/sbin:/bin; export PATH
result() { echo "WARDEN-VM-RESULT rc=\$1"; sync; echo o > /proc/sysrq-trigger; sleep 60; }
mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup || { echo "cannot mount cgroup2"; result 125; }
mountpoint -q /run || mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /dev/shm && mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
mkdir -p /dev/pts && mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts 2>/dev/null
mount -o remount,rw / 2>/dev/null
hostname warden-vm
ip link set lo up
# No udev here: load what the tests use (disk images, overlays) up front.
modprobe -a loop overlay ext4 2>/dev/null
# Like systemd: PID 1 out of the root cgroup (into init.scope), so the
# tests run where a service would, not in the root.
mkdir -p /sys/fs/cgroup/init.scope && echo \$\$ > /sys/fs/cgroup/init.scope/cgroup.procs
echo "== guest: \$(uname -r), \$(nproc) CPUs, \$(awk '/MemTotal/ {print int(\$2/1024) " MiB"}' /proc/meminfo)"
echo "== guest mounts: \$(grep -E ' /sys/fs/cgroup' /proc/mounts | tr '\n' ';')"
echo "== guest cgroup controllers: \$(cat /sys/fs/cgroup/cgroup.controllers)"
grep -q ' cgroup ' /proc/mounts && { echo "a cgroup v1 hierarchy is mounted: not a pure v2 host"; result 125; }
export WARDEN_TEST_AGENT=/payload/warden-agent WARDEN_TEST_PROBE=/payload/warden-probe WARDEN_TEST_REQUIRE_CGROUP2=1
# Debian 12's kernel (6.1) has Landlock ABI 2 at most, below the ABI 5 Warden
# needs: sandboxes run as wardend's default (best-effort) has them there.
export WARDEN_TEST_LANDLOCK=$landlock
# Debian 12's tmpfs cannot hold the overlay's user.* attributes (Linux 6.6
# can), so the native backend refuses in-memory writable layers there: the
# suite runs on disk images, wardend's default.
export WARDEN_TEST_DISK=1
# Emulation (TCG) is many times slower than the hardware the probes' time
# budgets are made for.
export WARDEN_TEST_TIME_SCALE=$time_scale
echo "== guest: tmpfs user xattrs: \$(python3 -c "import os; open('/dev/shm/x','w').close(); os.setxattr('/dev/shm/x', 'user.t', b'1'); print('yes')" 2>&1 | tail -n1)"
export HOME=/root TMPDIR=/tmp
rc=0
mkdir -p /tmp/cg && cd /tmp/cg
t0=\$(date +%s)
echo "== guest: go test ./internal/isolation/cgroup -run '$cgroup_run'"
/payload/cgroup.test -test.v -test.count=1 -test.timeout=20m -test.run '$cgroup_run' || rc=1
echo "== guest: cgroup tests took \$((\$(date +%s) - t0))s"
mkdir -p /tmp/native && cd /tmp/native
t0=\$(date +%s)
echo "== guest: go test ./internal/backend/native -run '$native_run'"
/payload/native.test -test.v -test.count=1 -test.timeout=35m -test.run '$native_run' || rc=1
echo "== guest: native tests took \$((\$(date +%s) - t0))s"
result \$rc
EOF
size=$(( $(du -sm "$work/payload" | cut -f1) + 32 ))
truncate -s "${size}M" "$work/payload.img"
mkfs.ext4 -q -F -L payload -d "$work/payload" "$work/payload.img"

# 4. Boot.
say "booting Debian 12 ($(basename "$img"), accel $accel); console follows"
log=$work/console.log
set +e
timeout --foreground -k 10 "$vm_timeout" qemu-system-x86_64 "${qaccel[@]}" -smp 2 -m 4G \
  -nodefaults -no-reboot -display none -serial stdio -monitor none -nic none \
  -kernel "$cache/vmlinuz-$key" -initrd "$cache/initrd-$key" \
  -append "root=/dev/vda rootfstype=ext4 rw console=ttyS0 cgroup_no_v1=all init=/sbin/warden-vm-init panic=-1 quiet loglevel=4" \
  -drive file="$img",format=raw,if=virtio,snapshot=on \
  -drive file="$work/payload.img",format=raw,if=virtio,readonly=on \
  -device virtio-rng-pci </dev/null 2>&1 | tee "$log"
qrc=${PIPESTATUS[0]}
set -e
took=$(( $(date +%s) - started ))
rc=$(sed -n 's/.*WARDEN-VM-RESULT rc=\([0-9]*\).*/\1/p' "$log" | tail -n1)
if [ -z "$rc" ]; then
  say "FAIL: the VM ended without a result (qemu exit $qrc; 124 is the ${vm_timeout}s timeout) after ${took}s"
  exit 1
fi
if [ "$rc" != 0 ]; then
  say "FAIL: tests failed on cgroup v2 (rc $rc) after ${took}s"
  exit 1
fi
say "PASS: cgroup v2 tests passed in ${took}s"
}
main "$@"
