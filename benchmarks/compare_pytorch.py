#!/usr/bin/env python3
"""llmtrain against PyTorch on the same LibTorch, side by side in one call.

For each preset x dtype it runs llmtrain (1 rank; plain, and compile=True: the
fused LM head + cross-entropy), PyTorch eager and PyTorch + torch.compile
(benchmarks/python_reference.py, the same model written plainly) alternately,
A B C D A B C D ..., with the same threads, the same synthetic GPT-2
token ids and the same global batch, and prints one table: median ms/step
(median over rounds of each run's median over its timed steps, warm-up
excluded), tokens/s, peak RSS (the process's max resident set, measured the same
way for all: GNU time's %M) and the ratios. Then llmtrain's scaling on
this machine: 1 rank x 2 threads against 2 ranks x 1 thread on the same global
batch, and weak scaling 1 -> 2 ranks (1 thread each).

  benchmarks/compare_pytorch.sh                      # all of it (about 20 min on 2 cores)
  benchmarks/compare_pytorch.sh --configs gpt2_small --dtypes float32 --rounds 2
"""
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PRESETS = {"gpt2_small": "inputs/bench_gpt2_small.cfg", "llama_small": "inputs/bench_llama_small.cfg",
           "gpt2_124m": "inputs/bench_gpt2_124m.cfg"}
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "LLMTRAIN_PROGRESS": "off"}


def run_timed(cmd, env, log):
    """Runs cmd under GNU time; returns (stdout, max RSS in MB)."""
    rss_file = tempfile.mktemp()
    full = ["/usr/bin/time", "-f", "%M", "-o", rss_file] + cmd
    p = subprocess.run(full, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + p.stdout + "\n")
    if p.returncode != 0:
        sys.exit(f"compare_pytorch: failed (exit {p.returncode}): {' '.join(cmd)}\n"
                 + "\n".join(p.stdout.splitlines()[-15:]) + f"\n(full output in {log})")
    rss = int(open(rss_file).read().split()[-1]) / 1024
    os.unlink(rss_file)
    return p.stdout, rss


def make_data(build, data_dir, python, log):
    """Synthetic GPT-2 token ids (uniform, seeded) as nanoGPT .bin files and as
    llmtrain HDF5 shards imported from them: both sides read the same tokens."""
    h5 = os.path.join(data_dir, "h5")
    if os.path.exists(os.path.join(h5, "index.json")):
        return h5
    os.makedirs(data_dir, exist_ok=True)
    subprocess.run([python, "-c",
                    "import numpy as np, sys; r = np.random.default_rng(1234);"
                    "r.integers(0, 50257, size=4_000_000, dtype=np.uint16).tofile(sys.argv[1] + '/train.bin');"
                    "r.integers(0, 50257, size=200_000, dtype=np.uint16).tofile(sys.argv[1] + '/val.bin')",
                    data_dir], check=True)
    run_timed([os.path.join(build, "bin", "llmtrain-prepare"), "--out_dir", h5, "--from_nanogpt", data_dir,
               "--vocab_size", "50257", "--tokenizer_name", "gpt2"], {**os.environ, **MPI_ENV}, log)
    return h5


def llmtrain_cmd(a, preset, dtype, h5, out, ranks, threads, batch, fused=False):
    exe = os.path.join(a.build, "bin", "llmtrain")
    args = [exe, os.path.join(ROOT, preset), f"--data_dir={h5}", f"--dtype={dtype}", f"--num_threads={threads}",
            f"--max_iters={a.warmup + a.iters}", f"--warmup_report_iters={a.warmup}", f"--out_dir={out}",
            "--eval_interval=100000", "--eval_iters=1", "--device=cpu"]
    if batch:
        args.append(f"--batch_size={batch}")
    if fused:
        args.append("--compile=True")
    return (["mpiexec", "-n", str(ranks), "--bind-to", "none"] + args) if ranks > 1 else args


