#!/usr/bin/env python3
"""Where the cores go in a burst of new sessions: the CPU each kind of process
(the router replicas, the workersims) uses while idle and in the first
milliseconds of a burst of first turns, read from /proc, and optionally Go
runtime traces of the Raft leader (the placer) and of one asker over the burst.

    scripts/burstcpu.py [REPLICAS] [SESSIONS]      # defaults: 8 64
    BURST_TRACE=DIR   also writes DIR/leader.trace and DIR/asker.trace
                      (go tool trace; -d=parsed dumps the events)
    BURST_PROFILE=DIR also writes CPU profiles of the leader and of one asker
                      over 8 s from the burst on, DIR/leader.pprof and
                      DIR/asker.pprof (go tool pprof bin/router FILE)
    BURST_TURNS=N, BURST_THINK=S
                      turns per session and the think time between them
                      [1 3s]: more turns keep the tier busy past the burst
    BURST_FLAGS='...' extra router flags, e.g. --gossip-flush-interval 100ms
    BURST_ROUTER=PATH another build of the router [bin/router]
    BURST_ALLOCS=DIR  also writes the bytes the leader and an asker allocate
                      over 8 s, DIR/leader.allocs and DIR/asker.allocs
                      (go tool pprof -sample_index=alloc_space)

It starts 8 workersims and REPLICAS replicas on 127.0.0.1 as the tier sweep
does (scripts/realtier.py), each with --debug-addr on loopback, waits for the
tier to form, measures a second of idle, then sends SESSIONS first turns at
once (loadgen agentic, the sweep's prompt sizes) and prints the CPU of each
kind of process over the first 100, 200, 300 and 500 ms and over the whole
load, and each replica's placer question times. /proc counts CPU in ticks of 10 ms, so one
run's figures are that coarse.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

spec = importlib.util.spec_from_file_location("realtier", os.path.join(os.path.dirname(__file__), "realtier.py"))
rt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rt)


def start_tier(fleet, tmp, n, urls, flags):
    """n replicas with a debug listener each; their API and debug URLs."""
    ports = rt.free_ports(4 * n)
    apis, debug = [], []
    for i in range(n):
        api, gossip, raft, dbg = ports[4 * i:4 * i + 4]
        join = ["--join", f"127.0.0.1:{ports[1]}"] if i else []
        fleet.start([os.environ.get("BURST_ROUTER", f"{rt.BIN}/router"), "serve", "--host", "127.0.0.1", "--port", str(api), "--prometheus-port", "0",
                     "--node-name", f"burst-{i}", "--data-dir", os.path.join(tmp, f"data-{i}"),
                     "--gossip-bind", f"127.0.0.1:{gossip}", "--raft-bind", f"127.0.0.1:{raft}",
                     "--bootstrap-expect", str(n), *join, "--worker-urls", ",".join(urls),
                     "--debug-addr", f"127.0.0.1:{dbg}", *flags], f"burst-router-{i}.log")
        apis.append(f"http://127.0.0.1:{api}")
        debug.append(f"http://127.0.0.1:{dbg}")

    def formed(api):
        m = rt.scrape(api)
        return (m.get(("vllm_router_cluster_members", ""), 1 if n == 1 else 0) >= n and
                m.get(("vllm_router_cluster_registry_workers", ""), 0) >= len(urls))
    for api in apis:
        rt.wait_for(f"replica {api} in a cluster of {n}", lambda a=api: formed(a))
    return apis, debug


def fetch(url, path):
    with urllib.request.urlopen(url, timeout=30) as r, open(path, "wb") as f:
        f.write(r.read())


def leader_and_asker(apis):
    """The Raft leader's index and another replica's."""
    lead = next(i for i, a in enumerate(apis) if rt.scrape(a).get(("vllm_router_cluster_raft_leader", ""), 0) == 1)
    return lead, (lead + 1) % len(apis)


def asks(api):
    """The replica's placer question count, mean in ms, and how many took over 10 ms."""
    m = rt.scrape(api)
    count = m.get(("vllm_router_cluster_placer_ask_seconds_count", ""), 0)
    total = m.get(("vllm_router_cluster_placer_ask_seconds_sum", ""), 0)
    under = m.get(("vllm_router_cluster_placer_ask_seconds_bucket", 'le="0.01"'), 0)
    return count, (1000 * total / count if count else 0), count - under


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    sessions = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    flags = os.environ.get("BURST_FLAGS", "").split()
    trace_dir, profile_dir = os.environ.get("BURST_TRACE"), os.environ.get("BURST_PROFILE")
    turns, think = os.environ.get("BURST_TURNS", "1"), os.environ.get("BURST_THINK", "3s")
    tmp = tempfile.mkdtemp(prefix="burstcpu-")
    fleet = rt.Fleet(tmp, "burst")
    try:
        urls = fleet.workers(8, 65536, 1.0)
        apis, debug = start_tier(fleet, tmp, n, urls, flags)
        before = fleet.cpu_seconds()
        time.sleep(1.0)
        idle = fleet.cpu_seconds()
        print("idle, 1000 ms: " + ", ".join(f"{r} {1000 * (idle[r] - before[r]):.0f} ms" for r in sorted(idle)))
        tracers = []
        for out, what in ((trace_dir, "trace?seconds=2"), (profile_dir, "profile?seconds=8"), (os.environ.get("BURST_ALLOCS"), "allocs?seconds=8")):
            if not out or n == 1:
                continue
            os.makedirs(out, exist_ok=True)
            for i, name in zip(leader_and_asker(apis), ("leader", "asker")):
                path = os.path.join(out, name + {"t": ".trace", "p": ".pprof", "a": ".allocs"}[what[0]])
                tracers.append(threading.Thread(target=fetch, args=(f"{debug[i]}/debug/pprof/{what}", path)))
        for t in tracers:
            t.start()
        if tracers:
            time.sleep(0.3)  # the traces start before the burst
        samples, stop = [], threading.Event()

        def sample():
            while not stop.is_set():
                samples.append((time.monotonic(), fleet.cpu_seconds()))
                time.sleep(0.005)
        sampler = threading.Thread(target=sample)
        start, base = time.monotonic(), fleet.cpu_seconds()
        sampler.start()
        subprocess.run([f"{rt.BIN}/loadgen", "agentic", *sum((["--target", a] for a in apis), []), "--balance", "random",
                        "--sessions", str(sessions), "--turns", turns, "--think-time", think, *rt.AGENTIC,
                        "--endpoint", "chat", "--tools", "0", "--duration", "1m"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        time.sleep(max(0.0, 0.6 - (time.monotonic() - start)))
        stop.set()
        sampler.join()
        end, whole = time.monotonic(), fleet.cpu_seconds()
        print(f"the whole load, {1000 * (end - start):.0f} ms: " +
              ", ".join(f"{r} {1000 * (whole[r] - base.get(r, 0)):.0f} ms" for r in sorted(whole)))
        for window in (0.1, 0.2, 0.3, 0.5):
            at = next(c for t, c in samples if t - start >= window)
            print(f"burst, first {1000 * window:.0f} ms: " +
                  ", ".join(f"{r} {1000 * (at[r] - base.get(r, 0)):.0f} ms" for r in sorted(at)))
        for t in tracers:
            t.join()
        for i, a in enumerate(apis):
            count, mean, slow = asks(a)
            if count:
                print(f"replica {i}: {count:.0f} questions to the placer, mean {mean:.1f} ms, {slow:.0f} over 10 ms")
    finally:
        fleet.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
