#!/bin/bash
# Runs inside the soft-RoCE guest (chrooted into the overlay of the host root,
# started by the initramfs through /run/usmc-vm/start.sh). Loads the RDMA
# modules, builds the requested topology, waits for the RoCE v2 GIDs, runs the
# command with the caller's cwd and environment, and leaves its exit code in
# the result share (/run/usmc-vm/rc). The share is the run directory on the
# host; vm-run.sh wrote params.sh and env.sh there.
#
# Topology exported to the command:
#   USMC_TEST_SETUP          none | one | two | twopath | asym
#   USMC_TEST_HOST_A/_B      IPv4 of the two "hosts" (the same one for "one")
#   USMC_TEST_RXE_A/_B       their rxe devices
#   USMC_TEST_NETDEV_A/_B    their netdevs
#   USMC_TEST_GID_INDEX_A/_B index of the IPv4-mapped RoCE v2 GID
#   the same with A2/B2      twopath: the hosts' second RoCE path; asym:
#                            host A's second path to host B's one port
#   USMC_RXE_VM=1
set -uo pipefail # no -e: whatever happens, an exit code must be written

RUN=/run/usmc-vm
: >"$RUN/phase-script"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# shellcheck source=/dev/null
. "$RUN/params.sh"

# The command's terminal: raw output, no \n -> \r\n translation.
exec 3>/dev/ttyS0
stty -F /dev/ttyS0 raw -echo 2>/dev/null
exec 4>>"$RUN/guest.log"
log() { echo "[vm] $*" >&3; echo "$*" >&4; }
finish() { # rc
	: >"$RUN/phase-cmd-end"
	dmesg >"$RUN/dmesg.log" 2>&1
	# ctest's logs written in the guest (LastTest.log...) come back too.
	if [ -d "/run/usmc-upper$VM_BUILD/Testing" ]; then
		cp -r "/run/usmc-upper$VM_BUILD/Testing" "$RUN/ctest-Testing" 2>/dev/null
	fi
	echo "$1" >"$RUN/rc.tmp" && mv "$RUN/rc.tmp" "$RUN/rc"
	sync
	exit 0
}
fail() {
	log "setup failed: $*"
	finish 125
}
run() { # run a setup command, log it, fail the setup if it fails
	echo "+ $*" >&4
	"$@" >&4 2>&1 || fail "$* (exit $?)"
}

[ "$(uname -r)" = "$VM_KVER" ] || log "warning: kernel $(uname -r), expected $VM_KVER"
hostname usmc-rxe-vm 2>/dev/null
# modprobe finds the unpacked kernel's modules (depmod -b ran on the host).
mkdir -p /usr/lib/modules
ln -sfn "$VM_KDIR/lib/modules/$VM_KVER" "/usr/lib/modules/$VM_KVER"
run ip link set lo up

# gid_index <dev> <ipv4>: index of the IPv4-mapped RoCE v2 GID, polled with
# shell builtins only (a process per sysfs entry costs ~0.1 s under TCG).
gid_index() {
	local dev=$1 ip=$2 hex g t i n=0
	# shellcheck disable=SC2086
	printf -v hex '%02x%02x:%02x%02x' ${ip//./ }
	local want="0000:0000:0000:0000:0000:ffff:$hex"
	local gids=/sys/class/infiniband/$dev/ports/1/gids
	local types=/sys/class/infiniband/$dev/ports/1/gid_attrs/types
	while [ $n -lt 200 ]; do # 200 x 0.1 s
		for ((i = 0; i < 32; i++)); do
			read -r g 2>/dev/null <"$gids/$i" || continue
			[ "$g" = "$want" ] || continue
			read -r t 2>/dev/null <"$types/$i" || t=
			[ "$t" = "RoCE v2" ] || continue
			GID_INDEX=$i
			return 0
		done
		n=$((n + 1))
		sleep 0.1
	done
	fail "no RoCE v2 GID for $ip on $dev after 20 s"
}

sysctl_set() { # key value: no sysctl(8) process per key
	echo "$2" >"/proc/sys/${1//.//}" || fail "sysctl $1=$2"
}

case "$VM_SETUP" in
one | two | twopath | asym)
	run modprobe -a rdma_rxe ib_uverbs rdma_ucm
	;;
