#!/usr/bin/env python3
"""timeline_summary.py: where a step's time goes, from LOCKSTEP_TIMELINE files.

usage: timeline_summary.py [--modules] [--skip N] FILE [FILE ...]
       timeline_summary.py --merge OUT FILE [FILE ...]

For each file (one rank's Chrome trace), the spans of the steps after the first N (--skip, default
5: warm-up) are grouped by name: count, mean microseconds, total milliseconds and share of the
steps' time. Phases of the step (load batch, forward, backward, the all-reduce wait, optimizer,
prefetch, loss read) come first; --modules adds each module's forward and backward, and the rows
of the gradient buckets and of the MPI communication thread are listed with their own totals.
On a GPU the spans are host time: 'read loss (waits for the device)' is where the host waited
for the GPU, so a large share there means the GPU, not the host, sets the pace.

--merge OUT writes the ranks' files as one trace (each rank stays its own process), for viewers
that open one file at a time (ui.perfetto.dev, chrome://tracing).
"""
import argparse
import json
import signal
import sys
from collections import defaultdict


class BadTrace(Exception):
    """A file that is not a trace this script reads; the message says why."""


def load(path):
    """path's events, checked (check_events). Raises OSError, or BadTrace saying what is wrong."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadTrace(f"not a trace: not UTF-8 text (byte {e.start})")
    text = text.rstrip()
    if not text:
        raise BadTrace("the file is empty (a run that wrote no trace, or one killed before its first write)")
    if text.endswith("]"):
        try:
            events = json.loads(text)
        except ValueError as e:
            raise BadTrace(f"not a trace: not JSON ({e})")
        return check_events(events)
    # a run that died: the array was never closed, and (a trace of an older lockstep, or one killed
    # within a write) its last event may be cut short: left out, said so
    if not text.startswith("["):
        raise BadTrace("not a trace: it does not begin with '[' (a JSON array of events)")
    try:
        return check_events(json.loads(text.rstrip(",") + "]"))
    except ValueError as e:
        cut = text.rfind(",\n")
        if cut < 0:
            raise BadTrace("holds no complete event: it is cut short inside its first (the run was killed)")
        try:
            events = json.loads(text[:cut] + "]")
        except ValueError:
            raise BadTrace(f"not a trace: not JSON ({e})")
        print(f"timeline_summary: {path}: the last event is cut short (the run was killed): left out",
              file=sys.stderr)
        return check_events(events)


def kind(v):
    """v's JSON kind, for messages."""
    return {dict: "an object", list: "an array", str: "a string", bool: "true or false",
            type(None): "null"}.get(type(v), "a number")


def check_events(events):
    """events when they are a Chrome trace's (a JSON array of objects) with the fields read here:
    name, tid, ts and dur on spans (ph X), args.name on thread and process names (ph M), and tid
    on thread names. Raises BadTrace naming the first event that is not so."""
    if not isinstance(events, list):
        raise BadTrace(f"not a trace: {kind(events)}, not an array of events")
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise BadTrace(f"not a trace: event {i} is {kind(e)}, not an object")
        ph, name = e.get("ph"), e.get("name")
        if ph == "X":
            need = ("name", "tid", "ts", "dur")
        elif ph == "M" and name in ("thread_name", "process_name"):
            need = ("tid",) if name == "thread_name" else ()
        else:
            continue  # not read here
        what = f"event {i} (ph {ph}, {json.dumps(name)[:60]})"
        for key in need:
            if key not in e:
                raise BadTrace(f"{what} has no '{key}'")
        if not isinstance(name, str):
            raise BadTrace(f"{what}: its name is {kind(name)}, not a string")
        if "tid" in need and (not isinstance(e["tid"], (int, str)) or isinstance(e["tid"], bool)):
            raise BadTrace(f"{what}: its tid is {kind(e['tid'])}, not a number or string")
        for key in ("ts", "dur") if ph == "X" else ():
            if not isinstance(e[key], (int, float)) or isinstance(e[key], bool):
                raise BadTrace(f"{what}: its {key} is {kind(e[key])}, not a number")
        if ph == "M":
            args = e.get("args")
            if not isinstance(args, dict) or not isinstance(args.get("name"), str):
                raise BadTrace(f"{what} has no args.name (a string)")
    return events


