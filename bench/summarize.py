#!/usr/bin/env python3
"""Summarize bench/all.sh's raw leafd-bench JSON (OUT/raw/LABEL.RUN.json) as Markdown tables:
medians of the runs and ratios against the baseline measured in the same script, both the
ratio of the medians and the median of the per-run ratios ("paired").

    python3 bench/summarize.py OUT
    python3 bench/summarize.py --median-run OUT LABEL   # the run whose p99 is the median
"""
import glob
import json
import os
import statistics
import sys

SNOWFLAKE_LIMIT = 4_096_000  # IDs/s of one worker with 12 sequence bits
SEGMENT_TARGET = 20_000_000  # issue 10's batch target


def load(out):
    runs = {}
    for f in glob.glob(os.path.join(out, "raw", "*.json")):
        label, run, _ = os.path.basename(f).rsplit(".", 2)
        with open(f) as fh:
            r = json.load(fh)
        cpu = f[:-len(".json")] + ".cpu"
        if os.path.exists(cpu):
            with open(cpu) as fh:
                r["server_cpu"] = float(fh.read().strip() or 0)
        runs.setdefault(label, {})[int(run)] = r
    return runs


def val(r, key):
    if key == "cpu":
        return r.get("server_cpu", 0)
    if key in ("p50", "p99", "p999", "max"):
        return r["latency"][key + "_ms"]
    return r[key]


def med(runs, label, key):
    rs = runs.get(label, {})
    if not rs:
        return None
    return statistics.median(val(r, key) for r in rs.values())


def paired(runs, label, base, key):
    a, b = runs.get(label, {}), runs.get(base, {})
    rs = [val(a[i], key) / val(b[i], key) for i in a if i in b and val(b[i], key) > 0]
    return statistics.median(rs) if rs else None


def spread(runs, label, base, key):
    a, b = runs.get(label, {}), runs.get(base, {})
    rs = sorted(val(a[i], key) / val(b[i], key) for i in a if i in b and val(b[i], key) > 0)
    return "%.2f–%.2f" % (rs[0], rs[-1]) if rs else "—"


def fmt(v, nd=0):
    if v is None:
        return "—"
    if nd == 0:
        return "{:,.0f}".format(v).replace(",", " ")
    return "%.*f" % (nd, v)


def ratio(a, b):
    return a / b if a is not None and b else None


def errors(runs, label):
    return sum(r["errors"] + len(r.get("conn_errors") or []) for r in runs.get(label, {}).values())


def pair_table(runs, title, rows, base_name):
    if not any(label in runs and base in runs for _, label, base in rows):
        return
    print("### " + title)
    print()
    print("| test | %s req/s | req/s | ratio | paired (range) | p99 %s / test ms | p99 ratio | p99.9 %s / test ms | p99.9 ratio | server CPU %s / test | errors |" % (base_name, base_name, base_name, base_name))
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, label, base in rows:
        if label not in runs or base not in runs:
            continue
        lr, br = med(runs, label, "requests_per_sec"), med(runs, base, "requests_per_sec")
        l99, b99 = med(runs, label, "p99"), med(runs, base, "p99")
        l999, b999 = med(runs, label, "p999"), med(runs, base, "p999")
        print("| %s | %s | %s | **%s** | %s (%s) | %s / %s | **%s** | %s / %s | %s | %s / %s | %d |" % (
            name, fmt(br), fmt(lr), fmt(ratio(lr, br), 3),
            fmt(paired(runs, label, base, "requests_per_sec"), 3), spread(runs, label, base, "requests_per_sec"),
            fmt(b99, 3), fmt(l99, 3), fmt(ratio(l99, b99), 2),
            fmt(b999, 3), fmt(l999, 3), fmt(ratio(l999, b999), 2),
            fmt(med(runs, base, "cpu"), 2), fmt(med(runs, label, "cpu"), 2), errors(runs, label)))
    print()


def loads_info(out, label):
    """The .loads files of a refill label: list of dicts (loads, seconds, step) per run."""
    res = []
    for f in sorted(glob.glob(os.path.join(out, "raw", label + ".*.loads"))):
        with open(f) as fh:
            res.append({k: float(v) for k, v in (x.split("=") for x in fh.read().split())})
    return res


