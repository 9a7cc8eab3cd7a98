#!/usr/bin/env python3
"""What llmtrain's model and the plain PyTorch model keep for backward, per block
and at the peak, measured on CPU (issue 46: "peak memory at most eager's").

Both sides run one forward + backward of the same preset and shape (the loss
under autocast, backward outside it, gradients starting as none, after one
untraced warm-up step) under LibTorch's profiler with memory events: llmtrain's
model through build/bin/bench-saved-memory (compile=False, and compile=True: the
fused kernels' CPU twins), the PyTorch model of benchmarks/python_reference.py
(what compare_pytorch.sh runs) in this process with torch.profiler. One parser
reads both traces: every allocation and free, in order, from which it replays

  kept  the bytes live when backward starts (allocated in the step and not yet
        freed: what the graph saved, plus the loss),
  peak  the most bytes live at once during the step (the gradients included),

each at 4 and at 2 layers of the same shape: per block = (4 layers - 2) / 2.
The rows +buckets run llmtrain's model as its trainer holds the gradients (DDP
on one rank, distributed/grad_buckets.cpp): buckets made during backward as
their first gradients arrive and dropped after the optimizer step, as
PyTorch's zero_grad(set_to_none=True) leaves them to backward; finish() is in
the traced backward. The rows +persistent hold them as use_cuda_graphs=True's
persistent buckets do, from one step to the next, zeroed, not freed: their
bytes count in kept and peak from the start.
Where llmtrain and PyTorch differ, the kept bytes per block are listed by the
op that allocated them (the outermost aten:: / llmtrain:: op around the
allocation) and the allocation's size.

On a GPU, PyTorch's RMSNorm is F.rms_norm's fused kernel, which saves its input
and an fp32 reciprocal RMS per row; on CPU, F.rms_norm is composite and saves
five tensors. So that the CPU table says what a GPU keeps, the reference's
RMSNorm here saves what the CUDA kernel saves (an autograd.Function with the
same math). llmtrain's CPU norm already does (model/layers.cpp, RmsNormCpu).
SDPA on CPU is the flash kernel on both sides; its output comes in (B, T, H, D)
storage whatever q's layout, as cuDNN's does only for q in that layout.

  benchmarks/memory_per_block.py --build build inputs/bench_llama_small.cfg dtype=bfloat16
  benchmarks/memory_per_block.py --build build inputs/bench_llama_small.cfg dtype=bfloat16 \
      batch_size=2 block_size=64 --check 0.01      # the CTest memory_per_block

--check TOL: exit 1 unless each llmtrain model keeps per block at most (1 + TOL)
times what the PyTorch model keeps, and peaks per block at most that.
"""
import argparse
import bisect
import collections
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

FWD, BWD = "memory::forward", "memory::backward"
# (row, compile, gradients): the models as the step above runs them, then llmtrain's as its trainer holds the
# gradients (buckets made during backward), then as persistent buckets hold them (use_cuda_graphs=True: from one
# step to the next, their bytes added to kept and peak).
IMPLS = (("llmtrain", "False", "none"), ("llmtrain_fused", "True", "none"), ("pytorch_eager", None, None),
         ("llmtrain+buckets", "False", "buckets"), ("llmtrain_fused+buckets", "True", "buckets"),
         ("llmtrain+persistent", "False", "kept"), ("llmtrain_fused+persistent", "True", "kept"))


