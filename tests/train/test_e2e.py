#!/usr/bin/env python3
"""End-to-end checks of the real binaries under mpiexec (driven by CTest).

  loss_falls   2 ranks train tiny_llama on prepared SOTU text; the loss falls. The run
               calibrates its own device profile before its first step
               (device_profile=calibrate) and its run log holds the prediction made
               with the profile it measured.
  dp_equal     1 rank x batch 2B, 2 ranks x batch B, 1 rank x batch B x accum 2, and
               2 ranks x batch B/2 x accum 2 under ZeRO-1 and FSDP (with and without
               prefetch) see the same data
               (world-size-independent order) and must give the same per-iteration
               loss and gradient norm and the same final eval losses (fp32
               tolerance): the parallel strategy changes nothing. FSDP's waits
               inside forward/backward show up as communication_ms.
  refusals     bad input and settings this build or device cannot run (use_cuda_graphs=True
               on a CPU or with float16) fail with a message naming the key/file.
  precision    float32, bfloat16 and float16 (dynamic loss scaling) train the same
               model from the same data to nearly the same losses; float16's run
               log records its loss scale.
  bf16_params  param_dtype=bfloat16 (bf16 parameters, fp32 masters) tracks the
               fp32-parameter loss curve over 300 iterations: within 1% on the mean of
               three seeds, 2% on each.
  stalled_rank one of 2 ranks is stopped (SIGSTOP) mid-run: the watchdog ends the
               job within collective_timeout_s + a margin, naming that rank.
  config_errors  a directory as the config file, a key set twice in one file, and
               max_iters=0 (no iteration ran: no loss printed, nothing evaluated).
  document_masking  short JSONL documents packed into each sequence: training with
               document_masking=true through the real binaries (the loss falls, and
               differs from the unmasked run's from the first iteration); data
               without an EOS (a nanoGPT token stream) is refused naming the key.
  early_split  a val split that is empty or shorter than block_size + 1 fails at
               start-up, before any training work.
  phases       2 ranks, rank 1 arriving 300 ms late at every loss allreduce
               (LLMTRAIN_TEST_SLOW_LOSS_REDUCE): rank 0's wait there is exposed
               communication, not time outside the phases; the phases and `other`
               still sum to the step.
  host_reads   a step that does not log never reads a value on the host (issue 46): 2 ranks
               with log_interval=4 and profile_steps=1-2: the traces of steps 1 and 2
               hold no aten::item / _local_scalar_dense; every step is still in the
               run log, its loss and gradient norm bit for bit those of the same run
               with log_interval=1 (recorded at each step); the console prints
               iterations 0, 4 and 5 only.
  graph_twin   use_cuda_graphs' step (static batch buffers, the learning rate as a device
               tensor, the step's values in a fixed slot; train/graph_step.hpp) run without
               capture (LLMTRAIN_TEST_GRAPH_STEP=plain, its CPU twin) gives bit for bit the
               losses, gradient norms, eval losses and final parameters (export_hf bytes) of
               the normal step: 1 and 2 ranks, accumulation 2, clipping that fires, a warm-up
               learning rate, and gradient_log_interval iterations (the host step) between.
  run_log_full_disk  out_dir on a small tmpfs that fills up: the run ends with the
               OS error naming the run log, whose last complete version stays
               readable and no temporary file is left (root; 77 where mounting is
               not allowed).

Usage: test_e2e.py BUILD_DIR SOURCE_DIR MPIEXEC CASE
"""
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "."))
import e2e_common  # noqa: E402  (setup, run, mpi shared by the end-to-end scripts)

case = sys.argv[4]
work = e2e_common.setup(sys.argv, "e2e_" + case)
build, source, mpiexec, bin_dir = e2e_common.build, e2e_common.source, e2e_common.mpiexec, e2e_common.bin_dir
run, mpi, prepare = e2e_common.run, e2e_common.mpi, e2e_common.prepare
CPU = e2e_common.CPU  # several ranks, no GPU needed: --device=cpu


def train(n, data, out, *extra):
    cfg = os.path.join(source, "inputs", "tiny_llama.cfg")
    p = run(mpi(n, os.path.join(bin_dir, "llmtrain"), cfg, f"--data_dir={data}", f"--out_dir={out}", CPU, *extra))
    logs = sorted(glob.glob(os.path.join(work, out, "run_*.json")))
    assert len(logs) == 1, f"expected one run log in {out}, found {logs}\n{p.stdout}"
    with open(logs[0]) as f:
        return json.load(f)


def close(a, b, rtol=2e-4, atol=1e-5):
    return abs(a - b) <= atol + rtol * abs(b)


