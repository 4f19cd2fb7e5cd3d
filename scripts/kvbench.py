#!/usr/bin/env python3
"""The acceptance bench of routing on the engines' KV events, on real processes.

    scripts/kvbench.py OUT.md    # scripts/bench.sh kvevents runs it

Workersims publishing their KV events (vLLM's format, over ZMQ, with a replay
socket) under KV pressure (caches that evict), concurrent multi-turn
sessions from loadgen, through 1 and 4 router replicas (real memberlist and
Raft on 127.0.0.1), in three modes:

    text     the text index alone (no --kv-events)
    events   --kv-events: each replica routes on the events it heard
    oracle   --kv-events in a router built with the kvoracle tag, which asks
             every candidate's workersim, synchronously at decision time, how
             many leading blocks of the prompt it holds (POST /debug/kv/match,
             loopback only): the bound, the engines' caches known exactly
             (and the prompt's tokens: its tokenization is not bounded)
    before   events, with the router of the git revision KVBENCH_BEFORE
             (when set): the same bench before a change, side by side

Every run starts fresh workersims and replicas. A round runs every mode at a
tier size back to back, so the ratios between modes and tiers are taken within
a round, under the same load. The cached-token ratio is the workers' usage
(usage.prompt_tokens_details.cached_tokens over prompt_tokens, as loadgen
sums it); false hits are the replicas' own count (a predicted hit whose engine
found no more than the threshold cached), summed; the added latency is the
replicas' histogram of what tokenization added to each request (a cached
prompt's lookup included), the bucket bounds of its p50 and p99.

Two topologies (KVBENCH_TOPOLOGY): dial, every replica dials each engine's
bound publisher (vLLM with tcp://*:5557); bind, each replica binds a socket
(--kv-events-bind) and engine i dials replica i mod n (vLLM given the tier's
address, as llm-d deploys it), which relays what it hears to the others.
Two engines (KVBENCH_ENGINE): workersim, and llm-d-inference-sim (sim), the
public vLLM simulator `make peers` builds, which publishes by dialing out
only (the bind topology) and has no oracle endpoint.

Environment (defaults in brackets): KVBENCH_WORKERS [8], KVBENCH_KV (each
engine's KV cache in tokens: workersim's --kv-capacity-tokens, the
simulator's --kv-cache-size times 16) [32768], KVBENCH_SESSIONS [128],
KVBENCH_TURNS [6], KVBENCH_THINK (seconds) [0.3], KVBENCH_ROUNDS [3],
KVBENCH_REPLICAS [1 4], KVBENCH_MODES [text events oracle, and before when
KVBENCH_BEFORE is set], KVBENCH_FLAGS (more router flags for every mode) [],
KVBENCH_BEFORE (a git revision) [], KVBENCH_TOPOLOGY [dial], KVBENCH_ENGINE
[workersim], KVBENCH_SCENARIO [control], REALTIER_PIN (1: the routers on
core 1, the engines and loadgen on core 0) [0], KVBENCH_KEEP (a directory to copy
every run's logs to, the routers' request logs among them, with each run's
per-request lines from loadgen (RUN.json.requests.jsonl: session, turn,
request id, TTFT, cached tokens) and each replica's /metrics after the run
(RUN-router-N.metrics), to read a run request by request) [].

Scenarios (KVBENCH_SCENARIO), where the text index cannot know what the engines
hold and the events can:

    control   the sessions alone
    restart   engine 1 is killed and started again (its cache empty) after
              KVBENCH_RESTART_AFTER seconds [8] of the run
    sizes     the odd engines' caches are a quarter of the even ones'
    bypass    as many sessions again go straight to the engines, round robin,
              without passing the router (their prompts evict what the
              router's sessions cached)
    hostile   engine 1's events are noise that decodes as no batch, engine
              2's never go out (workersim's garble_kv_events and
              mute_kv_events faults): those workers must fall back to the
              text index, and the ratio stay >= 0.98 of the text index's
"""

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import realtier  # noqa: E402  (the real-process fleet: workersims, replicas, loadgen)

AGENTIC = ["--system-prompt-tokens", "1024", "--task-tokens", "512", "--observation-tokens", "384",
           "--answer-tokens", "32", "--seed", "7"]
