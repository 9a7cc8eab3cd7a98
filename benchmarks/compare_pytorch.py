#!/usr/bin/env python3
"""llmtrain against PyTorch on the same LibTorch, side by side in one call.

For each preset x dtype it runs llmtrain (1 rank; plain, and compile=True: the
fused LM head + cross-entropy), PyTorch eager and PyTorch + torch.compile
(benchmarks/python_reference.py, the same model written plainly) alternately,
A B C D A B C D ..., with the same threads, the same synthetic token ids
(uniform below the preset's vocab_size, at most 65536: the .bin files hold
uint16) and the same global batch, and prints one table: median ms/step
(median over rounds of each run's median over its timed steps, warm-up
excluded), tokens/s, peak RSS (the process's max resident set, measured the same
way for all: GNU time's %M; blank without /usr/bin/time) and the ratios. Then llmtrain's scaling on
this machine: 1 rank x 2 threads against 2 ranks x 1 thread on the same global
batch, and weak scaling 1 -> 2 ranks (1 thread each).

  benchmarks/compare_pytorch.sh                      # all of it (about 20 min on 2 cores)
  benchmarks/compare_pytorch.sh --configs gpt2_small --dtypes float32 --rounds 2

--device cuda: the same four on one GPU (llmtrain --device=cuda; PyTorch with
the model and data on the GPU, bf16 autocast over fp32 parameters, fused AdamW,
SDPA attention), by default the LLaMA-2 1.36B preset (inputs/full_llama_1.36b.cfg;
also gpt2_1.36b, llama3_1.5b) at its batch 8 x 2048 in bfloat16, one micro-batch
per step (--accum 1; the presets' 8 on request), 10 timed steps after 5 warm-up.
The table has ms/step, tokens/s, MFU, peak GPU memory (the most bytes of tensors
held at once: llmtrain's run log summary.allocated_peak_bytes, PyTorch's
torch.cuda.max_memory_allocated(); GB = 1e9 bytes) and llmtrain's ms/step over
torch.compile's and eager's. llmtrain's MFU is its run log's (per-iteration
`mfu`, median over the timed steps); PyTorch's applies llmtrain's FLOPs/token and
peak of the same preset and dtype (the run log's startup_info.mfu) to its
tokens/s. No scaling section. llmtrain's out_dir (its run ends with an
evaluation and a checkpoint, after the timed steps) is under /dev/shm when that
has 40 GB free. A run that fails (out of memory ...) is shown as failed and the
others go on (exit status 1 at the end); --deadline_s stops starting runs (and
kills the one in flight) after that many seconds so the table always prints,
and --json FILE is rewritten after every run:

  benchmarks/compare_pytorch.sh --device cuda --configs llama_1.36b --rounds 1 --iters 10 --warmup 5 --deadline_s 240

--op_count: instead of timing, the top-level ops of one training step (step 2:
after the first steps' allocations) of llmtrain (compile=False, and compile=True
as llmtrain_fused: the fused kernels; its profile_steps trace) and PyTorch eager (python_reference.py --profile_step;
torch.profiler, fused AdamW, clipping), each preset at 4 and at 2 layers of the
same shape, counted alike by `llmtrain-report --profile` (top-level: an aten::
or llmtrain:: op not inside another such op of its thread, views left out;
docs/performance.md). Per block = (ops at 4 layers - ops at 2) / 2: forward,
backward and optimizer. On a CPU this is the count of kernels a GPU would
launch for the step; --device cuda adds kernel time by category.

  benchmarks/compare_pytorch.sh --op_count --configs llama_small --dtypes float32
"""
import argparse
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PRESETS = {"gpt2_small": "inputs/bench_gpt2_small.cfg", "llama_small": "inputs/bench_llama_small.cfg",
           "gpt2_124m": "inputs/bench_gpt2_124m.cfg", "llama_1.36b": "inputs/full_llama_1.36b.cfg",
           "gpt2_1.36b": "inputs/full_gpt2_1.36b.cfg", "llama3_1.5b": "inputs/full_llama3_1.5b_optimal.cfg"}