if case == "loss_falls":
    data = prepare()
    log = train(2, data, "out", "--max_iters=60", "--eval_interval=30", "--eval_iters=5", "--log_interval=20",
                "--device_profile=calibrate")
    pred = log["startup_info"]["prediction"]
    prof = pred.get("profile", {})
    print(f"prediction with the profile this run measured: {pred.get('step_time_s')} s/step, profile "
          f"{prof.get('name')!r} ({prof.get('source')!r}), launch_us {prof.get('launch_us')}")
    assert prof.get("source", "").startswith("calibrate: measured by this run"), pred
    assert prof["name"].startswith("calibrated: 2 x cpu"), prof["name"]
    assert pred["device"] == prof["name"], (pred["device"], prof["name"])
    assert pred["step_time_s"] > 0 and pred["phases"]["forward_backward_s"] > 0, pred
    assert prof["launch_us"] > 0 and prof["gemm_tflops"], prof  # measured here, at the model's own shapes
    with open(os.path.join(work, "out", "device_profile.json")) as f:
        assert json.load(f)["launch_us"] == prof["launch_us"], "the profile file differs from the one predicted with"
    assert abs(log["summary"]["predicted_step_time_s"] - pred["step_time_s"]) < 1e-12, log["summary"]
    its = log["training_iterations"]
    evals = log["eval_results"]
    assert log["startup_info"]["config"]["world_size"] == 2
    assert len(its) == 60, len(its)
    first, last = its[0]["loss"], sum(r["loss"] for r in its[-5:]) / 5
    print(f"loss: iter 0 {first:.4f} -> last 5 mean {last:.4f}; evals {evals}")
    assert first > 5.0, "initial loss should be near ln(256) = 5.55"
    assert last < first - 1.5, "training loss did not fall"
    assert len(evals) == 2 and evals[1]["val_loss"] < evals[0]["val_loss"] < first

elif case == "dp_equal":
    data = prepare()
    common = ["--max_iters=8", "--eval_interval=8", "--eval_iters=4", "--log_interval=1", "--warmup_iters=2",
              "--learning_rate=3e-3", "--grad_clip=0.5", "--dataloader_num_workers=1"]
    runs = {
        "1 rank x batch 8": train(1, data, "r1", "--batch_size=8", *common),
        "2 ranks x batch 4": train(2, data, "r2", "--batch_size=4", *common),
        "1 rank x batch 4 x accum 2": train(1, data, "r1a", "--batch_size=4", "--gradient_accumulation_steps=2",
                                            *common),
        "2 ranks x batch 2 x accum 2, ZeRO-1": train(2, data, "rz", "--batch_size=2", "--gradient_accumulation_steps=2",
                                                     "--use_zero1=True", *common),
        "2 ranks x batch 2 x accum 2, FSDP": train(2, data, "rf", "--batch_size=2", "--gradient_accumulation_steps=2",
                                                   "--use_fsdp=True", *common),
        "2 ranks x batch 2 x accum 2, FSDP without prefetch": train(
            2, data, "rfn", "--batch_size=2", "--gradient_accumulation_steps=2", "--use_fsdp=True",
            "--fsdp_prefetch=False", *common),
    }
    ref_name, ref = next(iter(runs.items()))
    ok = True
    for name, log in runs.items():
        for a, b in zip(log["training_iterations"], ref["training_iterations"]):
            for key in ("loss", "grad_norm"):
                if not close(a[key], b[key]):
                    ok = False
                    print(f"{name}: iter {a['iter']} {key} {a[key]!r} != {ref_name} {b[key]!r}")
        ea, eb = log["eval_results"][-1], ref["eval_results"][-1]
        for key in ("train_loss", "val_loss"):
            if not close(ea[key], eb[key]):
                ok = False
                print(f"{name}: final {key} {ea[key]!r} != {ref_name} {eb[key]!r}")
        print(f"{name}: final val loss {ea['val_loss']:.6f}, last train loss "
              f"{log['training_iterations'][-1]['loss']:.6f}")
    assert ok, "data-parallel runs disagree"
    for name, log in runs.items():
        comm = [r["communication_ms"] for r in log["training_iterations"]]
        print(f"{name}: communication_ms per iteration {[round(c, 3) for c in comm]}")
    # FSDP waits for parameter gathers inside forward/backward and for the norm's
    # allreduce in the optimizer step: the trainer must report those waits as
    # communication, well above what a single rank spends there (it has nothing
    # to wait for).
    def mean_comm(log):
        its = log["training_iterations"]
        return sum(r["communication_ms"] for r in its) / len(its)
    alone = mean_comm(runs["1 rank x batch 8"])
    for name in ("2 ranks x batch 2 x accum 2, FSDP", "2 ranks x batch 2 x accum 2, FSDP without prefetch"):
        assert mean_comm(runs[name]) > 2 * alone, \
            f"{name}: communication_ms {mean_comm(runs[name]):.3f} is not above 1 rank's {alone:.3f}"
    # The clipping threshold is low enough to fire: the comparison covers the global norm.
    assert any(r["grad_norm"] > 0.5 for r in ref["training_iterations"])