ADDED = "vllm_router_kv_tokenize_added_seconds"
RESULTS = ("ok", "cached", "prefix", "peer", "slow", "failed")  # vllm_router_kv_tokenize_total's results
PLACED = ("asked", "here", "alone", "for_peer")  # vllm_router_cluster_placements_total's ways
MIGRATED = ("resumed", "failed", "unresumable")  # vllm_router_stream_migrations_total's results
ENGINE = "vllm_router_kv_tokenize_duration_seconds"
FALSE_BY_FACT = "vllm_router_false_hits_by_fact_total"


def config():
    e = os.environ.get
    return {
        "workers": int(e("KVBENCH_WORKERS", "8")),
        "kv": int(e("KVBENCH_KV", "32768")),
        "sessions": int(e("KVBENCH_SESSIONS", "128")),
        "turns": int(e("KVBENCH_TURNS", "8")),
        "think": float(e("KVBENCH_THINK", "0.3")),
        "rounds": int(e("KVBENCH_ROUNDS", "3")),
        "replicas": [int(x) for x in e("KVBENCH_REPLICAS", "1 4").split()],
        "modes": e("KVBENCH_MODES", "text events" + ("" if e("KVBENCH_ENGINE") == "sim" else " oracle") +
                   (" before" if e("KVBENCH_BEFORE") else "")).split(),
        "flags": e("KVBENCH_FLAGS", "").split(),
        "before": e("KVBENCH_BEFORE", ""),
        "topology": e("KVBENCH_TOPOLOGY", "dial"),
        "engine": e("KVBENCH_ENGINE", "workersim"),
        "scenario": e("KVBENCH_SCENARIO", "control"),
        "restart_after": float(e("KVBENCH_RESTART_AFTER", "8")),
    }


def engines_cell(reps):
    """The mean spread and queue time of reps' engines, '-' where they exported neither."""
    sp = [r["spread"] for r in reps if r.get("spread")]
    q = [r["queue_ms"] for r in reps if r.get("queue_ms") is not None]
    return (f"{statistics.mean(sp):.2f}" if sp else "-") + " / " + (f"{statistics.mean(q):.1f}" if q else "-")


def on_events(reps):
    """The false share of the hits predicted on the engines' events, over reps: '-' where none were."""
    predicted = sum(r.get("predicted_engine", 0) for r in reps)
    if not predicted:
        return "-"
    return f"{sum(r['false_engine'] for r in reps) / predicted:.1%} of {predicted / len(reps):.0f}"


def alone(mode):
    """The flags of the alone mode: events, each replica keeping the tokens it learns to itself."""
    return ["--kv-events-keep-tokens-alone"] if mode == "alone" else []


def model(cfg):
    return "fake-model" if cfg["engine"] == "sim" else "sim-model"


def loadgen_args(targets, cfg, out_json, seed="7", balance="random"):
    """The agentic sessions, on /v1/completions: each turn's prompt is the turn before's, extended
    (loadgen's chat sends one growing user message, so its turns share no whole message but the
    system's)."""
    return [f"{realtier.BIN}/loadgen", "agentic", *sum((["--target", a] for a in targets), []), "--balance", balance,
            "--sessions", str(cfg["sessions"]), "--turns", str(cfg["turns"]), "--think-time", f"{cfg['think']}s",
            *AGENTIC[:-1], seed, "--endpoint", "completions", "--model", model(cfg), "--duration", "20m",
            "--json", out_json, "--requests-json", out_json + ".requests.jsonl"]


class Busy:
    """How busy the machine's cores were while the load ran: /proc/stat read every half second on
    a thread of its own; saturated() is the share of those half-seconds at or above 95% busy, the
    mark of a run whose figures the host's cores bound rather than the router."""

    def __init__(self):
        self.shares, self.done = [], threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    @staticmethod
    def read():
        with open("/proc/stat") as f:
            v = list(map(int, f.readline().split()[1:]))
        return sum(v), v[3] + v[4]  # all, idle and iowait

    def sample(self):
        last = self.read()
        while not self.done.wait(0.5):
            now = self.read()
            total, idle = now[0] - last[0], now[1] - last[1]
            if total > 0:
                self.shares.append(1 - idle / total)
            last = now

    def saturated(self):
        self.done.set()
        self.thread.join()
        return sum(x >= 0.95 for x in self.shares) / len(self.shares) if self.shares else None


