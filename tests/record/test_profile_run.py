#!/usr/bin/env python3
"""profile_steps through the real binaries (driven by CTest; docs/performance.md).

2 ranks train tiny_llama on prepared SOTU text with compile=True (the fused
kernels: the LM head + loss among them) and --profile_steps=2-3: each rank writes
out/profile/rank<R>_steps2-3.pt.trace.json, valid Chrome-trace JSON (json.load)
with ProfilerStep#2 and #3, the fused loss as llmtrain:: ops (one each way per
step) and the ops' input shapes; `llmtrain-report --profile out/profile` prints, per step, the
op categories and the host synchronizations; a bad profile_steps is refused
naming the key.

Usage: test_profile_run.py BUILD_DIR SOURCE_DIR MPIEXEC
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
import e2e_common as e2e  # noqa: E402


def main():
    e2e.setup(sys.argv + ["profile_run"], "profile_run")
    data = e2e.prepare(n_files=4)
    e2e.train(2, data, "out", "--max_iters=5", "--eval_interval=100", "--eval_iters=1", "--compile=True",
              "--profile_steps=2-3", "--batch_size=2", "--block_size=64")
    files = sorted(glob.glob(os.path.join(e2e.work, "out", "profile", "*")))
    want = [os.path.join(e2e.work, "out", "profile", f"rank{r}_steps2-3.pt.trace.json") for r in (0, 1)]
    if files != want:
        sys.exit(f"FAILED: out/profile holds {files}, expected {want}")
    for f in files:
        trace = json.load(open(f))  # a trace that is not JSON fails here
        events = trace["traceEvents"]
        names = [e.get("name", "") for e in events]
        steps = sorted(n for n in names if n.startswith("ProfilerStep#"))
        if steps != ["ProfilerStep#2", "ProfilerStep#3"]:
            sys.exit(f"FAILED: {f}: steps {steps}, expected ProfilerStep#2 and #3")
        for op in ("llmtrain::lm_head_cross_entropy", "llmtrain::lm_head_cross_entropy_backward"):
            if names.count(op) != 2:
                sys.exit(f"FAILED: {f}: {names.count(op)} {op} events, expected one per traced step")
        if not any(e.get("cat") == "cpu_op" and "Input Dims" in e.get("args", {}) for e in events):
            sys.exit(f"FAILED: {f}: no op carries its input shapes")
    p = e2e.run([os.path.join(e2e.bin_dir, "llmtrain-report"), "--profile", os.path.join(e2e.work, "out", "profile")])
    print(p.stdout)
    for needle in ("ProfilerStep#2", "ProfilerStep#3", "top-level ops", "GEMM", "attention", "norm", "element-wise",
                   "copy", "optimizer", "communication", "host synchronizations",
                   "llmtrain::lm_head_cross_entropy 1"):
        if needle not in p.stdout:
            sys.exit(f"FAILED: llmtrain-report --profile does not print {needle!r}")
    if p.stdout.count("profile ") != 2:
        sys.exit("FAILED: llmtrain-report --profile DIR did not report both ranks' traces")
    bad = e2e.train(1, data, "bad", "--max_iters=1", "--profile_steps=3-1", expect_ok=False)[0]
    if bad.returncode == 0 or "profile_steps" not in bad.stdout:
        sys.exit(f"FAILED: profile_steps=3-1 was not refused naming the key:\n{bad.stdout}")
    print("OK")


if __name__ == "__main__":
    main()
