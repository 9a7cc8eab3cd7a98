#!/usr/bin/env python3
"""Faults around the data pipeline, with the real binaries (issue 19; driven by CTest).

  rerun        llmtrain-prepare refuses an existing data directory without
               --overwrite; a rerun with --overwrite whose input then fails (one
               document: an empty val split) leaves the old directory as it was;
               a good rerun replaces it; a directory holding other files is never
               replaced.
  unwritable   an out_dir whose parent is not writable fails before any input is
               read (an input error later in the stream is not reached), naming
               the path and the OS error (run without the DAC capabilities: root
               is then bound by permission bits like any user).
  full_disk    a rerun into a small tmpfs that fills up fails with one line naming
               the shard, the OS error, the disk's free and the needed bytes (no HDF5
               error stack); the old data directory is intact and no partial output is left
               (root; 77 where mounting is not allowed).
  binary_input files of random bytes, a JSONL document with a NUL and a document
               holding the end-of-document token are skipped with one warning each
               and a count; no document contributes an EOS id; --strict refuses.
  permission   a shard the trainer cannot read is reported with the OS error
               (Permission denied) and its path, not as a truncated file.
  bitflip      one bit flipped in a token of a real prepared shard: training
               stops with one line naming the shard, the dataset and the chunk,
               and llmtrain-prepare --verify names it too (exit 1); the untouched
               copy verifies and trains.

Usage: test_prepare_faults.py BUILD_DIR SOURCE_DIR MPIEXEC CASE
"""
import filecmp
import json
import os
import random
import re
import shutil
import stat
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
import e2e_common  # noqa: E402  (setup, run, mpi shared by the end-to-end scripts)

case = sys.argv[4]
work = e2e_common.setup(sys.argv, "prepare_faults_" + case)
build, source, mpiexec, bin_dir = e2e_common.build, e2e_common.source, e2e_common.mpiexec, e2e_common.bin_dir
run, mpi = e2e_common.run, e2e_common.mpi
prep_bin = os.path.join(bin_dir, "llmtrain-prepare")
speeches = e2e_common.sotu_files()


def prepare(out, *args, n=2, expect_ok=True, wrap=()):
    return run([*wrap, *mpi(n, prep_bin, "--out_dir", out, "--no_progress", *args)], expect_ok=expect_ok)


def fail(p, why):
    print(p.stdout[-4000:])
    sys.exit("FAILED: " + why)


def no_dac():
    """A command prefix that drops root's permission override (or nothing for a normal user)."""
    if os.geteuid() != 0:
        return []
    caps = "-dac_override,-dac_read_search"
    wrap = ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}"]
    probe = os.path.join(work, "probe")
    with open(probe, "w") as f:
        f.write("x")
    os.chmod(probe, 0)
    p = subprocess.run([*wrap, "cat", probe], capture_output=True)
    os.remove(probe)
    if p.returncode == 0:
        print("SKIP: cannot drop root's permission override here (setpriv)")
        sys.exit(77)
    return wrap


def leftovers(parent):
    return [n for n in os.listdir(parent) if ".prepare-" in n or ".old-" in n]


def index_of(d):
    with open(os.path.join(d, "index.json")) as f:
        return json.load(f)


if case == "rerun":
    out = os.path.join(work, "data")
    prepare(out, "--val_fraction", "0.2", *speeches[-6:])
    before = index_of(out)
    saved = os.path.join(work, "saved")
    shutil.copytree(out, saved)
    # 1. An existing data directory is not replaced without --overwrite.
    p = prepare(out, "--val_fraction", "0.2", *speeches[-3:], expect_ok=False)
    if p.returncode == 0 or "--overwrite" not in p.stdout or out not in p.stdout:
        fail(p, "a rerun over an existing data directory was not refused without --overwrite")
    # 2. With --overwrite, input that fails (one document: its split gets it, the other is empty).
    p = prepare(out, "--overwrite", "--val_fraction", "0.5", speeches[0], expect_ok=False)
    if p.returncode == 0 or "empty" not in p.stdout:
        fail(p, "one document did not fail with an empty split")
    cmp = filecmp.dircmp(saved, out)
    if cmp.left_only or cmp.right_only or cmp.diff_files or index_of(out) != before:
        fail(p, f"the failed rerun changed the old data directory: {cmp.left_only} {cmp.right_only} {cmp.diff_files}")
    if leftovers(work):
        fail(p, f"partial output left beside it: {leftovers(work)}")
    # 3. A good rerun with --overwrite replaces it.
    prepare(out, "--overwrite", "--val_fraction", "0.2", *speeches[-3:])
    after = index_of(out)
    assert after["sources"] == speeches[-3:] and after != before, after
    assert not leftovers(work), leftovers(work)
    # 4. A directory that is not a data directory is never replaced.
    other = os.path.join(work, "notes")
    os.makedirs(other)
    with open(os.path.join(other, "README.txt"), "w") as f:
        f.write("mine\n")
    p = prepare(other, "--overwrite", *speeches[-2:], expect_ok=False)
    if p.returncode == 0 or "README.txt" not in p.stdout or not os.path.exists(os.path.join(other, "README.txt")):
        fail(p, "a directory holding other files was replaced or not refused by name")
    print("refused without --overwrite; a failed rerun kept the old data; a good one replaced it; others untouched")