def parse_trace(path):
    """(kept bytes at backward's start, peak live bytes, {(bytes, op): count} of what is kept, where the peak is)."""
    events = json.load(open(path))["traceEvents"]
    spans = {e["name"]: e for e in events if e.get("ph") == "X" and e["name"] in (FWD, BWD)}
    if FWD not in spans or BWD not in spans:
        sys.exit(f"memory_per_block: {path} has no {FWD} / {BWD} span")
    bwd_start = spans[BWD]["ts"]
    # The outermost aten:: / llmtrain:: op of each thread, as sorted disjoint intervals.
    ops = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and (e["name"].startswith("aten::") or e["name"].startswith("llmtrain::")):
            ops[e["tid"]].append((e["ts"], e["ts"] + e.get("dur", 0), e["name"]))
    outer = {}
    for tid, lst in ops.items():
        lst.sort(key=lambda o: (o[0], -o[1]))
        top = []
        for o in lst:
            if not top or o[0] >= top[-1][1]:
                top.append(o)
        outer[tid] = ([o[0] for o in top], top)

    def op_at(tid, ts):
        starts, top = outer.get(tid, ([], []))
        i = bisect.bisect_right(starts, ts) - 1
        return top[i][2] if i >= 0 and ts <= top[i][1] else "(no op)"

    mem = sorted((e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
                 key=lambda e: e["ts"])
    live, cur, peak, kept, kept_at, peak_at = {}, 0, 0, None, None, ""
    for e in mem:
        if kept is None and e["ts"] >= bwd_start:
            kept, kept_at = cur, dict(live)
        n, addr = e["args"]["Bytes"], e["args"]["Addr"]
        if n > 0:
            live[addr] = (n, op_at(e["tid"], e["ts"]))
            cur += n
        elif addr in live:  # a free of a block allocated before the profiler started is not counted
            cur -= live.pop(addr)[0]
        if cur > peak:
            peak = cur
            peak_at = ("backward, " if e["ts"] >= bwd_start else "forward, ") + op_at(e["tid"], e["ts"])
    if kept is None:
        kept, kept_at = cur, dict(live)
    by = collections.Counter(kept_at.values())
    return kept, peak, by, peak_at


def run_llmtrain(a, layers, compile_, grads, trace):
    """Runs bench-saved-memory; returns the bytes of gradients held from before the step (0 with grads=none)."""
    cmd = [os.path.join(a.build, "bin", "bench-saved-memory"), a.preset] + [f"--{o}" for o in a.overrides] + [
        f"--n_layer={layers}", f"--compile={compile_}", f"--num_threads={a.threads}", f"--grads={grads}",
        f"--trace={trace}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"memory_per_block: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    held = [int(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("held_before_bytes ")]
    return held[0] if held else 0


def run_pytorch(a, layers, trace):
    import torch
    import python_reference as pr

    class RmsNormFn(torch.autograd.Function):
        # What at::_fused_rms_norm (CUDA) computes and saves: x and its fp32 rstd.
        @staticmethod
        def forward(ctx, x, w, eps):
            xf = x.float()
            rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
            ctx.save_for_backward(x, w, rstd)
            return (xf * rstd * w.float()).to(torch.promote_types(x.dtype, w.dtype))

        @staticmethod
        def backward(ctx, dy):
            x, w, rstd = ctx.saved_tensors
            xhat = x.float() * rstd
            g = dy.float() * w.float()
            dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
            dw = (dy.float() * xhat).reshape(-1, w.numel()).sum(0)
            return dx.to(x.dtype), dw.to(w.dtype), None

    def forward(self, x):  # the reference's CUDA branch: F.rms_norm(x.float(), ...)
        return RmsNormFn.apply(x.float(), self.weight, self.eps)

    pr.RMSNorm.forward = forward
    c = pr.read_config(a.preset, list(a.overrides) + [f"n_layer={layers}"])
    torch.manual_seed(c["seed"])
    model = pr.Transformer(c)
    bf16 = c["dtype"] == "bfloat16"
    g = torch.Generator().manual_seed(c["seed"] + 1)
    idx = torch.randint(0, c["vocab_size"], (c["batch_size"], c["block_size"]), generator=g)
    targets = torch.randint(0, c["vocab_size"], (c["batch_size"], c["block_size"]), generator=g)

    def step():
        for p in model.parameters():
            p.grad = None
        with torch.profiler.record_function(FWD):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = model(idx, targets)
        with torch.profiler.record_function(BWD):
            loss.backward()

    step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        with torch.profiler.record_function("ProfilerStep#1"):
            step()
    prof.export_chrome_trace(trace)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("preset")
    ap.add_argument("overrides", nargs="*", help="key=value, as llmtrain takes them (both sides read them)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--check", type=float, help="tolerance: exit 1 if llmtrain keeps or peaks more per block")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_intermixed_args()
    a.overrides = [o.lstrip("-") for o in a.overrides]
    import torch
    torch.set_num_threads(a.threads)
    res = {}
    with tempfile.TemporaryDirectory(prefix="memory_per_block_") as work:
        for layers in (4, 2):
            for impl, compile_, grads in IMPLS:
                trace = os.path.join(work, f"{impl}_{layers}.json")
                held = 0
                if compile_ is None:
                    run_pytorch(a, layers, trace)
                else:
                    held = run_llmtrain(a, layers, compile_, grads, trace)
                kept, peak, by, at = parse_trace(trace)
                res[(impl, layers)] = (kept + held, peak + held, by, at)
    impls = [i[0] for i in IMPLS]
    rows = {}
    for impl in impls:
        (k4, p4, b4, at4), (k2, p2, b2, _) = res[(impl, 4)], res[(impl, 2)]
        per = collections.Counter()
        for key in set(b4) | set(b2):
            d = (b4.get(key, 0) - b2.get(key, 0)) / 2
            if d:
                per[key] = d
        rows[impl] = dict(kept4=k4, kept2=k2, kept_block=(k4 - k2) / 2, peak4=p4, peak2=p2, peak_block=(p4 - p2) / 2,
                          peak_at=at4, by_tensor=per)
    ref = rows["pytorch_eager"]
    print(f"memory kept for backward and peak, CPU, {os.path.relpath(a.preset, ROOT)} {' '.join(a.overrides)} "
          f"(bytes; per block = (4 layers - 2) / 2)")
    print(f"{'impl':<26} {'kept, 4 L':>12} {'kept, 2 L':>12} {'kept/block':>12} {'peak, 4 L':>12} {'peak, 2 L':>12} "
          f"{'peak/block':>12} {'kept/block vs eager':>20} {'peak, 4 L vs eager':>19}")
    for impl in impls:
        r = rows[impl]
        print(f"{impl:<26} {r['kept4']:>12,} {r['kept2']:>12,} {r['kept_block']:>12,.0f} {r['peak4']:>12,} "
              f"{r['peak2']:>12,} {r['peak_block']:>12,.0f} {r['kept_block'] / ref['kept_block']:>20.4f} {r['peak4'] / ref['peak4']:>19.4f}")
    print("where the peak is (4 layers): " + "; ".join(f"{i} {rows[i]['peak_at']}" for i in impls))
    print("\nkept per block by the op that allocated it (op: count x bytes), where the two differ:")
    for impl in ("llmtrain", "llmtrain_fused"):
        mine, theirs = rows[impl]["by_tensor"], ref["by_tensor"]
        diff = []
        for key in sorted(set(mine) | set(theirs), key=lambda k: (k[1], k[0])):
            m, t = mine.get(key, 0), theirs.get(key, 0)
            if m != t:
                diff.append(f"  {key[1]:<50} {key[0]:>11,} B  {impl} {m:>5g}  pytorch_eager {t:>5g}")
        total = sum(k[0] * n for k, n in mine.items()) - sum(k[0] * n for k, n in theirs.items())
        print(f"{impl} against pytorch_eager: {total:+,.0f} B per block")
        print("\n".join(diff) if diff else "  (the same)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({i: {k: v for k, v in r.items() if k != "by_tensor"} for i, r in rows.items()}, f, indent=1)
    if a.check is not None:
        bad = []
        for impl in ("llmtrain", "llmtrain_fused"):
            for what in ("kept_block", "peak_block"):
                if rows[impl][what] > ref[what] * (1 + a.check):
                    bad.append(f"{impl} {what} {rows[impl][what]:,.0f} > pytorch_eager's {ref[what]:,.0f} "
                               f"x (1 + {a.check})")
        if bad:
            print("memory_per_block: FAILED: " + "; ".join(bad))
            return 1
        print(f"memory_per_block: llmtrain keeps and peaks per block at most PyTorch eager's x (1 + {a.check})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
