#!/usr/bin/env bash
# usmc-stat and a link group's links (label tcp): a stat_fake_publisher
# answers with a snapshot whose link group holds three links (slot 0 down,
# slot 1 ACTIVE, slot 2 still ACTIVATING), as one will once ADD_LINK and
# failover exist. The table must show the link group's line and one
# indented line per link, in slot order; --json must conform to the schema
# (usmc_stat_check.py: the flat fields are the main link's, slot 1's), and
# the checker must refuse flat fields that are not. The context's link
# counters get their line. A publisher older than the links array and
# those counters still gets its one link on the link group's line, and no
# counters line.
#
# Usage: test_usmc_stat_links.sh <stat_fake_publisher> <usmc-stat> <usmc_stat_check.py>
set -euo pipefail
FAKE=${1:?stat_fake_publisher}
STAT=${2:?usmc-stat}
CHECK=${3:?usmc_stat_check.py}
# shellcheck source=common/stat_fake.sh
. "$(dirname "$0")/common/stat_fake.sh"

python3 - "$tmp" <<'PY'
import copy, json, sys
d = sys.argv[1]
def link(slot, num, state, qp, peer_qp, used):
    return {"slot": slot, "link_num": num, "state": state, "device": "rxe%d" % slot,
            "port": 1, "local_gid": "::ffff:10.0.%d.2" % slot,
            "peer_gid": "::ffff:10.0.%d.1" % slot if state != "ACTIVATING" else "::",
            "qp_num": qp, "peer_qp_num": peer_qp, "sq_used": used, "sq_size": 272}
links = [link(0, 1, "INACTIVE", 17, 18, 0), link(1, 2, "ACTIVE", 21, 22, 3),
         link(2, 0, "ACTIVATING", 0, 0, 0)]
main = links[1]
lgr = {"id": 256, "role": "server", "state": "ACTIVE", "peer_id": "6a1c0e5b00000000",
       **{k: main[k] for k in ("device", "port", "local_gid", "peer_gid", "qp_num",
                               "peer_qp_num")},
       "links": links, "connections": 4, "max_connections": 255,
       "buffers": {"rmb": [{"size": 65536, "in_use": 4, "free": 0}], "sndbuf": []},
       "llc": {k: 0 for k in ("test_link_sent", "test_link_answered", "rkey_confirmed",
                              "rkey_deleted")},
       "engine": {k: 0 for k in ("cqes", "wakeups", "channel_sleeps", "spins_ok", "doorbells",
                                 "cq_arms", "ready_ops", "syscalls")}}
snap = {"schema": 1, "pid": 1, "comm": "links", "version": "0.1.0", "context": 0,
        "kernel_compat": False, "kernel_compat_cgroup": None, "devices": [],
        "counters": {k: 0 for k in ("connects", "accepts", "smcr", "fallbacks", "hs_errors",
                                    "open_conns", "lgrs_created", "lgrs_open",
                                    "lgrs_reclaimed", "pinned_bytes", "pinned_max",
                                    "pool_shrinks", "pinned_refused")},
        "fallback_reasons": [], "listeners": [], "connections": [], "link_groups": [lgr]}
snap["counters"].update(links_added=2, link_failures=1, failovers=5)
json.dump(snap, open(d + "/links.json", "w"))
old = copy.deepcopy(snap)
del old["link_groups"][0]["links"]
for k in ("links_added", "link_failures", "failovers"):
    del old["counters"][k]
json.dump(old, open(d + "/old.json", "w"))
bad = copy.deepcopy(snap)
bad["link_groups"][0]["qp_num"] = 17  # slot 0's: not the main link
json.dump([bad], open(d + "/bad.json", "w"))
PY

# --- three links: the link group's line, then one line per link
fake_start self 0 1 "$tmp/links.json"
"$STAT" -p "$fake_pid" >"$tmp/table.txt" || fail "usmc-stat exit $?"
cat "$tmp/table.txt"
grep -A3 '^  LGR ' "$tmp/table.txt" >"$tmp/lgr.txt" || fail "no link group line"
cat >"$tmp/want.txt" <<'EOF'
  LGR 0x00000100 server ACTIVE peer=6a1c0e5b00000000 conns=4/255 links=3
    link 1 slot 0 INACTIVE rxe0/1 gid ::ffff:10.0.0.2 -> ::ffff:10.0.0.1 qp 17 -> 18 sq 0/272
    link 2 slot 1 ACTIVE rxe1/1 gid ::ffff:10.0.1.2 -> ::ffff:10.0.1.1 qp 21 -> 22 sq 3/272
    link 0 slot 2 ACTIVATING rxe2/1 gid ::ffff:10.0.2.2 -> :: qp 0 -> 0 sq 0/272
EOF
diff -u "$tmp/want.txt" "$tmp/lgr.txt" || fail "the link group's lines"
grep -qx "  links_added=2 link_failures=1 failovers=5" "$tmp/table.txt" ||
	fail "no link counters line"
"$STAT" --json -p "$fake_pid" >"$tmp/out.json" || fail "usmc-stat --json exit $?"
python3 "$CHECK" "$tmp/out.json" --counter links_added=2 --counter link_failures=1 \
	--counter failovers=5 || fail "--json does not conform"
fake_stop

# --- the checker refuses flat fields that are not the main link's
rc=0
python3 "$CHECK" "$tmp/bad.json" >"$tmp/bad.out" || rc=$?
[ "$rc" = 1 ] && grep -q "qp_num 17, its main link's 21" "$tmp/bad.out" ||
	fail "the checker took flat fields of another link: $(cat "$tmp/bad.out")"

# --- a publisher without the links array: its link on the link group's line
fake_start self 0 1 "$tmp/old.json"
"$STAT" -p "$fake_pid" >"$tmp/old.txt" || fail "usmc-stat (old publisher) exit $?"
grep -qx '  LGR 0x00000100 server ACTIVE rxe1/1 peer=6a1c0e5b00000000 gid ::ffff:10.0.1.2 -> ::ffff:10.0.1.1 qp 21 -> 22 conns=4/255' \
	"$tmp/old.txt" || fail "old publisher's link group line: $(cat "$tmp/old.txt")"
grep -q '^    link ' "$tmp/old.txt" && fail "link lines without links"
grep -q 'links_added=' "$tmp/old.txt" && fail "link counters without link counters"
fake_stop
echo "PASS: a link group's links in the table and in --json"