elif case == "unwritable":
    wrap = no_dac()
    parent = os.path.join(work, "readonly")
    os.makedirs(parent)
    os.chmod(parent, 0o555)
    bad = os.path.join(work, "bad.jsonl")  # an input error the run must not reach first
    with open(bad, "w") as f:
        f.write('{"text": "fine"}\n{"text": 12}\n')
    try:
        p = prepare(os.path.join(parent, "data"), *speeches[-2:], bad, wrap=wrap, expect_ok=False)
    finally:
        os.chmod(parent, 0o755)
    if p.returncode == 0 or "Permission denied" not in p.stdout or parent not in p.stdout:
        fail(p, "an unwritable out_dir was not named with the OS error")
    if "JSONL" in p.stdout or "HDF5" in p.stdout:
        fail(p, "the inputs were read (or HDF5 tried to write) before the output location was checked")
    print("unwritable out_dir refused before reading the inputs, with its path and 'Permission denied'")

elif case == "full_disk":
    if os.geteuid() != 0:
        print("SKIP: mounting a tmpfs needs root")
        sys.exit(77)
    mnt = os.path.join(work, "small")
    os.makedirs(mnt)
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt], capture_output=True, text=True)
    if m.returncode != 0:
        print(f"SKIP: cannot mount a tmpfs here: {m.stderr.strip()}")
        sys.exit(77)
    try:
        out = os.path.join(mnt, "data")
        small = sorted(speeches, key=os.path.getsize)[:3]  # a few KB of text
        prepare(out, "--val_fraction", "0.3", *small)
        saved = os.path.join(work, "saved")
        shutil.copytree(out, saved)
        used = shutil.disk_usage(mnt).used
        p = prepare(out, "--overwrite", "--val_fraction", "0.1", *speeches[-40:], expect_ok=False)  # ~3 MB of tokens
        if p.returncode == 0:
            fail(p, "a full disk was reported as success")
        if "No space left on device" not in p.stdout:
            fail(p, "the error does not give the OS's reason (No space left on device)")
        line = next((l for l in p.stdout.splitlines() if "error: writing shard" in l), "")
        if not ("No space left on device" in line and ".h5" in line and "bytes free on the file system of" in line
                and "needed" in line):
            fail(p, "the error does not name the shard, the disk, the bytes free and needed")
        if "HDF5-DIAG" in p.stdout:
            fail(p, "a raw HDF5 error stack was printed")
        cmp = filecmp.dircmp(saved, out)
        if cmp.left_only or cmp.right_only or cmp.diff_files:
            fail(p, f"the old data directory changed: {cmp.left_only} {cmp.right_only} {cmp.diff_files}")
        if leftovers(mnt):
            fail(p, f"partial output left on the full disk: {leftovers(mnt)}")
        if shutil.disk_usage(mnt).used > used:
            fail(p, f"the disk holds more than before: {shutil.disk_usage(mnt).used} > {used} bytes")
        # Shards that fit before one that does not: the space of each shard is taken
        # before HDF5 writes it, so the failure is found at a later shard too, by all
        # ranks together (parallel HDF5 hung when a write failed inside H5Fclose).
        out2 = os.path.join(mnt, "data2")
        p = prepare(out2, "--shard_tokens", "120000", "--val_fraction", "0.1", *speeches[-40:], expect_ok=False)
        line = next((l for l in p.stdout.splitlines() if "error: writing shard" in l), "")
        shard = re.search(r"train_(\d{5})\.h5", line)
        if p.returncode == 0 or "No space left on device" not in line or not shard or int(shard.group(1)) < 1:
            fail(p, "a disk that fills at a later shard is not reported at that shard")
        if os.path.exists(out2) or leftovers(mnt) or shutil.disk_usage(mnt).used > used:
            fail(p, f"partial output left after a later shard failed: {os.listdir(mnt)}")
        print(f"full disk: error with the OS reason, old data intact, nothing left behind (also at shard {shard.group(1)})")
    finally:
        subprocess.run(["umount", "-l", mnt])

