#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check `usmc-stat --json` output against the schema of docs/usmc-stat.md
(schema 1), then against what the test expects.

usage: usmc_stat_check.py FILE [--pid PID] [--listeners N] [--conns MODE:N]...
                          [--reason NAME]... [--fallback NAME]... [--lgrs N]
                          [--lgr-conns N] [--same-lgr] [--counter NAME=N]...
  --conns MODE:N   at least N connections in MODE (SMC-R, TCP, CONNECTING)
  --reason NAME    at least one TCP connection with that fallback reason
  --fallback NAME  the process's fallback_reasons counts NAME at least once
  --lgrs N         at least N link groups
  --lgr-conns N    some link group has at least N connections
  --counter NAME=N the process's counter NAME is N (e.g. link_failures=0)
Exit 0 if it conforms, 1 with the reasons otherwise.
"""
import argparse
import json
import re
import sys

U64 = "u64"
INT = "int"
STR = "str"
BOOL = "bool"

COUNTERS = {k: U64 for k in ("connects", "accepts", "smcr", "fallbacks", "hs_errors",
                             "open_conns", "lgrs_created", "lgrs_open",
                             "lgrs_reclaimed", "pinned_bytes", "pinned_max",
                             "pool_shrinks", "pinned_refused", "links_added",
                             "link_failures", "failovers")}
FALLBACK = {"name": STR, "code": STR, "count": U64}
DEVICE = {"name": STR, "port": INT, "netdev": STR, "gid_index": INT}
LISTENER_COUNTERS = {k: U64 for k in (
    "accepted", "smcr", "fallbacks", "hs_failed", "congestion_fallbacks", "backlog_full",
    "in_handshake", "queued", "hs_queue_depth", "hs_queue_high", "backlog_high",
    "accept_stash_high", "kernel_queue", "listen_drops")}
LISTENER_COUNTERS["accept_uring"] = BOOL
LISTENER = {"address": STR, "backlog": INT, "tcp_only": BOOL, "auto_fallback": BOOL,
            "counters": LISTENER_COUNTERS, "hs_time_hist": [U64],
            "fallback_reasons": [FALLBACK]}
REASON = {"name": STR, "code": STR}
CONN = {"local": STR, "peer": STR, "role": STR, "mode": STR, "reason": ("nullable", REASON),
        "peer_declined": BOOL, "lgr_id": U64, "bytes_sent": U64, "bytes_received": U64}
POOL = {"size": U64, "in_use": U64, "free": U64}
LINK = {"slot": INT, "link_num": INT, "state": STR, "device": STR, "port": INT,
        "local_gid": STR, "peer_gid": STR, "qp_num": U64, "peer_qp_num": U64,
        "sq_used": INT, "sq_size": INT}
LGR = {"id": U64, "role": STR, "state": STR, "peer_id": STR, "device": STR, "port": INT,
       "local_gid": STR, "peer_gid": STR, "qp_num": U64, "peer_qp_num": U64,
       "links": [LINK], "connections": INT, "max_connections": INT,
       "buffers": {"rmb": [POOL], "sndbuf": [POOL]},
       "llc": {k: U64 for k in ("test_link_sent", "test_link_answered", "rkey_confirmed",
                                "rkey_deleted")},
       "engine": {k: U64 for k in ("cqes", "wakeups", "channel_sleeps", "spins_ok", "doorbells",
                                   "cq_arms", "ready_ops", "syscalls")}}
SNAPSHOT = {"schema": INT, "pid": INT, "comm": STR, "version": STR, "context": INT,
            "kernel_compat": BOOL, "kernel_compat_cgroup": ("nullable", STR), "devices": [DEVICE],
            "counters": COUNTERS,
            "fallback_reasons": [FALLBACK], "listeners": [LISTENER], "connections": [CONN],
            "link_groups": [LGR]}

ADDR = re.compile(r"^(\d+\.\d+\.\d+\.\d+|\[[0-9a-fA-F:.]+\]):\d+$")
ENUMS = {("connections", "role"): {"server", "client"},
         ("connections", "mode"): {"SMC-R", "TCP", "CONNECTING"},
         ("link_groups", "role"): {"server", "client"},
         ("link_groups", "state"): {"INIT", "ACTIVE", "DEAD"},
         ("links", "state"): {"ACTIVATING", "ACTIVE", "INACTIVE"}}
LINKS_MAX = 3  # SMC_LINKS_PER_LGR_MAX
FLAT_LINK_KEYS = ("device", "port", "local_gid", "peer_gid", "qp_num", "peer_qp_num")

errors = []


def check(v, spec, path):
    if isinstance(spec, tuple):  # ("nullable", spec)
        if v is not None:
            check(v, spec[1], path)
        return
    if isinstance(spec, list):
        if not isinstance(v, list):
            errors.append(f"{path}: not an array")
            return
        for i, item in enumerate(v):
            check(item, spec[0], f"{path}[{i}]")
        return
    if isinstance(spec, dict):
        if not isinstance(v, dict):
            errors.append(f"{path}: not an object")
            return
        for k, s in spec.items():
            if k not in v:
                errors.append(f"{path}: missing {k}")
            else:
                check(v[k], s, f"{path}.{k}")
        for k in v:
            if k not in spec:
                errors.append(f"{path}: unknown member {k}")
        return
    ok = {U64: lambda x: isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**64,
          INT: lambda x: isinstance(x, int) and not isinstance(x, bool),
          STR: lambda x: isinstance(x, str),
          BOOL: lambda x: isinstance(x, bool)}[spec](v)
    if not ok:
        errors.append(f"{path}: {v!r} is not {spec}")


def main_link(links):
    """The link the flat fields stand for: the first ACTIVE one, else the first."""
    active = [k for k in links if k.get("state") == "ACTIVE"]
    return (active or links or [None])[0]


def check_links(g, p):
    links = g.get("links", [])
    if len(links) > LINKS_MAX:
        errors.append(f"{p}: {len(links)} links, at most {LINKS_MAX}")
    slots = [k.get("slot") for k in links]
    if slots != sorted(set(slots)) or any(not 0 <= x < LINKS_MAX for x in slots):
        errors.append(f"{p}: link slots {slots}")
    for k in links:
        if k.get("state") not in ENUMS[("links", "state")]:
            errors.append(f"{p}: link state {k.get('state')!r}")
        if not 0 <= k.get("sq_used", 0) <= k.get("sq_size", 0):
            errors.append(f"{p}: link sq_used {k.get('sq_used')} of {k.get('sq_size')}")
    m = main_link(links)
    for key in FLAT_LINK_KEYS if m else ():
        if g.get(key) != m.get(key):
            errors.append(f"{p}: {key} {g.get(key)!r}, its main link's {m.get(key)!r}")


def check_values(s, p):
    if s.get("schema") != 1:
        errors.append(f"{p}.schema: {s.get('schema')!r}, expected 1")
    for c in s.get("connections", []):
        for k in ("role", "mode"):
            if c.get(k) not in ENUMS[("connections", k)]:
                errors.append(f"{p}: connection {k} {c.get(k)!r}")
        if c.get("mode") == "TCP" and c.get("reason") is None:
            errors.append(f"{p}: TCP connection without a reason")
        if c.get("mode") != "TCP" and c.get("reason") is not None:
            errors.append(f"{p}: {c.get('mode')} connection with a reason")
        if c.get("mode") == "SMC-R" and not c.get("lgr_id"):
            errors.append(f"{p}: SMC-R connection without a link group")
        for k in ("local", "peer"):
            if c.get("mode") != "CONNECTING" and not ADDR.match(c.get(k, "")):
                errors.append(f"{p}: connection {k} {c.get(k)!r}")
    for g in s.get("link_groups", []):
        for k in ("role", "state"):
            if g.get(k) not in ENUMS[("link_groups", k)]:
                errors.append(f"{p}: link group {k} {g.get(k)!r}")
        if not re.fullmatch(r"[0-9a-f]{16}", g.get("peer_id", "")):
            errors.append(f"{p}: link group peer_id {g.get('peer_id')!r}")
        check_links(g, f"{p}: link group {g.get('id')}")
    for f in s.get("fallback_reasons", []):
        if f.get("count", 0) < 1:
            errors.append(f"{p}: fallback reason {f.get('name')} counted 0 times")
    for lsn in s.get("listeners", []):
        if not ADDR.match(lsn.get("address", "")):
            errors.append(f"{p}: listener address {lsn.get('address')!r}")
        if len(lsn.get("hs_time_hist", [])) > 24:
            errors.append(f"{p}: hs_time_hist longer than 24 buckets")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--pid", type=int)
    ap.add_argument("--listeners", type=int, default=0)
    ap.add_argument("--conns", action="append", default=[])
    ap.add_argument("--reason", action="append", default=[])
    ap.add_argument("--fallback", action="append", default=[])
    ap.add_argument("--lgrs", type=int, default=0)
    ap.add_argument("--lgr-conns", type=int, default=0)
    ap.add_argument("--counter", action="append", default=[])
    a = ap.parse_args()

    with open(a.file) as f:
        doc = json.load(f)
    if not isinstance(doc, list):
        print("FAIL: not a JSON array")
        return 1
    for i, s in enumerate(doc):
        # other processes may run another libusmc (and schema): only ours count
        if a.pid is not None and isinstance(s, dict) and s.get("pid") != a.pid:
            continue
        check(s, SNAPSHOT, f"[{i}]")
        if isinstance(s, dict):
            check_values(s, f"[{i}]")
    if not errors:
        snaps = [s for s in doc if a.pid is None or s["pid"] == a.pid]
        if not snaps:
            errors.append(f"no snapshot of pid {a.pid}")
        conns = [c for s in snaps for c in s["connections"]]
        lgrs = [g for s in snaps for g in s["link_groups"]]
        if sum(len(s["listeners"]) for s in snaps) < a.listeners:
            errors.append(f"fewer than {a.listeners} listeners")
        for want in a.conns:
            mode, n = want.rsplit(":", 1)
            got = sum(1 for c in conns if c["mode"] == mode)
            if got < int(n):
                errors.append(f"{got} {mode} connections, expected at least {n}")
        for r in a.reason:
            if not any(c["reason"] and c["reason"]["name"] == r for c in conns):
                errors.append(f"no connection with fallback reason {r}")
        for r in a.fallback:
            if not any(f["name"] == r for s in snaps for f in s["fallback_reasons"]):
                errors.append(f"fallback reason {r} never counted")
        if len(lgrs) < a.lgrs:
            errors.append(f"{len(lgrs)} link groups, expected at least {a.lgrs}")
        if a.lgr_conns and not any(g["connections"] >= a.lgr_conns for g in lgrs):
            errors.append(f"no link group with {a.lgr_conns} connections")
        for want in a.counter:
            name, n = want.split("=", 1)
            for s in snaps:
                if s["counters"].get(name) != int(n):
                    errors.append(f"counter {name} {s['counters'].get(name)!r}, expected {n}")
        ids = {g["id"] for g in lgrs}
        for c in conns:
            if c["mode"] == "SMC-R" and c["lgr_id"] not in ids:
                errors.append(f"connection {c['local']} in unknown link group {c['lgr_id']}")
    for e in errors:
        print("FAIL:", e)
    if errors:
        return 1
    print(f"OK: {len(doc)} snapshot(s) conform to usmc-stat schema 1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
