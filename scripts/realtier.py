#!/usr/bin/env python3
"""The real-process tier sweep: router replicas from bin/ with real memberlist
and Raft in front of workersims, all on 127.0.0.1, against one replica, and
fleetsim on the same configurations beside it.

    scripts/realtier.py sweep OUT.md   # the agentic grid (make bench runs it)
    scripts/realtier.py burst OUT.md   # concurrent requests sharing one long prefix
    scripts/realtier.py trace OUT.md   # the conversation trace, as recorded and spread over its steps

Every run starts fresh workersims (empty caches) and fresh replicas (empty
indexes, registries and data dirs). A round runs every point of the grid once,
one replica first, so the tier's figures are ratios to the one-replica run of
the same round: the machine's load moves both alike. The grid and the fleet
come from environment variables (defaults in brackets):

    REALTIER_REPLICAS    tier sizes besides the one-replica baseline [4 8]
    REALTIER_THINK       mean think time between turns, seconds [0.1 0.3]
    REALTIER_LONG        1 adds the long think times, 1 and 3 s, to REALTIER_THINK
                         (about 20 more minutes) [0]
    REALTIER_BALANCE     random (every turn to a random replica) and/or
                         session (a session-sticky balancer) [random session]
    REALTIER_SESSIONS    concurrent sessions; "128 64" adds the half-rate run [128]
    REALTIER_TURNS       turns per session [10]
    REALTIER_ROUNDS      rounds per point [3]
    REALTIER_WORKERS     workersims [8]
    REALTIER_KV          each workersim's --kv-capacity-tokens [65536]
    REALTIER_TIME_SCALE  each workersim's --time-scale; fleetsim's think time
                         and gossip interval are scaled to match [1]
    REALTIER_VARIANTS    router flag sets, name=flags;... ["default="]; e.g.
                         "default=;nohot=--hot-prefix-load 0"; a first word
                         router=PATH runs another build: "new=;old=router=bin/router-old";
                         a first word nice=N runs the workersims and loadgen at
                         niceness N, the routers at 0: "shared=;routers-first=nice=10"
                         says how much of a tier's tail is the cores it shares;
                         a first word pin=1 runs the routers on core 1 and the
                         workersims and loadgen on core 0, so that no router
                         takes a worker's core: "shared=;apart=pin=1"
    REALTIER_PIN         1 pins every variant that does not say pin=0 [0]
    REALTIER_AGAIN       0 runs one replica once a round, not twice [1]
    REALTIER_FLEETSIM    0 skips the fleetsim side [1]
    REALTIER_ENDPOINT    the sessions' API: chat, messages (Anthropic's) or
                         completions [chat]
    REALTIER_TOOLS       tool definitions every request of a session carries [0]
    REALTIER_KEEP        a directory to keep each run's per-request lines in
                         (loadgen --requests-json) and each replica's /metrics
                         at the end of the run and its log, named by run [none]
    BURST_REQUESTS, BURST_PREFIX_TOKENS, BURST_OWN_TOKENS, BURST_ROUNDS,
    BURST_REPLICAS       the burst: requests, shared prefix and each one's
                         own part in tokens, rounds, tiers [40 4096 2048 3 "1 4"]
    TRACE_FILE, TRACE_LIMIT, TRACE_SCALE, TRACE_WORKERS, TRACE_KV, TRACE_SPREADS,
    TRACE_REPLICAS, TRACE_ROUNDS, TRACE_ROUTER_FLAGS
                         the trace: file, records, speed-up of the replay and of
                         the workersims, workersims, their KV, arrival spreads,
                         tiers, rounds, router flags (fleetsim gets those it has)
                         [../shared/data/traces/mooncake_conversation_trace.jsonl
                         1000 4 16 262144 "0 3s" "4 8" 3 none]

After each run the sweep scrapes every replica's /metrics and sums the
attribution families vllm_router_false_hits_total and
vllm_router_lost_hits_total (by cause); it says "not exported" when a router
does not have them. From loadgen's per-request lines it also counts the late
misses (turns after a session's first with under half the prompt cached) and
those sent back to the previous turn's worker, and pools the rounds' TTFTs
for a p99 of 3 times the turns.
"""

import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

BIN = "bin"
AGENTIC = ["--system-prompt-tokens", "2048", "--task-tokens", "512", "--observation-tokens", "512",
           "--answer-tokens", "32", "--seed", "11"]
ATTRIBUTION = ("vllm_router_false_hits_total", "vllm_router_lost_hits_total")
COLD_MISSES = "vllm_router_cold_misses_total"
FALSE_BY_FACT = "vllm_router_false_hits_by_fact_total"
GOSSIP_INTERVAL_S = 0.1  # the router's default load report interval
FLUSH_INTERVAL_S = 0.01  # and its default flush of changed loads
# AGAIN marks the round's second run of one replica, the same load on fresh processes: how far one
# replica strays from itself between two runs is the spread a tier's ratio must be read against.
AGAIN = "again"


def env_list(name, default):
    return os.environ.get(name, default).split()


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def free_ports(n):
    """n loopback ports free for TCP and UDP now (the machine is shared)."""
    held, ports = [], []
    while len(ports) < n:
        t = socket.socket()
        t.bind(("127.0.0.1", 0))
        port = t.getsockname()[1]
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.bind(("127.0.0.1", port))
        except OSError:
            t.close()
            continue
        held += [t, u]
        ports.append(port)
    for s in held:
        s.close()
    return ports


def get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def scrape(url):
    """Every sample of a Prometheus text page: {(name, labels): value}."""
    out = {}
    for line in get(url + "/metrics", timeout=10).splitlines():
        if not line or line[0] == "#":
            continue
        series, _, value = line.rpartition(" ")
        name, _, labels = series.partition("{")
        try:
            out[(name, labels.rstrip("}"))] = float(value)
        except ValueError:
            pass
    return out


def wait_for(what, cond, deadline_s=120.0):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            if cond():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} never happened within {deadline_s:.0f} s")