def summarize(path, skip, modules, out):
    events = load(path)
    pids = sorted({e.get("pid") for e in events if "pid" in e}, key=str)
    # a merged file (--merge) holds every rank: each summarized on its own
    for pid in pids:
        summarize_rank(path, [e for e in events if e.get("pid") == pid], skip, modules, out)
    if not pids:
        print(f"{path}: no steps", file=out)


def summarize_rank(path, events, skip, modules, out):
    rows = {}
    rank = None
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            rows[e["tid"]] = e["args"]["name"]
        if e.get("ph") == "M" and e.get("name") == "process_name":
            rank = e["args"]["name"]
    spans = [e for e in events if e.get("ph") == "X"]
    steps = sorted((e for e in spans if e["name"].startswith("step ") and rows.get(e["tid"]) == "main"),
                   key=lambda e: e["ts"])
    kept = steps[skip:] if len(steps) > skip else steps  # too few to leave the warm-up out: all kept
    if not kept:
        print(f"{path}: no steps", file=out)
        return
    t_steps = sum(s["dur"] for s in kept)
    windows = [(s["ts"], s["ts"] + s["dur"]) for s in kept]

    def in_steps(e):
        return any(a <= e["ts"] < b for a, b in windows)

    groups = defaultdict(list)
    for e in spans:
        if e["name"].startswith("step ") or not in_steps(e):
            continue
        row = rows.get(e["tid"], f"thread {e['tid']}")
        if e.get("cat") == "module" and not modules:
            continue
        key = e["name"] if row == "main" else f"[{row}] {e['name']}"
        if row.startswith("bucket "):
            key = f"[{row}] all-reduce, launch to completion"
        elif row != "main" and e["name"].startswith("MPI_"):
            key = f"[{row}] {e['name'].split(' ')[0]}"
        groups[key].append(e["dur"])
    n = len(kept)
    skipped = len(steps) - n
    left_out = f"after {skipped} skipped" if skipped or not skip else f"(fewer than --skip {skip} + 1: none skipped)"
    print(f"{path} ({rank or 'rank ?'}): {n} steps {left_out}, mean step {t_steps / n / 1000:.3f} ms", file=out)
    print(f"  {'span':<52} {'count':>6} {'mean us':>10} {'ms/step':>9} {'share':>7}", file=out)
    order = sorted(groups.items(), key=lambda kv: (kv[0].startswith("["), -sum(kv[1])))
    for name, durs in order:
        total = sum(durs)
        print(f"  {name[:52]:<52} {len(durs):>6} {total / len(durs):>10.1f} {total / n / 1000:>9.3f} "
              f"{100 * total / t_steps:>6.1f}%", file=out)


def nonnegative(text):
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"{text} is not a count >= 0")
    return n


def main():
    # a reader that goes away (| head) ends the output, not an error about the trace
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--skip", type=nonnegative, default=5, help="leave out the first N steps (warm-up)")
    ap.add_argument("--modules", action="store_true", help="also list each module's forward and backward")
    ap.add_argument("--merge", metavar="OUT", help="write the files as one trace to OUT instead")
    a = ap.parse_args()
    if a.merge:
        events = []
        try:
            for p in a.files:
                events.extend(load(p))
            with open(a.merge, "w") as f:
                json.dump(events, f, separators=(",", ":"))
        except OSError as e:
            print(f"timeline_summary: {e.filename}: {e.strerror}", file=sys.stderr)
            return 1
        except BadTrace as e:
            print(f"timeline_summary: {p}: {e}", file=sys.stderr)
            return 1
        print(f"{a.merge}: {len(events)} events from {len(a.files)} files")
        return 0
    for p in a.files:
        try:
            summarize(p, a.skip, a.modules, sys.stdout)
        except OSError as e:
            print(f"timeline_summary: {e.filename}: {e.strerror}", file=sys.stderr)
            return 1
        except BadTrace as e:
            print(f"timeline_summary: {p}: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