esac
[ "$VM_SMC" = 1 ] && run modprobe -a smc smc_diag

# The tests' tc filters (tests/rxe/roce_cut.h) turn the packet path's
# ingress and egress hooks on and off: static branches in
# __netif_receive_skb_core() and __dev_queue_xmit(), patched live with
# text_poke_bp() while rxe traffic runs, which under TCG can oops the guest
# ("Oops: int3", docs/soft-roce.md). One clsact qdisc with a u32 filter on
# a device of its own, kept for the guest's life, turns them on now, before
# any traffic, and they stay on.
case "$VM_SETUP" in
two | twopath | asym)
	run modprobe dummy numdummies=0
	run ip link add usmc-tc type dummy
	run tc qdisc add dev usmc-tc clsact
	for hook in ingress egress; do
		run tc filter add dev usmc-tc $hook protocol ip prio 1 u32 \
			match ip protocol 17 0xff match ip dport 4791 0xffff action drop
	done
	;;
esac

A=10.0.0.1
B=10.0.0.2
A2=10.0.1.1
B2=10.0.1.2

# veth_path <dev A> <dev B> <addr A> <addr B> <table> <rxe A> <rxe B>: one
# RoCE path between the hosts: a veth pair, a /24 address on each end, an
# rxe device on each, and the policy routing that sends locally generated
# traffic to the peer's address through the pair instead of lo: to B via
# table <table> (rule pref <table> - 90), to A via table <table> + 1
# (pref <table> - 89), with permanent neighbours (no ARP between two
# addresses of one host). Sets GID_A and GID_B to the GID indexes.
veth_path() {
	local da=$1 db=$2 a=$3 b=$4 t=$5 ra=$6 rb=$7 d mac_a mac_b
	run ip link add "$da" type veth peer name "$db"
	for d in "$da" "$db"; do
		sysctl_set "net.ipv4.conf.$d.accept_local" 1
		sysctl_set "net.ipv4.conf.$d.rp_filter" 0
	done
	run ip addr add "$a/24" dev "$da"
	run ip addr add "$b/24" dev "$db"
	run ip link set "$da" up
	run ip link set "$db" up
	run ip rule add pref $((t - 90)) iif lo to "$b" lookup "$t"
	run ip rule add pref $((t - 89)) iif lo to "$a" lookup $((t + 1))
	run ip route add "$b" dev "$da" src "$a" table "$t"
	run ip route add "$a" dev "$db" src "$b" table $((t + 1))
	read -r mac_a <"/sys/class/net/$da/address"
	read -r mac_b <"/sys/class/net/$db/address"
	run ip neigh replace "$b" lladdr "$mac_b" dev "$da" nud permanent
	run ip neigh replace "$a" lladdr "$mac_a" dev "$db" nud permanent
	run rdma link add "$ra" type rxe netdev "$da"
	run rdma link add "$rb" type rxe netdev "$db"
	gid_index "$ra" "$a"
	GID_A=$GID_INDEX
	gid_index "$rb" "$b"
	GID_B=$GID_INDEX
}

