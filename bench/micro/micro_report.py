#!/usr/bin/env python3
"""Prints the tables of bench/micro/run_micro.sh from the raw results it leaves in its folder.

usage: micro_report.py --rounds N --configs plain,nrtprof,... DIR

DIR/roundR/CONFIG/ holds, per run: bench.json (Google Benchmark's JSON), stderr (with the
benchmark's "micro_bench: traced calls: ..." line), and either capture/summary.json (nrtprof)
or lttng_counts.txt (the LTTng peer, from bench/lttng/run_lttng.sh --record).

Medians are over every repetition of every round (real time per iteration). A configuration's
"added" cost is its median minus plain's. Prints figures; asserts nothing about time.
"""

import argparse
import json
import os
import re
import statistics
import sys

LABELS = {
    "plain": "plain",
    "plain_threaded": "plain, multi-threaded",
    "nrtprof": "nrtprof",
    "nrtprof_stacks16": "nrtprof stacks=16",
    "lttng": "lttng-ust",
    "lttng_entry_exit": "lttng-ust entry+exit",
    "nrtprof_alt": "nrtprof (alt. build)",
}
TRACED = [
    ("nrt_tensor_write/host/4B", "nrt_tensor_write, host, 4 B"),
    ("nrt_tensor_read/host/4B", "nrt_tensor_read, host, 4 B"),
    ("range_push_pop", "range push+pop (pair)"),
]
CLOCKS = [
    ("clock_gettime/MONOTONIC", "clock_gettime(MONOTONIC)"),
    ("rdtsc", "rdtsc"),
]


