#!/usr/bin/env python3
"""The LoRA bench on real processes: adapter residency against adapter-blind routing.

    scripts/lorabench.py OUT.md    # scripts/bench.sh lora runs it

16 LoRA adapters over 8 engines of 2 slots each (--max-loras 2), agentic
sessions from loadgen each on one adapter drawn by a Zipf law (the first
adapter takes about 30% of the sessions, the last under 2%), through one
router replica, in three modes:

    residency   this build: cache_aware with --lora-residency (the default)
    cache_aware the same policy, adapter-blind (--lora-residency=false)
    least_load  --policy least_load, adapter-blind

on two engines:

    sim         llm-d-inference-sim (v0.10.2): a request whose adapter finds
                both slots held by running requests of others waits, but a
                swap itself costs nothing, and it counts no loads
    workersim   the same slots (sim/lora.go), and a load into a slot costs its
                engine step --lora-swap-ms; it counts its loads

Every run starts fresh engines and a fresh replica. A round runs every mode of
an engine back to back. Figures: the engines' adapter loads per 1,000 requests
(workersim_lora_loads_total), TTFT p50 and p99 (loadgen, at the client), and
how many engines ran the hot adapter (a0): workersim's from each answer's
x-worker-id, llm-d-inference-sim's from its vllm:lora_requests_info series (it
keeps every one it ever set). The worst round is the one of the highest p99.

Environment (defaults in brackets): LORABENCH_ENGINES [sim workersim],
LORABENCH_MODES [residency cache_aware least_load], LORABENCH_ROUNDS [3],
LORABENCH_SESSIONS [96], LORABENCH_TURNS [4], LORABENCH_THINK (s) [0.2],
LORABENCH_SWAP_MS (workersim's --lora-swap-ms) [20], LORABENCH_SCALE
(workersim's --time-scale) [4], LORABENCH_SIM (llm-d-inference-sim's path)
[~/.cache/kvrouter/peers/llm-d-inference-sim], LORABENCH_KEEP (a directory
to keep each run's per-request lines in) [].
"""

import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import realtier  # noqa: E402  (the real-process fleet: processes, ports, scrapes, loadgen)

WORKERS, ADAPTERS, SLOTS, BASE = 8, 16, 2, "lora-base"
MODES = {
    "residency": ["--policy", "cache_aware"],
    "cache_aware": ["--policy", "cache_aware", "--lora-residency=false"],
    "least_load": ["--policy", "least_load", "--lora-residency=false"],
}
# The workloads: "shared", every session of an adapter opens with the same 1,024-token system
# prompt (an adapter's application); "own", every session's prompt is its own from its first
# block (the 16-token system prompt is shorter than one), so prefix affinity cannot group an
# adapter's sessions.
WORKLOADS = {
    "shared": ["--system-prompt-tokens", "1024", "--task-tokens", "256"],
    "own": ["--system-prompt-tokens", "16", "--task-tokens", "1024"],
}
AGENTIC = ["--observation-tokens", "256", "--answer-tokens", "24", "--seed", "5"]


def config():
    e = os.environ.get
    return {
        "engines": e("LORABENCH_ENGINES", "sim workersim").split(),
        "workloads": e("LORABENCH_WORKLOADS", "shared own").split(),
        "modes": e("LORABENCH_MODES", " ".join(MODES)).split(),
        "rounds": int(e("LORABENCH_ROUNDS", "3")),
        "sessions": int(e("LORABENCH_SESSIONS", "96")),
        "turns": int(e("LORABENCH_TURNS", "4")),
        "think": float(e("LORABENCH_THINK", "0.2")),
        "swap_ms": e("LORABENCH_SWAP_MS", "20"),
        "scale": e("LORABENCH_SCALE", "4"),
        "sim": e("LORABENCH_SIM", os.path.expanduser("~/.cache/kvrouter/peers/llm-d-inference-sim")),
    }