# asym_paths: host A has two RoCE ports, veth0 (A) and veth2 (A2), rxe0
# and rxe2; host B has one, the bridge br1 over the peers veth1 and veth3
# with both B and B2, and rxe1 on it (rxe takes a packet on the netdev it
# arrives on: a bridge is how two wires reach one device). Policy routing
# as veth_path()'s, tables 100-103; each of host A's ports may also reach
# either of host B's addresses (metric 10), which a link from rxe2 to the
# GID B needs (rxe routes out of its own netdev only).
asym_paths() {
	local d mac_br mac_0 mac_2
	run ip link add veth0 type veth peer name veth1
	run ip link add veth2 type veth peer name veth3
	run ip link add br1 type bridge
	for d in veth0 veth1 veth2 veth3 br1; do
		sysctl_set "net.ipv4.conf.$d.accept_local" 1
		sysctl_set "net.ipv4.conf.$d.rp_filter" 0
	done
	run ip link set veth1 master br1
	run ip link set veth3 master br1
	run ip addr add "$A/24" dev veth0
	run ip addr add "$A2/24" dev veth2
	run ip addr add "$B/24" dev br1
	run ip addr add "$B2/24" dev br1
	for d in veth0 veth1 veth2 veth3 br1; do
		run ip link set "$d" up
	done
	run ip rule add pref 10 iif lo to "$B" lookup 100
	run ip rule add pref 11 iif lo to "$A" lookup 101
	run ip rule add pref 12 iif lo to "$B2" lookup 102
	run ip rule add pref 13 iif lo to "$A2" lookup 103
	run ip route add "$B" dev veth0 src "$A" table 100
	run ip route add "$B" dev veth2 src "$A2" metric 10 table 100
	run ip route add "$A" dev br1 src "$B" table 101
	run ip route add "$B2" dev veth2 src "$A2" table 102
	run ip route add "$B2" dev veth0 src "$A" metric 10 table 102
	run ip route add "$A2" dev br1 src "$B2" table 103
	read -r mac_br </sys/class/net/br1/address
	read -r mac_0 </sys/class/net/veth0/address
	read -r mac_2 </sys/class/net/veth2/address
	for d in veth0 veth2; do
		run ip neigh replace "$B" lladdr "$mac_br" dev "$d" nud permanent
		run ip neigh replace "$B2" lladdr "$mac_br" dev "$d" nud permanent
	done
	run ip neigh replace "$A" lladdr "$mac_0" dev br1 nud permanent
	run ip neigh replace "$A2" lladdr "$mac_2" dev br1 nud permanent
	run rdma link add rxe0 type rxe netdev veth0
	run rdma link add rxe2 type rxe netdev veth2
	run rdma link add rxe1 type rxe netdev br1
}

case "$VM_SETUP" in
none)
	export USMC_TEST_SETUP=none
	;;
asym)
	for k in all default; do
		sysctl_set net.ipv4.conf.$k.accept_local 1
		sysctl_set net.ipv4.conf.$k.rp_filter 0
	done
	run ip rule add pref 100 lookup local
	run ip rule del pref 0 lookup local
	asym_paths
	export USMC_TEST_SETUP=asym USMC_TEST_HOST_A=$A USMC_TEST_HOST_B=$B
	export USMC_TEST_RXE_A=rxe0 USMC_TEST_RXE_B=rxe1
	export USMC_TEST_NETDEV_A=veth0 USMC_TEST_NETDEV_B=br1
	gid_index rxe0 $A
	export USMC_TEST_GID_INDEX_A=$GID_INDEX
	gid_index rxe1 $B
	export USMC_TEST_GID_INDEX_B=$GID_INDEX
	export USMC_TEST_HOST_A2=$A2 USMC_TEST_HOST_B2=$B2
	export USMC_TEST_RXE_A2=rxe2 USMC_TEST_RXE_B2=rxe1
	export USMC_TEST_NETDEV_A2=veth2 USMC_TEST_NETDEV_B2=br1
	gid_index rxe2 $A2
	export USMC_TEST_GID_INDEX_A2=$GID_INDEX
	gid_index rxe1 $B2
	export USMC_TEST_GID_INDEX_B2=$GID_INDEX
	;;
one)
	# One device; client and server share its address, rxe loops back.
	run modprobe dummy numdummies=0
	run ip link add dummy0 type dummy
	run ip addr add $A/24 dev dummy0
	run ip link set dummy0 up
	run rdma link add rxe0 type rxe netdev dummy0
	gid_index rxe0 $A
	export USMC_TEST_SETUP=one USMC_TEST_HOST_A=$A USMC_TEST_HOST_B=$A
	export USMC_TEST_RXE_A=rxe0 USMC_TEST_RXE_B=rxe0
	export USMC_TEST_NETDEV_A=dummy0 USMC_TEST_NETDEV_B=dummy0
	export USMC_TEST_GID_INDEX_A=$GID_INDEX USMC_TEST_GID_INDEX_B=$GID_INDEX
	;;