# Defaults per device: (configs, dtypes, timed steps, warm-up steps, micro-batches per step; None = the preset's).
DEVICE_DEFAULTS = {"cpu": ("gpt2_small,llama_small,gpt2_124m", "float32,bfloat16", 20, 5, None),
                   "cuda": ("llama_1.36b", "bfloat16", 10, 5, 1)}
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1", "LLMTRAIN_PROGRESS": "off"}


class RunFailed(Exception):
    """A run that exited non-zero or was killed at the deadline (killed); the message says which, then its output."""

    def __init__(self, msg, killed):
        super().__init__(msg)
        self.killed = killed


def run_timed(cmd, env, log, timeout=None, strict=True):
    """Runs cmd under GNU time (without it when /usr/bin/time is missing: no RSS)
    in a process group of its own; returns (stdout, max RSS in MB or None).
    After `timeout` seconds the whole group is killed. A failed or killed run
    exits this script when strict, else raises RunFailed."""
    rss_file = tempfile.mktemp()
    timer = ["/usr/bin/time", "-f", "%M", "-o", rss_file] if os.access("/usr/bin/time", os.X_OK) else []
    p = subprocess.Popen(timer + cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        why = f"failed (exit {p.returncode})" if p.returncode != 0 else None
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # SIGKILL, not TERM: llmtrain saves a checkpoint on TERM
        out, _ = p.communicate()
        why = f"killed at the deadline after {timeout:.0f} s"
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + out + "\n")
    try:
        rss = int(open(rss_file).read().split()[-1]) / 1024 if timer and why is None else None
    finally:
        if os.path.exists(rss_file):
            os.unlink(rss_file)
    if why is not None:
        msg = (f"{why}: {' '.join(cmd)}\n" + "\n".join(out.splitlines()[-15:]) + f"\n(full output in {log})")
        if strict:
            sys.exit("compare_pytorch: " + msg)
        raise RunFailed(msg, why.startswith("killed"))
    return out, rss


def preset_vocab(preset):
    """The preset's vocab_size (its `vocab_size = N` line)."""
    for line in open(os.path.join(ROOT, preset)):
        k, _, v = line.split("#", 1)[0].partition("=")
        if k.strip() == "vocab_size":
            return int(v)
    sys.exit(f"compare_pytorch: {preset} sets no vocab_size")


def make_data(build, data_root, vocab, python, log):
    """Synthetic token ids (uniform below min(vocab, 65536), seeded) as nanoGPT
    .bin files and as llmtrain HDF5 shards imported from them, cached per
    vocabulary in data_root/vocab<N>: both sides read the same tokens. Returns
    (the .bin directory, the HDF5 directory)."""
    ids = min(vocab, 65536)  # nanoGPT's .bin files (and --from_nanogpt) hold uint16 ids
    data_dir = os.path.join(data_root, f"vocab{ids}")
    h5 = os.path.join(data_dir, "h5")
    if os.path.exists(os.path.join(h5, "index.json")):
        return data_dir, h5
    os.makedirs(data_dir, exist_ok=True)
    subprocess.run([python, "-c",
                    "import numpy as np, sys; r = np.random.default_rng(1234); n = int(sys.argv[2]);"
                    "r.integers(0, n, size=4_000_000, dtype=np.uint16).tofile(sys.argv[1] + '/train.bin');"
                    "r.integers(0, n, size=200_000, dtype=np.uint16).tofile(sys.argv[1] + '/val.bin')",
                    data_dir, str(ids)], check=True)
    run_timed([os.path.join(build, "bin", "llmtrain-prepare"), "--out_dir", h5, "--from_nanogpt", data_dir,
               "--vocab_size", str(ids), "--tokenizer_name", "gpt2" if ids == 50257 else "synthetic",
               "--overwrite"], {**os.environ, **MPI_ENV}, log)
    return data_dir, h5


