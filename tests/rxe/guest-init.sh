#!/bin/sh
# /init of the soft-RoCE guest's initramfs (busybox sh). Mounts the host root
# read-only over virtio-9p with a tmpfs overlay on top, mounts the writable
# result share, chroots and runs /run/usmc-vm/start.sh (written by vm-run.sh),
# then powers off. Kernel messages and this script's output go to the console
# (ttyS1, a log file on the host); the command's output goes to ttyS0.
export PATH=/bin:/sbin
/bin/busybox --install -s /bin

msg() { echo "guest-init: $*"; }
die() {
	msg "FATAL: $*"
	halt_guest
}
halt_guest() {
	sync
	# poweroff -f can block behind tasks stuck in D state: reset through
	# sysrq after a grace period; with -no-reboot qemu exits on reset.
	(sleep 10; echo b >/proc/sysrq-trigger) &
	poweroff -f
	sleep 30
	echo b >/proc/sysrq-trigger
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

while read -r m; do
	insmod "/lib/modules/$m" || die "insmod $m failed"
done </modules
echo /sbin/usmc-modprobe >/proc/sys/kernel/modprobe

# Host root, read-only. multidevs=remap on the host side keeps inode numbers
# unique across the host's filesystems.
mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=512000,cache=loose hostroot /lower ||
	die "cannot mount the host root (9p)"
mount -t tmpfs -o mode=0755 rw /rw
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot ||
	die "cannot mount the overlay"

R=/newroot
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts $R/dev/pts
mount -t tmpfs tmpfs $R/dev/shm
mount -t tmpfs -o mode=0755 tmpfs $R/run
mount -t cgroup2 cgroup2 $R/sys/fs/cgroup 2>/dev/null || true
mount -t bpf bpf $R/sys/fs/bpf 2>/dev/null || true
# /tmp stays on the overlay: the host's /tmp (maybe a build tree) stays visible.
mkdir -p $R/run/usmc-vm
# Results share: cache=none so every write reaches the host at once.
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=none usmcrun $R/run/usmc-vm ||
	die "cannot mount the result share"
[ -r $R/run/usmc-vm/start.sh ] || die "no start.sh in the result share"
# What the guest wrote (the overlay's upper layer), for guest-run.sh to
# copy logs back, e.g. ctest's Testing/ directory of the build tree.
mkdir -p $R/run/usmc-upper
mount -o bind,ro /rw/upper $R/run/usmc-upper

msg "running start.sh"
chroot $R /bin/bash /run/usmc-vm/start.sh
msg "start.sh exited with $?"
umount $R/run/usmc-vm $R/run/usmc-upper 2>/dev/null
halt_guest
