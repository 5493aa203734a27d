#!/usr/bin/env bash
# rxe_twopath test: what the Linux kernel's own SMC-R makes of the guest's
# two RoCE paths (vm-run.sh --setup twopath --smc). An AF_SMC pair runs in
# each of three configurations, each with fresh link groups, and their
# links are dumped (smc_kctl links) while connected:
#
#  as-built  the topology as guest-run.sh builds it, no pnet table;
#  pnet      a pnet table that tells the hosts apart (host A: veth0, veth2,
#            rxe0, rxe2; host B: veth1, veth3, rxe1, rxe3);
#  subnet    the pnet table, and path 2's netdevs also given an address in
#            path 1's subnet (10.0.0.3, 10.0.0.4).
#
# What the kernel does (net/smc/smc_llc.c smc_llc_srv_add_link() and
# smc_llc_cli_add_link() look for an alternate device with
# net/smc/smc_pnet.c smc_pnet_find_alt_roce(): any other RDMA device of
# the link group's PNETID, an empty one matching an empty one, whose
# netdev has an IPv4 address in the subnet of the link group's own
# address, net/smc/smc_ib.c smc_ib_determine_gid()):
#  as-built  one guest kernel sees both hosts' devices and no PNETID tells
#            them apart: the second link crosses over on path 1 (one end
#            takes the peer's device), path 2 is never used (its subnet
#            differs);
#  pnet      no alternate device in the link group's subnet: one link;
#  subnet    two links, one on each path (SYMMETRIC). Then path 1 goes
#            down and the connection closes cleanly over path 2's link.
# The test checks exactly this and prints the dumps as evidence
# (docs/soft-roce.md, "The kernel's SMC-R on two paths").
#
# Usage: smc_kernel_twopath.sh <smc_kctl> <smc_pair>
# shellcheck disable=SC2153 # USMC_TEST_* come from guest-run.sh's environment
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../../tools/common/rxe-env.sh"
KCTL=${1:?smc_kctl path}
PAIR=${2:?smc_pair path}
EID=USMC-RXE-TEST

if [ -z "${USMC_TEST_RXE_A2:-}" ] || [ -z "${USMC_TEST_NETDEV_B2:-}" ]; then
	rxe_fail "needs two RoCE paths (tests/rxe/vm-run.sh --setup twopath)"
fi
[ -d /sys/module/smc_diag ] || modprobe -a smc smc_diag || rxe_fail "cannot load smc, smc_diag"
A=$USMC_TEST_HOST_A B=$USMC_TEST_HOST_B
echo "net.smc.smcr_max_links_per_lgr = $(cat /proc/sys/net/smc/smcr_max_links_per_lgr 2>/dev/null || echo '?')"
"$KCTL" ueid flush
"$KCTL" ueid add "$EID"
"$KCTL" pnet flush

# run_pair <name> <client addr> <server addr> <port> [<while connected>]:
# an AF_SMC connection (1 MiB + 100 round trips), its links dumped into
# $RXE_TMP/<name>.links while it is up, then the optional command.
run_pair() {
	local name=$1 cli=$2 srv=$3 port=$4 extra=${5:-true} server
	"$PAIR" server "$srv" "$port" >"$RXE_TMP/$name.server" 2>&1 &
	server=$!
	RXE_PIDS+=("$server")
	"$PAIR" client "$cli" "$srv" "$port" $((1 << 20)) \
		"'$KCTL' links >'$RXE_TMP/$name.links' && $extra" >"$RXE_TMP/$name.client" 2>&1 ||
		rxe_fail "$name: AF_SMC client failed: $(cat "$RXE_TMP/$name.client")"
	wait "$server" || rxe_fail "$name: AF_SMC server failed: $(cat "$RXE_TMP/$name.server")"
	echo "--- $name: $cli -> $srv, links while connected"
	cat "$RXE_TMP/$name.links"
}

# Path <n>'s routes and permanent neighbours back after its netdev came up
# (as fault_net.h fnet_link_path(): tables 98 + 2n and 99 + 2n).
path_up() {
	local n=$1 s="" a b da db
	[ "$n" = 1 ] || s=$n
	a=$(printenv "USMC_TEST_HOST_A$s") b=$(printenv "USMC_TEST_HOST_B$s")
	da=$(printenv "USMC_TEST_NETDEV_A$s") db=$(printenv "USMC_TEST_NETDEV_B$s")
	ip link set "$da" up
	ip route replace "$b" dev "$da" src "$a" table $((98 + 2 * n))
	ip route replace "$a" dev "$db" src "$b" table $((99 + 2 * n))
	ip neigh replace "$b" lladdr "$(<"/sys/class/net/$db/address")" dev "$da" nud permanent
	ip neigh replace "$a" lladdr "$(<"/sys/class/net/$da/address")" dev "$db" nud permanent
}

