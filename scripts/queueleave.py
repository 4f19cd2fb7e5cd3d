# queueleave.py: how long after a queued client closes its connection the
# router frees its place in the admission queue, on real router and
# workersim processes on 127.0.0.1 (one slot, --max-concurrent-requests 1,
# held by a long stream; the queued request closes after 300 ms).
# usage: python3 scripts/queueleave.py ROUTER_BIN WORKERSIM_BIN N
import socket, subprocess, sys, tempfile, time, urllib.request, statistics

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def metric(url, family, match=""):
    try:
        text = urllib.request.urlopen(url + "/metrics", timeout=2).read().decode()
    except Exception:
        return None
    total = 0.0
    for line in text.splitlines():
        if line.startswith(family) and match in line and line[len(family)] in "{ ":
            total += float(line.rsplit(" ", 1)[1])
    return total

def post(port, body, close_after=False):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(("POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    return s

router_bin, worker_bin, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
wp, ap, gp, rp = free_port(), free_port(), free_port(), free_port()
d = tempfile.mkdtemp()
dn = subprocess.DEVNULL
w = subprocess.Popen([worker_bin, "--host", "127.0.0.1", "--port", str(wp), "--max-num-seqs", "4"], stdout=dn, stderr=dn)
r = subprocess.Popen([router_bin, "serve", "--host", "127.0.0.1", "--port", str(ap), "--prometheus-port", "0", "--node-name", "leave",
                      "--data-dir", d, "--gossip-bind", "127.0.0.1:%d" % gp, "--raft-bind", "127.0.0.1:%d" % rp, "--bootstrap-expect", "1",
                      "--worker-urls", "http://127.0.0.1:%d" % wp, "--max-concurrent-requests", "1", "--rate-limit-tokens-per-second", "1000",
                      "--queue-timeout-secs", "60", "--log-level", "warning"], stdout=dn, stderr=dn)
url = "http://127.0.0.1:%d" % ap
try:
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", data=b'{"model":"sim-model","prompt":"x","max_tokens":1}',
                                                              headers={"Content-Type": "application/json"}), timeout=2).status == 200:
                break
        except Exception:
            time.sleep(0.1)
    holder = post(ap, '{"model":"sim-model","prompt":"hold","max_tokens":100000,"stream":true}')
    while metric(url, "vllm_router_admission_in_flight") != 1:
        time.sleep(0.01)
    times = []
    for i in range(n):
        q = post(ap, '{"model":"sim-model","prompt":"queued %d","max_tokens":4}' % i)
        while metric(url, "vllm_router_admission_queued") != 1:
            time.sleep(0.005)
        time.sleep(0.3)  # let the watch reach its longest interval
        q.close()
        t0 = time.time()
        while metric(url, "vllm_router_admission_queued") != 0 and time.time() - t0 < 3:
            time.sleep(0.002)
        times.append(time.time() - t0)
        if times[-1] >= 3:
            break
    gone = metric(url, "vllm_router_admission_refused_total", 'reason="client_gone"')
    times.sort()
    print("samples %d, freed after (ms): min %.0f, median %.0f, max %.0f; refused client_gone %s" % (
        len(times), 1000 * times[0], 1000 * statistics.median(times), 1000 * times[-1], gone))
    holder.close()
finally:
    r.terminate(); w.terminate(); r.wait(); w.wait()
