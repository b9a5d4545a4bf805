#!/usr/bin/env python3
"""Runs one peer of benches/real.sh through its phases: the sync, then events one at a time or
a quiet rest. Not run on its own (benches/real.sh calls it).

    phases.py [--writer CMD] [--rest SECONDS] [--strace FILE] [--perf FILE] -- PEER_CMD...

The peer (kube-watcher's examples/bench.rs or a peer of benches/peers/) writes
{"synced_ms":...,"sync_cpu_s":...} to stderr when its initial sync is over; its other stderr
passes through. At that line:
  --writer CMD    starts the writer (a shell command; stopped when the peer is done), so that
                  the events the peer times each come alone, none of them queued during the sync;
  --strace FILE   attaches `strace -c -f` to the peer (every thread) until it ends: the system
                  calls of what follows the sync, counted into FILE;
  --perf FILE     records the peer (every thread) with `perf record -g` from there until it
                  ends, into FILE (`perf report -i FILE`): where the CPU of the events goes;
  --rest SECONDS  (a peer that waits for events that never come: a node agent whose pods do not
                  change) the peer's CPU over SECONDS from there, then its peak RSS; the peer is
                  killed and the line is made here.
Prints one JSON line: the peer's own (with --rest, one made of its sync line), with
`client_cpu_s` (its rusage: user + system, all threads) and `writes` (what the writer made)
added; with --rest, `rest_s`, `rest_cpu_ms` (from /proc/PID/stat: whole process, 10 ms
ticks), `rest_cpu_us` (the threads' schedstat run time, nanoseconds: the threads alive at
both ends), `rest_switches_per_s` (the threads' context switches a second: wake-ups) and
`max_rss_kb` (VmHWM).
"""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time


def main():
    args = sys.argv[1:]
    writer_cmd = rest = strace_file = perf_file = None
    while args and args[0] != "--":
        flag, value, args = args[0], args[1], args[2:]
        if flag == "--writer":
            writer_cmd = value
        elif flag == "--rest":
            rest = float(value)
        elif flag == "--strace":
            strace_file = value
        elif flag == "--perf":
            perf_file = value
        else:
            sys.exit(f"phases.py: unknown flag {flag}")
    peer_cmd = args[1:]
    peer = subprocess.Popen(peer_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    synced = threading.Event()
    sync_line = {}
    writer = strace = perf = None
    writer_log = f"/tmp/kw-phases-writer.{os.getpid()}"

    def on_sync(line):
        nonlocal writer, strace, perf
        sync_line.update(line)
        if strace_file:
            strace = subprocess.Popen(["strace", "-c", "-f", "-o", strace_file, "-p", str(peer.pid)],
                                      stderr=subprocess.DEVNULL)
        if perf_file:
            perf = subprocess.Popen(["perf", "record", "-q", "-g", "-F", "1999", "-o", perf_file,
                                     "-p", str(peer.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if strace or perf:
            time.sleep(0.3)  # strace or perf attaches to every thread before the writer starts
        if writer_cmd:
            with open(writer_log, "w") as log:
                writer = subprocess.Popen(writer_cmd, shell=True, stderr=log, start_new_session=True)
        synced.set()

    def pass_stderr():
        for raw in peer.stderr:
            text = raw.decode(errors="replace")
            if not synced.is_set() and '"synced_ms"' in text:
                try:
                    on_sync(json.loads(text))
                    continue
                except ValueError:
                    pass
            sys.stderr.write(text)
        synced.set()

    reader = threading.Thread(target=pass_stderr, daemon=True)
    reader.start()
    line = None
    try:
        if rest is not None:
            synced.wait()
            if peer.poll() is not None or not sync_line:
                sys.exit(f"phases.py: the peer ended before its sync line ({peer.returncode})")
            time.sleep(1)  # the writer's first requests, and the peer settling after its sync
            before = sample(peer.pid)
            time.sleep(rest)
            after = sample(peer.pid)
            hwm = status_kb(peer.pid, "VmHWM:")
            peer.kill()
            reap(peer)
            line = dict(sync_line)
            line.update({
                "initial_sync_ms": sync_line.get("synced_ms"),
                "rest_s": rest,
                "rest_cpu_ms": round((after["ticks"] - before["ticks"]) * 10),
                "rest_cpu_us": round(sum(after["ns"].get(t, 0) - ns for t, ns in before["ns"].items()) / 1000),
                "rest_switches_per_s": round(sum(after["switches"].get(t, 0) - n
                                                 for t, n in before["switches"].items()) / rest, 3),
                "max_rss_kb": hwm,
            })
            line = json.dumps(line, separators=(",", ":"))
        else:
            out = peer.stdout.read().decode()
            peer_cpu = reap(peer)
            if peer.returncode:
                sys.exit(peer.returncode)
            line = out.strip().splitlines()[-1]
    finally:
        if writer is not None:
            os.killpg(writer.pid, signal.SIGTERM)
            writer.wait()
        for tracer in (strace, perf):
            if tracer is not None:
                tracer.wait(timeout=30)
    reader.join(timeout=5)
    writes = 0
    if os.path.exists(writer_log):
        counts = re.findall(r"^load: (\d+) changes", open(writer_log).read(), re.M)
        writes = int(counts[-1]) if counts else 0
        os.remove(writer_log)
    extra = {"writes": writes}
    if rest is None:
        extra["client_cpu_s"] = round(peer_cpu, 3)
    print(line.rstrip().rstrip("}") + "," + json.dumps(extra, separators=(",", ":"))[1:])


def reap(peer):
    """Waits for the peer; its own CPU seconds (user + system, all its threads), from its rusage
    alone (the writer and strace are children too)."""
    _, status, usage = os.wait4(peer.pid, 0)
    peer.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def sample(pid):
    """The process's CPU ticks, and per thread its run time (ns) and context switches."""
    stat = open(f"/proc/{pid}/stat").read()
    fields = stat[stat.rindex(")") + 2:].split()
    ns, switches = {}, {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            ns[tid] = int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
            status = open(f"/proc/{pid}/task/{tid}/status").read()
            switches[tid] = sum(int(v) for v in re.findall(r"ctxt_switches:\s+(\d+)", status))
        except OSError:
            pass  # the thread ended meanwhile
    return {"ticks": int(fields[11]) + int(fields[12]), "ns": ns, "switches": switches}


def status_kb(pid, field):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith(field):
            return int(l.split()[1])
    return 0


if __name__ == "__main__":
    main()
