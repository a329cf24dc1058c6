#!/usr/bin/env bash
# Slow-client load on the admission webhook server, loopback only and bounded in time: starts the webhook
# server alone (crates/kubetrain-controller/examples/webhook_load_target.rs, TLS on 127.0.0.1, in-memory
# API server), then opens N TLS connections that each POST a review header promising DECLARED bytes, send
# SENT bytes of body and stall. Prints the server's RSS before, at its peak and while the connections
# stall, how many connections the server cut or refused, and the latency of one valid review sent while
# the attack is on (it must still be answered). Figures in docs/benchmarks.md ("Webhook under slow clients").
#
# MODE=heads (issue 39) runs the slow-head attack instead: N TLS clients each send a request head one byte per
# RATE seconds (default 1) that never ends and reconnect as soon as the server cuts them, for HOLD seconds;
# once they are all connected, VALID reviews (default 6) are sent one after the other and each one's latency
# is printed (a valid review must be answered within 1 s). The valid reviews come from VALID_FROM (default
# 127.0.0.2: the API server and the attacking pods have different addresses; 127.0.0.1 puts them all behind
# one address); the attackers from ATTACK_FROM (space-separated, default 127.0.0.1; several addresses take
# the server to its overall cap instead of its per-address one). Figures in docs/operator.md ("Limits of the
# webhook server").
#
# Usage: benches/webhook-slowloris.sh [CONNS...]          (default: 100 1000)
# Environment: SENT (body bytes each connection sends, default 8000000), DECLARED (its Content-Length,
#   default 8388608), HOLD (seconds to keep the stalled connections open, default 15), PROFILE (release or
#   dev, default release), RSS_ABORT_MB (stop the attack once the server's RSS passes this, default 3000),
#   BIN (a webhook_load_target built elsewhere, e.g. from an older commit, instead of building this one).
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-release}"
target=$(scripts/target-dir.sh)
dir="$profile"; [ "$profile" = dev ] && dir=debug
bin="${BIN:-$target/$dir/examples/webhook_load_target}"
[ -n "${BIN:-}" ] || cargo build --profile "$profile" -p kubetrain-controller --example webhook_load_target >&2
conns=("$@"); [ ${#conns[@]} -eq 0 ] && conns=(100 1000)
ulimit -n "$(( $(ulimit -Hn) < 65536 ? $(ulimit -Hn) : 65536 ))" 2>/dev/null || true

for n in "${conns[@]}"; do
  # A fresh server per run, fed by a pipe it serves until closed.
  coproc SERVER { exec "$bin" 0; }
  read -r _ addr <&"${SERVER[0]}"
  if [ "${MODE:-bodies}" = heads ]; then
  python3 - "$addr" "$n" <<'PY'
import asyncio, json, os, ssl, sys, time

addr, n = sys.argv[1], int(sys.argv[2])
host, port = addr.rsplit(":", 1)
assert host in ("127.0.0.1", "[::1]"), "loopback only"
rate = float(os.environ.get("RATE", 1))
hold = float(os.environ.get("HOLD", 15))
valid_count = int(os.environ.get("VALID", 6))
valid_from = os.environ.get("VALID_FROM", "127.0.0.2")
attack_from = os.environ.get("ATTACK_FROM", "127.0.0.1").split()
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
PATH = "/validate-trainer-kubeflow-org-v1alpha1-trainjob"
stats = {"connections": 0, "cut": 0, "failed": 0}
live = set()
stop = asyncio.Event()

async def trickler(i):
    head = f"POST {PATH} HTTP/1.1\r\nHost: localhost\r\nX-Slow: ".encode()
    while not stop.is_set():
        try:
            r, w = await asyncio.wait_for(
                asyncio.open_connection(host, int(port), ssl=ctx, server_hostname="localhost",
                                        local_addr=(attack_from[i % len(attack_from)], 0)), hold)
        except Exception:
            stats["failed"] += 1
            await asyncio.sleep(0.1)
            continue
        stats["connections"] += 1
        live.add(i)
        try:
            k = 0
            while not stop.is_set():
                w.write(head[k:k + 1] if k < len(head) else b"a")
                k += 1
                await w.drain()
                try:
                    await asyncio.wait_for(r.read(1), rate)
                    break  # closed (or answered) by the server: reconnect
                except asyncio.TimeoutError:
                    pass
            stats["cut"] += 0 if stop.is_set() else 1
        except Exception:
            stats["cut"] += 0 if stop.is_set() else 1
        finally:
            live.discard(i)
            w.close()

async def valid_review():
    # curl in its own process, timing itself: the attackers' busy event loop must not delay or time it.
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "1", "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
        "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
        "name": "j", "namespace": "default", "operation": "CREATE", "userInfo": {},
        "object": {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                   "metadata": {"name": "j", "namespace": "default"},
                   "spec": {"runtimeRef": {"name": "torch-distributed"}}}}}
    curl = await asyncio.create_subprocess_exec(
        "curl", "-sk", "--max-time", "10", "--interface", valid_from, "-o", "/dev/null",
        "-w", "%{http_code} %{time_total}", "-H", "Content-Type: application/json",
        "--data-binary", json.dumps(review), f"https://{host}:{port}{PATH}",
        stdout=asyncio.subprocess.PIPE)
    out, _ = await curl.communicate()
    code, seconds = (out.decode().split() + ["0", "0"])[:2]
    # 000: no answer (refused, reset, or --max-time reached).
    return ("no answer" if code == "000" else code), float(seconds)

