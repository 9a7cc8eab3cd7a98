#!/usr/bin/env python3
"""HDF5 checkpoints through the real binaries (driven by CTest).

  resume_exact    N + resume + N iterations equal 2N straight, bit for bit (losses,
                  gradient norms, final evaluation), at 1 and 2 ranks, for DDP,
                  ZeRO-1, FSDP and FSDP with bf16 parameters (fp32 masters saved),
                  with dropout on (the RNG state is restored).
  resume_reshape  a checkpoint of 2 ranks (DDP) resumes on 3 (ZeRO-1), one of 3
                  (FSDP) on 1 (DDP), one of 1 (FSDP, bf16 parameters) on 2 (ZeRO-1),
                  with the same global batch: the data order is kept, so the losses
                  follow the uninterrupted run (fp32 tolerance; bf16's for bf16).
  eval_only       init_from=resume eval_only=True loads, evaluates and exits: the
                  same numbers as the training run's final evaluation.
  signal          SIGUSR1 mid-run: every rank finishes the iteration, a checkpoint
                  is written, the exit code is 124; resuming finishes with the
                  losses of an uninterrupted run.
  kill_in_save    one rank SIGKILLed half way through writing a checkpoint: the
                  previous checkpoint stays `latest` and loads; the resumed run
                  equals an uninterrupted one.
  async           checkpoint_async=True with a save every iteration: 3 + resume + 3
                  iterations equal 6 straight, bit for bit, for DDP, ZeRO-1 and FSDP;
                  from 2 ranks onto 1 it resumes bit for bit as from a synchronous
                  save (and the straight run within fp32 tolerance); the run log records each save as
                  asynchronous; a rank SIGKILLed half way through a background
                  write leaves the previous checkpoint `latest` and loadable, and
                  keep_last deletes older checkpoints only after a newer one is complete.
  nan             a NaN loss skips the update on every rank and is counted;
                  max_bad_steps in a row stops the run naming the last good checkpoint.
  bad_input       a model that does not match the checkpoint, a truncated newest
                  checkpoint (falls back with a warning), a missing dataset, `latest`
                  naming a missing file, no checkpoint at all, an unwritable out_dir,
                  a full disk during a save (a small tmpfs): one-line errors naming the
                  file or tensor; an older checkpoint is never lost.
  checksum        every dataset's crc32c: llmtrain-checkpoint verify passes a sound
                  directory; one flipped bit in a tensor is named (file and dataset) by
                  verify and by resume, which falls back to the previous checkpoint; a
                  negative iteration attribute the same; a file without checksums
                  (an older llmtrain's) loads with a note. 2 ranks, ZeRO-1 (each rank
                  writes and reads its own slices; the checksums combine). `latest`
                  naming a file outside the directory and a directory named like a
                  checkpoint fail verify, named.
  disk_full       2 ranks on a small tmpfs: a save that cannot fit is refused before
                  writing (free and needed bytes named); the disk filling up half way
                  through a save (the disk_full_during_save fault point on rank 1)
                  fails the save on both ranks together, the .tmp goes, training goes
                  on with a warning and the next interval saves; a final save that
                  fails makes the run exit non-zero. The fill half way again on a
                  small ext4 loop image (direct I/O; a note where loop mounts fail).
  resume_changes  a resume with another learning_rate / grad_clip lists them (console,
                  run log resume_changes); another n_embd is refused naming the key;
                  another data_dir (data_mix) is refused unless resume_allow=data_dir (data_mix),
                  and so is the same data_mix file with other weights (listed with both
                  blends when allowed); weights of 1e308 give shares of 1/2, not 0.

Usage: test_checkpoint.py BUILD_DIR SOURCE_DIR MPIEXEC CASE
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common as e  # noqa: E402

case = sys.argv[4]
work = e.setup(sys.argv, "ckpt_" + case)
COMMON = ["--eval_interval=1000", "--eval_iters=2", "--log_interval=1", "--warmup_iters=2", "--learning_rate=3e-3",
          "--grad_clip=0.5"]


def ckpt_dir(out):
    return os.path.join(work, out, "checkpoints")


def latest(out):
    with open(os.path.join(ckpt_dir(out), "latest")) as f:
        return f.read().strip()


def expect_error(p, *needles):
    text = p.stdout
    if p.returncode == 0 or not all(n in text for n in needles):
        print(text)
        sys.exit(f"FAILED: expected a failure whose message contains {needles}, got exit {p.returncode}")
    line = next(l for l in text.splitlines() if needles[0] in l)
    print(f"  refused as expected: {line.strip()[:220]}")


if case == "resume_exact":
    data = e.prepare()
    bad = []
    for n in (1, 2):
        for strat in ("ddp", "zero1", "fsdp", "fsdp_bf16"):
            flags = [*COMMON, "--dropout=0.1", "--batch_size=4"]
            if strat == "zero1":
                flags.append("--use_zero1=True")
            if strat.startswith("fsdp"):
                flags.append("--use_fsdp=True")
            if strat.endswith("bf16"):  # bf16 parameters: the checkpoint holds the fp32 masters
                flags += ["--dtype=bfloat16", "--param_dtype=bfloat16"]
            tag = f"{strat}_np{n}"
            e.train(n, data, f"{tag}_full", *flags, "--max_iters=8")
            e.train(n, data, f"{tag}_part", *flags, "--max_iters=4", "--checkpoint_interval=4")
            p, _ = e.train(n, data, f"{tag}_part", *flags, "--max_iters=8", "--init_from=resume")
            assert "resumed from" in p.stdout, p.stdout
            full, part = e.run_logs(f"{tag}_full"), e.run_logs(f"{tag}_part")
            a, b = e.losses(full), e.losses(part)
            with open(full[-1]) as f:
                ea = json.load(f)["eval_results"][-1]
            with open(part[-1]) as f:
                eb = json.load(f)["eval_results"][-1]
            same = a == b and ea["val_loss"] == eb["val_loss"] and ea["train_loss"] == eb["train_loss"]
            print(f"{tag}: {len(b)} iterations over 2 runs, final val {eb['val_loss']:.6f} "
                  f"{'== straight run, bit for bit' if same else 'DIFFERS'}")
            if not same:
                bad.append(tag)
                print("  straight:", a, ea)
                print("  resumed: ", b, eb)
    assert not bad, f"resume is not bit-exact for {bad}"

elif case == "resume_reshape":
    data = e.prepare()
    BF16 = ["--param_dtype=bfloat16", "--dtype=bfloat16"]
    # global batch 12 sequences: 2 x 6, 3 x 4, 1 x 12
    layouts = {
        "2 ranks DDP -> 3 ranks ZeRO-1": ((2, ["--batch_size=6"]), (3, ["--batch_size=4", "--use_zero1=True"])),
        "3 ranks FSDP -> 1 rank DDP": ((3, ["--batch_size=4", "--use_fsdp=True"]), (1, ["--batch_size=12"])),
        # bf16 parameters: the fp32 masters move from 1 rank's FSDP shards into 2 ranks' ZeRO-1 shards
        "1 rank FSDP -> 2 ranks ZeRO-1, bf16 parameters":
            ((1, ["--batch_size=12", "--use_fsdp=True", *BF16]), (2, ["--batch_size=6", "--use_zero1=True", *BF16])),
    }
    for i, (name, ((n1, f1), (n2, f2))) in enumerate(layouts.items()):
        e.train(n1, data, f"straight{i}", *COMMON, *f1, "--max_iters=8")
        e.train(n1, data, f"moved{i}", *COMMON, *f1, "--max_iters=4", "--checkpoint_interval=4")
        p, log = e.train(n2, data, f"moved{i}", *COMMON, *f2, "--max_iters=8", "--init_from=resume")
        assert log["startup_info"]["resumed_from"]["world_size"] == n1, log["startup_info"]["resumed_from"]
        assert log["startup_info"]["config"]["world_size"] == n2
        a, b = e.losses(e.run_logs(f"straight{i}")), e.losses(e.run_logs(f"moved{i}"))
        assert len(a) == len(b) == 8, (len(a), len(b))
        worst = max(abs(x[0] - y[0]) / abs(x[0]) for x, y in zip(a, b))
        print(f"{name}: losses after the move {[round(x[0], 5) for x in b[4:]]}, straight "
              f"{[round(x[0], 5) for x in a[4:]]}, largest relative difference {worst:.2e}")
        # bf16 parameters round the masters anew on each side: bf16's tolerance
        rtol = 1e-2 if BF16[0] in f1 else 2e-4
        for (la, ga), (lb, gb) in zip(a, b):
            assert e.close(la, lb, rtol=rtol) and e.close(ga, gb, rtol=max(rtol, 1e-3)), f"{name}: {a} vs {b}"

elif case == "eval_only":
    data = e.prepare()
    _, trained = e.train(2, data, "out", *COMMON, "--max_iters=6", "--eval_interval=6", "--use_zero1=True")
    final = trained["eval_results"][-1]
    p, log = e.train(2, data, "out", *COMMON, "--init_from=resume", "--eval_only=True", "--use_zero1=True")
    ev = log["eval_results"][-1]
    assert ev["iter"] == 6 and log["training_iterations"] == [], log
    assert ev["val_loss"] == final["val_loss"] and ev["train_loss"] == final["train_loss"], (ev, final)
    print(f"eval_only of iteration 6: val {ev['val_loss']:.6f} == the training run's final evaluation")
    # Nothing to load is an error, not an evaluation of random weights.
    p, _ = e.train(1, data, "empty", *COMMON, "--init_from=resume", "--eval_only=True", expect_ok=False)
    expect_error(p, "no checkpoint in", "checkpoints")
    p, _ = e.train(1, data, "empty", *COMMON, "--eval_only=True", expect_ok=False)
    expect_error(p, "eval_only", "init_from=resume")

elif case == "signal":
    data = e.prepare()
    flags = [*COMMON, "--max_iters=30"]
    e.train(2, data, "straight", *flags)
    cmd = e.mpi(2, e.llmtrain(), os.path.join(e.source, "inputs", "tiny_llama.cfg"), f"--data_dir={data}",
                "--out_dir=stopped", e.CPU, *flags)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)
    watchdog = threading.Timer(180, p.kill)  # never hang the suite
    watchdog.start()
    seen = 0
    for line in p.stdout:
        if line.startswith("iter "):
            seen += 1
            if seen == 5:
                p.send_signal(signal.SIGUSR1)  # mpirun forwards it to every rank
                break
    rest = p.communicate(timeout=120)[0]
    watchdog.cancel()
    assert p.returncode == 124, f"exit code {p.returncode}, expected 124 (checkpointed, requeue me)\n{rest}"
    name = latest("stopped")
    stopped_at = int(name[5:13])
    assert 5 <= stopped_at < 30, name
    with open(e.run_logs("stopped")[-1]) as f:
        log = json.load(f)
    assert len(log["training_iterations"]) == stopped_at and log["checkpoints"][-1]["reason"] == "stop signal", log
    e.train(2, data, "stopped", *flags, "--init_from=resume")
    a, b = e.losses(e.run_logs("straight")), e.losses(e.run_logs("stopped"))
    assert a == b, f"resumed run differs from the straight one\n{a}\n{b}"
    print(f"SIGUSR1 -> checkpoint at iteration {stopped_at}, exit 124 -> resumed -> 30 iterations equal the "
          f"straight run bit for bit")

elif case == "kill_in_save":
    data = e.prepare()
    flags = [*COMMON, "--max_iters=12", "--checkpoint_interval=4"]
    e.train(2, data, "straight", *flags)
    p, _ = e.train(2, data, "killed", *flags, expect_ok=False, env={"LLMTRAIN_TEST_KILL_DURING_SAVE": "1:8"})
    assert p.returncode != 0, "the run went on although a rank was killed"
    names = sorted(os.listdir(ckpt_dir("killed")))
    assert latest("killed") == "ckpt_00000004.h5", names
    assert "ckpt_00000008.h5" not in names, names
    print(f"rank 1 killed while writing iteration 8's checkpoint: exit {p.returncode}, latest still "
          f"{latest('killed')}, directory {names}")
    p, _ = e.train(2, data, "killed", *flags, "--init_from=resume")
    assert "resumed from" in p.stdout and "ckpt_00000004.h5" in p.stdout, p.stdout
    assert not any(n.startswith(".") for n in os.listdir(ckpt_dir("killed"))), "the half-written file was not removed"
    a, b = e.losses(e.run_logs("straight")), e.losses(e.run_logs("killed"))
    # The killed run logged iterations 0..7, the resumed one 4..11: compare the resumed part.
    assert a[4:] == b[-8:], f"{a}\n{b}"
    print("resumed from iteration 4: iterations 4..11 equal the uninterrupted run bit for bit")

elif case == "async":
    data = e.prepare()
    ASYNC = [*COMMON, "--checkpoint_async=True", "--checkpoint_interval=1"]
    STRATEGY = {"ddp": [], "zero1": ["--use_zero1=True"], "fsdp": ["--use_fsdp=True"]}
    bad = []
    for strat in ("ddp", "zero1", "fsdp"):
        flags = [*COMMON, "--batch_size=4", *STRATEGY[strat]]
        tag = f"{strat}_np2"
        e.train(2, data, f"{tag}_full", *flags, "--max_iters=6")
        _, log = e.train(2, data, f"{tag}_part", *flags, *ASYNC[len(COMMON):], "--max_iters=3", "--keep_last=2")
        saved = [c for c in log["checkpoints"] if c.get("async")]
        assert [c["iter"] for c in saved] == [1, 2, 3], log["checkpoints"]
        assert all("write_seconds" in c and c["path"].endswith(f"ckpt_{c['iter']:08d}.h5") for c in saved), saved
        assert latest(f"{tag}_part") == "ckpt_00000003.h5", os.listdir(ckpt_dir(f"{tag}_part"))
        kept = sorted(n for n in os.listdir(ckpt_dir(f"{tag}_part")) if n.startswith("ckpt_"))
        assert kept == ["ckpt_00000002.h5", "ckpt_00000003.h5"], f"keep_last=2 kept {kept}"
        p, _ = e.train(2, data, f"{tag}_part", *flags, *ASYNC[len(COMMON):], "--max_iters=6", "--init_from=resume")
        assert "resumed from" in p.stdout and "ckpt_00000003.h5" in p.stdout, p.stdout
        a, b = e.losses(e.run_logs(f"{tag}_full")), e.losses(e.run_logs(f"{tag}_part"))
        same = a == b
        print(f"{tag}: asynchronous saves at iterations 1, 2, 3; 3 + resume + 3 iterations "
              f"{'== 6 straight, bit for bit' if same else 'DIFFER'}")
        if not same:
            bad.append(tag)
            print("  straight:", a)
            print("  resumed: ", b)
    assert not bad, f"asynchronous checkpoints change the run: {bad}"
    # Across world sizes (2 ranks ZeRO-1 -> 1 rank DDP, the same global batch): the
    # asynchronous checkpoint resumes exactly as the synchronous one (bit for bit),
    # and both follow the straight run within fp32 tolerance (another reduction order).
    runs = {}
    for mode in ("sync", "async"):
        first = [*COMMON, "--batch_size=4", "--use_zero1=True", "--checkpoint_interval=1", "--max_iters=3"]
        if mode == "async":
            first.append("--checkpoint_async=True")
        e.train(2, data, f"moved_{mode}", *first)
        e.train(1, data, f"moved_{mode}", *COMMON, "--batch_size=8", "--max_iters=6", "--init_from=resume")
        runs[mode] = e.losses(e.run_logs(f"moved_{mode}"))
    straight = e.losses(e.run_logs("zero1_np2_full"))
    assert runs["async"] == runs["sync"], f"async and sync checkpoints resume differently:\n{runs}"
    for (la, ga), (lb, gb) in zip(straight, runs["async"]):
        assert e.close(la, lb) and e.close(ga, gb, rtol=1e-3), f"{straight} vs {runs['async']}"
    print("2 ranks (ZeRO-1, asynchronous saves) -> 1 rank (DDP): resumes bit for bit as from a synchronous save, "
          "and follows the straight run within fp32 tolerance")
    # A rank killed while the background thread writes iteration 4's file.
    flags = [*ASYNC, "--max_iters=8", "--checkpoint_interval=2", "--keep_last=1"]
    p, _ = e.train(2, data, "killed", *flags, expect_ok=False, env={"LLMTRAIN_TEST_KILL_DURING_SAVE": "1:4"})
    assert p.returncode != 0, "the run went on although a rank was killed"
    names = sorted(os.listdir(ckpt_dir("killed")))
    assert latest("killed") == "ckpt_00000002.h5" and "ckpt_00000004.h5" not in names, names
    print(f"rank 1 killed while its writer thread wrote iteration 4's checkpoint: exit {p.returncode}, latest "
          f"still {latest('killed')} (keep_last=1 deleted nothing before a newer one was complete)")
    p, _ = e.train(2, data, "killed", *flags, "--init_from=resume")
    assert "resumed from" in p.stdout and "ckpt_00000002.h5" in p.stdout, p.stdout
    assert not any(n.startswith(".") for n in os.listdir(ckpt_dir("killed"))), "the half-written file was not removed"

elif case == "nan":
    data = e.prepare()
    p, log = e.train(2, data, "one", *COMMON, "--max_iters=8", env={"LLMTRAIN_TEST_NAN_AT": "3"})
    its = log["training_iterations"]
    assert its[3].get("bad_step") == "loss is nan" and its[3].get("skipped_step") is True, its[3]
    assert all("bad_step" not in r for i, r in enumerate(its) if i != 3)
    assert log["summary"]["bad_steps"] == 1 and log["summary"]["status"] == "completed"
    assert [ev["iter"] for ev in log["events"] if ev["kind"] == "bad_step"] == [3], log["events"]
    assert not log["errors"], log["errors"]
    assert all(isinstance(r.get("loss"), float) for i, r in enumerate(its) if i != 3), "loss not finite after a skip"
    print("one NaN loss at iteration 3: update skipped on every rank, counted (bad_steps = 1), training went on")
    p, log = e.train(2, data, "many", *COMMON, "--max_iters=20", "--checkpoint_interval=2", "--max_bad_steps=3",
                     expect_ok=False, env={"LLMTRAIN_TEST_NAN_AT": "5,6,7,8,9"})
    expect_error(p, "training diverged: 3 non-finite steps in a row", "ckpt_00000004.h5")
    assert log["summary"]["status"] == "failed" and "training diverged" in log["summary"]["error"], log["summary"]
    assert [ev["iter"] for ev in log["events"] if ev["kind"] == "bad_step"] == [5, 6, 7], log["events"]

elif case == "bad_input":
    data = e.prepare()
    flags = [*COMMON, "--max_iters=4", "--checkpoint_interval=2"]
    e.train(1, data, "good", *flags)
    # A model that does not match: the tensor and both shapes are named.
    p, _ = e.train(1, data, "good", *flags, "--n_embd=48", "--init_from=resume", expect_ok=False)
    expect_error(p, "config key 'n_embd'", "64", "48")
    # The newest checkpoint truncated: a warning, then the previous one.
    shutil.copytree(os.path.join(work, "good"), os.path.join(work, "trunc"))
    newest = os.path.join(ckpt_dir("trunc"), "ckpt_00000004.h5")
    with open(newest, "r+b") as f:
        f.truncate(os.path.getsize(newest) // 2)
    p, _ = e.train(1, data, "trunc", *flags, "--max_iters=6", "--init_from=resume")
    assert "ckpt_00000004.h5 is unusable" in p.stdout and "resumed from" in p.stdout and \
        "ckpt_00000002.h5 at iteration 2" in p.stdout, p.stdout
    print("  truncated newest checkpoint: warned, resumed from the previous one")
    # A dataset missing from the only checkpoint: named.
    shutil.copytree(os.path.join(work, "good"), os.path.join(work, "nodata"))
    os.remove(os.path.join(ckpt_dir("nodata"), "ckpt_00000002.h5"))
    py = os.environ.get("LLMTRAIN_PYTHON", "python3")
    subprocess.run([py, "-c", "import h5py, sys; f = h5py.File(sys.argv[1], 'r+'); "
                    "del f['optimizer/exp_avg/h.1.mlp.c_fc.weight']; f.close()",
                    os.path.join(ckpt_dir("nodata"), "ckpt_00000004.h5")], check=True)
    p, _ = e.train(1, data, "nodata", *flags, "--init_from=resume", expect_ok=False)
    expect_error(p, "optimizer/exp_avg/h.1.mlp.c_fc.weight")
    # `latest` naming a file that is gone: a warning, then the newest present.
    shutil.copytree(os.path.join(work, "good"), os.path.join(work, "gone"))
    with open(os.path.join(ckpt_dir("gone"), "latest"), "w") as f:
        f.write("ckpt_00000099.h5\n")
    p, _ = e.train(1, data, "gone", *flags, "--max_iters=6", "--init_from=resume")
    assert "ckpt_00000099.h5 is unusable" in p.stdout and "ckpt_00000004.h5 at iteration 4" in p.stdout, p.stdout
    print("  latest naming a missing file: warned, resumed from the newest present")
    # No checkpoint at all.
    p, _ = e.train(1, data, "nothing", *flags, "--init_from=resume", expect_ok=False)
    expect_error(p, "no checkpoint in", "nothing/checkpoints")
    # An out_dir that cannot be created.
    open(os.path.join(work, "a_file"), "w").close()
    p, _ = e.train(1, data, "a_file/out", *flags, expect_ok=False)
    expect_error(p, "a_file/out")
    # A full disk during a save: the error names the file; the older checkpoint survives and loads.
    disk = os.path.join(work, "small_disk")
    os.makedirs(disk)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", disk]).returncode != 0:
        print("SKIP: cannot mount a tmpfs here (not root?)")
        sys.exit(77)
    try:
        # tiny_llama's checkpoint is 3.6 MB: the first fits, the second does not.
        p, _ = e.train(1, data, os.path.join(disk, "run"), *flags, "--keep_last=1", expect_ok=False)
        expect_error(p, "ckpt_00000004.h5")
        kept = sorted(os.listdir(os.path.join(disk, "run", "checkpoints")))
        assert "ckpt_00000002.h5" in kept and "ckpt_00000004.h5" not in kept, kept
        with open(os.path.join(disk, "run", "checkpoints", "latest")) as f:
            assert f.read().strip() == "ckpt_00000002.h5"
        shutil.copytree(os.path.join(disk, "run"), os.path.join(work, "after_full"))
        p, _ = e.train(1, data, "after_full", *flags, "--max_iters=3", "--init_from=resume")
        assert "ckpt_00000002.h5 at iteration 2" in p.stdout, p.stdout
        print(f"  disk full during the second save: error named the file, kept {kept}, resumed from it")
    finally:
        subprocess.run(["umount", disk])
elif case == "checksum":
    import struct
    data = e.prepare()
    flags = [*COMMON, "--max_iters=4", "--checkpoint_interval=2", "--use_zero1=True"]
    e.train(2, data, "good", *flags)
    verify = os.path.join(e.bin_dir, "llmtrain-checkpoint")
    p = e.run([verify, "verify", os.path.join(work, "good")])
    assert "2 of 2 checkpoint(s) sound" in p.stdout and "every crc32c verified" in p.stdout, p.stdout
    print("  verify on a sound run:", p.stdout.strip().splitlines()[-1])
    py = os.environ.get("LLMTRAIN_PYTHON", "python3")
    ds = "optimizer/exp_avg/h.1.mlp.c_fc.weight"

    def h5(script, path):
        subprocess.run([py, "-c", "import h5py, sys, numpy as np; f = h5py.File(sys.argv[1], 'r+'); " + script +
                        "; f.close()", path], check=True)

    # One flipped bit in the middle of a tensor's bytes on disk.
    shutil.copytree(os.path.join(work, "good"), os.path.join(work, "flip"))
    newest = os.path.join(ckpt_dir("flip"), "ckpt_00000004.h5")
    off = int(subprocess.run([py, "-c", "import h5py, sys; d = h5py.File(sys.argv[1], 'r')[sys.argv[2]]; "
                              "print(d.id.get_offset() + d.id.get_storage_size() // 2)", newest, ds],
                             check=True, stdout=subprocess.PIPE, text=True).stdout)
    with open(newest, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x04]))
    p = e.run([verify, "verify", os.path.join(work, "flip")], expect_ok=False)
    assert p.returncode == 1 and "ckpt_00000004.h5" in p.stdout and ds in p.stdout and "checksum" in p.stdout, p.stdout
    print("  verify names the flipped tensor:", next(l for l in p.stdout.splitlines() if "BAD" in l)[:200])
    p, _ = e.train(2, data, "flip", *flags, "--max_iters=6", "--init_from=resume")
    assert "ckpt_00000004.h5 is unusable" in p.stdout and ds in p.stdout and \
        "ckpt_00000002.h5 at iteration 2" in p.stdout, p.stdout
    print("  resume: warned naming file and dataset, resumed from ckpt_00000002.h5")
    # Out-of-range metadata: a negative iteration.
    shutil.copytree(os.path.join(work, "good"), os.path.join(work, "negative"))
    h5("f.attrs['iteration'] = np.int64(-5)", os.path.join(ckpt_dir("negative"), "ckpt_00000004.h5"))
    p = e.run([verify, "verify", os.path.join(ckpt_dir("negative"), "ckpt_00000004.h5")], expect_ok=False)
    assert p.returncode == 1 and "attribute 'iteration' is -5" in p.stdout, p.stdout
    p, _ = e.train(2, data, "negative", *flags, "--max_iters=6", "--init_from=resume")
    assert "ckpt_00000004.h5 is unusable" in p.stdout and "attribute 'iteration' is -5" in p.stdout and \
        "ckpt_00000002.h5 at iteration 2" in p.stdout, p.stdout
    print("  negative iteration: named by resume (fell back) and by verify")
    # A checkpoint of an older llmtrain: no checksums at all.
    shutil.copytree(os.path.join(work, "good"), os.path.join(work, "old"))
    h5("f.visititems(lambda n, o: o.attrs.__delitem__('crc32c') if isinstance(o, h5py.Dataset) else None); "
       "f.attrs.__delitem__('checksum')",
       os.path.join(ckpt_dir("old"), "ckpt_00000004.h5"))
    p, _ = e.train(2, data, "old", *flags, "--max_iters=6", "--init_from=resume")
    assert "written without checksums" in p.stdout and "ckpt_00000004.h5 at iteration 4" in p.stdout, p.stdout
    print("  a checkpoint without checksums loads, with a note")
    # Issue 49: `latest` naming a file outside the directory, and a directory named
    # like a checkpoint, are faults verify names (exit 1), not "sound".
    shutil.copytree(os.path.join(work, "good"), os.path.join(work, "outside"))
    with open(os.path.join(ckpt_dir("outside"), "latest"), "w") as f:
        f.write(f"../../good/checkpoints/ckpt_00000004.h5\n")
    p = e.run([verify, "verify", os.path.join(work, "outside")], expect_ok=False)
    assert p.returncode == 1 and "latest: points to '../../good/checkpoints/ckpt_00000004.h5', which is not a " \
        "checkpoint file of" in p.stdout, p.stdout
    print("  latest pointing outside:", next(l for l in p.stdout.splitlines() if "latest" in l)[:200])
    shutil.copytree(os.path.join(work, "good"), os.path.join(work, "dirname"))
    os.makedirs(os.path.join(ckpt_dir("dirname"), "ckpt_00000006.h5"))
    p = e.run([verify, "verify", os.path.join(work, "dirname")], expect_ok=False)
    assert p.returncode == 1 and "ckpt_00000006.h5' is a directory, not a checkpoint file" in p.stdout, p.stdout
    print("  a directory named like a checkpoint:", next(l for l in p.stdout.splitlines() if "BAD" in l)[:200])

elif case == "disk_full":
    data = e.prepare()
    disk = os.path.join(work, "small_disk")
    os.makedirs(disk)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", disk]).returncode != 0:
        print("SKIP: cannot mount a tmpfs here (needs root: mount -t tmpfs)")
        sys.exit(77)
    flags = [*COMMON, "--max_iters=4", "--checkpoint_interval=2", "--keep_last=1", "--use_zero1=True"]
    out = os.path.join(disk, "run")

    def fill_half_way(what):
        # Rank 1 fills the disk half way through iteration 2's save: both ranks learn of it, nothing hangs
        # (a collective_timeout_s far below the suite's timeout would end a hang), training goes on.
        p, log = e.train(2, data, out, *flags, "--collective_timeout_s=60",
                         env={"LLMTRAIN_TEST_DISK_FULL_DURING_SAVE": "1:2"})
        warn = next((l for l in p.stdout.splitlines() if "ckpt_00000002.h5' not written" in l), None)
        assert warn and "no space left on device" in warn and "bytes free" in warn and "needed" in warn, p.stdout
        assert "training goes on" in warn, warn
        names = sorted(os.listdir(os.path.join(out, "checkpoints")))
        assert names == ["ckpt_00000004.h5", "latest"], names
        assert [ev["kind"] for ev in log["events"]].count("checkpoint_failed") == 1, log["events"]
        print(f"  {what}: disk full during iteration 2's save (rank 1): {warn.strip()[:240]}")
        print(f"  run went on; iteration 4 saved; directory {names}")
        shutil.rmtree(out)

    try:
        fill_half_way("tmpfs")
        # The final save fails: exit non-zero, the message names the file.
        p, _ = e.train(2, data, out, *flags, expect_ok=False, env={"LLMTRAIN_TEST_DISK_FULL_DURING_SAVE": "0:4"})
        assert p.returncode != 0 and "ckpt_00000004.h5' not written" in p.stdout and \
            "last checkpoint could not be saved" in p.stdout, p.stdout
        names = sorted(os.listdir(os.path.join(out, "checkpoints")))
        assert names == ["ckpt_00000002.h5", "latest"], names
        print(f"  the final save failed: exit {p.returncode}, directory {names}")
    finally:
        subprocess.run(["umount", disk])
    # A disk too small for any checkpoint: refused before writing a byte.
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", disk], check=True)
    try:
        p, _ = e.train(2, data, out, *flags, expect_ok=False)
        line = next((l for l in p.stdout.splitlines() if "ckpt_00000002.h5' not written" in l), "")
        assert "no space left on device" in line and "bytes free" in line and "3" in line, p.stdout
        assert p.returncode != 0, p.stdout
        assert sorted(os.listdir(os.path.join(out, "checkpoints"))) == [], os.listdir(os.path.join(out, "checkpoints"))
        print(f"  2 MB disk: refused before writing: {line.strip()[:240]}")
    finally:
        subprocess.run(["umount", disk])
    # The same fill half way through a save on ext4 (a 48 MB loop image), where the
    # shares' whole pages are written with direct I/O (O_DIRECT), not through HDF5.
    img = os.path.join(work, "ext4.img")
    subprocess.run(["truncate", "-s", "48M", img], check=True)
    mk = subprocess.run(["mkfs.ext4", "-q", "-F", img], capture_output=True, text=True)
    if mk.returncode != 0 or subprocess.run(["mount", "-o", "loop", img, disk], capture_output=True).returncode != 0:
        print("  note: no ext4 loop mount here (mkfs.ext4 or mount -o loop failed): the direct-I/O fill not run")
    else:
        try:
            fill_half_way("ext4 (direct I/O)")
        finally:
            subprocess.run(["umount", disk])

elif case == "resume_changes":
    data = e.prepare()
    flags = [*COMMON, "--max_iters=4", "--checkpoint_interval=2"]
    e.train(1, data, "run", *flags)
    shutil.copytree(os.path.join(work, "run"), os.path.join(work, "run2"))
    p, log = e.train(1, data, "run", *flags, "--max_iters=6", "--init_from=resume", "--learning_rate=1e-3",
                     "--grad_clip=1.0")
    lines = [l for l in p.stdout.splitlines() if "resume changes" in l]
    assert len(lines) == 1 and "learning_rate 0.003 -> 0.001" in lines[0] and "grad_clip 0.5 -> 1.0" in lines[0] \
        and "max_iters 4 -> 6" in lines[0], p.stdout
    ch = {c["key"]: (c["checkpoint"], c["now"]) for c in log["startup_info"]["resume_changes"]}
    assert ch["learning_rate"] == (0.003, 0.001) and ch["grad_clip"] == (0.5, 1.0), ch
    assert abs(log["training_iterations"][-1]["lr"] - 1e-3) < 3e-4, log["training_iterations"][-1]
    print("  " + lines[0].strip())
    p, _ = e.train(1, data, "run2", *flags, "--init_from=resume", "--n_embd=48", expect_ok=False)
    expect_error(p, "config key 'n_embd'", "cannot change on resume")
    shutil.copytree(os.path.join(work, "run2"), os.path.join(work, "run3"))
    py = os.environ.get("LLMTRAIN_PYTHON", "python3")
    for n in ("ckpt_00000002.h5", "ckpt_00000004.h5"):
        subprocess.run([py, "-c", "import h5py, sys, numpy as np; f = h5py.File(sys.argv[1], 'r+'); "
                        "f.attrs['tokenizer'] = np.bytes_(b'gpt2'); f.close()",
                        os.path.join(ckpt_dir("run3"), n)], check=True)
    p, _ = e.train(1, data, "run3", *flags, "--init_from=resume", expect_ok=False)
    expect_error(p, "used tokenizer 'gpt2'", "uses 'byte'")
    other = os.path.join(work, "other_data")
    shutil.copytree(data, other)
    p, _ = e.train(1, other, "run2", *flags, "--init_from=resume", "--max_iters=5", expect_ok=False)
    expect_error(p, "config key 'data_dir'", "resume_allow=data_dir")
    p, log = e.train(1, other, "run2", *flags, "--init_from=resume", "--max_iters=5", "--resume_allow=data_dir")
    assert any(c["key"] == "data_dir" for c in log["startup_info"]["resume_changes"]), log["startup_info"]
    print("  data_dir changed with resume_allow=data_dir: resumed, listed")
    # A blend is the data too: a changed data_mix is refused the same way, unless allowed.
    mix = f"--data_mix=0.5 {data} 0.5 {other}"
    p, _ = e.train(1, other, "run2", *flags, "--init_from=resume", "--max_iters=6", mix, expect_ok=False)
    expect_error(p, "config key 'data_mix'", "resume_allow=data_mix")
    p, log = e.train(1, other, "run2", *flags, "--init_from=resume", "--max_iters=6", mix,
                     "--resume_allow=data_dir,data_mix")
    ch = {c["key"]: (c["checkpoint"], c["now"]) for c in log["startup_info"]["resume_changes"]}
    assert ch.get("data_mix") == ("", f"0.5 {data} 0.5 {other}"), ch
    print("  data_mix changed with resume_allow=data_mix: resumed, listed")
    # Issue 49: the same data_mix *file* with other weights is another blend: refused
    # unless allowed, and listed with both blends.
    mix_file = os.path.join(work, "mix.txt")
    with open(mix_file, "w") as f:
        f.write(f"1 {data}\n1 {other}\n")
    e.train(1, data, "run4", *flags, f"--data_mix={mix_file}")
    with open(mix_file, "w") as f:
        f.write(f"3 {data}\n1 {other}  # weights changed\n")
    p, _ = e.train(1, data, "run4", *flags, "--init_from=resume", "--max_iters=6", f"--data_mix={mix_file}",
                   expect_ok=False)
    expect_error(p, "config key 'data_mix'", f"0.5 {data} 0.5 {other}", f"0.75 {data} 0.25 {other}",
                 "resume_allow=data_mix")
    p, log = e.train(1, data, "run4", *flags, "--init_from=resume", "--max_iters=6", f"--data_mix={mix_file}",
                     "--resume_allow=data_mix")
    ch = {c["key"]: (c["checkpoint"], c["now"]) for c in log["startup_info"]["resume_changes"]}
    assert ch.get("data_mix") == (f"0.5 {data} 0.5 {other}", f"0.75 {data} 0.25 {other}"), ch
    print("  the same data_mix file with changed weights: refused, then with resume_allow=data_mix resumed, listed")
    # Weights near DBL_MAX: their sum would overflow; the shares are still 1/2 and 1/2.
    _, log = e.train(1, data, "huge", *COMMON, "--max_iters=4", f"--data_mix=1e308 {data} 1e308 {other}")
    shares = [(u["weight"], u["tokens"]) for u in log["summary"]["data_sources"]]
    assert [w for w, _ in shares] == [0.5, 0.5] and all(t > 0 for _, t in shares), shares
    print(f"  data_mix=1e308 A 1e308 B: shares {shares}")
else:
    sys.exit(f"unknown case {case}")
print("PASS")
