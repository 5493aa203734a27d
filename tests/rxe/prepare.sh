#!/usr/bin/env bash
# Prepares the soft-RoCE guest in a build tree, once: fetches Debian's 6.12
# kernel package WITHOUT installing it, unpacks it into <vm-dir>/kernel,
# runs depmod there and builds a small busybox initramfs. Everything stays in
# <vm-dir> (default <build-dir>/rxe-vm); nothing goes to /boot or /lib/modules.
#
# Usage: tests/rxe/prepare.sh <vm-dir>
# Prints nothing when the cache is up to date. Environment:
#   USMC_RXE_KVER   kernel version (default 6.12.117+deb12-amd64)
#   USMC_RXE_DEB    use this linux-image .deb instead of apt-get download
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VM=${1:?usage: prepare.sh <vm-dir>}
KVER=${USMC_RXE_KVER:-6.12.117+deb12-amd64}
KDIR=$VM/kernel
INITRD=$VM/initrd-$KVER.cpio.gz
# Modules the initramfs needs to mount the host root (9p) and the overlay.
# virtio_pci is built in on 6.12 but a module on 6.1; modprobe sorts it out.
INITRD_MODULES=(virtio_pci 9pnet_virtio 9p overlay)

log() { echo "rxe-prepare: $*" >&2; }

mkdir -p "$VM"
# Serialise concurrent prepares of the same tree (e.g. two ctest runs).
exec 9>"$VM/.prepare.lock"
flock 9

# Host tools: the installer returns at once when everything is present.
need_deps=0
for t in qemu-system-x86_64 busybox depmod cpio xz ibv_rc_pingpong rping rdma ip; do
	command -v "$t" >/dev/null 2>&1 || need_deps=1
done
if [ "$need_deps" = 1 ]; then
	log "installing host packages (tools/install-deps.sh)"
	"$SRC/../../tools/install-deps.sh"
fi
PATH=$PATH:/usr/sbin:/sbin

# --- kernel: apt-get download + dpkg -x + depmod -b, stamped when complete
if [ ! -e "$KDIR/.stamp-$KVER" ]; then
	deb=${USMC_RXE_DEB:-}
	if [ -z "$deb" ]; then
		mkdir -p "$VM/deb"
		deb=$(ls "$VM"/deb/linux-image-"${KVER}"_*.deb 2>/dev/null | head -n1 || true)
		if [ -z "$deb" ]; then
			log "downloading linux-image-$KVER (not installed, only unpacked)"
			# As root, apt would warn that its sandbox user cannot write here.
			sandbox=()
			[ "$(id -u)" -ne 0 ] || sandbox=(-o APT::Sandbox::User=root)
			(cd "$VM/deb" && apt-get download -q "${sandbox[@]}" "linux-image-$KVER") >&2 || {
				log "apt-get download failed; try 'apt-get update' first"
				exit 1
			}
			deb=$(ls "$VM"/deb/linux-image-"${KVER}"_*.deb | head -n1)
		fi
	fi
	log "unpacking $(basename "$deb")"
	rm -rf "$KDIR"
	mkdir -p "$KDIR"
	dpkg -x "$deb" "$KDIR"
	# The package has /lib/modules on bookworm and /usr/lib/modules later.
	[ -d "$KDIR/lib/modules/$KVER" ] || ln -s usr/lib "$KDIR/lib"
	depmod -b "$KDIR" "$KVER"
	touch "$KDIR/.stamp-$KVER"
	rm -f "$INITRD"
fi
[ -r "$KDIR/boot/vmlinuz-$KVER" ] || {
	log "no kernel image in $KDIR/boot"
	exit 1
}

# --- initramfs: busybox + the 9p/overlay modules + guest-init.sh as /init.
# Rebuilt when guest-init.sh or this script changes.
if [ ! -e "$INITRD" ] || [ "$SRC/guest-init.sh" -nt "$INITRD" ] ||
	[ "${BASH_SOURCE[0]}" -nt "$INITRD" ]; then
	log "building initramfs"
	tmp=$(mktemp -d "$VM/initrd.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	mkdir -p "$tmp"/{bin,sbin,dev,proc,sys,lower,rw,newroot,lib/modules}
	cp /bin/busybox "$tmp/bin/busybox"
	ln -s busybox "$tmp/bin/sh"
	install -m 755 "$SRC/guest-init.sh" "$tmp/init"
	# The kernel's request_module helper runs with the initramfs as its
	# root: chroot into the guest's real root to use its modprobe.
	printf '#!/bin/sh\nexec /bin/busybox chroot /newroot /sbin/modprobe "$@"\n' \
		>"$tmp/sbin/usmc-modprobe"
	chmod 755 "$tmp/sbin/usmc-modprobe"
	# Modules in dependency order; busybox insmod cannot read .ko.xz.
	: >"$tmp/modules"
	while read -r kind path _; do
		[ "$kind" = insmod ] || continue
		name=$(basename "$path")
		name=${name%.xz}
		name=${name%.zst}
		case "$path" in
		*.xz) xz -dc "$path" >"$tmp/lib/modules/$name" ;;
		*.zst) zstd -qdc "$path" >"$tmp/lib/modules/$name" ;;
		*) cp "$path" "$tmp/lib/modules/$name" ;;
		esac
		grep -qx "$name" "$tmp/modules" || echo "$name" >>"$tmp/modules"
	done < <(for m in "${INITRD_MODULES[@]}"; do
		modprobe -d "$KDIR" -S "$KVER" --show-depends "$m"
	done)
	(cd "$tmp" && find . -mindepth 1 | cpio -o -H newc --quiet) | gzip -1 >"$INITRD.tmp"
	mv "$INITRD.tmp" "$INITRD"
	rm -rf "$tmp"
	trap - EXIT
fi