elif case == "binary_input":
    docs = os.path.join(work, "docs")
    os.makedirs(docs)
    rng = random.Random(19)
    texts = {"a.txt": "First document.\n", "b.txt": "Second one, with UTF-8: caf\u00e9 \u2014 ok.\n" * 20,
             "c.txt": open(speeches[-1], encoding="utf-8").read()}
    for name, t in texts.items():
        with open(os.path.join(docs, name), "w", encoding="utf-8") as f:
            f.write(t)
    binaries = []
    for i in range(11):  # the sweep's 11 files of random bytes
        name = f"blob_{i:02d}.bin.txt"
        with open(os.path.join(docs, name), "wb") as f:
            f.write(bytes(rng.randrange(256) for _ in range(4096)) + b"\0")
        binaries.append(name)
    latin1 = "d_latin1.txt"  # not UTF-8, but the byte tokenizer takes bytes
    with open(os.path.join(docs, latin1), "wb") as f:
        f.write("na\u00efve caf\u00e9\n".encode("latin-1"))
    jsonl = os.path.join(work, "more.jsonl")
    with open(jsonl, "w") as f:
        f.write(json.dumps({"text": "good line"}) + "\n")
        f.write(json.dumps({"text": "a NUL \u0000 inside"}) + "\n")
        f.write(json.dumps({"text": "another good line"}) + "\n")
    out = os.path.join(work, "data")
    p = prepare(out, "--val_fraction", "0.3", docs, jsonl)
    for name in binaries:
        if f"{name}: binary (a NUL byte" not in p.stdout:
            fail(p, f"no warning naming {name}")
    if f"{jsonl}:2: binary" not in p.stdout:
        fail(p, "no warning naming the JSONL line with a NUL")
    if "skipped 12 input document(s)" not in p.stdout:
        fail(p, "no count of the skipped documents")
    # Token accounting: every kept document is its bytes + one EOS; nothing else.
    kept = [t.encode() for t in texts.values()] + ["na\u00efve caf\u00e9\n".encode("latin-1")] + \
           [b"good line", b"another good line"]
    idx = index_of(out)
    tokens = idx["splits"]["train"]["tokens"] + idx["splits"]["val"]["tokens"]
    documents = idx["splits"]["train"]["documents"] + idx["splits"]["val"]["documents"]
    if documents != len(kept) or tokens != sum(len(k) + 1 for k in kept):
        fail(p, f"{documents} documents / {tokens} tokens, expected {len(kept)} / {sum(len(k) + 1 for k in kept)}")
    # --strict refuses, naming the file.
    p = prepare(os.path.join(work, "strict"), "--strict", docs, expect_ok=False)
    if p.returncode == 0 or "blob_00.bin.txt: binary" not in p.stdout or "--strict" not in p.stdout:
        fail(p, "--strict did not refuse the first binary file by name")
    if os.path.exists(os.path.join(work, "strict")) or leftovers(work):
        fail(p, "--strict left output behind")
    # Text tokenizers: ill-formed UTF-8 is not text, and neither is a document holding the EOS token.
    gpt2 = os.path.join(source, "third_party", "npm", "js-tiktoken@1.0.21", "dist", "ranks", "gpt2.cjs")
    if os.path.exists(gpt2):
        p = prepare(os.path.join(work, "gpt2"), "--tokenizer", "gpt2", "--val_fraction", "0.3", docs, jsonl)
        if f"{latin1}: not UTF-8 text" not in p.stdout:
            fail(p, "gpt2: the Latin-1 file was not refused as ill-formed UTF-8")
        eos_doc = os.path.join(work, "eos.jsonl")
        with open(eos_doc, "w") as f:
            f.write(json.dumps({"text": "one <|endoftext|> two"}) + "\n" + json.dumps({"text": "fine"}) + "\n")
        p = prepare(os.path.join(work, "gpt2eos"), "--tokenizer", "gpt2", "--val_fraction", "0", eos_doc,
                    os.path.join(docs, "c.txt"))
        if f"{eos_doc}:1: its text holds the end-of-document token (id 50256)" not in p.stdout:
            fail(p, "gpt2: a document holding <|endoftext|> was not skipped by name")
    else:
        print(f"note: {gpt2} missing, the gpt2 part was not run")
    print("binary documents skipped with warnings and a count; no EOS from content; --strict refuses")