def quantile(values, q):
    values = sorted(values)
    if len(values) == 1:
        return values[0]
    pos = q * (len(values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def traced_calls(run_dir):
    """What the benchmark process says it asked the tracer to record."""
    try:
        with open(os.path.join(run_dir, "stderr"), errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"micro_bench: traced calls: nrt_tensor_write=(\d+) nrt_tensor_read=(\d+) "
                  r"range_pairs=(\d+)", text)
    if not m:
        return None
    return {"write": int(m.group(1)), "read": int(m.group(2)), "pairs": int(m.group(3))}


def nrtprof_events(run_dir, calls):
    """(expected, recorded, tool's own drop count, detail, bytes per event) for an nrtprof run."""
    summary = load_json(os.path.join(run_dir, "capture", "summary.json"))
    if summary is None or calls is None:
        return None
    rows = {r["name"]: r["calls"] for r in summary.get("rows", [])}
    recorded = (rows.get("nrt_tensor_write", 0) + rows.get("nrt_tensor_read", 0) +
                rows.get("aten::bench", 0))
    expected = calls["write"] + calls["read"] + calls["pairs"]
    drops = summary.get("events_dropped", {})
    detail = ", ".join(f"{k} {v}" for k, v in drops.items() if k != "total" and v)
    trace_bytes = None
    try:
        with open(os.path.join(run_dir, "trace_bytes")) as f:
            trace_bytes = int(f.read().strip())
    except (OSError, ValueError):
        pass
    return expected, recorded, drops.get("total", 0), detail, trace_bytes


def lttng_events(run_dir, calls, entry_exit):
    counts = {}
    try:
        with open(os.path.join(run_dir, "lttng_counts.txt")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[1].isdigit():
                    counts[parts[0]] = int(parts[1])
    except OSError:
        return None
    if calls is None:
        return None
    expected = calls["write"] + calls["read"] + 2 * calls["pairs"]
    recorded = (counts.get("events.api_call.nrt_tensor_write", 0) +
                counts.get("events.api_call.nrt_tensor_read", 0) +
                counts.get("events.range_push", 0) + counts.get("events.range_pop", 0))
    if entry_exit:
        expected += calls["write"] + calls["read"]
        recorded += (counts.get("events.api_entry.nrt_tensor_write", 0) +
                     counts.get("events.api_entry.nrt_tensor_read", 0))
    lost = max(counts.get("discarded_lttng_list", 0), counts.get("discarded_lttng_stop", 0),
               counts.get("discarded_babeltrace2", 0))
    detail = (f"lttng list {counts.get('discarded_lttng_list', '?')}, "
              f"lttng stop {counts.get('discarded_lttng_stop', '?')}, "
              f"babeltrace2 {counts.get('discarded_babeltrace2', '?')}")
    return expected, recorded, lost, detail, counts.get("trace_bytes")


def settings(out_dir, configs, rounds):
    """How each tracer was set up, as the run recorded it."""
    lines = []
    try:
        with open(os.path.join(out_dir, "settings.txt")) as f:
            lines += [line.rstrip("\n") for line in f if line.strip()]
    except OSError:
        pass
    for config in configs:
        if not config.startswith("lttng"):
            continue
        for rnd in range(1, rounds + 1):
            try:
                with open(os.path.join(out_dir, f"round{rnd}", config, "lttng_list.txt")) as f:
                    text = f.read()
            except OSError:
                continue
            attrs = dict(re.findall(r"^[ \t]*([A-Z][A-Za-z -]+):[ \t]+(.+)$", text, re.M))
            lines.append(
                "lttng-ust: channel " + ", ".join(
                    f"{k.lower()} {attrs[k]}" for k in
                    ("Buffering scheme", "Event-loss mode", "Sub-buffer size", "Sub-buffer count",
                     "Read timer", "Blocking timeout") if k in attrs) +
                "; per CPU; context vtid")
            break
        break
    return lines



def print_comparison(medians, rows, peers, base_config, width):
    """One line per (key, label) of `rows`: the ns nrtprof adds per call over `base_config`,
    then each peer's and its ratio to nrtprof's; rows without both medians are left out."""
    for key, label in rows:
        if ("nrtprof", key) not in medians or (base_config, key) not in medians:
            continue
        base = medians[(base_config, key)]
        ours = medians[("nrtprof", key)] - base
        line = f"{label:<{width}} {ours:>8.1f}"
        for p in peers:
            if (p, key) not in medians:
                continue
            theirs = medians[(p, key)] - base
            ratio = f"{theirs / ours:.2f}x" if ours > 0 else "-"
            line += f" {theirs:>21.1f} {ratio:>6}"
        print(line)

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, required=True)
    parser.add_argument("--configs", required=True)
    parser.add_argument("dir")
    args = parser.parse_args()
    configs = args.configs.split(",")

    times = {}  # (config, benchmark) -> [wall ns per iteration of each repetition]
    cpu_times = {}  # (config, benchmark) -> [the benchmark thread's CPU ns per iteration]
    first_calls = {}  # config -> [ns per call of the first chunk, per round]
    events = {}  # config -> [expected, recorded, tool_lost, details, trace bytes]
    meta = None
    failed_runs = []
    unverified = []  # traced runs whose loss could not be checked (no summary.json or counts)
    for rnd in range(1, args.rounds + 1):
        for config in configs:
            run_dir = os.path.join(args.dir, f"round{rnd}", config)
            doc = load_json(os.path.join(run_dir, "bench.json"))
            if doc is None:
                failed_runs.append(f"round {rnd} {config}")
                continue
            meta = meta or doc.get("context", {})
            first = doc.get("context", {}).get("first_calls_ns_per_call")
            if first is not None:
                first_calls.setdefault(config, []).append(float(first))
            for b in doc.get("benchmarks", []):
                if b.get("run_type") != "iteration":
                    continue
                name = b["name"].split("/iterations:")[0]
                scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
                times.setdefault((config, name), []).append(b["real_time"] * scale)
                cpu_times.setdefault((config, name), []).append(b["cpu_time"] * scale)
            calls = traced_calls(run_dir)
            if config.startswith("nrtprof"):
                e = nrtprof_events(run_dir, calls)
            elif config.startswith("lttng"):
                e = lttng_events(run_dir, calls, config == "lttng_entry_exit")
            else:
                e = None
            if e is None and not config.startswith("plain"):
                unverified.append(f"round {rnd} {config}")
            if e is not None:
                acc = events.setdefault(config, [0, 0, 0, [], 0])
                acc[0] += e[0]
                acc[1] += e[1]
                acc[2] += e[2]
                if e[3]:
                    acc[3].append(e[3])
                if e[4]:
                    acc[4] += e[4]

    if meta is None:
        print("micro_report: no results in " + args.dir, file=sys.stderr)
        return 1
    reps = len(times.get((configs[0], TRACED[0][0]), [])) // max(args.rounds, 1)
    print()
    print(f"Per-call cost (ns), median of {args.rounds} rounds x {reps} repetitions x "
          f"{meta.get('calls_per_repetition', '?')} calls, {meta.get('settle_ms', '?')} ms "
          f"pause after each repetition; p25-p75 over the repetitions")
    print(f"machine: {meta.get('num_cpus', '?')} CPUs at {meta.get('mhz_per_cpu', '?')} MHz, "
          f"{meta.get('date', '')}")
    for line in settings(args.dir, configs, args.rounds):
        print(line)
    threaded = "plain_threaded" in configs
    header = (f"{'benchmark':<30} {'configuration':<22} {'ns/call':>8} {'p25-p75':>13} "
              f"{'thread CPU':>10} {'added vs plain':>15}" +
              (f" {'vs multi-threaded':>18}" if threaded else ""))
    print(header)
    print("-" * len(header))
    medians = {}
    for bench, label in TRACED:
        for i, config in enumerate(configs):
            values = times.get((config, bench))
            if not values:
                continue
            med = statistics.median(values)
            medians[(config, bench)] = med
            spread = f"{quantile(values, 0.25):.1f}-{quantile(values, 0.75):.1f}"
            cpu = statistics.median(cpu_times[(config, bench)])
            added = ""
            if config != "plain" and ("plain", bench) in medians:
                added = f"{med - medians[('plain', bench)]:+.1f}"
            added_mt = ""
            if threaded and not config.startswith("plain") and ("plain_threaded", bench) in medians:
                added_mt = f"{med - medians[('plain_threaded', bench)]:+.1f}"
            print(f"{label if i == 0 else '':<30} {LABELS.get(config, config):<22} {med:>8.1f} "
                  f"{spread:>13} {cpu:>10.1f} {added:>15}" +
                  (f" {added_mt:>18}" if threaded else ""))
    for bench, label in CLOCKS:
        values = times.get(("plain", bench))
        if values:
            spread = f"{quantile(values, 0.25):.1f}-{quantile(values, 0.75):.1f}"
            cpu = statistics.median(cpu_times[("plain", bench)])
            print(f"{label:<30} {'plain (reference)':<22} {statistics.median(values):>8.1f} "
                  f"{spread:>13} {cpu:>10.1f}")

    if first_calls:
        print()
        print(f"First {meta.get('calls_per_repetition', '?')} nrt_tensor_write calls of the "
              "thread (tracer buffers never touched yet), ns/call, median over rounds")
        for config in configs:
            if config in first_calls:
                print(f"  {LABELS.get(config, config):<22} {statistics.median(first_calls[config]):>8.1f}")

    if events:
        print()
        print("Events, all rounds: what the benchmark asked each tool to record, what it recorded, "
              "and what it says it lost")
        header = (f"{'configuration':<22} {'expected':>10} {'recorded':>10} {'missing':>8} "
                  f"{'tool: lost':>10} {'bytes/event':>11}  detail")
        print(header)
        print("-" * len(header))
        for config in configs:
            if config not in events:
                continue
            expected, recorded, lost, details, trace_bytes = events[config]
            per_event = f"{trace_bytes / recorded:.1f}" if trace_bytes and recorded else "-"
            detail = "; ".join(sorted(set(details))) if details else ""
            print(f"{LABELS.get(config, config):<22} {expected:>10} {recorded:>10} "
                  f"{expected - recorded:>8} {lost:>10} {per_event:>11}  {detail}")
        lossy = [c for c in events if events[c][0] != events[c][1] or events[c][2]]
        if unverified:
            print("NOT A FAIR COMPARISON: loss not checked (no capture summary or LTTng counts) "
                  "for " + ", ".join(unverified))
        if lossy:
            print("NOT A FAIR COMPARISON: events were lost in " +
                  ", ".join(LABELS.get(c, c) for c in lossy) +
                  " (lower --calls, raise NRTPROF_RING_EVENTS or the LTTng sub-buffers)")
        elif not unverified:
            print("Nothing lost in any configuration.")

    peers = [c for c in ("lttng", "lttng_entry_exit") if c in configs]
    if "nrtprof" in configs and "plain" in configs and peers:
        print()
        print("nrtprof vs LTTng-UST, added ns per call (issue 4: nrtprof at least 4x cheaper, "
              "nothing lost in either)")
        if any(events.get(c, [0, 0, 0])[0] != events.get(c, [0, 0, 0])[1] or
               events.get(c, [0, 0, 0])[2] for c in ["nrtprof"] + peers):
            print("NOT A FAIR COMPARISON: a tool lost events (see above)")
        header_cmp = f"{'benchmark':<30} {'nrtprof':>8}" + "".join(
            f" {LABELS[p]:>21} {'ratio':>6}" for p in peers)
        print(header_cmp)
        print("-" * len(header_cmp))
        print_comparison(medians, TRACED, peers, "plain", 30)
        print("ratio = LTTng's added ns / nrtprof's (wall time); above 1, nrtprof is cheaper; below 1, "
              "LTTng is.")
        if threaded:
            print()
            print("The same, added over the multi-threaded plain run (what the tracer's own work "
                  "costs a call; a tracer's threads make the process multi-threaded, which costs "
                  "the simulated runtime's locks the difference between the two plain rows)")
            print(header_cmp)
            print("-" * len(header_cmp))
            print_comparison(medians, TRACED, peers, "plain_threaded", 30)

    if failed_runs:
        print()
        print("Runs without results: " + ", ".join(failed_runs))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
