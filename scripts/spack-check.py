#!/usr/bin/env python3
"""spack-check.py [--packages GIT_DIR] [--env spack.yaml] [--repo spack/spack_repo/llmtrain]

Checks the project's Spack files against Spack's own package repository,
spack/spack-packages, at the commit pinned below, without a Spack: every
dependency, version range and variant that spack.yaml and the project's
package.py name must exist there. Prints one line per problem ("spack.yaml:
specs: 'opnempi': no such package in spack-packages@1e8cf05 (did you mean
openmpi?)") and exits 1; exits 0 with a summary when everything is found;
exits 77 when the spack-packages repository is not on this machine.

How: each package.py involved (and the build-system classes it derives from,
repos/spack_repo/builtin/build_systems/*.py) is executed as Spack would import
it, read straight from the pinned commit with git, against a stand-in for
Spack's core (`spack.package` and friends) that records the directives
(version, variant, depends_on, provides) and lets everything else through.
So variants made in loops (boost's libraries), inherited ones (CudaPackage's
cuda_arch, CMakePackage's build_type) and value sets (openmpi's fabrics) come
out as Spack sees them. Not checked: whether a `when=` condition allows a
variant in the combination asked for, and whether the concretizer finds a
solution (that needs Spack's core).

The repository: --packages, else $LLMTRAIN_SPACK_PACKAGES, else
/work/.mirror/spack+spack-packages/repo, ../spack-packages beside the clone
(a git directory or a clone; `git clone https://github.com/spack/spack-packages`).
"""
import argparse
import builtins
import difflib
import importlib.abc
import importlib.util
import os
import re
import subprocess
import sys
import types

# The spack-packages commit the Spack files were checked against (2026-07-01).
PINNED = "1e8cf059e35d55c4fe1142fed41785bedf6c7246"
PKG_DIR = "repos/spack_repo/builtin/packages"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------
# The stand-in for Spack's core.

class Recorder:
    pending = []  # directives of the class body being executed


def _directive(kind):
    def record(*args, **kwargs):
        Recorder.pending.append((kind, args, kwargs))
        return None
    return record


class ValueSet:
    """any_combination_of / disjoint_sets: the values a multi-valued variant takes."""

    def __init__(self, *values):
        self.values = set()
        for v in values:
            self.values.update(v if isinstance(v, (tuple, list, set)) else [v])

    def with_non_feature_values(self, *v):
        self.values.update(v)
        return self

    def __getattr__(self, name):  # with_default, with_error, prohibit_empty_set, ...
        return lambda *a, **k: self


class DirectiveMeta(type):
    def __new__(mcs, name, bases, ns, **kw):
        cls = super().__new__(mcs, name, bases, ns)
        if not ns.get("_stub"):
            cls._directives = Recorder.pending
            Recorder.pending = []
        else:
            cls._directives = []
        return cls

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub()

    def __getitem__(cls, k):  # Generic[...] in annotations
        return cls

    def __call__(cls, *a, **k):
        if cls.__dict__.get("_stub"):
            return Stub()
        return super().__call__(*a, **k)


class Stub:
    """Anything Spack's core would provide that a class body merely touches."""

    def __init__(self, *a, **k):
        pass

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub()

    def __call__(self, *a, **k):
        return a[0] if len(a) == 1 and callable(a[0]) and not k else Stub()

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __getitem__(self, k):
        return Stub()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def __mro_entries__(self, bases):
        return (stub_class("Stub"),)

    __add__ = __radd__ = __or__ = __ror__ = __and__ = __truediv__ = lambda self, o: Stub()


_stub_classes = {}


def stub_class(name):
    if name not in _stub_classes:
        _stub_classes[name] = DirectiveMeta(name, (), {"_stub": True})
    return _stub_classes[name]


class PackageBase(metaclass=DirectiveMeta):
    pass


class Package(PackageBase):
    pass


def _when(*a, **k):
    return Stub()


