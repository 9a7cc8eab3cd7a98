#!/usr/bin/env python3
"""A stale Open MPI semaphore does not hang llmtrain (issue 49), launched by mpirun or srun.

Open MPI 4.1's MPI-IO loads the shared-file-pointer component sharedfp/sm at every
MPI_File_open (HDF5's MPI-IO driver: shard reads, llmtrain-prepare's outputs,
checkpoint saves); it keeps a machine-wide POSIX semaphore named after the file's
basename, /dev/shm/sem.OMPIO_<basename>. A process killed while holding it leaves
it at 0 and every later open of a file of that name on the node blocks for ever.
The programs turn that component off before MPI_Init (src/distributed/runtime.cpp).

Here a zero semaphore is planted (sem_open, value 0) for every name the programs
open, and each of these must still finish within its time limit:
  prepare     mpirun -n 2 llmtrain-prepare writes train_00000.h5(.tmp) and val_00000.h5(.tmp)
  read        mpirun -n 2 llmtrain reads the shards (train, with evaluation)
  checkpoint  the same run saves .ckpt_00000002.h5.tmp (synchronous) and a resume reads ckpt_00000002.h5
and, as the control that shows the planted semaphore really blocks (so this test
can fail): with OMPI_MCA_sharedfp=sm given explicitly (a user's own setting is
respected) llmtrain-prepare does hang, and is killed after a few seconds; and a
training run so hung is ended by its watchdog after collective_timeout_s with a
message naming the shard it is opening.

The semaphores are planted in a private /dev/shm (a mount namespace of this test,
`unshare --mount`), so no other job on the machine meets them; where no namespace
can be made, in the machine's /dev/shm, created exclusively, and removed at the end
whatever happens.

With `srun` the same steps run as `srun --mpi=pmix` jobs on a one-node test cluster
(scripts/slurm-cluster.sh, started inside this test's mount namespace, so its node
sees the private /dev/shm too); exit 77 where that cluster cannot start.

Usage: test_stale_semaphore.py BUILD_DIR SOURCE_DIR MPIEXEC [mpirun|srun]
"""
import ctypes
import glob
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_common as e  # noqa: E402

LIMIT_S = 180  # each step; a healthy one takes seconds
CONTROL_S = 6  # how long the control watches prepare stay in its first open


