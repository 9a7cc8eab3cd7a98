#!/usr/bin/env python3
"""Every HDF5 call in llmtrain holds the one HDF5 lock (core/hdf5_mutex.hpp).

HDF5 as Debian builds it is not thread-safe, and the data loader's workers read
shards while the training thread writes checkpoints. The lock is taken by
H5_CHECK(call) and H5_LOCKED(expr) (and by h5::H5Id when it closes), so a line
of C++ that calls an HDF5 function (H5Fopen(...), H5get_libversion(...)) or
names one of HDF5's predefined types (H5T_NATIVE_*, H5T_STD_*, H5T_IEEE_*,
H5T_C_S1: each expands to a call of H5open) must do so inside one of them,
and the file must include src/core/hdf5_util.hpp (directly or through its own
headers), where H5_CHECK is defined (there only: it takes the lock).
This check names every line and file that does not. A line may opt out with a
comment "hdf5-lock: <why the lock is held>" (none does today).

Usage: check_hdf5_lock.py SOURCE_DIR   (scans SOURCE_DIR/src and SOURCE_DIR/include)
Exit 0: every call is locked; 1: the unlocked calls are listed.
"""
import os
import re
import sys

CALL = re.compile(r"\bH5[A-Za-z][A-Za-z0-9_]*\s*\(")
TYPE = re.compile(r"\bH5T_(NATIVE_|STD_|IEEE_|C_S1\b|FORTRAN_S1\b|UNIX_)")
OURS = {"H5Id", "H5Messages"}  # llmtrain's own names that look like HDF5's
LOCKED = ("H5_CHECK(", "H5_LOCKED(", "hdf5-lock:")


def code_of(line):
    """The line without a // comment and string literals (good enough for this code base)."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    return line.split("//", 1)[0]


def calls_hdf5(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            code = code_of(line)
            if TYPE.search(code) or any(not c.startswith(("H5_", "H5Id", "H5Messages"))
                                        for c in (m.group(0) for m in CALL.finditer(code))):
                return True
    return False


def unlocked(path):
    bad = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            code = code_of(line)
            calls = [m.group(0).rstrip("( \t") for m in CALL.finditer(code)]
            calls = [c for c in calls if c not in OURS and not c.startswith("H5_")]
            if not calls and not TYPE.search(code):
                continue
            if any(k in line for k in LOCKED):
                continue
            bad.append(f"{path}:{n}: {line.strip()}")
    return bad


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
LOCKING_HEADER = os.path.join("core", "hdf5_util.hpp")


def reaches_locking_header(path, roots, seen=None):
    """Whether `path` includes src/core/hdf5_util.hpp, following project headers."""
    seen = set() if seen is None else seen
    if path in seen:
        return False
    seen.add(path)
    if path.endswith(os.sep + LOCKING_HEADER):
        return True
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = INCLUDE.match(line)
            if not m:
                continue
            for base in [os.path.dirname(path), *roots]:
                cand = os.path.normpath(os.path.join(base, m.group(1)))
                if os.path.isfile(cand):
                    if reaches_locking_header(cand, roots, seen):
                        return True
                    break
    return False


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    roots = [os.path.join(root, "src"), os.path.join(root, "include")]
    bad, files = [], 0
    for top in ("src", "include"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if name.endswith((".cpp", ".hpp", ".h", ".cu", ".cuh")):
                    files += 1
                    path = os.path.join(dirpath, name)
                    lines = unlocked(path)
                    bad += lines
                    if name.endswith((".cpp", ".cu")) and not lines and calls_hdf5(path) and \
                            not reaches_locking_header(path, roots):
                        bad.append(f"{path}: calls HDF5 but does not include core/hdf5_util.hpp (H5_CHECK would "
                                   "not lock)")
    header = os.path.join(root, "src", LOCKING_HEADER)
    text = open(header, encoding="utf-8").read() if os.path.isfile(header) else ""
    if not re.search(r"#define H5_CHECK\(call\)[^\n]*\\?\n?[^\n]*hdf5_locked", text):
        bad.append(f"{header}: does not define H5_CHECK to hold the HDF5 lock (hdf5_locked)")
    if bad:
        print(f"{len(bad)} HDF5 call(s) outside H5_CHECK / H5_LOCKED (HDF5 is not thread-safe: every call must "
              "hold hdf5_mutex(), see include/llmtrain/core/hdf5_mutex.hpp):")
        print("\n".join(bad))
        return 1
    print(f"ok: every HDF5 call in {files} files of src/ and include/ holds the HDF5 lock")
    return 0


sys.exit(main())