def _decorator(*a, **k):
    return lambda f: f


SPACK_PACKAGE = {
    "version": _directive("version"),
    "variant": _directive("variant"),
    "depends_on": _directive("depends_on"),
    "provides": _directive("provides"),
    "extends": _directive("depends_on"),
    "when": _when,
    "default_args": _when,
    "any_combination_of": lambda *v: ValueSet(*v),
    "auto_or_any_combination_of": lambda *v: ValueSet("auto", *v),
    "disjoint_sets": lambda *sets: ValueSet(*[x for s in sets for x in s]),
    "PackageBase": PackageBase,
    "Package": Package,
    "run_after": _decorator,
    "run_before": _decorator,
    "on_package_attributes": _decorator,
    "register_builder": _decorator,
}


class StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in SPACK_PACKAGE:
            return SPACK_PACKAGE[name]
        return stub_class(name) if name[:1].isupper() else Stub()


class Builtins(dict):
    """Names a package.py uses without importing them (its star import of
    spack.package): directives from the table, anything else a stand-in."""

    def __missing__(self, name):
        if name in SPACK_PACKAGE:
            return SPACK_PACKAGE[name]
        return stub_class(name) if name[:1].isupper() else Stub()


BUILTINS = Builtins(vars(builtins))
for _name in ("license", "copyright", "credits", "help", "exit", "quit"):  # directives, not the REPL's
    BUILTINS.pop(_name, None)


def pkg_dir(name):
    """Spack's package name -> its directory (py-torch -> py_torch, 3proxy -> _3proxy)."""
    d = name.replace("-", "_")
    return "_" + d if d[:1].isdigit() else d


def pkg_name(directory):
    return directory.lstrip("_").replace("_", "-")


class Git:
    def __init__(self, gitdir, commit):
        self.gitdir, self.commit = gitdir, commit
        self._ls = None

    def run(self, *args, check=True):
        return subprocess.run(["git", "--git-dir", self.gitdir, *args], capture_output=True, text=True, check=check)

    def read(self, path):
        r = self.run("show", f"{self.commit}:{path}", check=False)
        return r.stdout if r.returncode == 0 else None

    def packages(self):
        if self._ls is None:
            out = self.run("ls-tree", "--name-only", f"{self.commit}:{PKG_DIR}").stdout
            self._ls = {pkg_name(d) for d in out.split()}
        return self._ls


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """spack_repo.builtin.* from the pinned commit; spack_repo.<ours>.* from the
    checkout; spack.* / llnl.* / archspec.* as stand-ins."""

    def __init__(self, git, ours):
        self.git, self.ours = git, ours  # ours: (namespace, directory)

    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in ("spack", "llnl", "archspec", "_vendoring"):
            return importlib.util.spec_from_loader(name, self, is_package=True)
        if top != "spack_repo":
            return None
        return importlib.util.spec_from_loader(name, self, is_package=self._source(name)[1])

    def _source(self, name):
        parts = name.split(".")
        if len(parts) <= 2:
            return "", True
        rel = "/".join(parts[2:])
        if parts[1] == self.ours[0]:
            for f, pkg in ((f"{rel}.py", False), (f"{rel}/__init__.py", True)):
                p = os.path.join(self.ours[1], f)
                if os.path.isfile(p):
                    return open(p).read(), pkg
            return "", True
        base = "repos/" + "/".join(parts[:2]) + "/" + rel
        text = self.git.read(base + ".py")
        if text is not None:
            return text, False
        return self.git.read(base + "/__init__.py") or "", True

    def create_module(self, spec):
        if spec.name.split(".")[0] != "spack_repo":
            return StubModule(spec.name)
        return None

    def exec_module(self, module):
        if isinstance(module, StubModule):
            module.__path__ = []
            if module.__name__ == "spack.package":
                module.__dict__.update(SPACK_PACKAGE)
                module.__all__ = list(SPACK_PACKAGE)
            return
        text, is_pkg = self._source(module.__name__)
        if is_pkg:
            module.__path__ = []
        module.__dict__["__builtins__"] = BUILTINS
        exec(compile(text, module.__name__, "exec"), module.__dict__)