elif case == "refusals":
    data = prepare()
    cfg = os.path.join(source, "inputs", "tiny_llama.cfg")
    llm = os.path.join(bin_dir, "llmtrain")
    cases = [
        ([llm, cfg, f"--data_dir={data}", CPU, "--batch_szie=3"], "did you mean 'batch_size'"),
        ([llm, cfg, f"--data_dir={data}", CPU, "--dtype=fp8"], "float32, bfloat16, float16"),
        ([llm, cfg, "--data_dir=/nonexistent/data", CPU], "/nonexistent/data"),
        ([llm, cfg, f"--data_dir={data}", CPU, "--use_cuda_graphs=True"],
         "config key 'use_cuda_graphs' = True captures the training step in a CUDA graph: it needs a CUDA device"),
        ([llm, cfg, f"--data_dir={data}", CPU, "--use_cuda_graphs=True", "--dtype=float16"],
         "config key 'use_cuda_graphs' = True cannot be used with dtype=float16"),
        ([llm, cfg, f"--data_dir={data}", CPU, "--block_size=2000000"], "block_size=2000000 is too large"),
        ([llm, cfg, f"--data_dir={data}", CPU, "--device_profile=h100_sxn"],
         "config key 'device_profile': device profile 'h100_sxn'"),
    ]
    if not os.path.exists("/dev/nvidia0"):  # a machine without a GPU refuses device=cuda in one line
        cases.append(([llm, cfg, f"--data_dir={data}", "--device=cuda"], "no CUDA device is visible"))
    for cmd, expect in cases:
        for n in (1, 2):
            p = run(mpi(n, *cmd), expect_ok=False)
            if p.returncode == 0 or expect not in p.stdout:
                print(p.stdout)
                sys.exit(f"FAILED: {' '.join(cmd[2:])} on {n} rank(s): expected an error containing {expect!r}")
    print("every bad input refused with a message naming it")
elif case == "stop_signal":
    # SIGUSR1 (Slurm's pre-emption warning, forwarded by mpirun to the ranks) ends
    # the run after the current iteration with a checkpoint and a complete run
    # log, on every rank (tests/train/test_checkpoint.py resumes from it).
    import signal
    import time
    data = prepare()
    cfg = os.path.join(source, "inputs", "tiny_llama.cfg")
    p = subprocess.Popen(mpi(2, os.path.join(bin_dir, "llmtrain"), cfg, f"--data_dir={data}", "--out_dir=out", CPU,
                             "--max_iters=100000", "--log_interval=1"),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)
    import threading
    watchdog = threading.Timer(180, p.kill)  # never hang the suite if no iteration line appears
    watchdog.start()
    seen = 0
    for line in p.stdout:  # wait until training runs
        if line.startswith("iter "):
            seen += 1
            if seen == 3:
                p.send_signal(signal.SIGUSR1)
                break
    rest = p.communicate(timeout=120)[0]
    watchdog.cancel()
    assert seen == 3, f"no iteration lines seen before exit\n{rest}"
    logs = glob.glob(os.path.join(work, "out", "run_*.json"))
    assert p.returncode == 124, f"exit code {p.returncode} (expected 124: checkpointed, requeue me)\n{rest}"
    with open(logs[0]) as f:
        log = json.load(f)
    n = len(log["training_iterations"])
    assert 3 <= n < 100000, n
    assert any(ev["kind"] == "stopped" and "stopped by signal" in ev["message"] for ev in log["events"]), log["events"]
    assert log["summary"]["status"] == "stopped" and not log["errors"], (log["summary"], log["errors"])
    assert log["summary"], "summary missing after a signal"
    print(f"stopped cleanly after {n} iterations; run log complete")
elif case == "precision":
    data = prepare()
    common = ["--max_iters=40", "--eval_interval=40", "--eval_iters=4", "--log_interval=10", "--warmup_iters=5",
              "--learning_rate=3e-3", "--batch_size=4"]
    logs = {d: train(1, data, "out_" + d, f"--dtype={d}", *common) for d in ("float32", "bfloat16", "float16")}
    ref = logs["float32"]["eval_results"][-1]["val_loss"]
    for d, log in logs.items():
        its = log["training_iterations"]
        val = log["eval_results"][-1]["val_loss"]
        print(f"{d}: loss {its[0]['loss']:.4f} -> {its[-1]['loss']:.4f}, final val {val:.4f} (float32 {ref:.4f}), "
              f"precision '{log['startup_info']['config']['precision']}'")
        assert its[-1]["loss"] < its[0]["loss"] - 1.0, f"{d}: loss did not fall"
        assert abs(val - ref) / ref < 0.03, f"{d}: final val loss {val} is not within 3% of float32's {ref}"
    fp16 = logs["float16"]["training_iterations"]
    assert all("loss_scale" in r for r in fp16), "float16 iterations must record their loss scale"
    assert all("loss_scale" not in r for r in logs["bfloat16"]["training_iterations"])
    assert "loss scaling" in logs["float16"]["startup_info"]["config"]["precision"]
    print(f"float16 loss scale {fp16[0]['loss_scale']:g} -> {fp16[-1]['loss_scale']:g}, "
          f"{sum(1 for r in fp16 if r.get('skipped_step'))} skipped step(s)")
