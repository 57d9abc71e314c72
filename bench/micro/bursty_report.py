#!/usr/bin/env python3
"""Prints the tables of `bench/micro/run_micro.sh --pattern bursty` from its raw results.

usage: bursty_report.py --rounds N --configs plain,nrtprof,... DIR

DIR/roundR/CONFIG/ holds, per run: bench.json (bench/micro/burst_bench.cc's JSON), stderr
(with its "micro_bench: traced calls: ..." line), and capture/summary.json (nrtprof) or
lttng_counts.txt (the LTTng peer). Medians are over every burst of every round; a
configuration's "added" cost is its median minus plain's, pattern by pattern. Prints figures;
asserts nothing about time.
"""

import argparse
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from micro_report import (LABELS, print_comparison, load_json, lttng_events, nrtprof_events, quantile,  # noqa: E402
                          settings, traced_calls)

CALLS = {
    "tensor_write": "nrt_tensor_write, 4 B, HOST tensor",
    "execute_schedule": "nrta_execute_schedule of a tiny model",
    "is_completed": "nrta_is_completed of a request in flight (no poll sees it complete)",
}


def async_calls(run_dir):
    """The async calls burst_bench made ("burst_bench: async calls: ..."), or None."""
    try:
        with open(os.path.join(run_dir, "stderr"), errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"burst_bench: async calls: nrta_execute_schedule=(\d+) nrta_is_completed=(\d+) "
                  r"nrta_is_completed_saw_completion=(\d+)", text)
    if not m:
        return None
    return {"schedule": int(m.group(1)), "polls": int(m.group(2)), "polls_done": int(m.group(3))}


def async_events(config, run_dir, calls, base):
    """Adds the async calls to `base` (expected, recorded, lost, detail, bytes): nrtprof records
    each schedule, and each poll that saw its request complete with the count of the thread's
    polls since its last recorded one, which summary.json's row adds up, with the polls a
    thread made after its last recorded one, counted when it ends (also a thread that only
    polls, as burst_bench's new threads do: its first poll gives it a ring and an exit hook):
    every poll is expected there. The LTTng peer records every call."""
    if base is None or calls is None:
        return base
    expected, recorded, lost, detail, trace_bytes = base
    if config.startswith("nrtprof"):
        summary = load_json(os.path.join(run_dir, "capture", "summary.json")) or {}
        rows = {r["name"]: r["calls"] for r in summary.get("rows", [])}
        expected += calls["schedule"] + calls["polls"]
        recorded += rows.get("nrta_execute_schedule", 0) + rows.get("nrta_is_completed", 0)
    else:
        counts = {}
        try:
            with open(os.path.join(run_dir, "lttng_counts.txt")) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 2 and parts[1].isdigit():
                        counts[parts[0]] = int(parts[1])
        except OSError:
            return None
        per = 2 if config == "lttng_entry_exit" else 1
        expected += per * (calls["schedule"] + calls["polls"])
        for kind in ("api_call",) + (("api_entry",) if per == 2 else ()):
            recorded += (counts.get(f"events.{kind}.nrta_execute_schedule", 0) +
                         counts.get(f"events.{kind}.nrta_is_completed", 0))
    return expected, recorded, lost, detail, trace_bytes