def loadgen(apis, cfg, out_json, log, fleet, engines):
    """The sessions through apis, with the scenario's doings meanwhile; the report of the sessions,
    with the share of the run the cores were saturated (Busy) as "saturated"."""
    side = None
    if cfg["scenario"] == "bypass":
        side = subprocess.Popen(loadgen_args(engines, cfg, out_json + ".bypass", seed="11", balance="round_robin"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=load_side())
    busy = Busy()
    with open(log, "w") as f:
        main = subprocess.Popen(loadgen_args(apis, cfg, out_json), stdout=f, stderr=subprocess.DEVNULL,
                                preexec_fn=load_side())
        if cfg["scenario"] == "restart":
            try:
                main.wait(timeout=cfg["restart_after"])
            except subprocess.TimeoutExpired:
                fleet.restart_engine(0)
        if main.wait() != 0:
            raise RuntimeError(f"loadgen failed: {log}")
    if side is not None:
        side.wait()
    with open(out_json) as f:
        rep = json.load(f)
    rep["saturated"] = busy.saturated()
    return rep


def event_ports(n, avoid=()):
    """n loopback ports p, each with p+1 free too (the event socket and its replay socket), none
    of them or their p+1 in avoid (ports handed out already, free until their process binds them)."""
    out = []
    while len(out) < n:
        p = realtier.free_ports(1)[0]
        if p in avoid or p + 1 in avoid:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", p + 1))
        except OSError:
            continue
        finally:
            s.close()
        if p not in out and p + 1 not in out and p - 1 not in out:
            out.append(p)
    return out


def engine_fault(cfg, i):
    """The fault flags of engine i in the hostile scenario (workersim only)."""
    if cfg["scenario"] != "hostile" or cfg["engine"] == "sim" or i > 1:
        return []
    return ["--fault", "garble_kv_events" if i == 0 else "mute_kv_events"]


def engine_kv(cfg, i):
    """Engine i's KV cache in tokens: the odd engines' a quarter in the sizes scenario."""
    return cfg["kv"] // 4 if cfg["scenario"] == "sizes" and i % 2 else cfg["kv"]


def load_side():
    """How the engines and loadgen start: on core 0 with REALTIER_PIN=1, where the routers run on
    core 1 (realtier.Variant), so that a tier's routers take no engine's core; None otherwise."""
    return realtier.Variant([]).preexec("load")


class Engines:
    """The engines of a run: how each was started, so that one can be started again."""

    def __init__(self, fleet):
        self.fleet, self.started = fleet, []

    def start(self, args, log, env=None):
        f = open(os.path.join(self.fleet.tmp, log), "a")
        self.fleet.procs.append(subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env, preexec_fn=load_side()))
        self.fleet.roles.append(os.path.basename(args[0]))
        self.started.append((len(self.fleet.procs) - 1, args, log, env))

    def restart(self, i):
        """Kills engine i and starts it again with its arguments: an engine restarted, its cache empty."""
        at, args, log, env = self.started[i]
        p = self.fleet.procs[at]
        p.kill()
        p.wait()
        f = open(os.path.join(self.fleet.tmp, log), "a")
        self.fleet.procs[at] = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, env=env, preexec_fn=load_side())


def kv_workers(fleet, cfg):
    """workersims publishing their KV events on sockets they bind: (URLs, event endpoints)."""
    n = cfg["workers"]
    urls, eps = [], []
    ports = realtier.free_ports(n)
    for i, (port, ev) in enumerate(zip(ports, event_ports(n, set(ports)))):
        ep = f"tcp://127.0.0.1:{ev}"
        fleet.engines.start([f"{realtier.BIN}/workersim", "--host", "127.0.0.1", "--port", str(port), "--worker-id",
                             f"w{i + 1}", "--model", "sim-model", "--kv-capacity-tokens", str(engine_kv(cfg, i)),
                             "--kv-events-endpoint", ep, "--kv-events-replay-endpoint", f"tcp://127.0.0.1:{ev + 1}",
                             *engine_fault(cfg, i)],
                            f"{fleet.tag}-workersim-{i + 1}.log")
        urls.append(f"http://127.0.0.1:{port}")
        eps.append(ep)
    wait_healthy(urls)
    return urls, eps


def wait_healthy(urls):
    for u in urls:
        realtier.wait_for(f"engine {u}", lambda u=u: realtier.get(u + "/health") is not None)