def adapters():
    return [f"a{i}" for i in range(ADAPTERS)]


def modules():
    return [json.dumps({"name": a, "path": f"/adapters/{a}"}) for a in adapters()]


def start_engines(fleet, cfg, engine):
    """WORKERS engines serving BASE and the adapters with SLOTS slots: their URLs."""
    urls = []
    for i, port in enumerate(realtier.free_ports(WORKERS)):
        if engine == "sim":
            args = [cfg["sim"], "--port", str(port), "--model", BASE, "--force-dummy-tokenizer",
                    "--max-loras", str(SLOTS), "--max-cpu-loras", str(ADAPTERS), "--max-num-seqs", "16",
                    "--max-model-len", "32768", "--latency-calculator", "per-token",
                    "--prefill-time-per-token", "100us", "--inter-token-latency", "4ms", "--lora-modules", *modules()]
        else:
            args = [f"{realtier.BIN}/workersim", "--host", "127.0.0.1", "--port", str(port), "--worker-id", f"w{i + 1}",
                    "--model", BASE, "--time-scale", cfg["scale"], "--max-loras", str(SLOTS),
                    "--lora-swap-ms", cfg["swap_ms"], "--max-num-seqs", "16"]
            for m in modules():
                args += ["--lora-modules", m]
        fleet.start(args, f"{fleet.tag}-engine-{i + 1}.log")
        urls.append(f"http://127.0.0.1:{port}")
    for u in urls:
        realtier.wait_for(f"engine {u}", lambda u=u: realtier.get(u + "/health") is not None)
    return urls


def ready(api):
    """The replica routes every adapter to every engine: each is eligible, and its /v1/models was
    read (a worker whose models are not known yet serves any model, so the pool of an adapter
    has every eligible worker either way; its being known says the replica is settled)."""
    m = realtier.scrape(api)
    return (m.get(("vllm_router_active_workers", ""), 0) >= WORKERS and
            realtier.get(api + "/v1/models").count('"a') >= ADAPTERS)


def load(apis, cfg, workload):
    return ["agentic", *sum((["--target", a] for a in apis), []), "--sessions", str(cfg["sessions"]),
            "--turns", str(cfg["turns"]), "--think-time", f"{cfg['think']}s", *WORKLOADS[workload], *AGENTIC,
            "--endpoint", "completions",
            "--models", ",".join(adapters()), "--model-zipf", "1", "--duration", "10m"]


def hot_workers(engine, urls, requests_jsonl):
    """How many engines ran a0, the hot adapter."""
    if engine == "workersim":
        with open(requests_jsonl) as f:
            return len({r["worker"] for r in map(json.loads, f) if r.get("model") == "a0" and not r.get("error")})
    n = 0
    for u in urls:
        for (name, labels), _ in realtier.scrape(u).items():
            if name == "vllm:lora_requests_info" and any(
                    "a0" in part.split('"')[1].split(",") for part in labels.split('",') if "running" in part):
                n += 1
                break
    return n


def run(tmp, tag, cfg, engine, mode, workload):
    fleet = realtier.Fleet(tmp, tag)
    try:
        urls = start_engines(fleet, cfg, engine)
        apis = fleet.tier(1, urls, realtier.Variant(MODES[mode]))
        realtier.wait_for(f"{apis[0]} knows the adapters", lambda: ready(apis[0]))
        out = os.path.join(tmp, tag + ".json")
        rep = realtier.loadgen(load(apis, cfg, workload), out, os.path.join(tmp, tag + ".txt"))
        keep = os.environ.get("LORABENCH_KEEP")
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.copy(out[:-len(".json")] + ".requests.jsonl", keep)
        loads = None
        if engine == "workersim":
            loads = sum(realtier.scrape(u).get(("workersim_lora_loads_total", ""), 0) for u in urls)
        return {"requests": rep["requests"], "errors": rep["errors"], "ttft_p50": rep["ttft_p50_ms"],
                "ratio": rep["cached_token_ratio"],
                "ttft_p99": rep["ttft_p99_ms"], "loads": loads,
                "loads_per_1000": None if loads is None else 1000 * loads / max(rep["requests"], 1),
                "hot": hot_workers(engine, urls, out[:-len(".json")] + ".requests.jsonl"),
                "loadavg": realtier.loadavg()}
    finally:
        fleet.stop()