def llmtrain_cmd(a, preset, dtype, h5, out, ranks, threads, batch, fused=False):
    exe = os.path.join(a.build, "bin", "llmtrain")
    args = [exe, os.path.join(ROOT, preset), f"--data_dir={h5}", f"--dtype={dtype}", f"--num_threads={threads}",
            f"--max_iters={a.warmup + a.iters}", f"--warmup_report_iters={a.warmup}", f"--out_dir={out}",
            "--eval_interval=100000", "--eval_iters=1", f"--device={a.device}"]
    if batch:
        args.append(f"--batch_size={batch}")
    if a.accum:
        args.append(f"--gradient_accumulation_steps={a.accum}")
    if fused:
        args.append("--compile=True")
    return (["mpiexec", "-n", str(ranks), "--bind-to", "none"] + args) if ranks > 1 or a.device == "cuda" else args


def llmtrain_result(out):
    logs = sorted(glob.glob(os.path.join(out, "run_*.json")))
    if not logs:
        sys.exit(f"compare_pytorch: llmtrain wrote no run log in {out}")
    j = json.load(open(logs[-1]))
    it = j["training_iterations"]
    skip = j["summary"].get("warmup_iters_skipped", 0)
    dts = [r["dt_ms"] for r in it[skip:]]
    m = {"median_ms": statistics.median(dts), "tokens": it[-1]["tokens"], "final_loss": it[-1].get("loss")}
    # GPU figures (docs/run-log.md): MFU per iteration (absent where the peak is unknown), the most bytes of
    # tensors held at once, and the FLOPs/token and peak that PyTorch's MFU is computed with.
    mfus = [r["mfu"] for r in it[skip:] if "mfu" in r]
    if mfus:
        m["mfu"] = statistics.median(mfus)
    peak = j["summary"].get("allocated_peak_bytes", max((r.get("allocated_peak_bytes", 0) for r in it), default=0))
    if peak:
        m["allocated_peak_bytes"] = peak
    si = j.get("startup_info", {})
    m["mfu_basis"] = {k: si.get("mfu", {}).get(k) for k in ("flops_per_token", "peak_tflops_total", "peak_basis",
                                                             "convention")}
    m["device_name"] = si.get("config", {}).get("device_name")
    m["params"] = si.get("model", {}).get("num_params")
    return m


def profile_counts(a, trace, log):
    """The step of a trace as llmtrain-report --profile counts it: (ops, ops by category)."""
    out = trace + ".report.json"
    run_timed([os.path.join(a.build, "bin", "llmtrain-report"), "--profile", trace, "--json", out],
              {**os.environ, **MPI_ENV}, log)
    step = json.load(open(out))[0]["steps"]
    if len(step) != 1:
        sys.exit(f"compare_pytorch: {trace} holds {len(step)} steps, expected the one traced")
    return step[0]["ops"], step[0]["ops_by_category"]