elif case == "bf16_params":
    # param_dtype=bfloat16 (bf16 parameters and gradients, fp32 master weights and
    # moments in the sharded AdamW) against fp32 parameters, both under bf16
    # autocast, same data and init: 300 iterations of the tiny model, the loss
    # curve smoothed over 50 iterations tracks within 1% all along, and the final
    # val loss too. ZeRO-1 on 2 ranks with fp32 gradient reductions.
    # Over three seeds: at batch 2 x 64 one pair of curves is chaotic at the 1%
    # level. When RoPE's rounding changed in the last bits (2026-11-28, more
    # accurate in bf16), seed 1337's gap went from 0.44% to 1.39% while seeds 1-4
    # went from 0.66/0.22/0.78/0.39% to 0.33/0.55/0.32/0.39%. So the mean gap of
    # three seeds must be under 1% and each under 2% (a broken bf16 path, e.g.
    # updates below bf16's resolution lost without fp32 masters, is off by far more
    # on every seed).
    data = prepare()
    common = ["--max_iters=300", "--eval_interval=300", "--eval_iters=4", "--log_interval=100", "--warmup_iters=20",
              "--lr_decay_iters=300", "--learning_rate=3e-3", "--batch_size=2", "--block_size=64", "--dtype=bfloat16",
              "--use_zero1=True"]
    gaps, val_gaps = [], []
    for seed in (1337, 1, 2):
        ref = train(2, data, f"out_fp32_params_{seed}", *common, f"--seed={seed}")
        got = train(2, data, f"out_bf16_params_{seed}", *common, f"--seed={seed}", "--param_dtype=bfloat16")
        assert "fp32 master weights" in got["startup_info"]["config"]["precision"], got["startup_info"]["config"]
        la = [r["loss"] for r in ref["training_iterations"]]
        lb = [r["loss"] for r in got["training_iterations"]]
        assert len(la) == len(lb) == 300, (len(la), len(lb))
        assert la[-1] < la[0] - 1.0 and lb[-1] < lb[0] - 1.0, f"seed {seed}: the loss did not fall"
        worst = 0.0
        for end in range(50, 301, 25):
            a, b = sum(la[end - 50:end]) / 50, sum(lb[end - 50:end]) / 50
            worst = max(worst, abs(a - b) / a)
            print(f"seed {seed}, iterations {end - 50:3d}-{end - 1:3d}: mean loss fp32 params {a:.4f}, "
                  f"bf16 params {b:.4f}")
        va, vb = ref["eval_results"][-1]["val_loss"], got["eval_results"][-1]["val_loss"]
        print(f"seed {seed}: final val loss fp32 params {va:.4f}, bf16 params {vb:.4f}; "
              f"largest smoothed difference {worst:.2%}")
        gaps.append(worst)
        val_gaps.append(abs(va - vb) / va)
    mean_gap, mean_val = sum(gaps) / len(gaps), sum(val_gaps) / len(val_gaps)
    print(f"mean over 3 seeds: largest smoothed difference {mean_gap:.2%}, final val loss {mean_val:.2%}")
    assert mean_gap < 0.01 and max(gaps) < 0.02, \
        f"bf16 parameters: smoothed loss {[f'{g:.2%}' for g in gaps]} away from fp32 parameters' (mean > 1% or one > 2%)"
    assert mean_val < 0.01 and max(val_gaps) < 0.02, \
        f"bf16 parameters: final val loss {[f'{g:.2%}' for g in val_gaps]} away (mean > 1% or one > 2%)"
elif case == "stalled_rank":
    # Issue 19, part 1: before the watchdog the other rank spun at 99% CPU forever.
    import signal
    import threading
    import time
    data = prepare()
    cfg = os.path.join(source, "inputs", "tiny_llama.cfg")
    limit = 20
    p = subprocess.Popen(mpi(2, os.path.join(bin_dir, "llmtrain"), cfg, f"--data_dir={data}", "--out_dir=out", CPU,
                             "--max_iters=100000", "--eval_interval=100000", "--log_interval=1",
                             f"--collective_timeout_s={limit}"),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)

    def children(pid):
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                            out.append(int(d))
                except (OSError, ValueError, IndexError):
                    pass
        return out

    def rank_of(pid):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                for kv in f.read().split(b"\0"):
                    if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
                        return int(kv.split(b"=", 1)[1])
        except OSError:
            pass
        return None

    ranks = {}
    guard = threading.Timer(240, p.kill)  # never hang the suite before the stop
    guard.start()
    try:
        seen, head = 0, []
        for line in p.stdout:
            head.append(line)
            if line.startswith("iter "):
                seen += 1
                if seen == 3:
                    break
        assert seen == 3, "training never started:\n" + "".join(head)
        ranks = {rank_of(c): c for c in children(p.pid)}
        assert 1 in ranks, f"rank 1's process not found among mpirun's children {ranks}"
        os.kill(ranks[1], signal.SIGSTOP)
        t0 = time.monotonic()
        guard.cancel()
        try:
            rest = p.communicate(timeout=limit + 60)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            rest = p.communicate()[0]
            sys.exit(f"FAILED: the job still ran {limit + 60} s after rank 1 was stopped (collective_timeout_s="
                     f"{limit})\n{rest[-3000:]}")
        elapsed = time.monotonic() - t0
    finally:
        guard.cancel()
        for pid in ranks.values():  # never leave a stopped rank behind
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
    print(rest[-2000:])
    assert p.returncode != 0, "the job ended with exit code 0"
    assert "watchdog" in rest and "rank(s) 1 did not arrive" in rest, "no watchdog message naming rank 1"
    # Why: "no heartbeat for N s" once rank 0 has heard from it, "never heard from"
    # when it was stopped before its first heartbeat reached rank 0 (seen under a
    # loaded CI machine); both name the cause.
    assert "no heartbeat" in rest or "never heard from" in rest, "the message does not say why rank 1 did not arrive"
    assert elapsed < limit + 30, f"the job ended {elapsed:.1f} s after the stop, limit {limit} s"
    # The run log records the watchdog's verdict (issue 19 part 8's failed status).
    logs = glob.glob(os.path.join(work, "out", "run_*.json"))
    assert len(logs) == 1, logs
    log = json.load(open(logs[0]))
    assert log["summary"].get("status") == "failed", log["summary"]
    assert "rank(s) 1 did not arrive" in log["summary"].get("error", ""), log["summary"]
    assert log["training_iterations"], "the iterations before the stall were not logged"
    print(f"job ended {elapsed:.1f} s after rank 1 was stopped (collective_timeout_s={limit})")