def dialing_engines(fleet, cfg, ports, binds):
    """Engines on ports, engine i dialing binds[i % len(binds)] with its host:port in its topic."""
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    for i, port in enumerate(ports):
        host, to = f"127.0.0.1:{port}", f"tcp://127.0.0.1:{binds[i % len(binds)]}"
        if cfg["engine"] == "sim":
            fleet.engines.start(
                [peer_sim(), "--port", str(port), "--model", "fake-model", "--force-dummy-tokenizer",
                 "--enable-kvcache", "--kv-cache-size", str(engine_kv(cfg, i) // 16), "--block-size", "16",
                 "--max-num-seqs", "64", "--max-model-len", "65536", "--zmq-endpoint", to,
                 "--latency-calculator", "per-token", "--prefill-time-per-token", "200us", "--inter-token-latency", "2ms"],
                f"{fleet.tag}-sim-{i + 1}.log", env=dict(os.environ, POD_IP=host))
        else:
            fleet.engines.start([f"{realtier.BIN}/workersim", "--host", "127.0.0.1", "--port", str(port), "--worker-id",
                                 f"w{i + 1}", "--model", "sim-model", "--kv-capacity-tokens", str(engine_kv(cfg, i)),
                                 "--kv-events-endpoint", to, "--kv-events-connect", "--kv-events-topic",
                                 f"kv@{host}@sim-model", *engine_fault(cfg, i)], f"{fleet.tag}-workersim-{i + 1}.log")
    wait_healthy(urls)
    return urls


def peer_sim():
    """llm-d-inference-sim, as `make peers` builds it."""
    p = os.environ.get("KVROUTER_PEER_SIM") or os.path.join(
        os.environ.get("PEER_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                                      "kvrouter", "peers"), "llm-d-inference-sim")
    if not os.access(p, os.X_OK):
        sys.exit("kvbench: llm-d-inference-sim is not built: make peers")
    return p


def all_healthy(api, n):
    with urllib.request.urlopen(api + "/cluster/workers", timeout=5) as r:
        rows = json.load(r)["workers"]
    return len(rows) >= n and all(w.get("healthy") for w in rows)


def streams_connected(api, n):
    """Every worker's stream is connected on api: trusted, or unheard (an idle engine has published
    nothing yet), or, in the bind topology, heard of from a peer (any state but disconnected)."""
    with urllib.request.urlopen(api + "/cluster/workers", timeout=5) as r:
        rows = json.load(r)["workers"]
    states = [(w.get("kv_events") or {}).get("state") for w in rows]
    return len(states) >= n and all(s and s != "disconnected" for s in states)


def buckets(pages, family):
    """The cumulative buckets of a histogram summed over pages: [(le, count)], ascending."""
    total = {}
    for page in pages:
        for (name, labels), v in page.items():
            if name == family + "_bucket":
                le = labels.partition('le="')[2].rstrip('"')
                total[le] = total.get(le, 0) + v
    return sorted(((float(k), v) for k, v in total.items()), key=lambda kv: kv[0])


def quantile(bs, q):
    """The upper bound of the bucket that holds quantile q (inf past the last bound), None when empty."""
    if not bs or bs[-1][1] == 0:
        return None
    want = q * bs[-1][1]
    return next(le for le, c in bs if c >= want)


def summed(pages, name, labels=""):
    return sum(p.get((name, labels), 0) for p in pages)


def family(page, name):
    """The sum of every sample of name on page, whatever its labels."""
    return sum(v for (n, _), v in page.items() if n == name)


def engines_seen(urls):
    """Where the tier placed the work, as the engines count it: the largest engine's prompt tokens
    over the mean engine's, and the mean time a request queued at its engine, in ms (None where the
    engine exports neither: vLLM's vllm:prompt_tokens_total and vllm:request_queue_time_seconds)."""
    pages = []
    for u in urls:
        try:
            pages.append(realtier.scrape(u))
        except OSError:
            pass
    tokens = [family(p, "vllm:prompt_tokens_total") for p in pages]
    queued = sum(family(p, "vllm:request_queue_time_seconds_sum") for p in pages)
    count = sum(family(p, "vllm:request_queue_time_seconds_count") for p in pages)
    spread = max(tokens) / statistics.mean(tokens) if tokens and statistics.mean(tokens) else None
    return spread, (1000 * queued / count if count else None)


def run(tmp, tag, cfg, mode, replicas, bindir):
    fleet = realtier.Fleet(tmp, tag)
    fleet.engines = Engines(fleet)
    fleet.restart_engine = fleet.engines.restart
    realtier.BIN = bindir[mode]
    try:
        extra = ["--policy", "cache_aware", *cfg["flags"]]
        if cfg["topology"] == "bind":
            # One call: ports from two calls can repeat (the first call's are
            # free again when the second asks), and an engine given a replica's
            # event port answers its health check with a ZMQ greeting.
            free = realtier.free_ports(replicas + cfg["workers"])
            binds, ports = free[:replicas], free[replicas:]
            urls = [f"http://127.0.0.1:{p}" for p in ports]
            if mode != "text":
                # The engines keep no replay socket here; llm-d-inference-sim holds its events up
                # to a second before it publishes them.
                extra += ["--kv-events", "--kv-events-replay-offset", "-1", "--kv-events-stale-after", "3s"]
            apis = fleet.tier(replicas, urls, realtier.Variant(extra + alone(mode)),
                              lambda i: ["--kv-events-bind", f"tcp://127.0.0.1:{binds[i]}"] if mode != "text" else [])
            dialing_engines(fleet, cfg, ports, binds)
            for a in apis:  # the engines started after the replicas: their first health checks
                realtier.wait_for(f"{a}: every worker healthy", lambda a=a: all_healthy(a, len(urls)))
        else:
            urls, eps = kv_workers(fleet, cfg)
            if mode != "text":
                extra += ["--kv-events", "--kv-events-endpoints", ",".join(eps)]
            if mode == "oracle":
                extra += ["--kv-events-tokenize-timeout", "5s"]  # the oracle knows every prompt's tokens
            apis = fleet.tier(replicas, urls, realtier.Variant(extra + alone(mode)))
        if mode != "text" and cfg["topology"] == "dial":
            # (A connection to the bound socket names its worker with its first batch.)
            for a in apis:
                realtier.wait_for(f"{a}: every worker's stream connected", lambda a=a: streams_connected(a, len(urls)))
        rep = loadgen(apis, cfg, os.path.join(tmp, tag + ".json"), os.path.join(tmp, tag + ".txt"), fleet, urls)
        spread, queue_ms = engines_seen(urls)
        pages = [realtier.scrape(a) for a in apis]
        for i, a in enumerate(apis):  # beside each replica's log, for KVBENCH_KEEP
            with open(os.path.join(tmp, f"{tag}-router-{i}.metrics"), "w") as f:
                f.write(realtier.get(a + "/metrics", timeout=10))
        added, engine = buckets(pages, ADDED), buckets(pages, ENGINE)
        res = {r: summed(pages, "vllm_router_kv_tokenize_total", f'result="{r}"') for r in RESULTS}
        return {"ratio": rep["cached_token_ratio"], "errors": rep["errors"], "requests": rep["requests"],
                "ttft_p50": rep["ttft_p50_ms"], "ttft_p99": rep["ttft_p99_ms"],
                "false": summed(pages, "vllm_router_false_hits_total"),
                "false_engine": summed(pages, FALSE_BY_FACT, 'fact="engine"'),
                "false_uncached": summed(pages, "vllm_router_false_hits_uncached_total"),
                "false_evicted": summed(pages, "vllm_router_false_hits_evicted_total"),
                "predicted": summed(pages, "vllm_router_predicted_hits_total"),
                "predicted_engine": summed(pages, "vllm_router_predicted_hits_by_fact_total", 'fact="engine"'),
                "judged": summed(pages, "vllm_router_judged_decisions_total"),
                "added_p50": quantile(added, 0.5), "added_p99": quantile(added, 0.99),
                "engine_p50": quantile(engine, 0.5), "engine_p99": quantile(engine, 0.99),
                "tokenize": res, "spread": spread,
                "placed": {h: summed(pages, "vllm_router_cluster_placements_total", f'how="{h}"') for h in PLACED},
                "migrated": {m: summed(pages, "vllm_router_stream_migrations_total", f'result="{m}"') for m in MIGRATED}, "queue_ms": queue_ms, "loadavg": realtier.loadavg(),
                "saturated": rep["saturated"]}
    finally:
        fleet.stop()
        realtier.BIN = bindir["text"]


def router_bin(tmp, name, args, src="."):
    """A directory with a router built from src with args, and links to the other binaries of bin/."""
    d = os.path.join(tmp, name + "-bin")
    os.makedirs(d)
    subprocess.run(["go", "build", *args, "-o", os.path.abspath(os.path.join(d, "router")), "./cmd/router"], check=True, cwd=src)
    for b in ("workersim", "loadgen"):
        os.symlink(os.path.abspath(os.path.join(realtier.BIN, b)), os.path.join(d, b))
    return d


def before_bin(tmp, rev):
    """The router of git revision rev, built from its tree."""
    src = os.path.join(tmp, "before-src")
    os.makedirs(src)
    archive = subprocess.run(["git", "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
    return router_bin(tmp, "before", [], src)


def saturated_cell(reps):
    """The mean share of the runs' half-seconds with the cores at or above 95% busy."""
    xs = [r["saturated"] for r in reps if r.get("saturated") is not None]
    return f"{statistics.mean(xs):.2f}" if xs else "-"


def ms(s):
    if s is None:
        return "-"
    return "> 50" if s == float("inf") else f"{s * 1000:g}"


def engines_text(cfg):
    if cfg["engine"] == "sim":
        return (f"{cfg['workers']} llm-d-inference-sim engines (`make peers`) publishing their KV events as vLLM does "
                f"(msgpack batches over ZMQ), --kv-cache-size {cfg['kv'] // 16} blocks of 16 tokens each")
    return (f"{cfg['workers']} workersims publishing their KV events (vLLM's msgpack batches over ZMQ), "
            f"--kv-capacity-tokens {cfg['kv']} each")


def topology_text(cfg):
    if cfg["topology"] == "bind":
        return ("bind topology: each replica binds a socket (--kv-events-bind) and engine i dials replica i mod n, "
                "which relays what it hears to the others (no replay socket)")
    return "dial topology: every replica dials each engine's bound publisher, with its replay socket"


def replicas_text(cfg):
    r = [str(n) for n in cfg["replicas"]]
    return r[0] if len(r) == 1 else ", ".join(r[:-1]) + " and " + r[-1]


def ttft_ratios(runs, n, mode, rounds):
    """Each round's TTFT p99 over the same round's with one replica, or [] when there is none."""
    pairs = [(runs.get((n, mode, k)), runs.get((1, mode, k))) for k in rounds]
    if n == 1 or any(a is None or b is None or not b["ttft_p99"] for a, b in pairs):
        return []
    return [a["ttft_p99"] / b["ttft_p99"] for a, b in pairs]


def ttft_vs_one(runs, n, mode, rounds):
    t = ttft_ratios(runs, n, mode, rounds)
    return f"{statistics.mean(t):.2f} / {max(t):.2f}" if t else "-"


def render(cfg, runs, load_before, load_after, elapsed):
    rounds = range(1, cfg["rounds"] + 1)
    L = [f"### KV events: {cfg['scenario']}, {cfg['topology']} topology, {cfg['engine']}\n",
         engines_text(cfg) + f", so the caches evict; {topology_text(cfg)}; loadgen runs {cfg['sessions']} "
         f"concurrent agentic sessions on /v1/completions (each turn's prompt extends the one before) of {cfg['turns']} turns ({' '.join(AGENTIC[:-2])}, think time "
         f"{cfg['think']:g} s), every turn to a random replica, through {replicas_text(cfg)} replicas started from bin/ on "
         "127.0.0.1 with real memberlist and Raft. Modes: text, the text index alone; events, --kv-events"
         + ("; alone, --kv-events with --kv-events-keep-tokens-alone (each replica keeps the prompts' tokens it "
            "learns to itself, as before the tier shared them)" if "alone" in cfg["modes"] else "")
         + ("; oracle, --kv-events in a router built with the kvoracle tag, which asks each candidate's workersim at "
            "decision time how many leading blocks of the prompt it holds (its loopback /debug/kv/match): the "
            "engines' caches known exactly, with the reservations, threshold and overload check of the others. "
            if "oracle" in cfg["modes"] else " (no oracle: the engine has no /debug/kv/match). ") +
         "Fresh workers and replicas for every run; a round runs the modes of a tier back to back, and every "
         "ratio is taken within a round. Cached-token ratio: the workers' usage (cached_tokens over "
         "prompt_tokens). False hits: the replicas' count of predicted hits whose engine found no more than the "
         "threshold cached, over the decisions judged, then split: on the engine's stored blocks (the events, or "
         "the oracle, said it held them at the decision), and of those the ones whose engine's events removed "
         "some of the prompt's blocks after the decision (evicted before the engine admitted the request: the "
         "index was right when it decided); on an in-flight reservation or the text index (the rest); and "
         "those whose engine found not one token cached. Added latency: the replicas' histogram of what "
         "tokenization added to each request (a cached prompt's lookup included), then the engines' /tokenize "
         "answers alone; bucket bounds in ms. Cores saturated: the share of the load's half-seconds with "
         "the machine's cores at or above 95% busy (/proc/stat); where it is high the host, not the "
         "router, bounds the run's latencies. The lookup on the sets is in the Go benchmark below."
         + (f" before: events with the router of {cfg['before']} (the same bench before the change), side by side."
            if cfg["before"] else "") + "\n",
         "```\nscripts/bench.sh kvevents   # this section\n"
         + f"KVBENCH_SCENARIO={cfg['scenario']} KVBENCH_TOPOLOGY={cfg['topology']} KVBENCH_ENGINE={cfg['engine']} "
         f"KVBENCH_WORKERS={cfg['workers']} KVBENCH_KV={cfg['kv']} KVBENCH_SESSIONS={cfg['sessions']} "
         f"KVBENCH_TURNS={cfg['turns']} KVBENCH_THINK={cfg['think']:g} KVBENCH_ROUNDS={cfg['rounds']} "
         f"KVBENCH_REPLICAS='{' '.join(map(str, cfg['replicas']))}'"
         + (f" KVBENCH_BEFORE={cfg['before']}" if cfg["before"] else "") + " scripts/kvbench.py OUT.md\n```\n",
         f"Load average (1, 5, 15 min) before: {load_before}; after: {load_after}; {elapsed / 60:.1f} min, "
         f"{len(runs)} runs. The machine has 2 cores, shared with other work: the workersims' simulated "
         "engines run on wall time, so a busy machine slows every mode alike within a round.\n",
         "Targets: events >= text and >= 0.99 of the oracle (worst round); more replicas >= 0.99 of one and "
         "TTFT p99 <= 1.1x one's (worst round); false hits at most 1% of the hits predicted on the events.\n",
         "| replicas | mode | cached-token ratio: mean / worst | vs text: mean / worst | vs oracle: mean / worst | "
         "vs 1 replica: mean / worst | false hits / judged (mean) | false hits on stored (evicted after) / reservation or text index / none cached (mean) | false share of the hits predicted on the events (mean) | added p50 / p99 ms | engine tokenize p50 / "
         "p99 ms | tokenized: ok / cached / prefix / peer / slow / failed (mean) | TTFT p50 / p99 ms | TTFT p99 vs 1 replica: mean / worst | "
         "engines: largest's prompt tokens over the mean's / queue ms (mean) | cores saturated: share of the run (mean) | errors | load avg per round |",
         "|" + "---|" * 18]
    verdicts = []
    for n in cfg["replicas"]:
        for mode in cfg["modes"]:
            reps = [runs[(n, mode, k)] for k in rounds]
            rat = [r["ratio"] for r in reps]

            def vs(key_fn, rs=reps):
                others = [key_fn(k) for k in rounds]
                if any(o is None for o in others):
                    return None
                xs = [r["ratio"] / o["ratio"] for r, o in zip(rs, others)]
                return statistics.mean(xs), min(xs)

            cols = []
            for other in (lambda k: runs.get((n, "text", k)), lambda k: runs.get((n, "oracle", k)),
                          lambda k: runs.get((1, mode, k))):
                v = vs(other)
                cols.append("-" if v is None else f"{v[0]:.3f} / {v[1]:.3f}")
            tok = " / ".join(f"{statistics.mean(r['tokenize'].get(x, 0) for r in reps):.0f}" for x in RESULTS)
            L.append(f"| {n} | {mode} | {statistics.mean(rat):.3f} / {min(rat):.3f} | {' | '.join(cols)} | "
                     f"{statistics.mean(r['false'] for r in reps):.1f} / {statistics.mean(r['judged'] for r in reps):.0f} | "
                     f"{statistics.mean(r['false_engine'] for r in reps):.1f} "
                     f"({statistics.mean(r['false_evicted'] for r in reps):.1f}) / "
                     f"{statistics.mean(r['false'] - r['false_engine'] for r in reps):.1f} / "
                     f"{statistics.mean(r['false_uncached'] for r in reps):.1f} | "
                     f"{on_events(reps)} | "
                     f"{ms(max((r['added_p50'] for r in reps), key=lambda x: x or 0))} / "
                     f"{ms(max((r['added_p99'] for r in reps), key=lambda x: x or 0))} | "
                     f"{ms(max((r['engine_p50'] for r in reps), key=lambda x: x or 0))} / "
                     f"{ms(max((r['engine_p99'] for r in reps), key=lambda x: x or 0))} | {tok} | "
                     f"{statistics.mean(r['ttft_p50'] for r in reps):.0f} / {statistics.mean(r['ttft_p99'] for r in reps):.0f} | "
                     f"{ttft_vs_one(runs, n, mode, rounds)} | {engines_cell(reps)} | {saturated_cell(reps)} | {sum(r['errors'] for r in reps)} | {' / '.join(r['loadavg'].split()[0] for r in reps)} |")
            if mode == "events":
                for label, other, bound in (("vs text", "text", 1.0), ("vs oracle", "oracle", 0.99)):
                    v = vs(lambda k: runs.get((n, other, k)))
                    if v is not None:
                        verdicts.append(f"{n} replica(s), events {label}: worst {v[1]:.3f} "
                                        f"({'met' if v[1] >= bound else 'not met'}, >= {bound})")
            if n != 1 and mode == "events":
                v = vs(lambda k: runs.get((1, mode, k)))
                if v is not None:
                    verdicts.append(f"events, {n} replicas vs 1: worst {v[1]:.3f} ({'met' if v[1] >= 0.99 else 'not met'}, >= 0.99)")
                t = ttft_ratios(runs, n, mode, rounds)
                if t:
                    verdicts.append(f"events, {n} replicas vs 1: TTFT p99 worst {max(t):.2f}x "
                                    f"({'met' if max(t) <= 1.1 else 'not met'}, <= 1.1x)")
            if mode == "events":
                fh = sum(r["false"] for r in reps) / max(1, sum(r["judged"] for r in reps))
                fe = sum(r["false_engine"] for r in reps) / max(1, sum(r.get("predicted_engine", 0) for r in reps))
                verdicts.append(f"{n} replica(s), events: false hits {fe:.1%} of the hits predicted on the events "
                                f"({'met' if fe <= 0.01 else 'not met'}, <= 1%), {fh:.1%} of all the decisions judged")
    L.append("\nAdded-latency figures are the worst round's bucket bound. " + "; ".join(verdicts) + ".\n")
    return "\n".join(L) + "\n"


def main(out_md):
    cfg = config()
    tmp = tempfile.mkdtemp(prefix="kvrouter-kvbench.")
    bindir = {"text": realtier.BIN, "events": realtier.BIN, "alone": realtier.BIN}
    if "oracle" in cfg["modes"]:
        bindir["oracle"] = router_bin(tmp, "oracle", ["-tags", "kvoracle"])
    if "before" in cfg["modes"]:
        bindir["before"] = before_bin(tmp, cfg["before"])
    runs, load_before, started = {}, realtier.loadavg(), time.monotonic()
    try:
        for rnd in range(1, cfg["rounds"] + 1):
            for n in cfg["replicas"]:
                for mode in cfg["modes"]:
                    tag = f"{mode}-n{n}-r{rnd}"
                    r = run(tmp, tag, cfg, mode, n, bindir)
                    runs[(n, mode, rnd)] = r
                    print(f"kvbench: {tag}: cached {r['ratio']:.3f}, false hits {r['false']:.0f} of {r['judged']:.0f} "
                          f"(stored {r['false_engine']:.0f}, evicted after {r['false_evicted']:.0f}, none cached {r['false_uncached']:.0f}), "
                          f"added p50 {ms(r['added_p50'])} p99 {ms(r['added_p99'])} ms, tokenized {r['tokenize']}, "
                          f"engines: spread {r['spread']}, queue ms {r['queue_ms']}, placed {r['placed']}, "
                          f"streams migrated {r['migrated']}, "
                          f"cores saturated {r['saturated']}, errors {r['errors']}, load {r['loadavg']}", file=sys.stderr)
    except Exception:
        keep = os.path.join(tempfile.gettempdir(), "kvrouter-kvbench-failed")
        shutil.rmtree(keep, ignore_errors=True)
        shutil.copytree(tmp, keep, symlinks=True)
        print(f"kvbench: failed; logs in {keep}", file=sys.stderr)
        raise
    with open(out_md, "w") as f:
        f.write(render(cfg, runs, load_before, realtier.loadavg(), time.monotonic() - started))
    if os.environ.get("KVBENCH_KEEP"):
        shutil.rmtree(os.environ["KVBENCH_KEEP"], ignore_errors=True)
        shutil.copytree(tmp, os.environ["KVBENCH_KEEP"], symlinks=True)
    if any(r["errors"] for r in runs.values()):  # a failed request's logs are kept to be read
        keep = os.path.join(tempfile.gettempdir(), "kvrouter-kvbench-errors")
        shutil.rmtree(keep, ignore_errors=True)
        shutil.copytree(tmp, keep, symlinks=True)
        print(f"kvbench: requests failed; logs in {keep}", file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/kvbench.py OUT.md")
    main(sys.argv[1])