def op_count(a, env, work, log):
    """--op_count: per config x dtype, llmtrain's and PyTorch eager's top-level ops of step 2 at 4 and 2 layers."""
    step, rows = 2, []
    for name in a.configs.split(","):
        preset = PRESETS.get(name, name)
        data_dir, h5 = make_data(a.build, a.data, preset_vocab(preset), a.python, log)
        for dtype in a.dtypes.split(","):
            counts = {}
            for layers in (4, 2):
                # llmtrain as it is (compile=False) and with its fused kernels (compile=True).
                for impl, compile_ in (("llmtrain", "False"), ("llmtrain_fused", "True")):
                    out = os.path.join(work, f"ops_{os.path.basename(name)}_{dtype}_{layers}_{compile_}")
                    cmd = [os.path.join(a.build, "bin", "llmtrain"), os.path.join(ROOT, preset), f"--data_dir={h5}",
                           f"--dtype={dtype}", f"--num_threads={a.threads}", f"--max_iters={step + 1}",
                           f"--out_dir={out}", "--eval_interval=100000", "--eval_iters=1", f"--device={a.device}",
                           f"--n_layer={layers}", f"--profile_steps={step}", f"--compile={compile_}"]
                    if a.accum:
                        cmd.append(f"--gradient_accumulation_steps={a.accum}")
                    run_timed((["mpiexec", "-n", "1", "--bind-to", "none"] + cmd) if a.device == "cuda" else cmd,
                              env, log)
                    trace = os.path.join(out, "profile", f"rank0_steps{step}-{step}.pt.trace.json")
                    if not os.path.exists(trace):
                        sys.exit(f"compare_pytorch: llmtrain wrote no trace {trace} (a build whose loop runs "
                                 f"StepProfiler: src/record/step_profiler.hpp)")
                    counts[(impl, layers)] = profile_counts(a, trace, log)
                    shutil.rmtree(out, ignore_errors=True)
                trace = os.path.join(work, f"pytorch_{os.path.basename(name)}_{dtype}_{layers}.pt.trace.json")
                run_timed([a.python, os.path.join(HERE, "python_reference.py"), os.path.join(ROOT, preset),
                           f"dtype={dtype}", f"n_layer={layers}", "--mode", "eager", "--data",
                           os.path.join(data_dir, "train.bin"), "--iters", "1", "--warmup", str(step),
                           "--threads", str(a.threads), "--device", a.device, "--profile_step", str(step),
                           "--profile_out", trace]
                          + ([f"gradient_accumulation_steps={a.accum}"] if a.accum else []), env, log)
                counts[("pytorch_eager", layers)] = profile_counts(a, trace, log)
            for impl in ("llmtrain", "llmtrain_fused", "pytorch_eager"):
                (n4, c4), (n2, c2) = counts[(impl, 4)], counts[(impl, 2)]
                per_cat = {k: (c4.get(k, 0) - c2.get(k, 0)) / 2 for k in sorted(set(c4) | set(c2))}
                rows.append((name, dtype, impl, n4, n2, (n4 - n2) / 2, per_cat))
    print(f"\ntop-level ops of one training step (step {step}; forward, backward, clipping, AdamW), "
          f"counted by llmtrain-report --profile on {a.device}")
    print(f"{'config':<12} {'dtype':<9} {'impl':<14} {'4 layers':>9} {'2 layers':>9} {'per block':>10}  per block by category")
    for r in rows:
        cats = ", ".join(f"{k} {v:g}" for k, v in r[6].items() if v)
        print(f"{r[0]:<12} {r[1]:<9} {r[2]:<14} {r[3]:>9} {r[4]:>9} {r[5]:>10g}  {cats}")
    print("(llmtrain: compile=False; llmtrain_fused: compile=True, the fused kernels of src/kernels. top-level: an "
          "aten:: or llmtrain:: op not inside another such op of its thread, views, aliases and allocations left out; "
          "per block = (4 layers - 2 layers) / 2; docs/performance.md)")
    return rows


def write_json(path, raw):
    """Rewrites path with every measurement so far (atomically: a kill leaves the previous version)."""
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump(raw, f, indent=1)
        os.replace(path + ".tmp", path)


def fmt(v, spec, none=""):
    return none if v is None else format(v, spec)