elif case == "config_errors":
    # Issue 19, part 5.
    data = prepare()
    cfg = os.path.join(source, "inputs", "tiny_llama.cfg")
    llm = os.path.join(bin_dir, "llmtrain")
    os.makedirs(os.path.join(work, "conf.d"))
    p = run([llm, os.path.join(work, "conf.d"), f"--data_dir={data}"], expect_ok=False)
    assert p.returncode != 0 and "is a directory" in p.stdout, p.stdout
    dup = os.path.join(work, "dup.cfg")
    with open(cfg) as f, open(dup, "w") as g:
        g.write(f.read() + "\nbatch_size = 3\n")
    p = run([llm, dup, f"--data_dir={data}"], expect_ok=False)
    n = sum(1 for _ in open(dup))
    assert p.returncode != 0 and "'batch_size' is set twice" in p.stdout and f"{dup}:{n}" in p.stdout, p.stdout
    # max_iters=0: no loss is printed (it used to say "final train loss 0.0000") and nothing is evaluated.
    p = run(mpi(2, llm, cfg, f"--data_dir={data}", "--out_dir=out0", CPU, "--max_iters=0"))
    assert "no iteration ran (max_iters=0)" in p.stdout, p.stdout
    assert "final train loss" not in p.stdout and "eval at" not in p.stdout, p.stdout
    log = json.load(open(glob.glob(os.path.join(work, "out0", "run_*.json"))[0]))
    assert log["training_iterations"] == [] and log["eval_results"] == [], log
    print("a directory, a duplicate key and max_iters=0 are each named")
    # Issue 49: each refused in one line, before any training (a single rank: nothing starts).
    bom = os.path.join(work, "bom.cfg")
    with open(cfg, "rb") as f, open(bom, "wb") as g:
        g.write(b"\xef\xbb\xbf" + f.read())
    p = run([llm, bom, f"--data_dir={data}", "--print_config"])
    assert "vocab_size = 256" in p.stdout, p.stdout
    for args, needle in [
        (["--describe_format=json"], "--describe_format is an option of --describe"),
        (["--describe_memory_gib=80"], "--describe_memory_gib is an option of --describe"),
        (["--describe", "--describe_ranks_per_node=16", "--describe_world_size=4"],
         "--describe_ranks_per_node=16 exceeds the world size 4"),
        (["--describe", "--describe_memory_gib=1e12"], "more than 2^40 sequences"),
        (["--eval_full=True", f"--data_mix=1 {data} 1 {data}"], "config key 'eval_full'"),
        (["--activation_checkpointing=selective", "--activation_checkpointing_every=5"],
         "'activation_checkpointing_every' (5) exceeds n_layer (4)"),
        (["--describe", "--activation_checkpointing=selective", "--activation_checkpointing_every=5"],
         "'activation_checkpointing_every' (5) exceeds n_layer (4)"),
    ]:
        p = run([llm, cfg, f"--data_dir={data}", "--out_dir=never", CPU, *args], expect_ok=False)
        errors = [ln for ln in p.stdout.splitlines() if "error" in ln.lower()]
        assert p.returncode != 0 and any(needle in ln for ln in errors), (args, p.stdout)
        assert not os.path.exists(os.path.join(work, "never")), f"{args}: a run started"
    # --data_mix= clears a config file's blend (the run trains on data_dir).
    mixcfg = os.path.join(work, "mix.cfg")
    with open(cfg) as f, open(mixcfg, "w") as g:
        g.write(f.read() + f"\ndata_mix = 1 {os.path.join(work, 'no_such_dir')}\n")
    p = run([llm, mixcfg, f"--data_dir={data}", "--data_mix=", "--print_config"])
    assert any(ln.rstrip() == "data_mix =" for ln in p.stdout.splitlines()), p.stdout
    print("issue 49: a BOM, --describe_* without --describe, ranks per node, 1e12 GiB, eval_full with data_mix, "
          "selective checkpointing past n_layer, --data_mix= : each handled")