# --------------------------------------------------------------------------
# What a package declares.

class Declared:
    def __init__(self, name, cls):
        self.name = name
        self.versions, self.variants, self.deps, self.provides = [], {}, [], set()
        for klass in reversed(cls.__mro__):
            for kind, args, kw in klass.__dict__.get("_directives", []):
                if kind == "version" and args:
                    self.versions.append(str(args[0]))
                elif kind == "variant" and args:
                    self.variants.setdefault(str(args[0]), set()).update(variant_values(kw))
                elif kind == "depends_on" and args:
                    self.deps.append(str(args[0]))
                elif kind == "provides":
                    self.provides.update(split_name(str(a))[0] for a in args)


def variant_values(kw):
    """The values a variant takes, or {"*"} when any value goes."""
    v = kw.get("values")
    if v is None:
        d = kw.get("default")
        return {True, False} if isinstance(d, bool) or d is None else {"*"}
    if isinstance(v, ValueSet):
        return {str(x) for x in v.values}
    if isinstance(v, (tuple, list, set)):
        return {str(x) for x in v}
    return {"*"}  # a validator function, a range, ...


def split_name(token):
    m = re.match(r"^([A-Za-z0-9_.-]*[A-Za-z0-9_])", token)
    return (m.group(1) if m else ""), token[m.end():] if m else token


# --------------------------------------------------------------------------
# Specs and versions (a subset of Spack's syntax: what these files use).

def parse_spec(text):
    """'py-torch@2.11: +cuda cuda_arch=90 ^nccl' ->
    [(name, version-range or None, {variant: value}), ...] (the root, then ^deps)."""
    out = []
    for part in re.split(r"\s\^|^\^", " " + text.strip()):
        part = part.strip()
        if not part:
            continue
        toks = re.findall(r"[+~][\w-]+|\w[\w-]*==?[\w.,:-]+|%[^\s]+|@[^\s+~]+|[^\s+~@%]+", part)
        name, ver, variants = None, None, {}
        for t in toks:
            if t.startswith("%"):
                continue  # a compiler or build dependency: out of scope
            if t.startswith("@"):
                ver = t[1:]
            elif t[0] in "+~":
                variants[t[1:]] = t[0] == "+"
            elif "=" in t:
                k, v = re.split(r"==?", t, maxsplit=1)
                variants[k] = v
            elif name is None:
                name, rest = split_name(t)
                if rest.startswith("@"):
                    ver = rest[1:]
        if name:
            out.append((name, ver, variants))
    return out


def vkey(v):
    return [int(c) if c.isdigit() else c for c in re.split(r"[._-]", v) if c != ""]


def vcmp(a, b):
    for x, y in zip(a, b):
        if x == y:
            continue
        if isinstance(x, int) and isinstance(y, int):
            return -1 if x < y else 1
        if isinstance(x, int):
            return 1  # numbers sort after words (Spack: develop/main are newest; close enough here)
        if isinstance(y, int):
            return -1
        return -1 if x < y else 1
    return 0


def prefix(a, b):
    return a[: len(b)] == b


def satisfies(version, rng):
    """Does the declared `version` fall in the range text `rng` (2.11:, :6.5, 1.2:1.4, =main, 22.05)?"""
    for r in rng.split(","):
        if r.startswith("="):
            if version == r[1:]:
                return True
            continue
        v = vkey(version)
        if ":" in r:
            lo, hi = r.split(":", 1)
            ok_lo = not lo or vcmp(v, vkey(lo)) >= 0
            ok_hi = not hi or vcmp(v, vkey(hi)) <= 0 or prefix(v, vkey(hi))
            if ok_lo and ok_hi:
                return True
        elif prefix(v, vkey(r)):
            return True
    return False