two | twopath)
	# Two "hosts" on a veth pair in the initial netns (rxe's UDP socket
	# lives there). Policy routing makes locally generated traffic between
	# the two addresses leave through the veth pair instead of lo.
	for k in all default; do
		sysctl_set net.ipv4.conf.$k.accept_local 1
		sysctl_set net.ipv4.conf.$k.rp_filter 0
	done
	run ip rule add pref 100 lookup local
	run ip rule del pref 0 lookup local
	veth_path veth0 veth1 $A $B 100 rxe0 rxe1
	ga=$GID_A gb=$GID_B
	export USMC_TEST_SETUP=$VM_SETUP USMC_TEST_HOST_A=$A USMC_TEST_HOST_B=$B
	export USMC_TEST_RXE_A=rxe0 USMC_TEST_RXE_B=rxe1
	export USMC_TEST_NETDEV_A=veth0 USMC_TEST_NETDEV_B=veth1
	export USMC_TEST_GID_INDEX_A=$ga USMC_TEST_GID_INDEX_B=$gb
	;;
esac
if [ "$VM_SETUP" = twopath ]; then
	# A second, independent RoCE path between the same two hosts: its own
	# veth pair, rxe devices, subnet and routing tables, so that each
	# host's second GID is its second-subnet address (SMC-Rv2 ADD_LINK
	# names a link by its GID's IPv4 address).
	veth_path veth2 veth3 $A2 $B2 102 rxe2 rxe3
	export USMC_TEST_HOST_A2=$A2 USMC_TEST_HOST_B2=$B2
	export USMC_TEST_RXE_A2=rxe2 USMC_TEST_RXE_B2=rxe3
	export USMC_TEST_NETDEV_A2=veth2 USMC_TEST_NETDEV_B2=veth3
	export USMC_TEST_GID_INDEX_A2=$GID_A USMC_TEST_GID_INDEX_B2=$GID_B
fi
: >"$RUN/phase-setup"
[ "$VM_SETUP" = none ] ||
	log "setup $VM_SETUP: $USMC_TEST_RXE_A $USMC_TEST_HOST_A gid $USMC_TEST_GID_INDEX_A," \
		"$USMC_TEST_RXE_B $USMC_TEST_HOST_B gid $USMC_TEST_GID_INDEX_B"
[ "$VM_SETUP" != twopath ] && [ "$VM_SETUP" != asym ] ||
	log "setup $VM_SETUP, path 2: $USMC_TEST_RXE_A2 $USMC_TEST_HOST_A2 gid $USMC_TEST_GID_INDEX_A2," \
		"$USMC_TEST_RXE_B2 $USMC_TEST_HOST_B2 gid $USMC_TEST_GID_INDEX_B2"

# The caller's environment (PATH included), then the topology on top.
topo=$(export -p | grep -E '^declare -x (USMC_TEST_[A-Z0-9_]*)=')
# shellcheck source=/dev/null
. "$RUN/env.sh"
eval "$topo"
export USMC_RXE_VM=1
cd "$VM_CWD" 2>/dev/null || fail "cannot cd to $VM_CWD"

# Stop the command ahead of the host's hard timeout, keeping a margin for
# the shutdown, so that its logs and exit code still come back.
read -r up _ </proc/uptime
budget=$((VM_TIMEOUT - ${up%.*} - 15))
[ $budget -ge 5 ] || budget=5
# Test knob: leave it to the host's hard timeout (checks that path).
[ -z "${USMC_RXE_NO_GUEST_TIMEOUT:-}" ] || budget=0
: >"$RUN/phase-cmd-start"
timeout -k 5 "$budget" "${VM_CMD[@]}" </dev/null >&3 2>&3
rc=$?
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
	: >"$RUN/timed-out"
	log "command timed out after $budget s"
fi
finish $rc