def fmt(v, spec="{:.0f}"):
    return "n/a" if v is None else spec.format(v)


def ratio(engine, r):
    """The cached-token ratio of a run: llm-d-inference-sim reports no cached tokens without its KV
    cache model."""
    return "n/a" if engine == "sim" else f"{r['ratio']:.3f}"


def render(cfg, runs, before, after, elapsed):
    lines = [f"16 adapters over 8 engines with --max-loras 2, Zipf popularity (s = 1) of {cfg['sessions']} agentic "
             f"sessions of {cfg['turns']} turns (think {cfg['think']} s) on /v1/completions, one replica; "
             f"{cfg['rounds']} rounds, each mode on fresh processes, the worst round (highest TTFT p99) shown. "
             f"workersim at --time-scale {cfg['scale']}, --lora-swap-ms {cfg['swap_ms']}. Workloads: shared, every "
             "session of an adapter opens with the adapter's 1,024-token system prompt; own, every session's "
             "prompt is its own from its first block.",
             "", "```", "scripts/bench.sh lora", "```", "",
             f"Load average before: {before}; after: {after}; {elapsed / 60:.1f} min.", "",
             "| workload | engine | mode | adapter loads / 1,000 requests (worst / mean) | TTFT p50 ms (worst round) | "
             "TTFT p99 ms (worst / mean) | cached-token ratio (worst round) | engines that ran the hot adapter "
             "(worst round) | errors |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (w, engine, mode), reps in runs.items():
        worst = max(reps, key=lambda r: r["ttft_p99"])
        loads = [r["loads_per_1000"] for r in reps if r["loads_per_1000"] is not None]
        lw = fmt(max(loads) if loads else None, "{:.1f}")
        lm = fmt(statistics.mean(loads) if loads else None, "{:.1f}")
        lines.append(f"| {w} | {engine} | {mode} | {lw} / {lm} | {worst['ttft_p50']:.0f} | {worst['ttft_p99']:.0f} / "
                     f"{statistics.mean(r['ttft_p99'] for r in reps):.0f} | {ratio(engine, worst)} | {worst['hot']} | "
                     f"{sum(r['errors'] for r in reps)} |")
    lines += ["", "Per run (workload, engine, mode, round: loads / 1,000, TTFT p50 / p99 ms, engines of a0, "
              "load average):", ""]
    for (w, engine, mode), reps in runs.items():
        for i, r in enumerate(reps):
            lines.append(f"- {w} {engine} {mode} {i + 1}: {fmt(r['loads_per_1000'], '{:.1f}')}, {r['ttft_p50']:.0f} / "
                         f"{r['ttft_p99']:.0f}, {r['hot']}, {r['loadavg']}")
    return "\n".join(lines) + "\n"


def main(out_md):
    cfg = config()
    before, start = realtier.loadavg(), time.monotonic()
    runs = {(w, e, m): [] for w in cfg["workloads"] for e in cfg["engines"] for m in cfg["modes"]}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(cfg["rounds"]):
            for w, engine, mode in runs:
                tag = f"{w}-{engine}-{mode}-{rnd}"
                r = run(tmp, tag, cfg, engine, mode, w)
                runs[(w, engine, mode)].append(r)
                print(tag, json.dumps(r), flush=True)
    with open(out_md, "w") as f:
        f.write(render(cfg, runs, before, realtier.loadavg(), time.monotonic() - start))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "lorabench.md")