class Fleet:
    """Workersims and router replicas of one run; stop() ends every process it started."""

    def __init__(self, tmp, tag):
        self.tmp, self.tag, self.procs, self.roles = tmp, tag, [], []

    def start(self, args, log, preexec=None):
        f = open(os.path.join(self.tmp, log), "w")
        self.procs.append(subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, preexec_fn=preexec))
        self.roles.append(os.path.basename(args[0]))

    def cpu_seconds(self):
        """CPU seconds (user and system) each role's processes have used so far: the routers' share
        of the 2 cores beside the workersims' says whether a tier's tail is contention."""
        tick = os.sysconf("SC_CLK_TCK")
        out = {}
        for p, role in zip(self.procs, self.roles):
            try:
                with open(f"/proc/{p.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[role] = out.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / tick
        return out

    def workers(self, n, kv, time_scale, preexec=None):
        urls = []
        for i, port in enumerate(free_ports(n)):
            self.start([f"{BIN}/workersim", "--host", "127.0.0.1", "--port", str(port), "--worker-id", f"w{i + 1}",
                        "--model", "sim-model", "--time-scale", str(time_scale), "--kv-capacity-tokens", str(kv)],
                       f"{self.tag}-workersim-{i + 1}.log", preexec)
            urls.append(f"http://127.0.0.1:{port}")
        for u in urls:
            wait_for(f"workersim {u}", lambda u=u: get(u + "/health") is not None)
        return urls

    def tier(self, n, worker_urls, variant, per_replica=lambda i: []):
        """n replicas over worker_urls, each with variant's flags and per_replica(i)'s."""
        ports = free_ports(3 * n)
        apis = []
        for i in range(n):
            api, gossip, raft = ports[3 * i:3 * i + 3]
            join = ["--join", f"127.0.0.1:{ports[1]}"] if i else []
            self.start([variant.router, "serve", "--host", "127.0.0.1", "--port", str(api), "--prometheus-port", "0",
                        "--node-name", f"{self.tag}-{i}", "--data-dir", os.path.join(self.tmp, f"data-{self.tag}-{i}"),
                        "--gossip-bind", f"127.0.0.1:{gossip}", "--raft-bind", f"127.0.0.1:{raft}",
                        "--bootstrap-expect", str(n), *join, "--worker-urls", ",".join(worker_urls), *variant.flags,
                        *per_replica(i)],
                       f"{self.tag}-router-{i}.log", variant.preexec("router"))
            apis.append(f"http://127.0.0.1:{api}")

        def formed(api):
            m = scrape(api)
            return (m.get(("vllm_router_cluster_members", ""), 1 if n == 1 else 0) >= n and
                    m.get(("vllm_router_cluster_registry_workers", ""), 0) >= len(worker_urls))
        for api in apis:
            wait_for(f"replica {api} in a cluster of {n} with {len(worker_urls)} workers", lambda a=api: formed(a))
        return apis

    def stop(self):
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []


def attribution(apis):
    """The attribution families summed over the replicas: {"false_hits": n, "lost:<cause>": n},
    or None when no replica exports them."""
    total, seen = {}, False
    for api in apis:
        for (name, labels), v in scrape(api).items():
            if name == ATTRIBUTION[0]:
                seen = True
                total["false_hits"] = total.get("false_hits", 0) + v
            elif name == ATTRIBUTION[1]:
                seen = True
                cause = "all"
                for part in labels.split(","):
                    k, _, val = part.partition("=")
                    if k == "cause":
                        cause = val.strip('"')
                total["lost:" + cause] = total.get("lost:" + cause, 0) + v
            elif name == COLD_MISSES:
                total["cold"] = total.get("cold", 0) + v
            elif name == FALSE_BY_FACT and 'fact="peer"' in labels:
                total["false_hits:peer"] = total.get("false_hits:peer", 0) + v
    return total if seen else None


def router_counts(apis):
    """Decisions the replicas predicted as hits, and hits shed for balance, summed."""
    hits = misses = shed = 0.0
    for api in apis:
        for (name, _), v in scrape(api).items():
            hits += v if name == "vllm_router_cache_hits_total" else 0
            misses += v if name == "vllm_router_cache_misses_total" else 0
            shed += v if name == "vllm_router_load_balancing_events_total" else 0
    return {"router_hit_rate": hits / (hits + misses) if hits + misses else 0.0, "shed": shed}


def mean_of(urls, family):
    """The mean of a histogram family summed over the processes at urls, in ms (None: no samples)."""
    total = count = 0.0
    for u in urls:
        for (name, _), v in scrape(u).items():
            total += v if name == family + "_sum" else 0
            count += v if name == family + "_count" else 0
    return total / count * 1000 if count else None


def ttft_split(requests_jsonl, apis, worker_urls):
    """Where the mean TTFT goes: the client's, the routers' (from a request's arrival to the
    worker's first byte) and the engines' own (from arrival at the engine to the first token, on
    engine time). Client less router is the way in and out of the router; router less engine is
    the routing, the forwarding and the workers' processes."""
    with open(requests_jsonl) as f:
        ttfts = [r["ttft_ms"] for r in map(json.loads, f) if not r.get("error") and r["ttft_ms"] > 0]
    return {"client_ms": statistics.mean(ttfts) if ttfts else None,
            "router_ms": mean_of(apis, "vllm_router_time_to_first_token_seconds"),
            "routing_ms": mean_of(apis, "vllm_router_routing_duration_seconds"),
            "ask_ms": mean_of(apis, "vllm_router_cluster_placer_ask_seconds"),
            "engine_ms": mean_of(worker_urls, "vllm:time_to_first_token_seconds")}


def door_split(requests_jsonl, router_logs):
    """Where the slowest 1% of turns spent their TTFT: at the door (the client's TTFT less the
    router's, which starts once the request is admitted and read: the admission queue) and after
    it (routing and the engine), each the mean over those turns in ms; None when the routers'
    log lines cannot be joined to loadgen's (an older build or loadgen)."""
    router_ttft = {}
    for path in router_logs:
        with open(path) as f:
            for line in f:
                if "msg=request " not in line:
                    continue
                kv = dict(part.split("=", 1) for part in line.split() if "=" in part)
                if "request_id" in kv and "ttft_ms" in kv:
                    router_ttft[kv["request_id"]] = float(kv["ttft_ms"])
    with open(requests_jsonl) as f:
        rows = [(r["ttft_ms"], router_ttft[r["request_id"]]) for r in map(json.loads, f)
                if r.get("status") == 200 and r.get("request_id") in router_ttft]
    if len(rows) < 100:
        return None
    rows.sort(reverse=True)
    top = rows[:len(rows) // 100]
    return {"door_ms": statistics.mean(c - r for c, r in top), "after_ms": statistics.mean(r for _, r in top)}


def fmt_door(reps):
    splits = [r.get("door") for r in reps]
    if any(s is None for s in splits):
        return "-"
    return (f"{statistics.mean(s['door_ms'] for s in splits):.0f} / "
            f"{statistics.mean(s['after_ms'] for s in splits):.0f}")


def ttfts(requests_jsonl):
    """Every answered request's TTFT in ms, from loadgen's per-request lines."""
    out = []
    with open(requests_jsonl) as f:
        for line in f:
            r = json.loads(line)
            if r.get("status") == 200 and "ttft_ms" in r:
                out.append(r["ttft_ms"])
    return out


def late_misses(requests_jsonl):
    """The turns after a session's first that the engine missed (under half the prompt cached),
    and how many of them went to the worker of the session's previous turn: a router that believes
    a worker still holds what its engine evicted sends the miss back there, where it recomputes
    the prompt behind whatever that worker has queued, rather than placing it on its load."""
    with open(requests_jsonl) as f:
        rs = sorted((r for r in map(json.loads, f) if r.get("status") == 200), key=lambda r: (r["session"], r["turn"]))
    misses = back = 0
    for prev, r in zip(rs, rs[1:]):
        if r["session"] == prev["session"] and r["cached_tokens"] < r["prompt_tokens"] / 2:
            misses += 1
            back += r["worker"] == prev["worker"]
    return {"misses": misses, "back": back}


def fmt_misses(reps):
    return (f"{statistics.mean(r['late_misses']['back'] for r in reps):.0f} / "
            f"{statistics.mean(r['late_misses']['misses'] for r in reps):.0f}")


def pooled_p99(reps):
    """The p99 TTFT of every turn of the runs taken together: a p99 of one run is its 13 slowest
    turns of 1,280, and which sessions a cache evicts first moves them by tens of percent from run
    to run, where the rounds pooled give it 3 times the turns."""
    xs = sorted(x for r in reps for x in r["ttfts"])
    return xs[min(int(0.99 * len(xs)), len(xs) - 1)]


def keep_failed(tmp):
    """Copies a failed run's directory (its processes' logs) where it outlives the run."""
    keep = os.path.join(tempfile.gettempdir(), "kvrouter-realtier-failed")
    shutil.rmtree(keep, ignore_errors=True)
    shutil.copytree(tmp, keep)
    print(f"realtier: failed; logs in {keep}", file=sys.stderr)


def agentic_load(balance, sessions, turns, think_s, agentic, endpoint="chat", tools=0):
    """loadgen's arguments for agentic sessions on endpoint (chat, messages, completions), given the
    replicas' URLs."""
    return lambda apis: ["agentic", *sum((["--target", a] for a in apis), []), "--balance", balance,
                         "--sessions", str(sessions), "--turns", str(turns), "--think-time", f"{think_s}s", *agentic,
                         "--endpoint", endpoint, "--tools", str(tools), "--duration", "20m"]


def loadgen(args, out_json, log, preexec=None):
    args = [f"{BIN}/loadgen", *args, "--json", out_json, "--requests-json", out_json[:-len(".json")] + ".requests.jsonl"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(log, "w") as f:
        subprocess.run(args, stdout=f, stderr=subprocess.DEVNULL, check=True,
                       preexec_fn=preexec)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # loadgen's alone: the fleet's processes are not reaped yet
    with open(out_json) as f:
        rep = json.load(f)
    rep["loadgen_cpu_s"] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return rep


def real_run(tmp, tag, cfg, replicas, extra, load):
    """One run on real processes, loadgen driven with load(replica URLs): its report, the
    attribution, the cores each kind of process kept busy, and the load average."""
    fleet = Fleet(tmp, tag)
    variant = Variant(extra)
    try:
        urls = fleet.workers(cfg["workers"], cfg["kv"], cfg["time_scale"], variant.preexec("load"))
        apis = fleet.tier(replicas, urls, variant)
        start, cpu_before = time.monotonic(), fleet.cpu_seconds()
        rep = loadgen(load(apis), os.path.join(tmp, tag + ".json"), os.path.join(tmp, tag + ".txt"),
                      variant.preexec("load"))
        rep["wall_s"] = time.monotonic() - start
        rep["cores"] = {role: (s - cpu_before.get(role, 0.0)) / rep["wall_s"]
                        for role, s in fleet.cpu_seconds().items()}
        rep["cores"]["loadgen"] = rep["loadgen_cpu_s"] / rep["wall_s"]
        rep["loadavg"] = loadavg()
        rep["attribution"] = attribution(apis)
        rep.update(router_counts(apis))
        rep["ttft_split"] = ttft_split(os.path.join(tmp, tag + ".requests.jsonl"), apis, urls)
        rep["ttfts"] = ttfts(os.path.join(tmp, tag + ".requests.jsonl"))
        rep["door"] = door_split(os.path.join(tmp, tag + ".requests.jsonl"),
                                 [os.path.join(tmp, f"{tag}-router-{i}.log") for i in range(len(apis))])
        rep["late_misses"] = late_misses(os.path.join(tmp, tag + ".requests.jsonl"))
        keep = os.environ.get("REALTIER_KEEP")
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.copy(os.path.join(tmp, tag + ".requests.jsonl"), keep)
            for i, api in enumerate(apis):
                with open(os.path.join(keep, f"{tag}.router-{i}.metrics"), "w") as f:
                    f.write(get(api + "/metrics", timeout=10))
                shutil.copy(os.path.join(tmp, f"{tag}-router-{i}.log"), os.path.join(keep, f"{tag}.router-{i}.log"))
        return rep
    finally:
        fleet.stop()


def fleetsim_runs(tmp, cfg, replicas, balance, sessions, think_s, seed, extra):
    """fleetsim on the same configuration: {replicas: run}. Virtual time runs at the engine's
    pace, so the think time and gossip interval, wall-clock on real processes, are scaled by the
    workers' time scale."""
    ts = cfg["time_scale"]
    out = os.path.join(tmp, f"fleetsim-{balance}-{sessions}-{think_s}-{seed}.json")
    args = [f"{BIN}/fleetsim", "--agentic", "--sessions", str(sessions), "--turns", str(cfg["turns"]),
            *AGENTIC[:-2], "--think-time", f"{think_s * ts}s", "--workers", str(cfg["workers"]),
            "--kv-capacity-tokens", str(cfg["kv"]), "--replicas", ",".join(map(str, replicas)), "--sync", "gossip",
            "--policies", "cache_aware", "--balance", balance, "--gossip-interval", f"{GOSSIP_INTERVAL_S * ts}s",
            "--seed", str(seed), "--parallel", "2", *extra, "--json", out]
    subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    with open(out) as f:
        return {r["replicas"]: r for r in json.load(f)["runs"]}


class Variant:
    """How a variant runs its processes. Leading words of its flags: router=PATH names another build
    than bin/router (REALTIER_VARIANTS='new=router=bin/router-new;old=router=bin/router-old'), so
    two builds run side by side in every round; nice=N runs the workersims and loadgen at niceness
    N, the routers at 0, so the kernel runs a router first when both wait for a core; pin=1 runs
    the routers on core 1 and the workersims and loadgen on core 0, so no router takes a worker's
    core (a tier's routers keep more of a core busy than one replica does), and pin=0 does not;
    REALTIER_PIN=1 pins every variant that does not say. The rest are router flags."""

    WORDS = ("router", "nice", "pin")

    def __init__(self, flags):
        self.router, self.nice, self.pin = f"{BIN}/router", 0, os.environ.get("REALTIER_PIN", "0") == "1"
        while flags and flags[0].split("=")[0] in self.WORDS:
            word, _, value = flags[0].partition("=")
            if word == "router":
                self.router = value
            elif word == "nice":
                self.nice = int(value)
            else:
                self.pin = value not in ("", "0")
            flags = flags[1:]
        self.flags = flags

    def preexec(self, side):
        """What a process of side runs before it starts ("router", or "load": the workersims and
        loadgen): its niceness and its core; None when neither is set."""
        nice = self.nice if side == "load" else 0
        cores = ({1} if side == "router" else {0}) if self.pin else None
        if not nice and cores is None:
            return None

        def setup():
            if nice:
                os.nice(nice)
            if cores is not None:
                os.sched_setaffinity(0, cores)
        return setup


def variants():
    out = []
    for part in os.environ.get("REALTIER_VARIANTS", "default=").split(";"):
        name, _, flags = part.partition("=")
        out.append((name.strip(), flags.split()))
    return out


def config():
    return {
        "replicas": [int(x) for x in env_list("REALTIER_REPLICAS", "4 8")],
        "think": think_times(),
        "balance": env_list("REALTIER_BALANCE", "random session"),
        "sessions": [int(x) for x in env_list("REALTIER_SESSIONS", "128")],
        "turns": int(os.environ.get("REALTIER_TURNS", "10")),
        "rounds": int(os.environ.get("REALTIER_ROUNDS", "3")),
        "workers": int(os.environ.get("REALTIER_WORKERS", "8")),
        "kv": int(os.environ.get("REALTIER_KV", "65536")),
        "time_scale": float(os.environ.get("REALTIER_TIME_SCALE", "1")),
        "fleetsim": os.environ.get("REALTIER_FLEETSIM", "1") != "0",
        "again": os.environ.get("REALTIER_AGAIN", "1") != "0",
        "endpoint": os.environ.get("REALTIER_ENDPOINT", "chat"),
        "tools": int(os.environ.get("REALTIER_TOOLS", "0")),
        "variants": variants(),
    }


def think_times():
    """REALTIER_THINK, with 1 and 3 s added under REALTIER_LONG=1: a default make bench stays under
    about 25 minutes, and the long points, whose ten turns take 10 and 30 s of think time each, run
    when asked."""
    think = [float(x) for x in env_list("REALTIER_THINK", "0.1 0.3")]
    if os.environ.get("REALTIER_LONG", "0") == "1":
        think += [t for t in (1.0, 3.0) if t not in think]
    return think


def fleetsim_flags(router_flags):
    """The router flags fleetsim also has (the policy's knobs), passed through."""
    out, i = [], 0
    while i < len(router_flags):
        flag = router_flags[i]
        if flag.split("=")[0] in Variant.WORDS:  # a build, or how the processes run: not a flag
            pass
        elif flag.split("=")[0] == "--placer":  # a boolean: only its --placer=false form takes a value
            out.append(flag)
        elif flag.split("=")[0] in ("--hot-prefix-load", "--hot-prefix-owners", "--balance-abs-threshold",
                                    "--balance-rel-threshold", "--cache-threshold"):
            out.append(flag)
            if "=" not in flag and i + 1 < len(router_flags):
                out.append(router_flags[i + 1])
                i += 1
        i += 1
    return out


def sweep(out_md):
    cfg = config()
    tmp = tempfile.mkdtemp(prefix="kvrouter-realtier.")
    runs = []  # dicts: variant, sessions, think, replicas, balance, round, real
    sims = {}  # (variant, sessions, think, balance, round) -> {replicas: run}
    started, load_before = time.monotonic(), loadavg()
    try:
        for rnd in range(1, cfg["rounds"] + 1):
            for vname, vflags in cfg["variants"]:
                for sessions in cfg["sessions"]:
                    for think in cfg["think"]:
                        points = [(1, "random")] + ([(1, AGAIN)] if cfg["again"] else [])
                        points += [(n, b) for n in cfg["replicas"] for b in cfg["balance"]]
                        for n, balance in points:
                            tag = f"{vname}-s{sessions}-t{think}-n{n}-{balance}-r{rnd}"
                            rep = real_run(tmp, tag, cfg, n, vflags,
                                           agentic_load("random" if balance == AGAIN else balance, sessions,
                                                        cfg["turns"], think, AGENTIC, cfg["endpoint"], cfg["tools"]))
                            runs.append({"variant": vname, "sessions": sessions, "think": think, "replicas": n,
                                         "balance": balance, "round": rnd, "real": rep})
                            print(f"realtier: {tag}: cached {rep['cached_token_ratio']:.3f} "
                                  f"TTFT p50 {rep['ttft_p50_ms']:.0f} p99 {rep['ttft_p99_ms']:.0f} ms "
                                  f"{rep['throughput_rps']:.1f} req/s, load {rep['loadavg']}", file=sys.stderr)
                        if cfg["fleetsim"]:
                            for balance in cfg["balance"]:
                                sims[(vname, sessions, think, balance, rnd)] = fleetsim_runs(
                                    tmp, cfg, [1] + cfg["replicas"], balance, sessions, think, rnd, fleetsim_flags(vflags))
    except Exception:
        keep_failed(tmp)
        raise
    elapsed = time.monotonic() - started
    with open(out_md, "w") as f:
        f.write(render_sweep(cfg, runs, sims, load_before, loadavg(), elapsed))
    shutil.rmtree(tmp, ignore_errors=True)


def targets(think):
    """The acceptance's bounds at a think time: cached ratio >=, TTFT ratios <=, throughput >=."""
    return (0.98, 1.1, 0.95) if think >= 0.3 else (0.95, 1.3, 0.95)


def fmt_attr(reps):
    attrs = [r["attribution"] for r in reps]
    if any(a is None for a in attrs):
        return "not exported"
    keys = sorted({k for a in attrs for k in a})
    return ", ".join(f"{k} {statistics.mean(a.get(k, 0) for a in attrs):.0f}" for k in keys) or "0"


def fmt_split(reps):
    """The mean TTFT at the client, the routers and the engines, then the routers' mean time to a
    worker chosen and to the placer's answer, each the mean over the runs."""
    parts = []
    for key in ("client_ms", "router_ms", "engine_ms", "routing_ms", "ask_ms"):
        vals = [r["ttft_split"][key] for r in reps if r.get("ttft_split", {}).get(key) is not None]
        parts.append(f"{statistics.mean(vals):.2f}" if vals else "-")
    return " / ".join(parts[:3]) + "; " + " / ".join(parts[3:])


def spread(reps, workers):
    """How unevenly the runs' requests fell on the workers (loadgen's per_worker counts; a worker
    that took none counts as 0): the coefficient of variation and the busiest worker over the
    mean, each the mean over the runs. A session's turns stay on its worker, so
    this is how evenly the sessions were placed."""
    cvs, peaks = [], []
    for r in reps:
        counts = [v for k, v in r["per_worker"].items() if k != "unknown"]
        counts += [0] * (workers - len(counts))  # a worker that took nothing is not listed
        if len(counts) < 2 or not any(counts):
            return "-"
        m = statistics.mean(counts)
        cvs.append(statistics.pstdev(counts) / m)
        peaks.append(max(counts) / m)
    return f"{statistics.mean(cvs):.2f} / {statistics.mean(peaks):.2f}"


def cores(reps):
    """The cores the routers and the workersims kept busy during the runs, each the mean over the runs."""
    if any("cores" not in r for r in reps):
        return "-"
    return " / ".join(f"{statistics.mean(r['cores'].get(role, 0.0) for r in reps):.2f}"
                      for role in ("router", "workersim", "loadgen"))


def render_sweep(cfg, runs, sims, load_before, load_after, elapsed):
    by = {(r["variant"], r["sessions"], r["think"], r["replicas"], r["balance"], r["round"]): r["real"] for r in runs}
    rounds = range(1, cfg["rounds"] + 1)
    L = []
    L.append("## Real processes: the tier against one replica\n")
    L.append(f"{cfg['workers']} workersims (--kv-capacity-tokens {cfg['kv']}, small enough to evict; --time-scale "
             f"{cfg['time_scale']:g}) behind router replicas started from bin/ on 127.0.0.1, each with its own "
             "memberlist and Raft (a tier waits until every replica sees all its members and workers). loadgen runs "
             f"agentic chat sessions ({cfg['turns']} turns, 2048-token shared system prompt, 512-token task, "
             "512-token observations, 32-token answers) with every turn to a random replica (random) or every turn "
             "of a session through the same replica (session, the sticky control). Fresh workers and replicas "
             "for every run; each round runs one replica first, and every ratio is the tier's run over the "
             "one-replica run of the same round. Cached tokens are the workers' "
             "usage.prompt_tokens_details.cached_tokens. fleetsim runs the same configuration (workers, KV "
             "capacity, sessions, turns, think time and gossip interval scaled by the time scale, balancer, "
             "replicas; every replica with the router's admission door) at seeds 1.."
             f"{cfg['rounds']}, one per round; its ratio is to its own one-replica run."
             + pinning(cfg) + "\n")
    L.append("```\nscripts/bench.sh realtier   # this section; make bench runs it\n"
             + " ".join(f"REALTIER_{k.upper()}=" + (f"'{' '.join(map(str, v))}'" if isinstance(v, list) and len(v) > 1
                                                     else str(v[0] if isinstance(v, list) else v))
                        for k, v in cfg.items() if k in ("replicas", "think", "balance", "sessions", "turns",
                                                         "rounds", "workers", "kv", "time_scale")
                        or (k, v) in (("endpoint", cfg["endpoint"]), ("tools", cfg["tools"])) and v not in ("chat", 0))
             + (f" REALTIER_VARIANTS='{os.environ['REALTIER_VARIANTS']}'" if "REALTIER_VARIANTS" in os.environ else "")
             + (" REALTIER_PIN=1" if os.environ.get("REALTIER_PIN") == "1" else "")
             + " scripts/realtier.py sweep OUT.md\n```\n")
    L.append(f"Load average (1, 5, 15 min) before: {load_before}; after: {load_after}. The sweep took "
             f"{elapsed / 60:.1f} min ({len(runs)} real runs). Each row's load average is the 1-minute figure at "
             "the end of each of its runs (the machine has 2 cores, shared).\n")
    L.append("Targets: think time >= 0.3 s: worst round >= 0.98 of one replica's cached-token ratio, TTFT p50 and "
             "p99 <= 1.1x, throughput >= 0.95x; 0.1 s: >= 0.95 and <= 1.3x. fleetsim within 0.03 of the real "
             "ratio." + (f" The row '1 {AGAIN}' is a second run of one replica in each round, the same load on fresh "
                         "processes, over the first: what the measurement itself moves between two runs of the "
                         "same thing, against which a tier's worst round is read." if cfg["again"] else "") + "\n")
    L.append("| variant | sessions | think s | replicas | balance | cached-token ratio | vs 1: mean / worst | "
             "fleetsim vs 1: mean / min | fleetsim - real | TTFT p50 vs 1: mean / worst | TTFT p99 vs 1: mean / worst / rounds pooled | "
             "throughput vs 1: mean / worst | fleetsim TTFT p50 / p99 / thr vs 1; its slowest 1% of turns: ms at the door / after | router hit rate | shed | "
             "false / lost hits (mean per run) | late misses: back to the previous turn's worker / all (mean per run) | "
             "slowest 1% of turns: ms at the door / after it (mean per run) | "
             "requests per worker: cv / max over mean (mean per run) | "
             "cores busy: routers / workersims / loadgen (mean per run) | load avg per round | verdict |")
    L.append("|" + "---|" * 22)
    for vname, _ in cfg["variants"]:
        for sessions in cfg["sessions"]:
            for think in cfg["think"]:
                ones = [by[(vname, sessions, think, 1, "random", k)] for k in rounds]
                one_ratio = statistics.mean(o["cached_token_ratio"] for o in ones)
                L.append(f"| {vname} | {sessions} | {think:g} | 1 | - | {one_ratio:.3f} | "
                         f"TTFT p50 {statistics.mean(o['ttft_p50_ms'] for o in ones):.0f} ms, p99 "
                         f"{statistics.mean(o['ttft_p99_ms'] for o in ones):.0f} ms (rounds pooled "
                         f"{pooled_p99(ones):.0f} ms) | | | | | "
                         f"{statistics.mean(o['throughput_rps'] for o in ones):.1f} req/s | | "
                         f"{statistics.mean(o['router_hit_rate'] for o in ones):.3f} | "
                         f"{statistics.mean(o['shed'] for o in ones):.0f} | {fmt_attr(ones)} | {fmt_misses(ones)} | "
                         f"{fmt_door(ones)} | "
                         f"{spread(ones, cfg['workers'])} | "
                         f"{cores(ones)} | {' / '.join(o['loadavg'].split()[0] for o in ones)} | baseline |")
                if cfg["again"]:
                    L.append(again_row(cfg, [by[(vname, sessions, think, 1, AGAIN, k)] for k in rounds], ones,
                                       vname, sessions, think))
                for n in cfg["replicas"]:
                    for balance in cfg["balance"]:
                        reps = [by[(vname, sessions, think, n, balance, k)] for k in rounds]
                        cached = [r["cached_token_ratio"] / o["cached_token_ratio"] for r, o in zip(reps, ones)]
                        p50 = [r["ttft_p50_ms"] / o["ttft_p50_ms"] for r, o in zip(reps, ones)]
                        p99 = [r["ttft_p99_ms"] / o["ttft_p99_ms"] for r, o in zip(reps, ones)]
                        thr = [r["throughput_rps"] / o["throughput_rps"] for r, o in zip(reps, ones)]
                        sim_cols, gap = "| not run | | ", None
                        if cfg["fleetsim"]:
                            s = [sims[(vname, sessions, think, balance, k)] for k in rounds]
                            sc = [x[n]["hit_rate"] / x[1]["hit_rate"] for x in s]
                            gap = statistics.mean(sc) - statistics.mean(cached)
                            sim_cols = (f"| {statistics.mean(sc):.3f} / {min(sc):.3f} | {gap:+.3f} | ")
                            sim_tail = (f"{statistics.mean(x[n]['ttft_p50_ms'] / x[1]['ttft_p50_ms'] for x in s):.2f} / "
                                        f"{statistics.mean(x[n]['ttft_p99_ms'] / x[1]['ttft_p99_ms'] for x in s):.2f} / "
                                        f"{statistics.mean(x[n]['throughput_rps'] / x[1]['throughput_rps'] for x in s):.2f}"
                                        f"; slowest 1%: {statistics.mean(x[n].get('slowest_at_door_ms', 0) for x in s):.0f}"
                                        f" / {statistics.mean(x[n].get('slowest_after_door_ms', 0) for x in s):.0f}")
                        else:
                            sim_tail = ""
                        want_cached, want_ttft, want_thr = targets(think)
                        missed = []
                        if min(cached) < want_cached:
                            missed.append(f"cached {min(cached):.3f} < {want_cached}")
                        if max(p50) > want_ttft or max(p99) > want_ttft:
                            missed.append(f"TTFT {max(max(p50), max(p99)):.2f}x > {want_ttft}x")
                        if min(thr) < want_thr:
                            missed.append(f"throughput {min(thr):.3f}x < {want_thr}x")
                        if gap is not None and abs(gap) > 0.03:
                            missed.append(f"fleetsim off by {gap:+.3f}")
                        verdict = "met" if not missed else "not met: " + "; ".join(missed)
                        if missed and cfg["again"]:
                            verdict += f" (one replica against itself: {self_spread(by, rounds, vname, sessions, think)})"
                        L.append(f"| {vname} | {sessions} | {think:g} | {n} | {balance} | "
                                 f"{statistics.mean(r['cached_token_ratio'] for r in reps):.3f} | "
                                 f"{statistics.mean(cached):.3f} / {min(cached):.3f} {sim_cols}"
                                 f"{statistics.mean(p50):.2f} / {max(p50):.2f} | {statistics.mean(p99):.2f} / {max(p99):.2f} / "
                                 f"{pooled_p99(reps) / pooled_p99(ones):.2f} | "
                                 f"{statistics.mean(thr):.2f} / {min(thr):.2f} | {sim_tail} | "
                                 f"{statistics.mean(r['router_hit_rate'] for r in reps):.3f} | "
                                 f"{statistics.mean(r['shed'] for r in reps):.0f} | {fmt_attr(reps)} | {fmt_misses(reps)} | "
                                 f"{fmt_door(reps)} | "
                                 f"{spread(reps, cfg['workers'])} | "
                                 f"{cores(reps)} | {' / '.join(r['loadavg'].split()[0] for r in reps)} | {verdict} |")
    return "\n".join(L) + "\n"


def pinning(cfg):
    """What the sweep's text says of the cores: which variants ran their routers on a core of
    their own."""
    pinned = [name for name, flags in cfg["variants"] if Variant(flags).pin]
    if not pinned:
        return ""
    which = "Every run" if len(pinned) == len(cfg["variants"]) else "The runs of " + ", ".join(pinned)
    return (f" {which} pinned the routers to core 1 and the workersims and loadgen to core 0 (one replica and "
            "tiers alike), as a tier runs on hosts of its own: the routers' CPU does not delay the engines' steps.")


def again_row(cfg, agains, ones, vname, sessions, think):
    """The row of one replica's second run in each round over its first: the measurement's own spread."""
    ratio = lambda key: [a[key] / o[key] for a, o in zip(agains, ones)]
    cached, p50, p99, thr = (ratio(k) for k in ("cached_token_ratio", "ttft_p50_ms", "ttft_p99_ms", "throughput_rps"))
    return (f"| {vname} | {sessions} | {think:g} | 1 | {AGAIN} | "
            f"{statistics.mean(a['cached_token_ratio'] for a in agains):.3f} | "
            f"{statistics.mean(cached):.3f} / {min(cached):.3f} | | | "
            f"{statistics.mean(p50):.2f} / {max(p50):.2f} | {statistics.mean(p99):.2f} / {max(p99):.2f} / "
            f"{pooled_p99(agains) / pooled_p99(ones):.2f} | "
            f"{statistics.mean(thr):.2f} / {min(thr):.2f} | | "
            f"{statistics.mean(a['router_hit_rate'] for a in agains):.3f} | "
            f"{statistics.mean(a['shed'] for a in agains):.0f} | {fmt_attr(agains)} | {fmt_misses(agains)} | "
            f"{fmt_door(agains)} | "
            f"{spread(agains, cfg['workers'])} | "
            f"{cores(agains)} | {' / '.join(a['loadavg'].split()[0] for a in agains)} | "
            "one replica against itself: the spread of the measurement |")


def self_spread(by, rounds, vname, sessions, think):
    """How far apart one replica's two runs of a round came, the worst round, either way round (the
    first run may be the one that strayed): cached, TTFT p50 and p99."""
    pairs = [(by[(vname, sessions, think, 1, AGAIN, k)], by[(vname, sessions, think, 1, "random", k)]) for k in rounds]
    worst = lambda key, pick: pick(pick(a[key] / o[key], o[key] / a[key]) for a, o in pairs)
    return (f"cached {worst('cached_token_ratio', min):.3f}, TTFT p50 {worst('ttft_p50_ms', max):.2f}x, "
            f"p99 {worst('ttft_p99_ms', max):.2f}x")


def burst(out_md):
    """Concurrent requests sharing one long prefix, on a cold fleet, through 1 and 4 replicas,
    with each router variant: how long the burst waits (TTFT) and how many workers take it."""
    cfg = config()
    requests = int(os.environ.get("BURST_REQUESTS", "40"))
    prefix = int(os.environ.get("BURST_PREFIX_TOKENS", "4096"))
    own = int(os.environ.get("BURST_OWN_TOKENS", "2048"))
    rounds = int(os.environ.get("BURST_ROUNDS", "3"))
    tiers = [int(x) for x in env_list("BURST_REPLICAS", "1 4")]
    agentic = ["--system-prompt-tokens", str(prefix), "--task-tokens", str(own), "--observation-tokens", "64",
               "--answer-tokens", "64", "--seed", "11"]
    tmp = tempfile.mkdtemp(prefix="kvrouter-burst.")
    rows, load_before, started = {}, loadavg(), time.monotonic()
    try:
        for rnd in range(1, rounds + 1):
            for vname, vflags in cfg["variants"]:
                for n in tiers:
                    tag = f"burst-{vname}-n{n}-r{rnd}"
                    rep = real_run(tmp, tag, cfg, n, vflags, agentic_load("random", requests, 1, 0, agentic))
                    rows.setdefault((vname, n), []).append(rep)
                    print(f"realtier: {tag}: TTFT p50 {rep['ttft_p50_ms']:.0f} p99 {rep['ttft_p99_ms']:.0f} ms, "
                          f"workers {rep['per_worker']}, load {rep['loadavg']}", file=sys.stderr)
    except Exception:
        keep_failed(tmp)
        raise
    L = ["### A burst sharing one long prefix\n",
         f"{requests} requests at once, each a {prefix}-token shared prefix (the system message) and its own "
         f"{own}-token part, 64 answer tokens, on {cfg['workers']} fresh workersims (--kv-capacity-tokens {cfg['kv']}, "
         f"--time-scale {cfg['time_scale']:g}) behind 1 and 4 fresh replicas, every request to a random replica. "
         "TTFT is how long a request waited for its first token: queueing behind the others on its worker "
         "plus its prefill.\n",
         "```\nscripts/realtier.py burst OUT.md\n"
         f"REALTIER_VARIANTS='{os.environ.get('REALTIER_VARIANTS', 'default=')}' BURST_REQUESTS={requests} "
         f"BURST_PREFIX_TOKENS={prefix} BURST_OWN_TOKENS={own} BURST_ROUNDS={rounds}\n```\n",
         f"Load average before: {load_before}; after: {loadavg()}; {(time.monotonic() - started) / 60:.1f} min.\n",
         "| variant | replicas | TTFT p50 ms: mean / worst | TTFT p99 ms: mean / worst | latency p99 ms | "
         "cached ratio | workers that took the burst (per round) | load avg per round |",
         "|---|---|---|---|---|---|---|---|"]
    for (vname, n), reps in rows.items():
        L.append(f"| {vname} | {n} | {statistics.mean(r['ttft_p50_ms'] for r in reps):.0f} / "
                 f"{max(r['ttft_p50_ms'] for r in reps):.0f} | {statistics.mean(r['ttft_p99_ms'] for r in reps):.0f} / "
                 f"{max(r['ttft_p99_ms'] for r in reps):.0f} | {statistics.mean(r['latency_p99_ms'] for r in reps):.0f} | "
                 f"{statistics.mean(r['cached_token_ratio'] for r in reps):.3f} | "
                 f"{' / '.join(str(len(r['per_worker'])) for r in reps)} | "
                 f"{' / '.join(r['loadavg'].split()[0] for r in reps)} |")
    with open(out_md, "w") as f:
        f.write("\n".join(L) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)

def trace_config():
    cfg = config()
    scale = float(os.environ.get("TRACE_SCALE", "4"))
    cfg.update({
        "trace": os.environ.get("TRACE_FILE", "../shared/data/traces/mooncake_conversation_trace.jsonl"),
        "limit": int(os.environ.get("TRACE_LIMIT", "1000")),
        "spreads": env_list("TRACE_SPREADS", "0 3s"),
        "replicas": [int(x) for x in env_list("TRACE_REPLICAS", "4 8")],
        "workers": int(os.environ.get("TRACE_WORKERS", "16")),
        "kv": int(os.environ.get("TRACE_KV", "262144")),
        "time_scale": scale,
        "rounds": int(os.environ.get("TRACE_ROUNDS", "3")),
        "router_flags": env_list("TRACE_ROUTER_FLAGS", ""),
    })
    return cfg


def replay_load(cfg, spread, seed):
    """loadgen's arguments for the trace, replayed time_scale times faster in front of workersims
    time_scale times faster, so the engines see the trace's own load."""
    return lambda apis: ["replay", *sum((["--target", a] for a in apis), []), "--trace", cfg["trace"],
                         "--limit", str(cfg["limit"]), "--rate-scale", f"{cfg['time_scale']:g}",
                         "--arrival-spread", spread, "--arrival-seed", str(seed), "--duration", "30m"]


def fleetsim_trace(tmp, cfg, spread, seed):
    """fleetsim on the same trace, arrivals and fleet: {replicas: run}. It replays at the trace's
    own pace, so the gossip's wall-clock intervals are scaled by the time scale."""
    ts = cfg["time_scale"]
    out = os.path.join(tmp, f"fleetsim-trace-{spread}-{seed}.json")
    args = [f"{BIN}/fleetsim", "--trace", cfg["trace"], "--limit", str(cfg["limit"]), "--arrival-spread", spread,
            "--arrival-seed", str(seed), "--workers", str(cfg["workers"]), "--kv-capacity-tokens", str(cfg["kv"]),
            "--replicas", ",".join(map(str, [1] + cfg["replicas"])), "--sync", "gossip", "--policies", "cache_aware",
            "--gossip-interval", f"{GOSSIP_INTERVAL_S * ts:g}s", "--gossip-flush-interval", f"{FLUSH_INTERVAL_S * ts:g}s",
            "--seed", str(seed), "--parallel", "2", *fleetsim_flags(cfg["router_flags"]), "--json", out]
    subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    with open(out) as f:
        return {r["replicas"]: r for r in json.load(f)["runs"]}


def trace(out_md):
    """The shared conversation trace through 1, 4 and 8 replicas, every request to a random one, as
    recorded (each 3 s step's requests in one instant) and spread over its step; fleetsim beside."""
    cfg = trace_config()
    tmp = tempfile.mkdtemp(prefix="kvrouter-realtier-trace.")
    by, sims, load_before, started = {}, {}, loadavg(), time.monotonic()
    try:
        for rnd in range(1, cfg["rounds"] + 1):
            for spread in cfg["spreads"]:
                for n in [1] + ([AGAIN] if cfg["again"] else []) + cfg["replicas"]:
                    tag = f"trace-{spread}-n{n}-r{rnd}"
                    rep = real_run(tmp, tag, cfg, 1 if n == AGAIN else n, cfg["router_flags"],
                                   replay_load(cfg, spread, rnd))
                    by[(spread, n, rnd)] = rep
                    print(f"realtier: {tag}: cached {rep['cached_token_ratio']:.3f} TTFT p50 {rep['ttft_p50_ms']:.0f} "
                          f"p99 {rep['ttft_p99_ms']:.0f} ms, mean client/routers/engines; routing/ask {fmt_split([rep])} ms, "
                          f"load {rep['loadavg']}", file=sys.stderr)
                if cfg["fleetsim"]:
                    sims[(spread, rnd)] = fleetsim_trace(tmp, cfg, spread, rnd)
    except Exception:
        keep_failed(tmp)
        raise
    with open(out_md, "w") as f:
        f.write(render_trace(cfg, by, sims, load_before, loadavg(), time.monotonic() - started))
    with open(out_md + ".json", "w") as f:  # every run's report, to read a row's runs one by one
        json.dump({"real": [{"spread": k[0], "replicas": k[1], "round": k[2], **v} for k, v in by.items()],
                   "fleetsim": [{"spread": k[0], "round": k[1], "runs": v} for k, v in sims.items()]}, f)
    shutil.rmtree(tmp, ignore_errors=True)


def render_trace(cfg, by, sims, load_before, load_after, elapsed):
    rounds = range(1, cfg["rounds"] + 1)
    L = ["### The conversation trace on real processes: as recorded and spread over its 3 s steps\n",
         f"The first {cfg['limit']} records of the shared conversation trace, replayed open loop by loadgen "
         f"{cfg['time_scale']:g}x faster in front of {cfg['workers']} workersims {cfg['time_scale']:g}x faster "
         f"(--time-scale {cfg['time_scale']:g}, --kv-capacity-tokens {cfg['kv']}), through 1 and "
         f"{' and '.join(map(str, cfg['replicas']))} router replicas from bin/ on 127.0.0.1 (real memberlist and "
         "Raft), every request to a random replica. The trace stamps its requests in 3 s steps: as recorded "
         "(spread 0) every request of a step arrives in the same instant; spread 3s moves each one to a "
         "uniform random time within its step (loadgen and fleetsim --arrival-spread, --arrival-seed the "
         "round), the same arrivals for every tier of a round. Ratios are to the one-replica run of the same "
         "round and spread. fleetsim runs the same trace, arrivals and fleet at the trace's own pace (its "
         "gossip intervals scaled by the time scale), seed the round.\n",
         "```\nscripts/realtier.py trace OUT.md\n"
         f"TRACE_LIMIT={cfg['limit']} TRACE_SCALE={cfg['time_scale']:g} TRACE_WORKERS={cfg['workers']} "
         f"TRACE_KV={cfg['kv']} TRACE_SPREADS='{' '.join(cfg['spreads'])}' "
         f"TRACE_REPLICAS='{' '.join(map(str, cfg['replicas']))}' TRACE_ROUNDS={cfg['rounds']}"
         + (f" TRACE_ROUTER_FLAGS='{' '.join(cfg['router_flags'])}'" if cfg["router_flags"] else "") + "\n```\n",
         f"Load average (1, 5, 15 min) before: {load_before}; after: {load_after}. {elapsed / 60:.1f} min.\n",
         "Targets (the tier's acceptance): worst round >= 0.98 of one replica's cached-token ratio, TTFT p50 "
         "and p99 <= 1.1x; fleetsim within 0.03 of the real ratio."
         + (f" '1 {AGAIN}' is a second run of one replica in each round over the first: the measurement's own "
            "spread." if cfg["again"] else "") + "\n",
         "| spread | replicas | cached-token ratio | vs 1: mean / worst | fleetsim vs 1: mean / min | fleetsim - real | "
         "TTFT p50 vs 1: mean / worst | TTFT p99 vs 1: mean / worst | fleetsim TTFT p50 / p99 vs 1 (mean) | "
         "TTFT mean ms: client / routers / engines; routing / placer ask | "
         "router hit rate | false / lost hits (mean per run) | cores busy: routers / workersims / loadgen | "
         "load avg per round | verdict |",
         "|" + "---|" * 15]
    for spread in cfg["spreads"]:
        ones = [by[(spread, 1, k)] for k in rounds]
        L.append(f"| {spread} | 1 | {statistics.mean(o['cached_token_ratio'] for o in ones):.3f} | TTFT p50 "
                 f"{statistics.mean(o['ttft_p50_ms'] for o in ones):.0f} ms, p99 "
                 f"{statistics.mean(o['ttft_p99_ms'] for o in ones):.0f} ms | | | | | | {fmt_split(ones)} | "
                 f"{statistics.mean(o['router_hit_rate'] for o in ones):.3f} | {fmt_attr(ones)} | {cores(ones)} | "
                 f"{' / '.join(o['loadavg'].split()[0] for o in ones)} | baseline |")
        for n in ([AGAIN] if cfg["again"] else []) + cfg["replicas"]:
            reps = [by[(spread, n, k)] for k in rounds]
            cached, p50, p99 = ([r[key] / o[key] for r, o in zip(reps, ones)]
                                for key in ("cached_token_ratio", "ttft_p50_ms", "ttft_p99_ms"))
            sim_cols, sim_tail, gap = "not run | | ", "", None
            if n == AGAIN:
                L.append(f"| {spread} | 1 {AGAIN} | {statistics.mean(r['cached_token_ratio'] for r in reps):.3f} | "
                         f"{statistics.mean(cached):.3f} / {min(cached):.3f} | | | "
                         f"{statistics.mean(p50):.2f} / {max(p50):.2f} | {statistics.mean(p99):.2f} / {max(p99):.2f} | | "
                         f"{fmt_split(reps)} | {statistics.mean(r['router_hit_rate'] for r in reps):.3f} | {fmt_attr(reps)} | "
                         f"{cores(reps)} | {' / '.join(r['loadavg'].split()[0] for r in reps)} | "
                         "one replica against itself: the spread of the measurement |")
                continue
            if cfg["fleetsim"]:
                s = [sims[(spread, k)] for k in rounds]
                sc = [x[n]["hit_rate"] / x[1]["hit_rate"] for x in s]
                gap = statistics.mean(sc) - statistics.mean(cached)
                sim_cols = f"{statistics.mean(sc):.3f} / {min(sc):.3f} | {gap:+.3f} | "
                sim_tail = (f"{statistics.mean(x[n]['ttft_p50_ms'] / x[1]['ttft_p50_ms'] for x in s):.2f} / "
                            f"{statistics.mean(x[n]['ttft_p99_ms'] / x[1]['ttft_p99_ms'] for x in s):.2f}")
            missed = []
            if min(cached) < 0.98:
                missed.append(f"cached {min(cached):.3f} < 0.98")
            if max(p50) > 1.1 or max(p99) > 1.1:
                missed.append(f"TTFT {max(max(p50), max(p99)):.2f}x > 1.1x")
            if gap is not None and abs(gap) > 0.03:
                missed.append(f"fleetsim off by {gap:+.3f}")
            L.append(f"| {spread} | {n} | {statistics.mean(r['cached_token_ratio'] for r in reps):.3f} | "
                     f"{statistics.mean(cached):.3f} / {min(cached):.3f} | {sim_cols}"
                     f"{statistics.mean(p50):.2f} / {max(p50):.2f} | {statistics.mean(p99):.2f} / {max(p99):.2f} | "
                     f"{sim_tail} | {fmt_split(reps)} | {statistics.mean(r['router_hit_rate'] for r in reps):.3f} | {fmt_attr(reps)} | "
                     f"{cores(reps)} | {' / '.join(r['loadavg'].split()[0] for r in reps)} | "
                     f"{'met' if not missed else 'not met: ' + '; '.join(missed)} |")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    if len(sys.argv) != 3 or sys.argv[1] not in ("sweep", "burst", "trace"):
        sys.exit("usage: scripts/realtier.py sweep|burst|trace OUT.md")
    {"sweep": sweep, "burst": burst, "trace": trace}[sys.argv[1]](sys.argv[2])