# --------------------------------------------------------------------------

class Checker:
    def __init__(self, git, ours_ns, ours_dir):
        self.git, self.ours_ns, self.ours_dir = git, ours_ns, ours_dir
        self.cache, self.virtuals = {}, {}
        self.problems, self.checked, self.seen = [], 0, set()
        sys.meta_path.insert(0, Finder(git, (ours_ns, ours_dir)))

    def module_name(self, pkg):
        return pkg_dir(pkg)

    def load(self, pkg, ours=False):
        key = (pkg, ours)
        if key not in self.cache:
            ns = self.ours_ns if ours else "builtin"
            modname = f"spack_repo.{ns}.packages.{self.module_name(pkg)}.package"
            mod = importlib.import_module(modname)
            want = "".join(w.capitalize() for w in re.split(r"[-_]", pkg))
            want = re.sub(r"^(\d)", r"_\1", want)
            classes = [c for c in vars(mod).values() if isinstance(c, DirectiveMeta) and c.__module__ == modname]
            cls = next((c for c in classes if c.__name__.lower() == want.lower()), classes[-1] if classes else None)
            if cls is None:
                raise RuntimeError(f"{modname}: no package class")
            self.cache[key] = Declared(pkg, cls)
        return self.cache[key]

    def is_virtual(self, name):
        if name not in self.virtuals:
            r = self.git.run("grep", "-l", "-E", r'provides\([^)]*"' + re.escape(name) + r'[@"+ ]',
                             self.git.commit, "--", PKG_DIR, check=False)
            self.virtuals[name] = [pkg_name(line.split("/")[-2]) for line in r.stdout.split()]
        return self.virtuals[name]

    def check_spec(self, where, text, own_versions=None):
        if (where, text) in self.seen:
            return
        self.seen.add((where, text))
        for name, ver, variants in parse_spec(text):
            self.checked += 1
            if name == self.ours_ns and own_versions is not None:
                decl = self.load(name, ours=True)
            elif name in self.git.packages():
                try:
                    decl = self.load(name)
                except Exception as e:  # a package the stand-in cannot import
                    self.problems.append(f"{where}: '{text}': {name}: could not read its package.py ({type(e).__name__}: {e})")
                    continue
            else:
                providers = self.is_virtual(name)
                if providers:
                    if variants:
                        self.problems.append(f"{where}: '{text}': {name} is a virtual package (provided by "
                                             f"{', '.join(sorted(providers)[:4])}, ...): it has no variants")
                    continue
                close = difflib.get_close_matches(name, self.git.packages(), n=3)
                hint = f" (did you mean {' or '.join(close)}?)" if close else ""
                self.problems.append(f"{where}: '{text}': {name}: no such package in spack-packages@{self.git.commit[:7]}{hint}")
                continue
            if ver and not any(satisfies(v, ver) for v in decl.versions):
                newest = sorted(decl.versions, key=lambda v: [(0, c) if isinstance(c, int) else (-1, 0) for c in vkey(v)])[-3:]
                self.problems.append(f"{where}: '{text}': {name}@{ver}: no such version (declared: ..., {', '.join(newest)})")
            for var, val in variants.items():
                if var not in decl.variants:
                    close = difflib.get_close_matches(var, decl.variants, n=3)
                    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
                    self.problems.append(f"{where}: '{text}': {name} has no variant '{var}'{hint}")
                    continue
                allowed = decl.variants[var]
                if "*" in allowed:
                    continue
                for one in (str(val).split(",") if not isinstance(val, bool) else [val]):
                    if isinstance(one, bool):
                        if not ({True, False} & allowed):
                            self.problems.append(f"{where}: '{text}': {name}'s variant '{var}' is not a boolean")
                    elif one not in {str(a) for a in allowed}:
                        self.problems.append(f"{where}: '{text}': {name} {var}={one}: not one of its values")


