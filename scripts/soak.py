#!/usr/bin/env python3
"""The soak: a tier of router replicas from bin/ (real memberlist and Raft, on
127.0.0.1) in front of workersims, under agentic traffic for an hour, with
workers coming and going and a replica restarted every 10 minutes; every
replica sampled every minute; after the warm-up nothing may grow beyond a
stated bound. `make soak` runs it; it is not part of `make test`.

    scripts/soak.py            # SOAK_MINUTES=3 for the short mode
    scripts/soak.py judge DIR  # judge and plot DIR/soak.csv and events.csv again

Environment (defaults in brackets):

    SOAK_MINUTES          how long the traffic runs [60]
    SOAK_SAMPLE_SECONDS   sampling period [60; 10 when SOAK_MINUTES < 20]
    SOAK_WARMUP_MINUTES   samples before this (and in a process's first this
                          many minutes) are the warm-up, not judged
                          [10; 1 when SOAK_MINUTES < 20]
    SOAK_RESTART_MINUTES  one replica restarted (SIGTERM, started again on its
                          data dir) this often, replicas 1, 2, 3, 1, ... in
                          turn: replica 0 serves the whole run [10; 1 short]
    SOAK_ROTATE_MINUTES   a new workersim registered and the oldest removed
                          this often (admin API, `router workers add|remove`)
                          [4; 0.75 short]
    SOAK_REPLICAS         replicas [4]
    SOAK_WORKERS          workersims live at once [6]
    SOAK_SESSIONS, SOAK_TURNS, SOAK_THINK
                          loadgen agentic: concurrent sessions, turns per
                          session, mean think time; when a loadgen run's
                          sessions end a new one starts with the next seed
                          (new prompts) [16 20 1s]
    SOAK_KV               each workersim's --kv-capacity-tokens [65536]
    SOAK_RESPONSES_SECONDS
                          beside the sessions, a stored response (POST
                          /v1/responses) through one replica and read back
                          (GET /v1/responses/{id}) through the next this often,
                          so that the replicas remember stored responses'
                          owners; 0: none [2]
    SOAK_ROUTER_FLAGS     more flags for every replica [none]
    SOAK_OUT              output directory, emptied first
                          [${TMPDIR:-/tmp}/kvrouter-soak]

It writes SOAK_OUT/soak.csv (a row per replica per sample), events.csv
(restarts, workers added and removed, loadgen runs), soak.svg (the series,
self-contained), soak.md (the figures table with each bound and whether it
is met) and logs/. It exits 1 when a bound is not met, 2 when the tier
could not be run. SIGTERM or SIGINT stops every process it started; each
child also gets SIGTERM should this script die without cleaning up.
"""

import base64
import csv
import ctypes
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import realtier  # noqa: E402  (the real-process helpers: ports, GETs, scrapes)
from realtier import free_ports, get, wait_for  # noqa: E402

BIN = "bin"
AGENTIC = ["--system-prompt-tokens", "2048", "--task-tokens", "512", "--observation-tokens", "512",
           "--answer-tokens", "32", "--endpoint", "chat", "--tools", "0"]
MiB = 1 << 20


def env_f(name, default):
    return float(os.environ.get(name, default))


