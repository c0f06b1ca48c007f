#!/usr/bin/env python3
# Throughput of N identical gate requests (the tiny baseline, 9 frames 64x96, 4 steps) through the worker
# queue with W CPU workers of T threads: python3 scripts/bench-workers.py W N T. It speaks the file
# protocol of docs/workers.md directly (any client can), and starts the workers itself.
import json, os, subprocess, sys, time, shutil
W, N, threads = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
src = os.path.abspath(os.path.join(os.path.dirname(__file__), "..")); binp = os.environ.get("AUTOOPTIM", src + "/build/autooptim")
run = f"{os.environ.get('TMPDIR', '/tmp')}/autooptim-tput-w{W}-t{threads}-{os.getpid()}"
os.makedirs(run + "/queue"); os.makedirs(run + "/responses")
base = json.load(open(src + "/manifests/wan22-tiny/baseline.json"))
base["config"].update(frames=9, steps=4, height=64, width=96)
procs = [subprocess.Popen([binp, "worker", "--serve", run, "--worker-id", f"cpu{i}", "--model", "wan22-tiny", "--threads", str(threads)],
                          stdout=open(f"{run}/w{i}.log", "w"), stderr=subprocess.STDOUT, cwd=src) for i in range(W)]
def ready():
    n = 0
    for i in range(W):
        try: n += json.load(open(f"{run}/workers/cpu{i}/worker.json"))["state"] == "ready"
        except Exception: pass
    return n == W
while not ready(): time.sleep(0.05)
t0 = time.time(); ids = []
for k in range(N):
    rid = f"bench-{k}"; ids.append(rid)
    req = {"kind": "gate", "id": rid, "client": "bench", "attempt": 0, "model": "wan22-tiny", "manifest": base, "split": "val",
           "out_dir": f"{run}/gates/{k}", "settings": {"prompts_dir": src + "/prompts", "manifests_dir": src + "/manifests",
           "cache_dir": f"{run}/cache", "timing_repeats": 1, "max_prompts": 1}}
    tmp = f"{run}/queue/.tmp-{rid}"; json.dump(req, open(tmp, "w")); os.rename(tmp, f"{run}/queue/{time.time_ns():020d}-{rid}.json")
done = {}
while len(done) < N:
    for rid in ids:
        p = f"{run}/responses/{rid}.json"
        if rid not in done and os.path.exists(p):
            try: done[rid] = json.load(open(p))
            except Exception: pass
    time.sleep(0.02)
wall = time.time() - t0
open(run + "/stop", "w").write("x")
for p in procs: p.wait()
ok = sum(r["ok"] for r in done.values())
per = {}
for r in done.values(): per[r["worker"]] = per.get(r["worker"], 0) + 1
print(f"workers={W} threads/worker={threads} gates={N} ok={ok} wall={wall:.1f}s throughput={60*N/wall:.1f} gates/min by_worker={per} "
      f"mean_busy={sum(r['busy_s'] for r in done.values())/N:.2f}s load={os.getloadavg()[0]:.1f}")
shutil.rmtree(run)