elif case == "document_masking":
    # Short documents (2 sentences of SOTU speeches, one JSONL line each) packed into block_size 128:
    # most windows hold several EOS boundaries.
    speeches = e2e_common.sotu_files(source)[-4:]
    docs = []
    for path in speeches:
        sentences = open(path, encoding="utf-8").read().split(". ")
        docs += [". ".join(sentences[i:i + 2]) for i in range(0, len(sentences), 2)]
    jsonl = os.path.join(work, "docs.jsonl")
    with open(jsonl, "w") as f:
        f.writelines(json.dumps({"text": d}) + "\n" for d in docs if d.strip())
    data = os.path.join(work, "data")
    run(mpi(2, os.path.join(bin_dir, "llmtrain-prepare"), "--out_dir", data, "--tokenizer", "byte",
            "--val_fraction", "0.1", "--no_progress", jsonl))
    common = ["--max_iters=40", "--eval_interval=40", "--eval_iters=4", "--log_interval=10"]
    masked = train(2, data, "masked", "--document_masking=True", *common)
    plain = train(2, data, "plain", *common)
    assert masked["startup_info"]["config"]["document_masking"] is True, masked["startup_info"]["config"]
    its = masked["training_iterations"]
    first, last = its[0]["loss"], sum(r["loss"] for r in its[-5:]) / 5
    print(f"document_masking: loss iter 0 {first:.4f} -> last 5 mean {last:.4f}; "
          f"without it iter 0 {plain['training_iterations'][0]['loss']:.4f}")
    assert last < first - 1.0, "training loss did not fall with document_masking"
    # The same weights and batch: the masked loss differs (other tokens in each context).
    assert not close(first, plain["training_iterations"][0]["loss"], rtol=1e-6, atol=0), (first, plain)
    # A raw token stream records no EOS: refused in one line naming the key.
    nano = os.path.join(work, "nano")
    os.makedirs(nano)
    tokens = open(jsonl, "rb").read()
    for name in ("train.bin", "val.bin"):
        with open(os.path.join(nano, name), "wb") as f:
            f.write(b"".join(bytes([b, 0]) for b in tokens))  # uint16 little-endian byte ids
    nano_data = os.path.join(work, "nano_data")
    run(mpi(1, os.path.join(bin_dir, "llmtrain-prepare"), "--out_dir", nano_data, "--from_nanogpt", nano,
            "--vocab_size", "256", "--no_progress"))
    p = run(mpi(1, os.path.join(bin_dir, "llmtrain"), os.path.join(source, "inputs", "tiny_llama.cfg"),
                f"--data_dir={nano_data}", "--out_dir=nano_out", CPU, "--document_masking=True", "--max_iters=2"),
            expect_ok=False)
    line = next((ln for ln in p.stdout.splitlines() if "document_masking" in ln and "EOS" in ln), "")
    assert p.returncode != 0 and line, p.stdout
    print("  " + line.strip())
elif case == "early_split":
    # Issue 19, part 6: the val split was checked only at the first evaluation.
    import array
    cfg = os.path.join(source, "inputs", "tiny_llama.cfg")
    llm = os.path.join(bin_dir, "llmtrain")
    prep = os.path.join(bin_dir, "llmtrain-prepare")
    nano = os.path.join(work, "nano")
    os.makedirs(nano)
    for split, n in (("train", 20000), ("val", 50)):  # val: 50 tokens < block_size + 1 = 129
        array.array("H", [(i * 7) % 256 for i in range(n)]).tofile(open(os.path.join(nano, split + ".bin"), "wb"))
    run(mpi(1, prep, "--out_dir", os.path.join(work, "short"), "--from_nanogpt", nano, "--vocab_size", "256",
            "--no_progress"))
    files = e2e_common.sotu_files(source)
    run(mpi(1, prep, "--out_dir", os.path.join(work, "noval"), "--val_fraction", "0", "--no_progress",
            *files[-3:]))
    for data, expect in (("short", "block_size=128 is too large for split 'val'"),
                         ("noval", "split 'val' of data directory")):
        p = run(mpi(2, llm, cfg, f"--data_dir={os.path.join(work, data)}", "--out_dir=out_" + data, CPU,
                    "--max_iters=50", "--eval_interval=40", "--log_interval=1"), expect_ok=False)
        assert p.returncode != 0 and expect in p.stdout, p.stdout
        assert "iter 0/" not in p.stdout, f"training ran before the val split was checked:\n{p.stdout}"
    print("short and empty val splits refused at start-up")
elif case == "run_log_full_disk":
    # Issue 19, part 3: every file through the one atomic writer; a full disk is an error naming the file.
    if os.geteuid() != 0:
        print("SKIP: mounting a tmpfs needs root")
        sys.exit(77)
    data = prepare()
    mnt = os.path.join(work, "small")
    os.makedirs(mnt)
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", mnt], capture_output=True, text=True)
    if m.returncode != 0:
        print(f"SKIP: cannot mount a tmpfs here: {m.stderr.strip()}")
        sys.exit(77)
    try:
        with open(os.path.join(mnt, "filler"), "wb") as f:  # leave about 96 KiB
            f.write(b"x" * (512 - 96) * 1024)
        cfg = os.path.join(source, "inputs", "tiny_llama.cfg")
        p = run(mpi(2, os.path.join(bin_dir, "llmtrain"), cfg, f"--data_dir={data}", f"--out_dir={mnt}/out", CPU,
                    "--max_iters=1000000", "--eval_interval=1000000", "--log_interval=1000",
                    "--batch_size=2", "--block_size=32"), expect_ok=False)  # the 10 s rewrite fills the disk
        tail = p.stdout[-3000:]
        assert p.returncode != 0, tail
        assert "No space left on device" in p.stdout, tail
        logs = glob.glob(os.path.join(mnt, "out", "run_*.json"))
        assert len(logs) == 1 and logs[0] in p.stdout, f"the error does not name the run log {logs}:\n{tail}"
        with open(logs[0]) as f:
            log = json.load(f)  # the last complete version
        left = [n for n in os.listdir(os.path.join(mnt, "out")) if ".tmp." in n]
        assert not left, f"temporary files left: {left}"
        print(f"full disk after {len(log['training_iterations'])} logged iterations: error names the run log, "
              f"its last version is complete JSON, no temporary file left")
    finally:
        subprocess.run(["umount", "-l", mnt])
