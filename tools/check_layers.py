#!/usr/bin/env python3
"""The shape rules of src/ that the build checks (DESIGN.md §2, "Folders and layers").

usage: check_layers.py layers BUILD_DIR SPEC...   SPEC is FOLDER=DEP,DEP,... in build order, one
                                                  per static library BUILD_DIR/libupipe_FOLDER.a
       check_layers.py sizes SRC_DIR              no function over 120 lines, no file over 700

layers, from the symbols of the built libraries (nm):
  - every upipe symbol a folder's library uses is defined in that folder or in a folder it declares
    below it (its DEPs, transitively); a DEP must be declared before the folder that names it;
  - no loop between object files: file A uses file B when B defines a symbol A leaves undefined;
    a strongly connected component of more than one file is a loop;
  - MPI_* only from the folders at or above comm; BLAS and oneDNN only from kernels.
Exit status 1 with one line per fault; 0 when the shape holds.
"""
import collections
import os
import re
import subprocess
import sys

MAX_FUNC = 120
MAX_FILE = 700


def nm_objects(lib):
    """{object name: (defined symbols, undefined symbols)} of a static library."""
    out = subprocess.run(["nm", "-P", "-A", lib], capture_output=True, text=True, check=True).stdout
    objs = collections.defaultdict(lambda: (set(), set()))
    for line in out.splitlines():
        head, _, rest = line.partition(": ")
        parts = rest.split()
        if len(parts) < 2 or "[" not in head:
            continue
        obj = head[head.index("[") + 1 : head.rindex("]")]
        sym, kind = parts[0], parts[1]
        if kind == "U":
            objs[obj][1].add(sym)
        elif kind in "TDBRGSCVWi":
            objs[obj][0].add(sym)
    return objs


def loops(graph):
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on, stack, found, n = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = n[0]
        n[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n[0]
                    n[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def check_layers(build, specs):
    faults, order, deps = [], [], {}
    for spec in specs:
        folder, _, rest = spec.partition("=")
        deps[folder] = [d for d in rest.split(",") if d]
        for d in deps[folder]:
            if d not in order:
                faults.append(f"{folder}: depends on {d}, which is not declared below it")
        order.append(folder)
    below = {}
    for f in order:
        s = set()
        for d in deps[f]:
            s |= {d} | below.get(d, set())
        below[f] = s
    where, objs = {}, {}
    for f in order:
        lib = os.path.join(build, f"libupipe_{f}.a")
        if not os.path.exists(lib):
            faults.append(f"{f}: {lib} not built")
            continue
        for o, (d, u) in nm_objects(lib).items():
            key = f"{f}/{o}"
            objs[key] = (d, u)
            for s in d:
                where.setdefault(s, key)
    graph = collections.defaultdict(set)
    mpi_ok = {"comm"} | {f for f in order if "comm" in below[f]}
    for key, (_, undef) in sorted(objs.items()):
        folder = key.split("/")[0]
        for s in sorted(undef):
            home = where.get(s)
            if home is None:  # a library's symbol
                if s.startswith("MPI_") and folder not in mpi_ok:
                    faults.append(f"{key}: uses {s}; only comm and the folders above it use MPI")
                if re.match(r"(cblas_|dnnl_|openblas_|sgemm_)", s) and folder != "kernels":
                    faults.append(f"{key}: uses {s}; only kernels calls BLAS or oneDNN")
                continue
            if home == key:
                continue
            graph[key].add(home)
            hf = home.split("/")[0]
            if hf != folder and hf not in below[folder]:
                faults.append(f"{key}: uses {s} from {home}, a folder not below {folder}")
    for comp in loops(graph):
        faults.append("loop between files: " + " <-> ".join(comp))
    return faults


def function_spans(lines):
    """(first line, length, header) of each function definition of clang-formatted C or CUDA."""
    cand, start = None, None
    for i, line in enumerate(lines):
        if start is None:
            if (
                re.match(r"^[A-Za-z_]", line)
                and "(" in line
                and not line.rstrip().endswith(";")
                and not re.match(r"^(typedef|enum|union|struct \w+ \{|#)", line)
            ):
                cand = i
            if cand is not None and line.rstrip().endswith("{"):
                start, cand = cand, None
            elif line.rstrip().endswith(";") and not line.startswith(" "):
                cand = None
        elif line.startswith("}"):
            yield start + 1, i - start + 1, lines[start].strip()
            start = None


def check_sizes(src):
    faults = []
    for d, _, files in sorted(os.walk(src)):
        for name in sorted(files):
            if not name.endswith((".c", ".h", ".cu")):
                continue
            path = os.path.join(d, name)
            with open(path, encoding="utf-8", errors="replace") as fh:
                lines = fh.read().split("\n")
            if len(lines) - 1 > MAX_FILE:
                faults.append(f"{path}: {len(lines) - 1} lines (at most {MAX_FILE}); split it")
            for at, n, head in function_spans(lines):
                if n > MAX_FUNC:
                    faults.append(f"{path}:{at}: a function of {n} lines (at most {MAX_FUNC}): {head}")
    return faults


def main(argv):
    if len(argv) >= 3 and argv[1] == "layers":
        faults = check_layers(argv[2], argv[3:])
    elif len(argv) == 3 and argv[1] == "sizes":
        faults = check_sizes(argv[2])
    else:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    for f in faults:
        print(f)
    print(f"check_layers {argv[1]}: {len(faults)} fault(s)")
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