def die_with_parent():
    """preexec: the child gets SIGTERM when this script dies, however it dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def scrape(api):
    """{family: value}, labelled series summed per family."""
    out = {}
    for (name, _), value in realtier.scrape(api).items():
        out[name] = out.get(name, 0.0) + value
    return out


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def proc_rss_fds(pid):
    rss = None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024  # kB -> MiB
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


class Stopped(Exception):
    pass


def on_signal(signum, _frame):
    raise Stopped(signal.Signals(signum).name)


class Soak:
    def __init__(self):
        self.minutes = env_f("SOAK_MINUTES", "60")
        short = self.minutes < 20
        self.sample_s = env_f("SOAK_SAMPLE_SECONDS", "10" if short else "60")
        self.warmup_min = env_f("SOAK_WARMUP_MINUTES", "1" if short else "10")
        self.restart_s = env_f("SOAK_RESTART_MINUTES", "1" if short else "10") * 60
        self.rotate_s = env_f("SOAK_ROTATE_MINUTES", "0.75" if short else "4") * 60
        self.n = int(os.environ.get("SOAK_REPLICAS", "4"))
        self.live_workers = int(os.environ.get("SOAK_WORKERS", "6"))
        self.sessions = os.environ.get("SOAK_SESSIONS", "16")
        self.turns = os.environ.get("SOAK_TURNS", "20")
        self.think = os.environ.get("SOAK_THINK", "1s")
        self.kv = os.environ.get("SOAK_KV", "65536")
        self.router_flags = os.environ.get("SOAK_ROUTER_FLAGS", "").split()
        # the gossip is encrypted, as in production (and as `make run-cluster` runs it): the key is
        # also what every replica derives the seals of stored responses' owners from, so that a
        # response stored through one replica is found through another
        self.gossip_key = base64.b64encode(os.urandom(32)).decode()
        self.out = os.environ.get("SOAK_OUT", os.path.join(os.environ.get("TMPDIR", "/tmp"), "kvrouter-soak"))
        shutil.rmtree(self.out, ignore_errors=True)
        os.makedirs(os.path.join(self.out, "logs"))
        self.children = []  # every Popen ever started, to stop at the end
        self.replicas = []  # {"api", "gossip", "raft", "proc", "started"}
        self.workers = []  # [(url, proc, name)] oldest first
        self.worker_seq = 0
        self.events = []
        self.rows = []
        self.last = {}  # replica -> (pid, t, sample) for the counters' rates
        self.t0 = None
        self.responses_s = env_f("SOAK_RESPONSES_SECONDS", "2")
        self.responses = {"stored": 0, "read": 0, "failed": 0}
        self.halt = threading.Event()

    # --- processes ---------------------------------------------------------

    def start(self, args, log):
        f = open(os.path.join(self.out, "logs", log), "a")
        p = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        f.close()
        self.children.append(p)
        return p

    def stop(self, p, timeout=20):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def stop_all(self):
        for p in self.children:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        end = time.monotonic() + 20
        for p in self.children:
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def minute(self):
        return (time.monotonic() - self.t0) / 60 if self.t0 else 0.0

    def event(self, kind, what):
        self.events.append((round(self.minute(), 2), kind, what))
        print(f"soak: {self.minute():6.2f} min: {kind} {what}", file=sys.stderr, flush=True)

    def new_worker(self):
        self.worker_seq += 1
        port = free_ports(1)[0]
        name = f"sim-{self.worker_seq}"
        p = self.start([f"{BIN}/workersim", "--host", "127.0.0.1", "--port", str(port), "--worker-id", name,
                        "--model", "sim-model", "--kv-capacity-tokens", self.kv], f"workersim-{self.worker_seq}.log")
        url = f"http://127.0.0.1:{port}"
        wait_for(f"workersim {url}", lambda: get(url + "/health", timeout=5) is not None, 60)
        return url, p, name

    def admin(self, *args):
        """`router workers ...` against the first replica that answers."""
        last = None
        for r in self.replicas:
            if r["proc"].poll() is not None or r.get("restarting"):
                continue
            res = subprocess.run([f"{BIN}/router", "workers", *args[:1], "--addr", r["api"], *args[1:]],
                                 capture_output=True, text=True, timeout=60)
            if res.returncode == 0:
                return res.stdout.strip()
            last = res.stderr.strip() or res.stdout.strip()
        raise RuntimeError(f"router workers {' '.join(args)}: {last}")

    def start_replica(self, i):
        r = self.replicas[i]
        peer = self.replicas[1 if i == 0 else 0]["gossip"]
        join = ["--join", f"127.0.0.1:{peer}"] if (i or r.get("restarts")) else []
        r["proc"] = self.start([f"{BIN}/router", "serve", "--host", "127.0.0.1", "--port", str(r["port"]),
                                "--prometheus-port", "0", "--node-name", f"soak-{i}",
                                "--data-dir", os.path.join(self.out, f"data-{i}"),
                                "--gossip-bind", f"127.0.0.1:{r['gossip']}", "--raft-bind", f"127.0.0.1:{r['raft']}",
                                "--bootstrap-expect", str(self.n), "--gossip-key", self.gossip_key, *join,
                                *self.router_flags],
                               f"router-{i}.log")
        r["started"] = time.monotonic()

    def formed(self, r, workers=None):
        m = scrape(r["api"])
        return (m.get("vllm_router_cluster_members", 0) >= self.n and m.get("vllm_router_cluster_registry_loaded", 0) == 1
                and (workers is None or m.get("vllm_router_cluster_registry_workers", 0) == workers))

    def restart(self, i):
        r = self.replicas[i]
        r["restarting"] = True
        self.event("restart", f"replica {i} (pid {r['proc'].pid}): SIGTERM")
        self.stop(r["proc"])
        r["restarts"] = r.get("restarts", 0) + 1
        self.start_replica(i)
        wait_for(f"replica {i} back in the cluster", lambda: self.formed(r), 180)
        r["restarting"] = False
        self.event("restarted", f"replica {i} (pid {r['proc'].pid})")

    def rotate(self):
        url, p, name = self.new_worker()
        self.event("worker_add", f"{name} {url}: {self.admin('add', '--url', url)}")
        self.workers.append((url, p, name))
        old_url, old_p, old_name = self.workers.pop(0)
        self.event("worker_remove", f"{old_name} {old_url}: {self.admin('remove', old_url)}")
        time.sleep(3)  # what was in flight on it ends (a removed worker gets no new requests)
        self.stop(old_p)

    def loadgen(self, seed, remaining_s):
        js = os.path.join(self.out, "logs", f"loadgen-{seed}.json")
        args = [f"{BIN}/loadgen", "agentic", *sum((["--target", r["api"]] for r in self.replicas), []),
                "--balance", "random", "--sessions", self.sessions, "--turns", self.turns, "--think-time", self.think,
                *AGENTIC, "--seed", str(seed), "--duration", f"{max(int(remaining_s), 1)}s", "--json", js]
        return self.start(args, f"loadgen-{seed}.log"), js

    def stored_responses(self):
        """A thread: a stored response through one replica, read back through the next, every
        SOAK_RESPONSES_SECONDS; a replica that is restarting is skipped."""
        k = 0
        while not self.halt.wait(self.responses_s):
            k += 1
            live = [r for r in self.replicas if r["proc"].poll() is None and not r.get("restarting")]
            if len(live) < 2:
                continue
            a, b = live[k % len(live)], live[(k + 1) % len(live)]
            body = json.dumps({"model": "sim-model", "input": f"soak response {k}: what is {k} + {k}?",
                               "store": True, "max_output_tokens": 8}).encode()
            try:
                req = urllib.request.Request(a["api"] + "/v1/responses", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=30) as r:
                    rid = json.loads(r.read())["id"]
                self.responses["stored"] += 1
                json.loads(get(f"{b['api']}/v1/responses/{rid}", timeout=30))
                self.responses["read"] += 1
            except (OSError, ValueError, KeyError):
                self.responses["failed"] += 1

    # --- samples -----------------------------------------------------------

    def sample(self):
        t = self.minute()
        la = loadavg()
        for i, r in enumerate(self.replicas):
            row = {"minute": round(t, 2), "replica": i, "pid": "", "age_min": "", "loadavg": la}
            p = r["proc"]
            if p.poll() is None and not r.get("restarting"):
                row["pid"] = p.pid
                row["age_min"] = round((time.monotonic() - r["started"]) / 60, 2)
                try:
                    rss, fds = proc_rss_fds(p.pid)
                    m = scrape(r["api"])
                except (OSError, RuntimeError) as e:
                    print(f"soak: replica {i} not sampled: {e}", file=sys.stderr)
                    self.rows.append(row)
                    continue
                row.update({
                    "rss_mb": round(rss, 2), "fds": fds,
                    "goroutines": m.get("go_goroutines"),
                    "heap_mb": round(m.get("go_memstats_heap_alloc_bytes", 0) / MiB, 2),
                    "go_sys_mb": round(m.get("go_memstats_sys_bytes", 0) / MiB, 2),
                    "index_blocks": m.get("vllm_router_index_blocks"),
                    "index_workers": m.get("vllm_router_index_workers"),
                    "registry_workers": m.get("vllm_router_cluster_registry_workers"),
                    "stored_owner_bytes": m.get("vllm_router_stored_response_owner_bytes"),
                    "body_bytes_held": m.get("vllm_router_request_body_bytes_held"),
                    "requests": m.get("vllm_router_requests_total", 0),
                })
                gossip = {"gossip_sent_Bps": "vllm_router_cluster_gossip_sent_bytes_total",
                          "gossip_recv_Bps": "vllm_router_cluster_gossip_received_bytes_total",
                          "gossip_state_Bps": "vllm_router_cluster_gossip_state_sent_bytes_total"}
                prev = self.last.get(i)
                now = time.monotonic()
                if prev and prev[0] == p.pid and now > prev[1]:
                    for col, fam in gossip.items():
                        row[col] = round((m.get(fam, 0) - prev[2].get(fam, 0)) / (now - prev[1]), 1)
                    row["rps"] = round((m.get("vllm_router_requests_total", 0) -
                                        prev[2].get("vllm_router_requests_total", 0)) / (now - prev[1]), 2)
                self.last[i] = (p.pid, now, m)
            self.rows.append(row)

    # --- the run -----------------------------------------------------------

    def run(self):
        ports = free_ports(3 * self.n)
        self.replicas = [{"port": ports[3 * i], "gossip": ports[3 * i + 1], "raft": ports[3 * i + 2],
                          "api": f"http://127.0.0.1:{ports[3 * i]}"} for i in range(self.n)]
        print(f"soak: {self.minutes:g} min, {self.n} replicas, {self.live_workers} workersims, output in {self.out}",
              file=sys.stderr, flush=True)
        for _ in range(self.live_workers):
            self.workers.append(self.new_worker())
        for i in range(self.n):
            self.start_replica(i)
        for r in self.replicas:
            wait_for(f"replica {r['api']} in a cluster of {self.n}", lambda r=r: self.formed(r), 180)
        for url, _, _ in self.workers:
            self.admin("add", "--url", url)
        for r in self.replicas:
            wait_for(f"replica {r['api']} with {self.live_workers} workers",
                     lambda r=r: self.formed(r, self.live_workers), 60)
        self.t0 = time.monotonic()
        end = self.t0 + self.minutes * 60
        self.event("start", f"{self.n} replicas, {self.live_workers} workers")
        seed, (lg, lg_json) = 1, self.loadgen(1, end - time.monotonic())
        self.event("loadgen", "seed 1")
        if self.responses_s > 0:
            threading.Thread(target=self.stored_responses, daemon=True).start()
        next_sample, next_restart, next_rotate = self.t0, self.t0 + self.restart_s, self.t0 + self.rotate_s
        restart_order, restarts = [i for i in range(1, self.n)] or [0], 0
        self.loadgen_runs = []
        while True:
            now = time.monotonic()
            if now >= next_sample:
                self.sample()
                self.write_csv()
                next_sample += self.sample_s
                if now >= end:
                    break
            if lg.poll() is not None:
                self.loadgen_done(seed, lg, lg_json)
                if end - now > 30:
                    seed += 1
                    lg, lg_json = self.loadgen(seed, end - now)
                    self.event("loadgen", f"seed {seed}")
            if now >= next_restart and end - now > 60:
                self.restart(restart_order[restarts % len(restart_order)])
                restarts += 1
                next_restart += self.restart_s
            if now >= next_rotate and end - now > 30:
                self.rotate()
                next_rotate += self.rotate_s
            time.sleep(max(0.0, min(1.0, next_sample - time.monotonic())))
        self.halt.set()
        self.stop(lg, 30)
        self.loadgen_done(seed, lg, lg_json)
        if self.responses_s > 0:
            self.event("responses", f"{self.responses['stored']} stored, {self.responses['read']} read back "
                                    f"through another replica, {self.responses['failed']} failed")
        self.event("end", f"{restarts} restarts, {self.worker_seq - self.live_workers} workers replaced")

    def loadgen_done(self, seed, p, js):
        if any(r["seed"] == seed for r in self.loadgen_runs):
            return
        rep = {}
        try:
            with open(js) as f:
                rep = json.load(f)
        except (OSError, ValueError):
            pass
        self.loadgen_runs.append({"seed": seed, "rc": p.returncode, "requests": rep.get("requests"),
                                  "errors": rep.get("errors"), "errors_by_kind": rep.get("errors_by_kind"),
                                  "failovers": rep.get("failovers"), "cached_token_ratio": rep.get("cached_token_ratio")})
        self.event("loadgen_done", f"seed {seed}: rc {p.returncode}, {rep.get('requests')} requests, "
                                   f"{rep.get('errors')} errors {rep.get('errors_by_kind') or ''}")

    def write_csv(self):
        cols = ["minute", "replica", "pid", "age_min", "rss_mb", "fds", "goroutines", "heap_mb", "go_sys_mb",
                "index_blocks", "index_workers", "registry_workers", "gossip_sent_Bps", "gossip_recv_Bps",
                "gossip_state_Bps", "stored_owner_bytes", "body_bytes_held", "requests", "rps", "loadavg"]
        with open(os.path.join(self.out, "soak.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
            w.writeheader()
            w.writerows(self.rows)
        with open(os.path.join(self.out, "events.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["minute", "event", "what"])
            w.writerows(self.events)
        with open(os.path.join(self.out, "loadgen.json"), "w") as f:
            json.dump(getattr(self, "loadgen_runs", []), f, indent=1)


# --- the verdict ----------------------------------------------------------------

def slope_per_hour(pts):
    """Least-squares slope of [(minute, value)], per hour."""
    if len(pts) < 3:
        return None
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else None


# Each series: column, label, unit, and its bound. A bound is judged on each process's life
# (a replica between two restarts) over its samples after the warm-up (the run's first
# SOAK_WARMUP_MINUTES and the process's own first SOAK_WARMUP_MINUTES); "ref" is the mean of
# its first 5 such samples (the warm-up value), and:
#   slope X     the least-squares slope is below X per hour (lives judged over >= 15 min after
#               their warm-up; in the short mode half the judged time)
#   band N, F   every sample within ref +- max(N, F x ref)
#   cap X       every sample at most X (also during the warm-up)
#   flat F, N   the median of the last third at most F x the median of the first third + N
#               (the means, when a fourth item says "mean")
#   le_col C, N every sample at most column C + N (the same sample)
#   le_per C, X every sample at most column C x X (X: the index's budget per worker)
SERIES = [
    ("rss_mb", "RSS", "MiB", [("slope", 30), ("cap", 512)]),
    ("heap_mb", "Go heap (allocated)", "MiB", [("slope", 20), ("cap", 256)]),
    ("go_sys_mb", "Go runtime's memory from the OS", "MiB", [("slope", 30)]),
    ("goroutines", "goroutines", "", [("band", 50, 0.25)]),
    ("fds", "open fds", "", [("band", 32, 0.25), ("cap", 1024)]),
    ("index_blocks", "index blocks", "", [("le_per", "index_workers", None), ("flat", 1.25, 1000)]),
    ("index_workers", "index worker tables", "", [("le_col", "registry_workers", 1)]),
    ("gossip_sent_Bps", "gossip sent", "B/s", [("flat", 1.25, 2048)]),
    ("gossip_recv_Bps", "gossip received", "B/s", [("flat", 1.25, 2048)]),
    # a push/pull sends the whole state, every 30 s or so and on every join (a peer's restart): a
    # minute holds none or a few, so the thirds are compared by their means
    ("gossip_state_Bps", "gossip push/pull state sent", "B/s", [("flat", 1.5, 2048, "mean")]),
    ("stored_owner_bytes", "stored-response owners", "B", [("cap", 16 * MiB)]),
    ("body_bytes_held", "request body bytes held", "B", [("cap", 64 * MiB)]),
]


def index_budget():
    """Blocks of the index's budget per worker: its engine's KV capacity at 4 bytes a token,
    in blocks of routing text (proxy/discover.go), --block-size 256 unless SOAK_ROUTER_FLAGS
    says otherwise."""
    flags = os.environ.get("SOAK_ROUTER_FLAGS", "").replace("=", " ").split()
    block = int(flags[flags.index("--block-size") + 1]) if "--block-size" in flags else 256
    return int(os.environ.get("SOAK_KV", "65536")) * 4 // block


def num(v):
    return None if v in ("", None) else float(v)


def lives(rows):
    """{(replica, pid): [row]} in time order."""
    out = {}
    for r in rows:
        if r.get("pid") not in ("", None):
            out.setdefault((int(r["replica"]), int(r["pid"])), []).append(r)
    return out


def bound_text(b, unit):
    u = f" {unit}" if unit else ""
    kind = b[0]
    if kind == "slope":
        return f"slope < {b[1]:g}{u}/h"
    if kind == "band":
        return f"within ±max({b[1]:g}, {b[2] * 100:g} %) of warm-up"
    if kind == "cap":
        return f"≤ {fmt(b[1], unit)}{u}"
    if kind == "flat":
        return (f"last third ≤ {b[1]:g} × first third + {fmt(b[2], unit)}{u} "
                f"({'means' if b[3:] == ('mean',) else 'medians'})")
    if kind == "le_per":
        return f"≤ index worker tables × {b[2] or index_budget()} (the budget per worker)"
    if kind == "le_col":
        return f"≤ registry workers + {b[2]}"
    return str(b)


def fmt(v, unit=""):
    if v is None:
        return "-"
    if unit == "B" and abs(v) >= MiB:
        return f"{v / MiB:.1f} Mi"
    if unit == "B" and abs(v) >= 1024:
        return f"{v / 1024:.1f} Ki"
    if abs(v) >= 100 or float(v).is_integer():
        return f"{v:.0f}"
    return f"{v:.2f}"


def judge(rows, warmup_min):
    """[(series, figures, [(bound text, met, worst)])] and whether every bound is met."""
    out, all_met = [], True
    by_life = lives(rows)
    # a slope is judged on a life of at least 15 min after its warm-up (half the run's judged
    # time in the short mode): a line through a few minutes of a sawtooth says nothing
    elapsed = max(float(r["minute"]) for r in rows)
    min_span = min(15.0, 0.5 * (elapsed - warmup_min))
    for col, label, unit, bounds in SERIES:
        results = []
        # figures: replica 0's first life (the whole run when replica 0 is never restarted)
        first = next((v for k, v in sorted(by_life.items()) if k[0] == 0), [])
        judged0 = [(float(r["minute"]), num(r.get(col))) for r in first
                   if float(r["minute"]) >= warmup_min and num(r.get(col)) is not None]
        fig = {"warm": statistics.mean(v for _, v in judged0[:5]) if judged0 else None,
               "end": judged0[-1][1] if judged0 else None,
               "slope": slope_per_hour(judged0), "span": (judged0[-1][0] - judged0[0][0]) if judged0 else 0,
               "max_all": max((num(r.get(col)) for r in rows if num(r.get(col)) is not None), default=None)}
        for b in bounds:
            met, worst, detail = True, None, ""
            for (rep, pid), life in sorted(by_life.items()):
                start = float(life[0]["minute"]) - float(life[0]["age_min"])
                pts = [(float(r["minute"]), num(r.get(col)), r) for r in life if num(r.get(col)) is not None]
                after = [(m, v, r) for m, v, r in pts if m >= warmup_min and m - start >= warmup_min]
                kind = b[0]
                if kind == "cap":
                    for m, v, _ in pts:
                        if v > b[1]:
                            met, detail = False, f"replica {rep} at {m:.0f} min: {fmt(v, unit)}"
                    worst = max([worst or 0] + [v for _, v, _ in pts])
                elif kind == "le_per":
                    per = b[2] or index_budget()
                    for m, v, r in pts:
                        lim = num(r.get(b[1]))
                        if lim is not None:
                            share = v / (lim * per) if lim else 0
                            worst = share if worst is None else max(worst, share)
                            if v > lim * per:
                                met, detail = False, f"replica {rep} at {m:.0f} min: {v:.0f} > {lim:.0f} x {per}"
                elif kind == "le_col":
                    for m, v, r in pts:
                        lim = num(r.get(b[1]))
                        if lim is not None:
                            worst = max(worst if worst is not None else -1e18, v - lim)
                            if v > lim + b[2]:
                                met, detail = False, f"replica {rep} at {m:.0f} min: {v:.0f} > {lim:.0f} + {b[2]}"
                elif not after:
                    continue
                elif kind == "slope":
                    if after[-1][0] - after[0][0] < min_span:
                        continue
                    s = slope_per_hour([(m, v) for m, v, _ in after])
                    if s is not None:
                        worst = s if worst is None else max(worst, s)
                        if s >= b[1]:
                            met, detail = False, f"replica {rep} (pid {pid}): {s:.1f}{unit}/h"
                elif kind == "band":
                    ref = statistics.mean(v for _, v, _ in after[:5])
                    width = max(b[1], b[2] * ref)
                    dev = max(abs(v - ref) for _, v, _ in after)
                    worst = dev if worst is None else max(worst, dev)
                    if dev > width:
                        met, detail = False, f"replica {rep} (pid {pid}): {dev:.0f} off {ref:.0f} (±{width:.0f})"
                elif kind == "flat":
                    if len(after) < 6:
                        continue
                    k = len(after) // 3
                    avg = statistics.mean if b[3:] == ("mean",) else statistics.median
                    a = avg(v for _, v, _ in after[:k])
                    z = avg(v for _, v, _ in after[-k:])
                    ratio = z / a if a else (0 if z == 0 else float("inf"))
                    worst = ratio if worst is None else max(worst, ratio)
                    if z > b[1] * a + b[2]:
                        met, detail = False, f"replica {rep} (pid {pid}): {fmt(a, unit)} -> {fmt(z, unit)}"
            all_met &= met
            results.append((bound_text(b, unit), met, worst, detail))
        out.append((col, label, unit, fig, results))
    return out, all_met


def render_md(judged, all_met, cfg, rows, events, loadgen_runs, elapsed_min):
    L = [f"Tier: {cfg['n']} replicas, {cfg['workers']} workersims live at once; {elapsed_min:.1f} min of traffic "
         f"sampled every {cfg['sample_s']:g} s; warm-up {cfg['warmup']:g} min.",
         "",
         f"Events: {sum(1 for e in events if e[1] == 'restarted')} replica restarts, "
         f"{sum(1 for e in events if e[1] == 'worker_add')} workers added and "
         f"{sum(1 for e in events if e[1] == 'worker_remove')} removed, "
         f"{len(loadgen_runs)} loadgen runs: {sum(r['requests'] or 0 for r in loadgen_runs)} requests, "
         f"{sum(r['errors'] or 0 for r in loadgen_runs)} errors"
         + "".join(f"; stored responses: {e[2]}" for e in events if e[1] == "responses") + ".",
         "",
         "| series | warm-up (replica 0) | end (replica 0) | slope after warm-up (replica 0) | bound (every process) | "
         "worst | met |",
         "|---|---|---|---|---|---|---|"]
    for col, label, unit, fig, results in judged:
        u = f" {unit}" if unit else ""
        for j, (text, met, worst, detail) in enumerate(results):
            slope = "-" if fig["slope"] is None else f"{fig['slope']:+.1f}{u}/h"
            head = (f"| {label} | {fmt(fig['warm'], unit)}{u} | {fmt(fig['end'], unit)}{u} | {slope} | "
                    if j == 0 else "| | | | | ")
            w = "-" if worst is None else (f"{worst:.2f}" if text.startswith("last third") else
                                           f"{worst:.2f} of it" if "budget" in text else fmt(worst, unit))
            L.append(f"{head}{text} | {w} | {'met' if met else 'NOT met: ' + detail} |")
    L += ["", f"Verdict: {'every bound met' if all_met else 'a bound was not met'}."]
    return "\n".join(L) + "\n"


# --- the plot -----------------------------------------------------------------

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render_svg(rows, events, warmup_min, title):
    panels = [s for s in SERIES]
    cols, pw, ph, mx, my = 2, 440, 150, 60, 40
    W = cols * (pw + mx) + 20
    nrows = (len(panels) + cols - 1) // cols
    H = nrows * (ph + my) + 70
    tmax = max([float(r["minute"]) for r in rows] + [1])
    nrep = max([int(r["replica"]) for r in rows] + [0]) + 1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           'font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14">{esc(title)}</text>']
    for i in range(nrep):
        out.append(f'<rect x="{20 + i * 90}" y="30" width="12" height="4" fill="{COLORS[i % len(COLORS)]}"/>'
                   f'<text x="{36 + i * 90}" y="36">replica {i}</text>')
    out.append(f'<text x="{40 + nrep * 90}" y="36" fill="#888">grey band: warm-up; dashed: restarts; '
               'ticks: workers replaced</text>')
    by_life = lives(rows)
    restarts = [float(e[0]) for e in events if e[1] == "restart"]
    rotations = [float(e[0]) for e in events if e[1] == "worker_add"]
    for k, (col, label, unit, _) in enumerate(panels):
        x0 = 20 + (k % cols) * (pw + mx) + mx - 10
        y0 = 60 + (k // cols) * (ph + my)
        vals = [num(r.get(col)) for r in rows if num(r.get(col)) is not None]
        vmax = max(vals + [1e-9]) * 1.1
        X = lambda m: x0 + pw * m / tmax
        Y = lambda v: y0 + ph - ph * v / vmax
        out.append(f'<rect x="{x0}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#ccc"/>')
        out.append(f'<rect x="{x0}" y="{y0}" width="{X(min(warmup_min, tmax)) - x0:.1f}" height="{ph}" fill="#eee"/>')
        out.append(f'<text x="{x0}" y="{y0 - 5}" font-weight="bold">{esc(label)}{" (" + esc(unit) + ")" if unit else ""}</text>')
        for frac in (0, 0.5, 1):
            v = vmax / 1.1 * frac
            out.append(f'<text x="{x0 - 4}" y="{Y(v) + 4:.1f}" text-anchor="end" fill="#555">{esc(fmt(v, unit))}</text>')
            out.append(f'<line x1="{x0}" x2="{x0 + pw}" y1="{Y(v):.1f}" y2="{Y(v):.1f}" stroke="#f0f0f0"/>')
        step = 10 if tmax > 20 else 1
        m = 0
        while m <= tmax:
            out.append(f'<text x="{X(m):.1f}" y="{y0 + ph + 12}" text-anchor="middle" fill="#555">{m:g}</text>')
            m += step
        for m in restarts:
            out.append(f'<line x1="{X(m):.1f}" x2="{X(m):.1f}" y1="{y0}" y2="{y0 + ph}" stroke="#999" stroke-dasharray="3,3"/>')
        for m in rotations:
            out.append(f'<line x1="{X(m):.1f}" x2="{X(m):.1f}" y1="{y0 + ph}" y2="{y0 + ph - 5}" stroke="#999"/>')
        for (rep, _), life in sorted(by_life.items()):
            pts = [(float(r["minute"]), num(r.get(col))) for r in life if num(r.get(col)) is not None]
            if pts:
                d = " ".join(f"{X(a):.1f},{Y(b):.1f}" for a, b in pts)
                out.append(f'<polyline points="{d}" fill="none" stroke="{COLORS[rep % len(COLORS)]}" stroke-width="1.3"/>')
    out.append(f'<text x="{W / 2}" y="{H - 8}" text-anchor="middle" fill="#555">minutes</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    soak = Soak()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    code = 0
    try:
        soak.run()
    except Stopped as e:
        print(f"soak: stopped by {e} at {soak.minute():.1f} min; stopping every process", file=sys.stderr)
        code = 143
    except Exception as e:  # the tier could not be run: say so, stop everything
        print(f"soak: {type(e).__name__}: {e}", file=sys.stderr)
        code = 2
    finally:
        soak.halt.set()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        soak.stop_all()
        for i in range(soak.n):
            shutil.rmtree(os.path.join(soak.out, f"data-{i}"), ignore_errors=True)
    if not soak.rows:
        return code or 2
    soak.write_csv()
    elapsed = max(float(r["minute"]) for r in soak.rows)
    judged, all_met = judge(soak.rows, soak.warmup_min)
    cfg = {"n": soak.n, "workers": soak.live_workers, "sample_s": soak.sample_s, "warmup": soak.warmup_min}
    md = render_md(judged, all_met, cfg, soak.rows, soak.events, getattr(soak, "loadgen_runs", []), elapsed)
    with open(os.path.join(soak.out, "soak.md"), "w") as f:
        f.write(md)
    with open(os.path.join(soak.out, "soak.svg"), "w") as f:
        f.write(render_svg(soak.rows, soak.events, soak.warmup_min,
                           f"Soak: {soak.n} replicas, {elapsed:.0f} min, workers replaced, a replica restarted "
                           f"every {soak.restart_s / 60:g} min"))
    print(md)
    print(f"soak: wrote {soak.out}/soak.csv, events.csv, soak.md, soak.svg", file=sys.stderr)
    if code:
        return code
    return 0 if all_met else 1


def rejudge(d):
    """Judges and plots a finished run's CSVs again (the warm-up from SOAK_WARMUP_MINUTES)."""
    with open(os.path.join(d, "soak.csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(d, "events.csv")) as f:
        events = [(float(e[0]), e[1], e[2]) for e in list(csv.reader(f))[1:]]
    elapsed = max(float(r["minute"]) for r in rows)
    warmup = env_f("SOAK_WARMUP_MINUTES", "1" if elapsed < 20 else "10")
    judged, all_met = judge(rows, warmup)
    n = max(int(r["replica"]) for r in rows) + 1
    sample_s = 60 * statistics.median(b - a for a, b in zip(sorted({float(r["minute"]) for r in rows}),
                                                             sorted({float(r["minute"]) for r in rows})[1:]))
    runs = []
    if os.path.exists(os.path.join(d, "loadgen.json")):
        with open(os.path.join(d, "loadgen.json")) as f:
            runs = json.load(f)
    cfg = {"n": n, "workers": max(int(num(r.get("registry_workers")) or 0) for r in rows), "sample_s": round(sample_s),
           "warmup": warmup}
    md = render_md(judged, all_met, cfg, rows, events, runs, elapsed)
    with open(os.path.join(d, "soak.md"), "w") as f:
        f.write(md)
    with open(os.path.join(d, "soak.svg"), "w") as f:
        f.write(render_svg(rows, events, warmup, f"Soak: {n} replicas, {elapsed:.0f} min, workers replaced, "
                                                 "replicas restarted in turn"))
    print(md)
    return 0 if all_met else 1


if __name__ == "__main__":
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    if len(sys.argv) == 3 and sys.argv[1] == "judge":
        sys.exit(rejudge(sys.argv[2]))
    if len(sys.argv) != 1:
        sys.exit("usage: scripts/soak.py [judge DIR]")
    sys.exit(main())