def llmtrain_result(out):
    logs = sorted(glob.glob(os.path.join(out, "run_*.json")))
    if not logs:
        sys.exit(f"compare_pytorch: llmtrain wrote no run log in {out}")
    j = json.load(open(logs[-1]))
    it = j["training_iterations"]
    skip = j["summary"].get("warmup_iters_skipped", 0)
    dts = [r["dt_ms"] for r in it[skip:]]
    return {"median_ms": statistics.median(dts), "tokens": it[-1]["tokens"], "final_loss": it[-1]["loss"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--python", default=sys.executable, help="the Python whose torch llmtrain links")
    ap.add_argument("--configs", default="gpt2_small,llama_small,gpt2_124m")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20, help="timed steps per run")
    ap.add_argument("--warmup", type=int, default=5, help="steps per run before timing")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "llmtrain-compare-data"))
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--json", help="also write every measurement here")
    a = ap.parse_args()
    for exe in ("llmtrain", "llmtrain-prepare"):
        if not os.access(os.path.join(a.build, "bin", exe), os.X_OK):
            sys.exit(f"compare_pytorch: {a.build}/bin/{exe} not built (cmake --build {a.build})")
    log = os.path.join(tempfile.gettempdir(), "compare_pytorch.log")
    open(log, "w").close()
    env = {**os.environ, **MPI_ENV, "OMP_NUM_THREADS": str(a.threads)}
    h5 = make_data(a.build, a.data, a.python, log)
    torch_version = subprocess.run([a.python, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip()
    work = tempfile.mkdtemp(prefix="compare_pytorch_")
    rows, raw = [], []
    # llmtrain: the plain path; llmtrain_fused: compile=True (LM head + cross-entropy
    # fused in chunks), what the targets are measured with.
    impls = ["llmtrain", "llmtrain_fused", "pytorch_eager", "pytorch_compile"]
    for name in a.configs.split(","):
        preset = PRESETS.get(name, name)
        for dtype in a.dtypes.split(","):
            res = {i: [] for i in impls}
            for r in range(a.rounds):
                k = r % len(impls)
                order = impls[k:] + impls[:k]  # rotate who goes first
                for impl in order:
                    if impl.startswith("llmtrain"):
                        out = os.path.join(work, f"{name}_{dtype}_{r}")
                        _, rss = run_timed(llmtrain_cmd(a, preset, dtype, h5, out, 1, a.threads, 0,
                                                        fused=impl == "llmtrain_fused"), env, log)
                        m = llmtrain_result(out)
                        shutil.rmtree(out, ignore_errors=True)
                        m.update(peak_rss_mb=rss, startup_s=None)
                    else:
                        stdout, rss = run_timed(
                            [a.python, os.path.join(HERE, "python_reference.py"), os.path.join(ROOT, preset),
                             f"dtype={dtype}", "--mode", impl.split("_")[1], "--data",
                             os.path.join(a.data, "train.bin"), "--iters", str(a.iters), "--warmup",
                             str(a.warmup), "--threads", str(a.threads)], env, log)
                        m = json.loads([l for l in stdout.splitlines() if l.startswith("{")][-1])
                        m["peak_rss_mb"] = rss
                        m["tokens"] = m["batch"] * m["block"]
                    m.update(impl=impl, config=name, dtype=dtype, round=r)
                    res[impl].append(m)
                    raw.append(m)
                    print(f"  {name} {dtype} round {r + 1}/{a.rounds} {impl}: {m['median_ms']:.1f} ms/step",
                          file=sys.stderr, flush=True)
            med = {i: statistics.median(x["median_ms"] for x in res[i]) for i in impls}
            for i in impls:
                rows.append((name, dtype, i, med[i], res[i][0]["tokens"] / (med[i] / 1e3),
                             max(x["peak_rss_mb"] for x in res[i]),
                             statistics.median(x["startup_s"] for x in res[i]) if res[i][0].get("startup_s")
                             is not None else None,
                             med["llmtrain_fused"] / med[i] if i != "llmtrain_fused" else None))
    print(f"\nllmtrain vs PyTorch {torch_version} on CPU: {a.threads} threads, {a.rounds} alternating rounds, "
          f"{a.iters} timed steps after {a.warmup} warm-up per run; medians")
    print(f"{'config':<12} {'dtype':<9} {'impl':<16} {'ms/step':>9} {'tokens/s':>9} {'peak RSS MB':>11} "
          f"{'start s':>8} {'fused/this':>13}")
    for n, d, i, ms, tps, rss, st, ratio in rows:
        print(f"{n:<12} {d:<9} {i:<16} {ms:>9.1f} {tps:>9.0f} {rss:>11.0f} "
              f"{'' if st is None else f'{st:.1f}':>8} {'' if ratio is None else f'{ratio:.2f}':>13}")
    print("(start s: time of the warm-up steps beyond timed steps, i.e. what torch.compile costs; "
          "fused/this: llmtrain compile=True's ms/step over this row's, < 1 = llmtrain faster)")

    if not a.no_scaling:
        name = a.configs.split(",")[0]
        preset = PRESETS.get(name, name)
        batch = 8
        runs = {"1 rank x 2 threads, batch 8": (1, 2, batch), "2 ranks x 1 thread, batch 4 each": (2, 1, batch // 2),
                "1 rank x 1 thread, batch 8": (1, 1, batch), "2 ranks x 1 thread, batch 8 each": (2, 1, batch)}
        ms = {k: [] for k in runs}
        for r in range(a.rounds):
            for k, (ranks, thr, b) in runs.items():
                out = os.path.join(work, f"scale_{r}_{ranks}_{thr}_{b}")
                run_timed(llmtrain_cmd(a, preset, "float32", h5, out, ranks, thr, b),
                          {**env, "OMP_NUM_THREADS": str(thr)}, log)
                ms[k].append(llmtrain_result(out))
                shutil.rmtree(out, ignore_errors=True)
        med = {k: statistics.median(x["median_ms"] for x in v) for k, v in ms.items()}
        print(f"\nllmtrain scaling on this machine ({name}, float32, medians of {a.rounds})")
        print(f"{'layout':<36} {'ms/step':>9} {'tokens/s':>9}")
        for k, (ranks, thr, b) in runs.items():
            print(f"{k:<36} {med[k]:>9.1f} {ms[k][0]['tokens'] / (med[k] / 1e3):>9.0f}")
        print(f"same global batch: 2 ranks x 1 thread take {med['2 ranks x 1 thread, batch 4 each'] / med['1 rank x 2 threads, batch 8']:.2f}x "
              f"the time of 1 rank x 2 threads")
        print(f"weak scaling 1 -> 2 ranks (1 thread each): efficiency "
              f"{med['1 rank x 1 thread, batch 8'] / med['2 ranks x 1 thread, batch 8 each']:.2f}")
    if a.json:
        json.dump(raw, open(a.json, "w"), indent=1)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