elif case == "phases":
    data = prepare()
    delay_ms = 300
    cfg = os.path.join(source, "inputs", "tiny_llama.cfg")
    run(mpi(2, os.path.join(bin_dir, "llmtrain"), cfg, f"--data_dir={data}", "--out_dir=out", CPU, "--max_iters=6",
            "--eval_interval=100", "--eval_iters=1", "--log_interval=1"),
        env={"LLMTRAIN_TEST_SLOW_LOSS_REDUCE": f"1:{delay_ms}"})
    with open(sorted(glob.glob(os.path.join(work, "out", "run_*.json")))[0]) as f:
        its = json.load(f)["training_iterations"]
    for r in its:
        phases = r["data_ms"] + r["forward_backward_ms"] + r["communication_ms"] + r["optimizer_ms"]
        print(f"iter {r['iter']}: dt {r['dt_ms']:.1f} ms = phases {phases:.1f} + other {r['other_ms']:.1f}; "
              f"communication {r['communication_ms']:.1f} ms")
        assert abs(phases + r["other_ms"] - r["dt_ms"]) < 0.05 * r["dt_ms"] + 1.0, r
        # rank 0 waited ~delay_ms for rank 1 in the loss allreduce: communication holds it
        assert r["communication_ms"] > 0.8 * delay_ms, r
        assert r["other_ms"] < 0.5 * delay_ms, r

elif case == "host_reads":
    data = prepare()
    cfg = os.path.join(source, "inputs", "tiny_llama.cfg")
    common = [f"--data_dir={data}", CPU, "--max_iters=6", "--eval_interval=100", "--eval_iters=1"]
    p = run(mpi(2, os.path.join(bin_dir, "llmtrain"), cfg, "--out_dir=out", *common, "--log_interval=4",
                "--profile_steps=1-2"))
    printed = [int(line.split("iter ")[1].split("/")[0]) for line in p.stdout.splitlines()
               if line.startswith("iter ") and "| loss" in line]
    assert printed == [0, 4, 5], f"console iterations {printed}, expected [0, 4, 5]\n{p.stdout}"
    # Top-level reads only (not inside another op: the CPU _fused_adamw_ reads each step count with item(), a GPU
    # kernel reads device memory; docs/performance.md), as llmtrain-report --profile counts them.
    for r in (0, 1):
        path = os.path.join(work, "out", "profile", f"rank{r}_steps1-2.pt.trace.json")
        events = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
        steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
        assert sorted(e["name"] for e in steps) == ["ProfilerStep#1", "ProfilerStep#2"], steps
        ops = [e for e in events if e.get("cat") == "cpu_op" and e["name"].startswith(("aten::", "llmtrain::"))]

        def inside(a, b):  # a inside b
            return a is not b and a["tid"] == b["tid"] and b["ts"] <= a["ts"] and a["ts"] + a["dur"] <= b["ts"] + b["dur"]
        for st in steps:
            reads = [e["name"] for e in ops if inside(e, st) and e["name"] in ("aten::item", "aten::_local_scalar_dense")
                     and not any(inside(e, o) for o in ops if o["name"] not in ("aten::item",))]
            assert not reads, f"rank {r} {st['name']}: host reads in a step that does not log: {reads}"
            print(f"rank {r} {st['name']}: no host read")
    rep = run([os.path.join(bin_dir, "llmtrain-report"), "--profile", os.path.join(work, "out", "profile")]).stdout
    print(rep)
    syncs = [line.strip() for line in rep.splitlines() if "host synchronizations" in line]
    assert len(syncs) == 4 and all(line.startswith("host synchronizations: 0") for line in syncs), syncs
    deferred = json.load(open(sorted(glob.glob(os.path.join(work, "out", "run_*.json")))[0]))
    each = train(2, data, "each", "--max_iters=6", "--eval_interval=100", "--eval_iters=1", "--log_interval=1")
    got = [(r["iter"], r["loss"], r["grad_norm"]) for r in deferred["training_iterations"]]
    want = [(r["iter"], r["loss"], r["grad_norm"]) for r in each["training_iterations"]]
    assert got == want, f"recorded at log points: {got}\nrecorded at each step: {want}"
    assert all(r["dt_ms"] > 0 and r["tokens_per_sec"] > 0 for r in deferred["training_iterations"]), deferred
    print(f"6 steps recorded at log points 0, 4 and 5, bit for bit as when recorded at each step: {got}")