async def main():
    tasks = [asyncio.ensure_future(trickler(i)) for i in range(n)]
    started = time.monotonic()
    while len(live) < min(n, 1000) and time.monotonic() - started < hold / 3:
        await asyncio.sleep(0.1)
    answers = []
    for _ in range(valid_count):
        answers.append(await valid_review())
        await asyncio.sleep(max(0.0, 1.0 - answers[-1][1]))
    stop.set()
    await asyncio.wait(tasks, timeout=5)
    within = sum(1 for code, t in answers if code == "200" and t <= 1.0)
    print(f"{n} clients trickling heads at 1 byte per {rate} s and reconnecting: "
          f"{stats['connections']} connections, {stats['cut']} cut by the server, {stats['failed']} failed to connect; "
          f"valid reviews answered within 1 s: {within} of {len(answers)} "
          f"({', '.join(f'{c} in {t:.2f} s' for c, t in answers)})")
    for t in tasks:
        t.cancel()

asyncio.run(main())
PY
  else
  python3 - "$SERVER_PID" "$addr" "$n" <<'PY'
import asyncio, json, os, ssl, sys, time

pid, addr, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
host, port = addr.rsplit(":", 1)
assert host in ("127.0.0.1", "[::1]"), "loopback only"
sent_bytes = int(os.environ.get("SENT", 8_000_000))
declared = int(os.environ.get("DECLARED", 8_388_608))
hold = float(os.environ.get("HOLD", 15))
abort_mb = float(os.environ.get("RSS_ABORT_MB", 3000))
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
PATH = "/validate-trainer-kubeflow-org-v1alpha1-trainjob"

def rss_mb():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0

stats = {"connected": 0, "stalled": 0, "cut": 0, "refused": 0}
peak = 0.0
stop = asyncio.Event()

async def attacker():
    try:
        r, w = await asyncio.wait_for(
            asyncio.open_connection(host, int(port), ssl=ctx, server_hostname="localhost"), hold)
    except Exception:
        stats["refused"] += 1
        return
    stats["connected"] += 1
    try:
        w.write((f"POST {PATH} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {declared}\r\n\r\n").encode())
        chunk = b"{" + b" " * 65535
        left = sent_bytes
        while left > 0 and not stop.is_set():
            piece = chunk[: min(len(chunk), left)]
            w.write(piece)
            left -= len(piece)
            await asyncio.wait_for(w.drain(), hold)
        stats["stalled"] += 1
        # Stall: wait for the server to answer or close, or for the end of the hold.
        read = asyncio.ensure_future(r.read(1))
        done, _ = await asyncio.wait({read, asyncio.ensure_future(stop.wait())},
                                     return_when=asyncio.FIRST_COMPLETED)
        if read in done:
            stats["cut"] += 1
        else:
            read.cancel()
    except Exception as e:
        stats["cut"] += 1
        stats.setdefault("errors", set()).add(type(e).__name__)
    finally:
        try:
            w.close()
        except Exception:
            pass

async def valid_review():
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "1", "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
        "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
        "name": "j", "namespace": "default", "operation": "CREATE", "userInfo": {},
        "object": {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                   "metadata": {"name": "j", "namespace": "default"},
                   "spec": {"runtimeRef": {"name": "torch-distributed"}}}}}
    body = json.dumps(review).encode()
    started = time.monotonic()
    try:
        r, w = await asyncio.wait_for(
            asyncio.open_connection(host, int(port), ssl=ctx, server_hostname="localhost"), 30)
        w.write((f"POST {PATH} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
        answer = await asyncio.wait_for(r.read(), 30)
        w.close()
        status = answer.split(b"\r\n", 1)[0].decode(errors="replace")
        return f"{status} in {time.monotonic() - started:.2f} s"
    except Exception as e:
        return f"no answer after {time.monotonic() - started:.2f} s ({type(e).__name__})"

async def main():
    global peak
    before = rss_mb()
    tasks = [asyncio.ensure_future(attacker()) for _ in range(n)]
    started = time.monotonic()
    aborted = False
    # Sample the RSS until every connection stalled or gave up, or the hold ran out.
    while time.monotonic() - started < hold:
        peak = max(peak, rss_mb())
        if peak > abort_mb:
            aborted = True
            break
        settled = stats["stalled"] + stats["refused"] + sum(1 for t in tasks if t.done())
        if settled >= n:
            break
        await asyncio.sleep(0.1)
    latency = await valid_review()
    during = rss_mb()
    peak = max(peak, during)
    stop.set()
    await asyncio.wait(tasks, timeout=hold)
    await asyncio.sleep(1)
    after = rss_mb()
    print(f"{n} connections sending {sent_bytes} of {declared} bytes: RSS before {before:.0f} MB, "
          f"peak {peak:.0f} MB{' (aborted)' if aborted else ''}, stalled {during:.0f} MB, after {after:.0f} MB; "
          f"connected {stats['connected']}, reached stall {stats['stalled']}, cut by server {stats['cut']}, "
          f"refused {stats['refused']}; a valid review meanwhile: {latency}"
          + (f"; client errors: {', '.join(sorted(stats['errors']))}" if stats.get("errors") else ""))

asyncio.run(main())
PY
  fi
  server_pid=$SERVER_PID
  eval "exec ${SERVER[1]}>&-"
  wait "$server_pid" || true
done
