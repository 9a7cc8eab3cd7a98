#!/usr/bin/env python3
"""packed-libs.py: which libraries a packed build must carry, and whether it carries them.

A packed build (scripts/pack-build.sh) runs on a GPU image that has only Ubuntu 24.04's
own libraries, CUDA, GCC 13 and python's torch (the nvidia-* wheels beside it), plus the
GPU kit's libraries (../shared/gpu-kit/deps.tar.xz). A library a program loads is
*provided* when its soname is
  - in the image's list (scripts/gpu-image-libs.txt: glibc, GCC 13's runtime, the
    Priority: required libraries of Ubuntu 24.04),
  - in the torch wheel (torch/lib, torch.libs) or an nvidia-* wheel (nvidia/**/lib),
  - in the GPU kit,
and the search stops there (what those load is theirs to provide). Everything else
must travel in the archive's lib/, and what it loads is searched the same way.

  packed-libs.py plan  [OPTIONS] PROGRAM...
      prints "SONAME PATH" for every library to pack, resolved on this machine (ldd);
      exits 1 naming the program when one cannot be resolved here.
  packed-libs.py check [OPTIONS] DIR
      DIR: an unpacked archive (llmtrain-build/, with build/ and lib/). For every ELF
      program under DIR/build, every library it needs, and what those in DIR/lib need,
      must be provided or in DIR/lib; prints each one that is not ("PROGRAM: SONAME
      (via CHAIN)") and exits 1. Reads the files only: no loader, no ldd, so it says
      what the GPU image will do, not what this machine (which has everything) does.
OPTIONS: --site DIR (site-packages with torch/ and nvidia/; default: python3's torch),
         --kit FILE (the kit's deps.tar.xz; none: no kit), --image FILE (default
         gpu-image-libs.txt beside this script).
"""
import argparse
import glob
import os
import struct
import subprocess
import sys
import tarfile


def elf_needed(path):
    """DT_NEEDED of an ELF64 little-endian file (None if not one)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dyn = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, p_memsz = struct.unpack_from(
            "<IIQQQQQ", data, phoff + i * phentsize)
        if p_type == 1:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:
            dyn = (p_offset, p_filesz)
    if dyn is None:
        return []   # static
    needed, strtab = [], None
    for off in range(dyn[0], dyn[0] + dyn[1], 16):
        tag, val = struct.unpack_from("<qQ", data, off)
        if tag == 0:
            break
        if tag == 1:
            needed.append(val)
        elif tag == 5:
            strtab = val
    for vaddr, offset, size in loads:   # DT_STRTAB is an address: to a file offset
        if vaddr <= strtab < vaddr + size:
            strtab = strtab - vaddr + offset
            break

    def cstr(o):
        return data[o:data.index(b"\0", o)].decode()
    return [cstr(strtab + n) for n in needed]


def provided_names(args):
    here = os.path.dirname(os.path.abspath(__file__))
    image = set()
    for line in open(args.image or os.path.join(here, "gpu-image-libs.txt")):
        line = line.split("#", 1)[0].strip()
        if line:
            image.add(line)
    site = args.site
    if not site:
        site = subprocess.check_output(
            ["python3", "-c", "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))"],
            text=True).strip()
    wheels = set()
    for pat in ("torch/lib/*.so*", "torch.libs/*.so*", "nvidia/**/lib/*.so*"):
        wheels.update(os.path.basename(p) for p in glob.glob(os.path.join(site, pat), recursive=True))
    kit = set()
    if args.kit:
        with tarfile.open(args.kit) as t:
            kit = {os.path.basename(n) for n in t.getnames() if ".so" in os.path.basename(n)}
    return {"image": image, "wheels": wheels, "kit": kit}, site


def is_provided(name, prov):
    return any(name in s for s in prov.values())


def ldd_map(path):
    out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
    m = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>":
            m[parts[0]] = parts[2] if parts[2].startswith("/") else None
    return m


def plan(args):
    prov, site = provided_names(args)
    want, bad = {}, []
    for prog in args.paths:
        host = ldd_map(prog)
        todo = list(elf_needed(prog) or [])
        seen = set()
        while todo:
            name = todo.pop()
            if name in seen or is_provided(name, prov):
                continue
            seen.add(name)
            path = host.get(name)
            if not path:
                path = next((p for lib in want.values() for p in [ldd_map(lib).get(name)] if p), None)
            if not path:
                bad.append(f"{prog}: {name} not found on this machine")
                continue
            real = os.path.realpath(path)
            if any(real.startswith(os.path.realpath(os.path.join(site, w)) + "/") for w in ("torch", "torch.libs", "nvidia")):
                continue   # a wheel's library under another name
            want[name] = path
            todo.extend(elf_needed(path) or [])
    for name in sorted(want):
        print(name, want[name])
    for b in bad:
        print("packed-libs:", b, file=sys.stderr)
    return 1 if bad else 0


def check(args):
    prov, _ = provided_names(args)
    d = args.paths[0]
    libdir = os.path.join(d, "lib")
    packed = set(os.listdir(libdir)) if os.path.isdir(libdir) else set()
    missing, progs = {}, 0
    for root, _, files in os.walk(os.path.join(d, "build")):
        for f in files:
            p = os.path.join(root, f)
            if os.path.islink(p) or not os.access(p, os.X_OK):
                continue
            needed = elf_needed(p)
            if needed is None:
                continue
            progs += 1
            todo = [(n, ()) for n in needed]
            seen = set()
            while todo:
                name, via = todo.pop()
                if name in seen or is_provided(name, prov):
                    continue
                seen.add(name)
                if name in packed:
                    todo.extend((n, via + (name,)) for n in elf_needed(os.path.join(libdir, name)) or [])
                    continue
                missing.setdefault(name, []).append((os.path.relpath(p, d), via))
    for name, users in sorted(missing.items()):
        prog, via = users[0]
        chain = f" (via {' -> '.join(via)})" if via else ""
        more = f" and {len(users) - 1} more" if len(users) > 1 else ""
        print(f"packed-libs: {prog}{more}: {name} is not in lib/, the image, the wheels nor the kit{chain}")
    print(f"packed-libs: {progs} programs, {len(packed)} libraries in lib/, "
          f"{len(missing)} unresolved", file=sys.stderr)
    return 1 if missing else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["plan", "check"])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--site")
    ap.add_argument("--kit")
    ap.add_argument("--image")
    args = ap.parse_args()
    return plan(args) if args.mode == "plan" else check(args)


if __name__ == "__main__":
    sys.exit(main())