def reexec_in_private_shm():
    """Runs this script again in a mount namespace with its own empty /dev/shm. Returns
    the child's exit code, or None where no namespace can be made (then the test plants
    in the machine's /dev/shm)."""
    if os.environ.get("LLMTRAIN_TEST_PRIVATE_SHM"):
        return None
    flags = ["--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        flags.append("--map-root-user")
    probe = subprocess.run(["unshare", *flags, "sh", "-c", "mount -t tmpfs -o size=64m tmpfs /dev/shm"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if probe.returncode != 0:
        print(f"note: no private /dev/shm here ({probe.stdout.strip()}); planting in the machine's /dev/shm")
        return None
    script = "mount -t tmpfs -o size=256m tmpfs /dev/shm && exec \"$@\""
    env = dict(os.environ, LLMTRAIN_TEST_PRIVATE_SHM="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return subprocess.run(["unshare", *flags, "sh", "-c", script, "sh", sys.executable, *sys.argv],
                          env=env).returncode


libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.sem_open.restype = ctypes.c_void_p
libc.sem_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_uint]
libc.sem_unlink.argtypes = [ctypes.c_char_p]
SEM_FAILED = ctypes.c_void_p(0).value  # glibc: (sem_t *) 0
planted = []


def plant(basename):
    """A semaphore of Open MPI's name for files named `basename`, at 0: what a process
    killed inside sharedfp/sm leaves behind."""
    name = ("/OMPIO_" + basename).encode()
    h = libc.sem_open(name, os.O_CREAT | os.O_EXCL, 0o644, 0)
    if h in (None, SEM_FAILED):
        err = ctypes.get_errno()
        sys.exit(f"FAILED: cannot plant semaphore {name.decode()}: {os.strerror(err)} "
                 f"(one already exists: a real stale one? see /dev/shm/sem.OMPIO_{basename})")
    planted.append(name)


def unplant():
    for name in planted:
        libc.sem_unlink(name)
    planted.clear()


MODE = sys.argv[4] if len(sys.argv) > 4 else "mpirun"
CLUSTER = None  # srun: the test cluster's state directory


def slurm_cluster(*args, check=True):
    return subprocess.run([os.path.join(e.source, "scripts", "slurm-cluster.sh"), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, check=False)


def launch(n, *cmd):
    """n ranks of cmd, by mpirun or by srun on the test cluster."""
    if MODE == "mpirun":
        return e.mpi(n, *cmd)
    return [os.path.join(e.source, "scripts", "slurm-cluster.sh"), "exec", CLUSTER, "srun", "-N1", f"-n{n}",
            "--mpi=pmix", f"--chdir={e.work}", *cmd]


def end_hung_jobs():
    """srun: a killed srun leaves its step's ranks on the node; cancel every job of this test's cluster."""
    if MODE == "srun":
        slurm_cluster("exec", CLUSTER, "scancel", "--user=root")
        for _ in range(100):
            q = slurm_cluster("exec", CLUSTER, "squeue", "-h")
            if not q.stdout.strip():
                return
            time.sleep(0.3)


def run_limited(cmd, limit_s, env=None):
    """Runs cmd in its own process group; on the time limit kills the whole group.
    Returns (returncode or None on the limit, output)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=e.work,
                         env=dict(os.environ, **(env or {})), start_new_session=True)
    try:
        out, _ = p.communicate(timeout=limit_s)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        kill_session(p.pid)
        out, _ = p.communicate()
        return None, out


def kill_session(sid):
    """SIGKILL to every process of the session this test started (mpirun puts its ranks
    in process groups of their own, in mpirun's session); a rank blocked in sem_wait
    ignores SIGTERM (llmtrain handles it between iterations) but not SIGKILL."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:  # after "pid (comm)": state ppid pgrp session
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            pass


def step(what, cmd, env=None):
    rc, out = run_limited(cmd, LIMIT_S, env)
    if rc is None:
        print(out[-3000:])
        sys.exit(f"FAILED: {what} hung for {LIMIT_S} s with the stale semaphores planted: {' '.join(cmd)}")
    if rc != 0:
        print(out[-3000:])
        sys.exit(f"FAILED ({rc}): {what}: {' '.join(cmd)}")
    print(f"ok: {what} finished with the stale semaphores planted")
    return out


def control():
    """llmtrain-prepare with OMPI_MCA_sharedfp=sm given explicitly: it must reach the open of
    train_00000.h5.tmp (the file appears in its staging directory) and stay there."""
    data_sm = os.path.join(e.work, "data_sm")
    cmd = launch(2, os.path.join(e.bin_dir, "llmtrain-prepare"), "--out_dir", data_sm, "--tokenizer", "byte",
                "--val_fraction", "0.2", "--no_progress", os.path.join(e.work, "text"))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=e.work,
                         env=dict(os.environ, OMPI_MCA_sharedfp="sm"), start_new_session=True)
    opened = None
    deadline = time.time() + LIMIT_S
    try:
        while time.time() < deadline:
            if p.poll() is not None:
                out = p.communicate()[0]
                print(out[-3000:])
                sys.exit(f"FAILED: with OMPI_MCA_sharedfp=sm and the semaphores planted, llmtrain-prepare did not "
                         f"hang (rc {p.returncode}): the planted semaphore is not what Open MPI waits on here, so "
                         f"this test proves nothing")
            if opened is None and glob.glob(os.path.join(e.work, ".data_sm.prepare-*", "train_00000.h5.tmp")):
                opened = time.time()
            if opened is not None and time.time() - opened >= CONTROL_S:
                print(f"ok (control): with OMPI_MCA_sharedfp=sm given explicitly llmtrain-prepare opened "
                      f"train_00000.h5.tmp and stayed in the open for {CONTROL_S} s: killed")
                return
            time.sleep(0.2)
    finally:
        if p.poll() is None:
            kill_session(p.pid)
            p.communicate()
            end_hung_jobs()
    sys.exit(f"FAILED (control): llmtrain-prepare did not reach train_00000.h5.tmp within {LIMIT_S} s")


def write_text(dirname):
    """A few hundred KB of plain text (byte tokenizer): enough for a tiny model's batches."""
    os.makedirs(dirname)
    rnd = random.Random(49)
    words = ["the", "semaphore", "was", "left", "at", "zero", "by", "a", "killed", "process", "and", "every",
             "later", "open", "waited", "for", "ever", "until", "someone", "noticed"]
    for i in range(40):  # 40 documents: some land in val
        with open(os.path.join(dirname, f"doc{i:02d}.txt"), "w") as f:
            for _ in range(80):
                f.write(" ".join(rnd.choice(words) for _ in range(12)) + ".\n")


def main():
    # What the programs do by themselves is under test, not a workaround in the caller's environment.
    for k in ("OMPI_MCA_sharedfp", "OMPI_MCA_io"):
        os.environ.pop(k, None)
    global CLUSTER
    work = e.setup(sys.argv, "stale_semaphore_" + MODE)
    shm = "a private /dev/shm" if os.environ.get("LLMTRAIN_TEST_PRIVATE_SHM") else "the machine's /dev/shm"
    text = os.path.join(work, "text")
    write_text(text)
    prepare = os.path.join(e.bin_dir, "llmtrain-prepare")
    names = ["train_00000.h5", "val_00000.h5", "train_00000.h5.tmp", "val_00000.h5.tmp",
             ".ckpt_00000002.h5.tmp", "ckpt_00000002.h5"]
    if MODE == "srun":
        CLUSTER = os.path.join(work, "cluster")
        st = slurm_cluster("start", CLUSTER, "--nodes", "1", "--cpus", "2")
        if st.returncode == 77:
            print(f"SKIP: the test cluster cannot start here: {st.stdout.strip()}")
            return 77
        if st.returncode != 0:
            print(st.stdout[-3000:])
            sys.exit("FAILED: the test cluster did not start")
    try:
        for n in names:
            plant(n)
        print(f"planted {len(names)} zero semaphores in {shm}: " + ", ".join("OMPIO_" + n for n in names))

        # The control: the component this test guards against, asked for explicitly, hangs
        # in the open of the first output (its file exists, the process stays in the open).
        control()

        data = os.path.join(work, "data")
        step("llmtrain-prepare (writes train_00000.h5, val_00000.h5)",
             launch(2, prepare, "--out_dir", data, "--tokenizer", "byte", "--val_fraction", "0.2", "--no_progress",
                    text))
        cfg = os.path.join(e.source, "inputs", "tiny_llama.cfg")
        common = [cfg, f"--data_dir={data}", "--out_dir=out", e.CPU, "--eval_interval=2", "--eval_iters=2",
                  "--log_interval=1", "--checkpoint_interval=2"]
        step("llmtrain (reads the shards, evaluates, saves .ckpt_00000002.h5.tmp)",
             launch(2, e.llmtrain(), *common, "--max_iters=2"))
        if not os.path.isfile(os.path.join(work, "out", "checkpoints", "ckpt_00000002.h5")):
            sys.exit("FAILED: the run finished without its checkpoint ckpt_00000002.h5")
        step("llmtrain --init_from=resume (reads ckpt_00000002.h5)",
             launch(2, e.llmtrain(), *common, "--max_iters=3", "--init_from=resume"))
        # The watchdog names what a stuck rank is inside of: with sharedfp/sm asked for, the
        # shard open hangs, and after collective_timeout_s the message says which file.
        rc, out = run_limited(launch(2, e.llmtrain(), *common, "--max_iters=3", "--out_dir=out_sm",
                                     "--collective_timeout_s=4"), LIMIT_S, env={"OMPI_MCA_sharedfp": "sm"})
        shard = os.path.join(data, "train_00000.h5")
        named = [ln for ln in out.splitlines() if ln.strip().startswith("rank ") and f"opening {shard}'" in ln]
        if rc is None or rc == 0 or "watchdog: no progress" not in out or not named:
            print(out[-3000:])
            sys.exit(f"FAILED: with sharedfp/sm the run's watchdog did not end it naming 'opening {shard}' "
                     f"(rc {rc})")
        print(f"ok: the watchdog names the open: {named[0].strip()[:200]}")
        end_hung_jobs()
        for n in names:  # still there and still taken: the runs went past them, not through them
            if not os.path.exists("/dev/shm/sem.OMPIO_" + n):
                sys.exit(f"FAILED: the planted semaphore OMPIO_{n} is gone: the test did not test what it says")
    finally:
        unplant()
        if CLUSTER:
            slurm_cluster("stop", CLUSTER)
    print("PASSED")


if __name__ == "__main__":
    rc = reexec_in_private_shm()
    sys.exit(rc if rc is not None else main())
