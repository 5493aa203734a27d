#!/usr/bin/env bash
# usmc-stat on the TCP path (label tcp): stat_target holds a context, a
# listener and connections that fell back for known reasons; usmc-stat
# must list it, its JSON must conform to the schema (usmc_stat_check.py,
# docs/usmc-stat.md) and show those connections, the human table must
# show them too, filters must filter, another uid must get nothing, and
# USMC_STAT=0 must publish nothing.
#
# With "churn", stat_target also opens and closes connections all along
# and usmc-stat queries it many times (the TSan run).
#
# Usage: test_usmc_stat.sh <stat_target> <usmc-stat> <usmc_stat_check.py> [churn]
set -euo pipefail
TARGET=${1:?stat_target}
STAT=${2:?usmc-stat}
CHECK=${3:?usmc_stat_check.py}
CHURN=0
[ "${4:-}" != churn ] || CHURN=1
tmp=$(mktemp -d)
pid=
cleanup() {
	exec 3>&- 2>/dev/null || true
	[ -z "$pid" ] || kill "$pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# start <env...>: stat_target in the background, held by fd 3; sets pid
start() {
	mkfifo "$tmp/in"
	env "$@" "$TARGET" <"$tmp/in" >"$tmp/out" 2>"$tmp/err" &
	pid=$!
	exec 3>"$tmp/in"
	rm "$tmp/in"
	for _ in $(seq 100); do
		grep -q '^ready' "$tmp/out" && return 0
		kill -0 "$pid" 2>/dev/null || fail "stat_target died: $(cat "$tmp/err")"
		sleep 0.1
	done
	fail "stat_target never got ready"
}

# stop: stat_target closes everything and must exit 0 (clean teardown)
stop() {
	exec 3>&-
	wait "$pid" || fail "stat_target exit $?: $(cat "$tmp/err")"
	pid=
}

# --- published: JSON conforms and shows what stat_target holds
start USMC_KERNEL_COMPAT=0 STAT_TARGET_CHURN=$CHURN
if [ "$CHURN" = 1 ]; then
	for i in $(seq 30); do
		"$STAT" --json -p "$pid" >"$tmp/churn.json" || fail "usmc-stat --json exit $? (round $i)"
		python3 "$CHECK" "$tmp/churn.json" --pid "$pid" --conns TCP:7 >/dev/null ||
			fail "round $i: $(python3 "$CHECK" "$tmp/churn.json")"
	done
	stop
	echo "PASS: 30 snapshots while connections came and went"
	exit 0
fi
port=$(awk '/^ready/ {print $2}' "$tmp/out")
"$STAT" --json -p "$pid" >"$tmp/snap.json" || fail "usmc-stat --json exit $?"
python3 "$CHECK" "$tmp/snap.json" --pid "$pid" --listeners 1 --conns TCP:7 \
	--reason NOSMCRDEV --reason DISABLED --fallback NOSMCRDEV --fallback DISABLED \
	--counter links_added=0 --counter link_failures=0 --counter failovers=0 ||
	fail "snapshot: $(cat "$tmp/snap.json")"
# all of them: at least ours (other tests' processes may be there too)
"$STAT" --json >"$tmp/all.json" || [ $? = 3 ] || fail "usmc-stat --json (all)"
python3 "$CHECK" "$tmp/all.json" --pid "$pid" || fail "all: $(cat "$tmp/all.json")"

# --- the human table
"$STAT" -p "$pid" >"$tmp/human.txt" || fail "usmc-stat exit $?"
cat "$tmp/human.txt"
grep -q "^PID $pid stat_target " "$tmp/human.txt" || fail "no process line"
grep -q "^  LISTEN 127.0.0.1:$port backlog=16 " "$tmp/human.txt" || fail "no listener line"
grep -Eq "^  127\.0\.0\.1:$port +127\.0\.0\.1:[0-9]+ +server +TCP +NOSMCRDEV " \
	"$tmp/human.txt" || fail "no server TCP connection line"
grep -Eq "^  127\.0\.0\.1:[0-9]+ +127\.0\.0\.1:$port +client +TCP +DISABLED +5 +5$" \
	"$tmp/human.txt" || fail "no DISABLED client line with 5 bytes each way"
grep -q "fallbacks: .*NOSMCRDEV=" "$tmp/human.txt" || fail "no fallback counts"
grep -qx "  links_added=0 link_failures=0 failovers=0" "$tmp/human.txt" ||
	fail "no link counters line"

# --- filters
n=$("$STAT" -p "$pid" --reason DISABLED | grep -c " DISABLED " || true)
[ "$n" = 1 ] || fail "--reason DISABLED: $n lines"
"$STAT" --json -p "$pid" --mode smcr >"$tmp/smcr.json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(any(s["connections"] for s in d))' \
	"$tmp/smcr.json" || fail "--mode smcr kept TCP connections"
rc=0
"$STAT" -p 999999999 >/dev/null || rc=$?
[ "$rc" = 1 ] || fail "no such pid: exit $rc, expected 1"
rc=0
"$STAT" --bogus >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "bad option: exit $rc, expected 2"

# --- another uid gets nothing (SO_PEERCRED); needs root to switch
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
	rc=0
	setpriv --reuid=65534 --regid=65534 --clear-groups "$STAT" --json -p "$pid" \
		>"$tmp/other.json" 2>"$tmp/other.err" || rc=$?
	[ "$rc" = 3 ] || fail "other uid: exit $rc, expected 3"
	grep -q '"pid"' "$tmp/other.json" && fail "other uid read a snapshot"
	echo "other uid refused: $(cat "$tmp/other.err")"
else
	echo "SKIP: uid check (not root)"
fi
stop

# --- USMC_STAT=0: nothing published
start USMC_KERNEL_COMPAT=0 USMC_STAT=0
rc=0
"$STAT" -p "$pid" >/dev/null || rc=$?
[ "$rc" = 1 ] || fail "USMC_STAT=0: exit $rc, expected 1 (not found)"
grep -q "usmc-stat/$pid/" /proc/net/unix && fail "USMC_STAT=0 still bound a socket"
stop
echo "PASS: usmc-stat on the TCP path"