PATTERNS = [
    ("continuous", "continuous (no pause)"),
    ("after_short_pause", "burst after {short} ms"),
    ("after_long_pause", "burst after {long} ms{evict}"),
    ("new_thread", "new thread's first calls"),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--configs", required=True)
    parser.add_argument("dir")
    args = parser.parse_args()
    configs = args.configs.split(",")

    wall = {}  # (config, pattern) -> [ns/call of each burst]
    cpu = {}
    events = {}  # config -> [expected, recorded, tool_lost, details]
    meta = None
    failed_runs = []
    unverified = []
    invalid = []
    for rnd in range(1, args.rounds + 1):
        for config in configs:
            run_dir = os.path.join(args.dir, f"round{rnd}", config)
            doc = load_json(os.path.join(run_dir, "bench.json"))
            if doc is None:
                failed_runs.append(f"round {rnd} {config}")
                continue
            meta = meta or doc.get("context", {})
            for name, samples in doc.get("patterns", {}).items():
                wall.setdefault((config, name), []).extend(samples["wall_ns_per_call"])
                cpu.setdefault((config, name), []).extend(samples["cpu_ns_per_call"])
            calls = traced_calls(run_dir)
            if config.startswith("nrtprof"):
                e = nrtprof_events(run_dir, calls)
            elif config.startswith("lttng"):
                e = lttng_events(run_dir, calls, config == "lttng_entry_exit")
            else:
                e = None
            if e is not None:
                e = async_events(config, run_dir, async_calls(run_dir), e)
            ctx = doc.get("context", {})
            if ctx.get("schedule_failures") or ctx.get("polls_saw_completed"):
                invalid.append(f"round {rnd} {config}: {ctx.get('schedule_failures', 0)} schedule "
                               f"calls failed, {ctx.get('polls_saw_completed', 0)} timed polls saw "
                               f"their request complete (hold {ctx.get('hold_ms_min', '?')} ms)")
            if e is None and config != "plain":
                unverified.append(f"round {rnd} {config}")
            if e is not None:
                acc = events.setdefault(config, [0, 0, 0, []])
                acc[0] += e[0]
                acc[1] += e[1]
                acc[2] += e[2]
                if e[3]:
                    acc[3].append(e[3])

    if meta is None:
        print("bursty_report: no results in " + args.dir, file=sys.stderr)
        return 1
    evict = f" +{meta['evict_mib']} MiB" if meta.get("evict_mib") else ""
    if meta.get("drop_ring_mappings"):
        evict += ", ring unmapped"
    labels = {p: text.format(short=meta.get("short_pause_ms", "?"), long=meta.get("long_pause_ms", "?"),
                             evict=evict)
              for p, text in PATTERNS}
    print()
    call = meta.get("call", "tensor_write")
    print(f"Per-call cost in the bursty pattern (ns/call of {CALLS.get(call, call)}): "
          f"bursts of {meta.get('calls_per_burst', '?')} calls; {args.rounds} processes x "
          f"{meta.get('rounds', '?')} bursts of each kind (a new thread every "
          f"{meta.get('new_thread_every', '?')} rounds); median and p25-p75 over the bursts")
    print(f"cpu: {meta.get('cpu', '?')}; a second thread alive: "
          f"{'yes' if meta.get('live_thread') else 'no (one started and joined)'}")
    if invalid:
        print("NOT THE PATTERN ASKED FOR: " + "; ".join(invalid))
    for line in settings(args.dir, configs, args.rounds):
        print(line)
    header = (f"{'pattern':<28} {'configuration':<22} {'ns/call':>8} {'p25-p75':>13} "
              f"{'thread CPU':>10} {'added vs plain':>15}")
    print(header)
    print("-" * len(header))
    medians = {}
    for pattern, _ in PATTERNS:
        for i, config in enumerate(configs):
            values = wall.get((config, pattern))
            if not values:
                continue
            med = statistics.median(values)
            medians[(config, pattern)] = med
            spread = f"{quantile(values, 0.25):.1f}-{quantile(values, 0.75):.1f}"
            added = ""
            if config != "plain" and ("plain", pattern) in medians:
                added = f"{med - medians[('plain', pattern)]:+.1f}"
            print(f"{labels[pattern] if i == 0 else '':<28} {LABELS.get(config, config):<22} "
                  f"{med:>8.1f} {spread:>13} {statistics.median(cpu[(config, pattern)]):>10.1f} "
                  f"{added:>15}")

    if events:
        print()
        print("Events, all rounds: what the benchmark asked each tool to record, what it recorded, "
              "and what it says it lost")
        header = f"{'configuration':<22} {'expected':>10} {'recorded':>10} {'missing':>8} {'tool: lost':>10}  detail"
        print(header)
        print("-" * len(header))
        for config in configs:
            if config not in events:
                continue
            expected, recorded, lost, details = events[config]
            detail = "; ".join(sorted(set(details))) if details else ""
            print(f"{LABELS.get(config, config):<22} {expected:>10} {recorded:>10} "
                  f"{expected - recorded:>8} {lost:>10}  {detail}")
        lossy = [c for c in events if events[c][0] != events[c][1] or events[c][2]]
        if unverified:
            print("NOT A FAIR COMPARISON: loss not checked for " + ", ".join(unverified))
        if lossy:
            print("Events were lost in " + ", ".join(LABELS.get(c, c) for c in lossy))
        elif not unverified:
            print("Nothing lost in any configuration.")

    peers = [c for c in ("lttng", "lttng_entry_exit") if c in configs]
    if "nrtprof" in configs and "plain" in configs and peers:
        print()
        print("nrtprof vs LTTng-UST, added ns per call, same run (issue 13: >= 4x less than one "
              "event, >= 8x less than entry+exit)")
        header = f"{'pattern':<28} {'nrtprof':>8}" + "".join(f" {LABELS[p]:>21} {'ratio':>6}" for p in peers)
        print(header)
        print("-" * len(header))
        print_comparison(medians, [(pattern, labels[pattern]) for pattern, _ in PATTERNS], peers,
                         "plain", 28)
        print("ratio = LTTng's added ns / nrtprof's (wall time); above 1, nrtprof is cheaper.")

    paired = [p for p, _ in PATTERNS if any((c, p + "_direct") in wall for c in configs)]
    if paired:
        print()
        if meta.get("paired") == 2:
            print("Interleaved in each burst (burst_bench --paired=2): what the wrapper adds, ns/call "
                  "= the median over bursts of (time of a call through the linked symbol - time of a "
                  "call to libnrt's own function; each the burst's 10-90th percentile mean), calls "
                  "alternating, each timed alone with the TSC (its own ~20 ns included in both); "
                  "plain's column is the harness's noise")
        else:
            print("Paired in each process (burst_bench --paired): what the wrapper adds, ns/call = "
                  "the median over rounds of (burst through the linked symbol - burst through "
                  "libnrt's own function), same pause, same process; plain's column is the "
                  "harness's noise")
        header = f"{'pattern':<28}" + "".join(f" {LABELS.get(c, c):>22}" for c in configs)
        print(header)
        print("-" * len(header))
        for pattern in paired:
            line = f"{labels[pattern]:<28}"
            for config in configs:
                a = wall.get((config, pattern), [])
                b = wall.get((config, pattern + "_direct"), [])
                n = min(len(a), len(b))
                if n == 0:
                    line += f" {'-':>22}"
                    continue
                diffs = [x - y for x, y in zip(a[:n], b[:n])]
                spread = f"({quantile(diffs, 0.25):+.1f}..{quantile(diffs, 0.75):+.1f})"
                line += f" {statistics.median(diffs):>+8.1f} {spread:>13}"
            print(line)
        print("In brackets: p25..p75 of the per-round (per-burst) differences.")
        print("Medians of the direct calls themselves, ns/call: " + "; ".join(
            f"{labels[p]}: " + ", ".join(
                f"{LABELS.get(c, c)} {statistics.median(wall[(c, p + '_direct')]):.1f}"
                for c in configs if (c, p + "_direct") in wall) for p in paired))

    if failed_runs:
        print()
        print("Runs without results: " + ", ".join(failed_runs))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