elif case == "graph_twin":
    data = prepare()
    common = ["--max_iters=7", "--eval_interval=7", "--eval_iters=2", "--log_interval=1", "--warmup_iters=3",
              "--learning_rate=3e-3", "--grad_clip=0.5", "--gradient_accumulation_steps=2",
              "--gradient_log_interval=3"]
    ok = True
    for n, batch in ((1, 4), (2, 2)):
        ok_before = ok
        normal = train(n, data, f"normal{n}", f"--batch_size={batch}", f"--export_hf=hf_normal{n}", *common)
        cfg = os.path.join(source, "inputs", "tiny_llama.cfg")
        p = run(mpi(n, os.path.join(bin_dir, "llmtrain"), cfg, f"--data_dir={data}", f"--out_dir=twin{n}", CPU,
                    f"--batch_size={batch}", f"--export_hf=hf_twin{n}", *common),
                env={"LLMTRAIN_TEST_GRAPH_STEP": "plain"})
        twin = json.load(open(sorted(glob.glob(os.path.join(work, f"twin{n}", "run_*.json")))[0]))
        assert twin["startup_info"]["cuda_graphs"]["mode"] == "plain", twin["startup_info"].get("cuda_graphs")
        assert twin["summary"]["cuda_graph_replays"] == 0, twin["summary"]
        assert "cuda_graphs" not in normal["startup_info"], normal["startup_info"]["cuda_graphs"]
        got = [(r["iter"], r["loss"], r["grad_norm"]) for r in twin["training_iterations"]]
        want = [(r["iter"], r["loss"], r["grad_norm"]) for r in normal["training_iterations"]]
        if got != want or len(got) != 7:
            ok = False
            print(f"{n} rank(s): the twin's (iter, loss, grad_norm) {got}\n  the normal step's {want}")
        if twin["eval_results"] != normal["eval_results"]:
            ok = False
            print(f"{n} rank(s): eval {twin['eval_results']} != {normal['eval_results']}")
        weights = sorted(glob.glob(os.path.join(work, f"hf_normal{n}", "*.safetensors")))
        assert weights, f"no exported weights under hf_normal{n}"
        for w in weights:
            t = os.path.join(work, f"hf_twin{n}", os.path.basename(w))
            if open(w, "rb").read() != open(t, "rb").read():
                ok = False
                print(f"{n} rank(s): final parameters differ: {w} != {t}")
        assert any(r["grad_norm"] > 0.5 for r in normal["training_iterations"]), "clipping never fired"
        if ok == ok_before:
            print(f"{n} rank(s), accum 2: 7 steps bit for bit, eval {twin['eval_results'][-1]}, weights identical")
    assert ok, "the graph-ready step differs from the normal step"

elif case == "memory_check":
    # A micro-batch predicted to need ~192 GiB per rank is refused at start-up,
    # before anything large is allocated: one line (predicted against available,
    # the largest micro-batch that fits with and without activation
    # checkpointing), within seconds, not an allocator's stack trace.
    import time
    data = prepare()
    cfg = os.path.join(source, "inputs", "tiny_llama.cfg")
    llm = e2e_common.llmtrain()

    def describe(*extra):
        p = run([llm, cfg, "--describe", "--describe_format=json", "--describe_world_size=1", *extra])
        lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
        assert len(lines) == 1, f"--describe_format=json printed {len(lines)} lines:\n{p.stdout}"
        return json.loads(lines[0])

    gib = 1024.0 ** 3
    peak = lambda b: describe(f"--batch_size={b}")["memory"]["peak_bytes_per_rank"]
    p1, p2 = peak(1), peak(2)
    batch = int(round((192 * gib - p1) / (p2 - p1))) + 1
    need = peak(batch)
    assert 180 * gib < need < 200 * gib, need / gib
    avail = describe(f"--batch_size={batch}", f"--describe_memory_gib=24")["memory"]
    assert 0 < avail["max_batch_size"] < batch, avail
    for n in (1, 2):
        t0 = time.time()
        cmd = [llm, cfg, f"--data_dir={data}", "--out_dir=out", CPU, f"--batch_size={batch}"]
        p = run(mpi(n, *cmd) if n > 1 else cmd, expect_ok=False, timeout=120)
        took = time.time() - t0
        ours = [ln for ln in p.stdout.splitlines() if "memory_check:" in ln]
        assert p.returncode != 0 and ours, p.stdout
        assert took < 60, f"refused after {took:.0f} s"
        line = ours[0]
        assert "predicted peak 1" in line and "exceeds the" in line and "MemAvailable" in line, line
        assert "without activation checkpointing" in line and "with full activation checkpointing" in line, line
        assert "Traceback" not in p.stdout and "bad_alloc" not in p.stdout and "allocate" not in p.stdout, p.stdout
        if n == 1:  # run alone (no mpiexec banner): the one line is all it prints
            printed = [ln for ln in p.stdout.splitlines() if ln.strip()]
            assert printed == [line], p.stdout
        print(f"{n} rank(s): refused in {took:.1f} s: {line}")
    # (memory_check=False skipping the check is tested in test_metrics'
    # DeviceMemory.RefusalLine: a run of 192 GiB cannot be let through here.)
    # The tiny preset's own batch is not refused, on 2 ranks.
    p = run(mpi(2, llm, cfg, f"--data_dir={data}", "--out_dir=out2", CPU, "--max_iters=2", "--eval_iters=1"))
    assert "memory_check:" not in p.stdout, p.stdout
else:
    sys.exit(f"unknown case {case}")
print("PASS")