def refill_table(out, runs):
    delays = sorted({k[len("refill"):].split("-")[0] for k in runs if k.startswith("refill")},
                    key=lambda d: int(d[:-2]))
    if not delays:
        return
    base = delays[0]
    print("### Refills: INCR with the database behind a delaying proxy (MariaDB, 50 connections, unpipelined)")
    print()
    print("p999 ratio: against the same phase with %s added (ratio of the medians; paired: median of the per-run ratios). Switch interval: seconds per segment load during the phase (median)." % base)
    print()
    print("| phase | added per round trip | req/s | p99 ms | p999 ms | p999 ratio | paired (range) | max ms | errors (UNAVAILABLE) | loads | s per switch | step at the end |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for phase in ("new", "ramp", "steady", "restart"):
        for d in delays:
            label, blabel = "refill%s-%s" % (d, phase), "refill%s-%s" % (base, phase)
            if label not in runs:
                continue
            li = loads_info(out, label)
            loads = statistics.median(x["loads"] for x in li) if li else None
            per = statistics.median(x["seconds"] / x["loads"] for x in li if x["loads"]) if li and any(x["loads"] for x in li) else None
            step = statistics.median(x["step"] for x in li) if li else None
            p999, b999 = med(runs, label, "p999"), med(runs, blabel, "p999")
            print("| %s | %s | %s | %s | %s | **%s** | %s (%s) | %s | %d | %s | %s | %s |" % (
                phase, d, fmt(med(runs, label, "requests_per_sec")), fmt(med(runs, label, "p99"), 3),
                fmt(p999, 3), fmt(ratio(p999, b999), 2),
                fmt(paired(runs, label, blabel, "p999"), 2), spread(runs, label, blabel, "p999"),
                fmt(med(runs, label, "max"), 1), errors(runs, label), fmt(loads), fmt(per, 2), fmt(step)))
    print()


def main(argv):
    if len(argv) == 4 and argv[1] == "--median-run":
        rs = load(argv[2]).get(argv[3], {})
        if not rs:
            return 1
        order = sorted(rs, key=lambda i: val(rs[i], "p99"))
        print(order[(len(order) - 1) // 2])
        return 0
    out = argv[1]
    runs = load(out)
    n = max((len(v) for v in runs.values()), default=0)
    print("## bench/all.sh summary")
    print()
    with open(os.path.join(out, "env.txt")) as fh:
        for line in fh:
            print("    " + line.rstrip())
    print()
    print("Medians of %d alternating runs; ratio = test / baseline of the medians, paired = median of the per-run ratios." % n)
    print()
    pair_table(runs, "Latency: leafd against redis-server (leafd-bench, 50 connections)", [
        ("INCR", "leafd-incr", "redis-incr"),
        ("INCR -P 16", "leafd-incr-p16", "redis-incr-p16"),
    ], "redis")

    if any(k.startswith(("segment1000", "snowflake1000", "incrby1000")) for k in runs):
        print("### Batches (leafd alone, pinned; -P 16)")
        print()
        print("| test | IDs/s (median) | runs | target | ratio to target | p99 ms | server CPU (cores) | errors |")
        print("|---|---|---|---|---|---|---|---|")
        for name, label, target in [
            ("IDS.SEGMENT tag 1000, go-redis", "segment1000-goredis", SEGMENT_TARGET),
            ("IDS.SEGMENT tag 1000, leafd-bench client", "segment1000-raw", SEGMENT_TARGET),
            ("IDS.SNOWFLAKE 1000", "snowflake1000", SNOWFLAKE_LIMIT),
            ("INCRBY tag 1000", "incrby1000", None),
        ]:
            if label not in runs:
                continue
            m = med(runs, label, "ids_per_sec")
            each = ", ".join(fmt(runs[label][i]["ids_per_sec"]) for i in sorted(runs[label]))
            print("| %s | %s | %s | %s | %s | %s | %s | %d |" % (
                name, fmt(m), each, fmt(target) if target else "—",
                ("**%s**" % fmt(ratio(m, target), 3)) if target else "—", fmt(med(runs, label, "p99"), 3),
                fmt(med(runs, label, "cpu"), 2), errors(runs, label)))
        print()

    pair_table(runs, "Many tags: round-robin over all tags against one tag (same server, INCR -P 16)", [
        ("INCR, many tags vs one", "tags-many", "tags-one"),
    ], "one tag")
    mem = os.path.join(out, "tags-memory.txt")
    if os.path.exists(mem):
        with open(mem) as fh:
            kv = dict(x.split("=") for x in fh.read().split())
        tags = int(kv["tags"])
        h1 = int(kv["heap_inuse_one_tag"])
        per2 = (int(kv["heap_inuse_all_tags"]) - h1) / tags
        per3 = (int(kv["heap_inuse_after_runs"]) - h1) / tags
        print("Go heap in use (`go_memstats_heap_inuse_bytes`, uncollected garbage included): %s bytes with one tag; with %s tags %s bytes right after priming (**%.0f bytes per tag**) and %s after the measured runs (**%.0f bytes per tag**); RSS after the runs %s bytes. Priming (creating and loading every tag) took %s s." % (
            fmt(h1), fmt(tags), fmt(int(kv["heap_inuse_all_tags"])), per2, fmt(int(kv["heap_inuse_after_runs"])), per3,
            fmt(int(kv["rss_after_runs"])), kv["prime_seconds"]))
        print()

    refill_table(out, runs)

    pair_table(runs, "Cores: leafd against redis-server placed the same way (GOMAXPROCS 1: server pinned, client on the other core; GOMAXPROCS 2: both unpinned)", [
        ("INCR, GOMAXPROCS 1", "cores1-leafd-incr", "cores1-redis-incr"),
        ("INCR -P 16, GOMAXPROCS 1", "cores1-leafd-incr-p16", "cores1-redis-incr-p16"),
        ("INCR, GOMAXPROCS 2", "cores2-leafd-incr", "cores2-redis-incr"),
        ("INCR -P 16, GOMAXPROCS 2", "cores2-leafd-incr-p16", "cores2-redis-incr-p16"),
    ], "redis")
    pair_table(runs, "Cores: leafd GOMAXPROCS 2 (unpinned) against GOMAXPROCS 1 (pinned)", [
        ("INCR", "cores2-leafd-incr", "cores1-leafd-incr"),
        ("INCR -P 16", "cores2-leafd-incr-p16", "cores1-leafd-incr-p16"),
    ], "GOMAXPROCS 1")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