def main():
    t_start = time.monotonic()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--python", default=sys.executable, help="the Python whose torch llmtrain links")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: llmtrain --device=cuda and PyTorch on the GPU, GPU columns, no scaling section")
    ap.add_argument("--configs", help="names in PRESETS or preset paths (default: cpu: gpt2_small,llama_small,"
                                      "gpt2_124m; cuda: llama_1.36b)")
    ap.add_argument("--dtypes", help="default: cpu: float32,bfloat16; cuda: bfloat16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, help="timed steps per run (default: cpu 20, cuda 10)")
    ap.add_argument("--warmup", type=int, help="steps per run before timing (default 5)")
    ap.add_argument("--accum", type=int, help="micro-batches per step on both sides (gradient_accumulation_steps; "
                                              "default: cpu: the preset's, cuda: 1; 0 = the preset's)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "llmtrain-compare-data"))
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--deadline_s", type=float, help="no run starts after this many seconds (from the start of "
                                                     "this script) and one still going then is killed; the table "
                                                     "prints what finished")
    ap.add_argument("--json", help="also write every measurement here (rewritten after each run)")
    ap.add_argument("--op_count", action="store_true",
                    help="instead of timing: top-level ops per step and per block of llmtrain and PyTorch eager "
                         "(see above)")
    a = ap.parse_args()
    configs, dtypes, iters, warmup, accum = DEVICE_DEFAULTS[a.device]
    a.configs = a.configs or configs
    a.dtypes = a.dtypes or dtypes
    a.iters = iters if a.iters is None else a.iters
    a.warmup = warmup if a.warmup is None else a.warmup
    a.accum = accum if a.accum is None else a.accum
    cuda = a.device == "cuda"
    for exe in ("llmtrain", "llmtrain-prepare"):
        if not os.access(os.path.join(a.build, "bin", exe), os.X_OK):
            sys.exit(f"compare_pytorch: {a.build}/bin/{exe} not built (cmake --build {a.build})")

    def time_left():  # seconds to the deadline; None without one
        return None if a.deadline_s is None else a.deadline_s - (time.monotonic() - t_start)

    log = os.path.join(tempfile.gettempdir(), "compare_pytorch.log")
    open(log, "w").close()
    env = {**os.environ, **MPI_ENV, "OMP_NUM_THREADS": str(a.threads)}
    torch_version = subprocess.run([a.python, "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True).stdout.strip()
    # llmtrain's run ends with an evaluation and a checkpoint (val loss improved; after the timed steps): on a GPU
    # that is GBs (15.5 GB at 1.36B), written faster to a tmpfs when it has room; each run's out_dir is removed after.
    shm = cuda and os.path.isdir("/dev/shm") and shutil.disk_usage("/dev/shm").free > 40e9
    work = tempfile.mkdtemp(prefix="compare_pytorch_", dir="/dev/shm" if shm else None)
    if a.op_count:
        rows = op_count(a, env, work, log)
        write_json(a.json, [{"config": r[0], "dtype": r[1], "impl": r[2], "ops_4_layers": r[3], "ops_2_layers": r[4],
                             "ops_per_block": r[5], "per_block_by_category": r[6]} for r in rows])
        shutil.rmtree(work, ignore_errors=True)
        return
    rows, raw, notes = [], [], []
    failed = stopped = False
    # llmtrain: the plain path; llmtrain_fused: compile=True (LM head + cross-entropy
    # fused in chunks), what the targets are measured with.
    impls = ["llmtrain", "llmtrain_fused", "pytorch_eager", "pytorch_compile"]
    for name in a.configs.split(","):
        preset = PRESETS.get(name, name)
        if time_left() is not None and time_left() <= 0:
            stopped = True
            break
        data_dir, h5 = make_data(a.build, a.data, preset_vocab(preset), a.python, log)
        for dtype in a.dtypes.split(","):
            res = {i: [] for i in impls}
            for r in range(a.rounds):
                k = r % len(impls)
                order = impls[k:] + impls[:k]  # rotate who goes first
                for impl in order:
                    left = time_left()
                    if left is not None and left <= 0:
                        stopped = True
                        break
                    try:
                        if impl.startswith("llmtrain"):
                            out = os.path.join(work, f"{os.path.basename(name)}_{dtype}_{r}_{impl}")
                            _, rss = run_timed(llmtrain_cmd(a, preset, dtype, h5, out, 1, a.threads, 0,
                                                            fused=impl == "llmtrain_fused"), env, log, left, False)
                            m = llmtrain_result(out)
                            shutil.rmtree(out, ignore_errors=True)
                            m.update(peak_rss_mb=rss, startup_s=None)
                            if cuda and "allocated_peak_bytes" in m:
                                m["peak_gpu_bytes"] = m["allocated_peak_bytes"]
                        else:
                            stdout, rss = run_timed(
                                [a.python, os.path.join(HERE, "python_reference.py"), os.path.join(ROOT, preset),
                                 f"dtype={dtype}"] + ([f"gradient_accumulation_steps={a.accum}"] if a.accum else [])
                                + ["--mode", impl.split("_")[1], "--data", os.path.join(data_dir, "train.bin"),
                                   "--iters", str(a.iters), "--warmup", str(a.warmup), "--threads", str(a.threads),
                                   "--device", a.device], env, log, left, False)
                            m = json.loads([l for l in stdout.splitlines() if l.startswith("{")][-1])
                            m["peak_rss_mb"] = rss
                            m["tokens"] = m["batch"] * m["block"]
                    except RunFailed as e:
                        if impl.startswith("llmtrain"):
                            shutil.rmtree(out, ignore_errors=True)
                        failed, stopped = failed or not e.killed, stopped or e.killed
                        m = {"failed": str(e).splitlines()[0], "killed": e.killed}
                        print(f"compare_pytorch: {name} {dtype} {impl} {e}", file=sys.stderr, flush=True)
                    m.update(impl=impl, config=name, dtype=dtype, round=r)
                    res[impl].append(m)
                    raw.append(m)
                    write_json(a.json, raw)
                    if "failed" in m:
                        continue
                    print(f"  {name} {dtype} round {r + 1}/{a.rounds} {impl}: {m['median_ms']:.1f} ms/step"
                          + (f", MFU {m['mfu']:.1f}%" if "mfu" in m else "")
                          + (f", peak {m['peak_gpu_bytes'] / 1e9:.2f} GB" if "peak_gpu_bytes" in m else ""),
                          file=sys.stderr, flush=True)
                if stopped:
                    break
            ok = {i: [x for x in res[i] if "failed" not in x] for i in impls}
            med = {i: statistics.median(x["median_ms"] for x in ok[i]) if ok[i] else None for i in impls}
            # llmtrain's FLOPs/token and peak (run log startup_info.mfu) for the PyTorch rows' MFU
            basis = next((x["mfu_basis"] for i in impls[:2] for x in ok[i]
                          if x.get("mfu_basis", {}).get("peak_tflops_total")), None)
            for i in impls:
                if not ok[i]:
                    rows.append((name, dtype, i, "not run" if not res[i] else
                                 "failed" if any(not x["killed"] for x in res[i]) else "killed"))
                    continue
                tps = ok[i][0]["tokens"] / (med[i] / 1e3)
                if i.startswith("llmtrain"):
                    mfus = [x["mfu"] for x in ok[i] if "mfu" in x]
                    mfu = statistics.median(mfus) if mfus else None
                else:
                    mfu = tps * basis["flops_per_token"] / (basis["peak_tflops_total"] * 1e12) * 100 if basis else None
                gpu_gb = [x["peak_gpu_bytes"] / 1e9 for x in ok[i] if x.get("peak_gpu_bytes") is not None]
                rss = [x["peak_rss_mb"] for x in ok[i] if x.get("peak_rss_mb") is not None]
                start = [x["startup_s"] for x in ok[i] if x.get("startup_s") is not None]
                fused, llm = med["llmtrain_fused"], i.startswith("llmtrain")
                rows.append((name, dtype, i, med[i], tps, mfu, max(gpu_gb) if gpu_gb else None,
                             max(rss) if rss else None, statistics.median(start) if start else None,
                             fused / med[i] if i != "llmtrain_fused" and fused else None,
                             med[i] / med["pytorch_compile"] if llm and med["pytorch_compile"] else None,
                             med[i] / med["pytorch_eager"] if llm and med["pytorch_eager"] else None))
            done = [x for i in impls for x in ok[i]]
            if basis:
                convention = (basis["convention"] or "").split(" (")[0]  # "FLOPs/token = 6*N + 12*L*H*Q*T"
                notes.append(f"{name} {dtype}: {basis['flops_per_token'] / 1e9:.3f} GFLOP/token ({convention}), "
                             f"peak {basis['peak_tflops_total']:.4g} TFLOP/s ({basis['peak_basis']})")
            if len({x["tokens"] for x in done}) > 1:
                notes.append(f"WARNING {name} {dtype}: tokens per step differ: "
                             + ", ".join(f"{x['impl']} {x['tokens']}" for x in done))
            params = {x["impl"].split("_")[0]: x.get("params") for x in done if x.get("params")}
            if len(set(params.values())) > 1:
                notes.append(f"WARNING {name}: parameter counts differ: {params}")
            elif params:
                notes.append(f"{name}: {next(iter(params.values())):,} parameters "
                             f"({' = '.join(sorted(params))})")
            if stopped:
                break
        if stopped:
            break
    # One table; the columns after tokens/s depend on the device: (header, width, a row's cell).
    if cuda:
        gpu = next((x["device_name"] for x in raw if x.get("device_name") not in (None, "cpu")), "CUDA")
        accum = f"{a.accum} micro-batch(es)" if a.accum else "the preset's micro-batches"
        title = (f"llmtrain vs PyTorch {torch_version} on {gpu}: {a.rounds} alternating rounds, {a.iters} timed steps "
                 f"after {a.warmup} warm-up per run, {accum} per step; medians")
        cols = [("MFU %", 6, lambda r: fmt(r[5], ".1f")), ("peak GB", 8, lambda r: fmt(r[6], ".2f")),
                ("start s", 8, lambda r: fmt(r[8], ".1f")), ("llm/compile", 11, lambda r: fmt(r[10], ".2f")),
                ("llm/eager", 10, lambda r: fmt(r[11], ".2f"))]
        footer = ("(llmtrain: compile=False; llmtrain_fused: compile=True, the LM head + cross-entropy fused in chunks. "
                  "llm/compile, llm/eager: this llmtrain row's ms/step over torch.compile's / eager's, < 1 = llmtrain "
                  "faster. peak GB: the most bytes of tensors held at once (llmtrain: run log allocated_peak_bytes; "
                  "PyTorch: torch.cuda.max_memory_allocated()), 1 GB = 1e9 bytes. start s: time of the warm-up steps "
                  "beyond timed steps, i.e. what torch.compile costs. MFU: llmtrain's from its run log (per-iteration "
                  "mfu); PyTorch's = its tokens/s x llmtrain's FLOPs/token / llmtrain's peak (run log startup_info.mfu "
                  "of the same preset and dtype): the same model, the same FLOPs)")
    else:
        title = (f"llmtrain vs PyTorch {torch_version} on CPU: {a.threads} threads, {a.rounds} alternating rounds, "
                 f"{a.iters} timed steps after {a.warmup} warm-up per run; medians")
        cols = [("peak RSS MB", 11, lambda r: fmt(r[7], ".0f")), ("start s", 8, lambda r: fmt(r[8], ".1f")),
                ("fused/this", 13, lambda r: fmt(r[9], ".2f"))]
        footer = ("(start s: time of the warm-up steps beyond timed steps, i.e. what torch.compile costs; "
                  "fused/this: llmtrain compile=True's ms/step over this row's, < 1 = llmtrain faster)")
    print("\n" + title)
    print(f"{'config':<12} {'dtype':<9} {'impl':<16} {'ms/step':>9} {'tokens/s':>9} "
          + " ".join(f"{h:>{w}}" for h, w, _ in cols))
    for row in rows:
        if len(row) == 4:  # a run that failed, was killed or did not start
            print(f"{row[0]:<12} {row[1]:<9} {row[2]:<16} {row[3]:>9}")
            continue
        print(f"{row[0]:<12} {row[1]:<9} {row[2]:<16} {row[3]:>9.1f} {row[4]:>9.0f} "
              + " ".join(f"{cell(row):>{w}}" for _, w, cell in cols))
    print(footer)
    for note in notes:
        print("  " + note)
    if stopped:
        print(f"stopped at the deadline ({a.deadline_s:.0f} s): later runs not started (rows 'not run' / missing)")
    if failed:
        print(f"some runs failed (rows 'failed'; their output in {log})")

    if not a.no_scaling and not cuda and not stopped:
        name = a.configs.split(",")[0]
        preset = PRESETS.get(name, name)
        _, h5 = make_data(a.build, a.data, preset_vocab(preset), a.python, log)
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
    write_json(a.json, raw)
    shutil.rmtree(work, ignore_errors=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