# Every link group gone: both paths' netdevs down (a link group left
# without a usable link terminates), then up again with their routes.
reset_lgrs() {
	local i d
	for d in "$USMC_TEST_NETDEV_A" "$USMC_TEST_NETDEV_A2"; do
		ip link set "$d" down
	done
	for i in $(seq 100); do
		"$KCTL" links | grep -q '^no SMC-R link group' && break
		[ "$i" -lt 100 ] || rxe_fail "link groups still there 20 s after both paths went down"
		sleep 0.2
	done
	path_up 1
	path_up 2
	for i in $(seq 100); do
		[ "$(<"/sys/class/infiniband/$USMC_TEST_RXE_A/ports/1/state")" = "4: ACTIVE" ] &&
			[ "$(<"/sys/class/infiniband/$USMC_TEST_RXE_A2/ports/1/state")" = "4: ACTIVE" ] &&
			break
		[ "$i" -lt 100 ] || rxe_fail "ports not ACTIVE again"
		sleep 0.2
	done
}

# links_of <name> <role>: the link lines of the link group of that role.
links_of() {
	awk -v r="role=$2" '/^lgr /{on = index($0, r) > 0} /^  link /{if (on) print}' \
		"$RXE_TMP/$1.links"
}
lgr_type() {
	grep "^lgr .*role=$2 " "$RXE_TMP/$1.links" | sed 's/.* type=\([A-Z_]*\).*/\1/'
}
# Every configuration runs and prints its evidence; the verdict comes last.
failed=0
bad() {
	echo "FAIL: $*"
	failed=1
}

# 1. As built: a second link, but across path 1 (one end uses its peer's
# device, which the same kernel also sees). Fresh link groups first: the
# kernel keeps idle ones for minutes, and an earlier test's (two links
# with a usmc peer, test_multilink_kernel) would be dumped with ours.
reset_lgrs
run_pair as-built "$A" "$B" 18611
for role in client server; do
	[ "$(lgr_type as-built $role)" = SYMMETRIC ] ||
		bad "as-built: $role link group is $(lgr_type as-built $role), not SYMMETRIC"
	! links_of as-built $role | grep -Eq "dev=($USMC_TEST_RXE_A2|$USMC_TEST_RXE_B2) " ||
		bad "as-built: a link on path 2"
done
echo "as built: the kernel's second link crosses over path 1's devices; path 2 unused"

# 2. A pnet table that keeps each host to its own devices.
reset_lgrs
for d in "$USMC_TEST_NETDEV_A" "$USMC_TEST_NETDEV_A2"; do "$KCTL" pnet add HOSTA eth "$d"; done
for d in "$USMC_TEST_RXE_A" "$USMC_TEST_RXE_A2"; do "$KCTL" pnet add HOSTA ib "$d"; done
for d in "$USMC_TEST_NETDEV_B" "$USMC_TEST_NETDEV_B2"; do "$KCTL" pnet add HOSTB eth "$d"; done
for d in "$USMC_TEST_RXE_B" "$USMC_TEST_RXE_B2"; do "$KCTL" pnet add HOSTB ib "$d"; done
run_pair pnet "$A" "$B" 18612
for role in client server; do
	if [ "$(lgr_type pnet $role)" != SINGLE ] || [ "$(links_of pnet $role | wc -l)" != 1 ]; then
		bad "pnet: $role link group is not SINGLE with one link"
	fi
done
echo "pnet: hosts told apart, path 2 in another subnet: one link (no alternate device)"

# 3. Path 2's netdevs also in path 1's subnet: a link on each path. Then
# path 1 goes down while connected; the connection closes over path 2.
reset_lgrs
ip addr add 10.0.0.3/24 dev "$USMC_TEST_NETDEV_A2"
ip addr add 10.0.0.4/24 dev "$USMC_TEST_NETDEV_B2"
down="echo 1 >/proc/sys/net/ipv4/conf/$USMC_TEST_NETDEV_A/ignore_routes_with_linkdown &&
	echo 1 >/proc/sys/net/ipv4/conf/$USMC_TEST_NETDEV_B/ignore_routes_with_linkdown &&
	ip link set $USMC_TEST_NETDEV_A down && sleep 3 && '$KCTL' links >'$RXE_TMP/subnet-down.links'"
run_pair subnet "$A" "$B" 18613 "$down"
for role in client server; do
	[ "$(lgr_type subnet $role)" = SYMMETRIC ] ||
		bad "subnet: $role link group is $(lgr_type subnet $role), not SYMMETRIC"
	links_of subnet $role | grep -Eq "dev=($USMC_TEST_RXE_A2|$USMC_TEST_RXE_B2) .*state=ACTIVE" ||
		bad "subnet: no active $role link on path 2"
	links_of subnet $role | grep -Eq "dev=($USMC_TEST_RXE_A|$USMC_TEST_RXE_B) .*state=ACTIVE" ||
		bad "subnet: no active $role link on path 1"
done
echo "--- subnet: 3 s after path 1 went down"
cat "$RXE_TMP/subnet-down.links"
echo "subnet: with path 2 in the link group's subnet, one link on each path; the connection closed over path 2"
echo "--- the kernel's link messages"
dmesg | grep -E 'smc: SMC-R lg .* link (added|removed)' || true
[ "$failed" = 0 ] || rxe_fail "the kernel's SMC-R on two paths is not as docs/soft-roce.md says"
echo "PASS: the kernel's SMC-R on two paths behaves as docs/soft-roce.md says"