def find_packages_repo(arg):
    cands = [arg] if arg else []
    if os.environ.get("LLMTRAIN_SPACK_PACKAGES"):
        cands.append(os.environ["LLMTRAIN_SPACK_PACKAGES"])
    cands += ["/work/.mirror/spack+spack-packages/repo", os.path.join(ROOT, "..", "spack-packages")]
    for c in cands:
        for g in (c, os.path.join(c, ".git")):
            if os.path.isdir(g) and subprocess.run(["git", "--git-dir", g, "rev-parse", "--git-dir"],
                                                   capture_output=True).returncode == 0:
                return g
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--packages", help="spack-packages git directory or clone")
    ap.add_argument("--commit", default=PINNED)
    ap.add_argument("--env", default=os.path.join(ROOT, "spack.yaml"))
    ap.add_argument("--repo", default=os.path.join(ROOT, "spack", "spack_repo", "llmtrain"),
                    help="the project's package repository (holds repo.yaml)")
    a = ap.parse_args()
    gitdir = find_packages_repo(a.packages)
    if not gitdir:
        print("spack-check: skipped: no spack-packages repository here (--packages, LLMTRAIN_SPACK_PACKAGES, "
              "or `git clone https://github.com/spack/spack-packages` beside the clone)")
        return 77
    git = Git(gitdir, a.commit)
    if git.run("cat-file", "-e", f"{a.commit}^{{commit}}", check=False).returncode != 0:
        print(f"spack-check: {gitdir} lacks the pinned commit {a.commit} (git fetch it)")
        return 1
    import yaml
    repo_yaml = yaml.safe_load(open(os.path.join(a.repo, "repo.yaml")))["repo"]
    ns = repo_yaml["namespace"]
    builtin_api = yaml.safe_load(git.read("repos/spack_repo/builtin/repo.yaml"))["repo"]["api"]
    chk = Checker(git, ns, os.path.abspath(a.repo))  # spack_repo.<ns>.X is <repo>/X
    if str(repo_yaml.get("api", "v1.0")).split(".")[0] != str(builtin_api).split(".")[0]:
        chk.problems.append(f"{a.repo}/repo.yaml: api {repo_yaml.get('api', 'v1.0 (none given)')}: "
                            f"spack-packages@{a.commit[:7]} is {builtin_api}")

    own = chk.load(ns, ours=True) if os.path.isfile(os.path.join(a.repo, "packages", ns, "package.py")) else None
    pkg_rel = os.path.relpath(os.path.join(a.repo, "packages", ns, "package.py"), ROOT)
    if own is None:
        chk.problems.append(f"{pkg_rel}: missing")
    else:
        for d in own.deps:
            chk.check_spec(pkg_rel, d)
    env = yaml.safe_load(open(a.env))["spack"]
    env_rel = os.path.relpath(a.env, ROOT)
    for s in env.get("specs", []):
        chk.check_spec(f"{env_rel}: specs", str(s), own_versions=own.versions if own else [])
    for name, cfg in (env.get("packages") or {}).items():
        if name != "all":
            chk.check_spec(f"{env_rel}: packages", name)
        for ext in (cfg or {}).get("externals", []) or []:
            chk.check_spec(f"{env_rel}: packages:{name}: externals", ext["spec"])
        for req in (cfg or {}).get("require", []) or []:
            if isinstance(req, str):
                chk.check_spec(f"{env_rel}: packages:{name}: require", f"{name} {req}")
    for name, dev in (env.get("develop") or {}).items():
        chk.check_spec(f"{env_rel}: develop", dev.get("spec", name), own_versions=own.versions if own else [])
    for p in chk.problems:
        print(p)
    if chk.problems:
        print(f"spack-check: {len(chk.problems)} problem(s) against spack-packages@{a.commit[:7]}")
        return 1
    print(f"spack-check: {chk.checked} specs in {env_rel} and {pkg_rel}: every package, version range and "
          f"variant exists in spack-packages@{a.commit[:7]} ({len(chk.cache)} package files read)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