elif case == "permission":
    wrap = no_dac()
    out = os.path.join(work, "data")
    prepare(out, "--val_fraction", "0.2", *speeches[-4:])
    shard = os.path.join(out, "val_00000.h5")
    os.chmod(shard, 0)
    cfg = os.path.join(source, "inputs", "tiny_llama.cfg")
    p = run([*wrap, *mpi(1, os.path.join(bin_dir, "llmtrain"), cfg, f"--data_dir={out}", "--out_dir=out",
                         "--max_iters=2")], expect_ok=False)
    os.chmod(shard, 0o644)
    if p.returncode == 0 or f"cannot read shard '{shard}': Permission denied" not in p.stdout:
        fail(p, "an unreadable shard was not reported with the OS error and its path")
    if "truncated" in p.stdout:
        fail(p, "the wrong cause (a truncated file) was given")
    print("unreadable shard: 'Permission denied' with its path")

elif case == "bitflip":
    # The smallest speeches: the train shard is one chunk (65536 tokens), so any
    # batch reads the flipped one.
    small = sorted(speeches, key=os.path.getsize)[:5]
    good = os.path.join(work, "good")
    prepare(good, "--val_fraction", "0.2", *small)
    bad = os.path.join(work, "bad")
    shutil.copytree(good, bad)
    shard = os.path.join(bad, "train_00000.h5")
    # Byte tokens are stored as uint16 little-endian: find a run of the text in the
    # file and flip the lowest bit of one token (still an id of the vocabulary).
    blob = open(shard, "rb").read()
    pos = -1
    for doc in small:  # the documents hashed into the train split are in it
        text = open(doc, "rb").read()
        pattern = b"".join(bytes([c, 0]) for c in text[len(text) // 2:len(text) // 2 + 32])
        pos = blob.find(pattern)
        if pos >= 0:
            break
    assert pos >= 0, "no run of the corpus found in the shard's bytes"
    with open(shard, "r+b") as f:
        f.seek(pos + 16)
        byte = f.read(1)[0]
        f.seek(pos + 16)
        f.write(bytes([byte ^ 1]))

    def train(d, out):
        return e2e_common.train(1, d, out, "--max_iters=2", "--eval_interval=1000", expect_ok=False)[0]

    p = train(bad, "run_bad")
    line = [l for l in p.stdout.splitlines() if "fails its checksum" in l]
    if p.returncode == 0 or not line or shard not in line[0] or "dataset 'tokens'" not in line[0] \
            or "chunk 0 (tokens [0, " not in line[0]:
        fail(p, "training on a shard with a flipped bit did not stop naming the shard, the dataset and the chunk")
    p = run([*mpi(1, prep_bin, "--verify", bad)], expect_ok=False)
    if p.returncode != 1 or f"BAD  {shard}: " not in p.stdout or "chunk 0" not in p.stdout:
        fail(p, "llmtrain-prepare --verify did not name the flipped shard")
    p = run([*mpi(1, prep_bin, "--verify", good)], expect_ok=False)
    if p.returncode != 0 or "BAD" in p.stdout or "shard(s) sound" not in p.stdout:
        fail(p, "llmtrain-prepare --verify refused the untouched data")
    p = train(good, "run_good")
    if p.returncode != 0:
        fail(p, "the untouched data did not train")
    print("flipped bit: training stops naming the shard, dataset and chunk; --verify names it; the untouched copy "
          "trains:\n  " + line[0])

else:
    sys.exit(f"unknown case {case}")
print("PASS")
