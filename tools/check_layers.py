#!/usr/bin/env python3
"""The shape rules of src/ that the build checks (DESIGN.md §8, "Layers").

usage: check_layers.py layers BUILD_DIR SPEC... [--bare EXE...]
                                   SPEC is FOLDER=DEP,DEP,... in build order, one per static
                                   library BUILD_DIR/libupipe_FOLDER.a; each EXE after --bare
                                   must need no MPI, BLAS nor oneDNN shared library
       check_layers.py sizes SRC_DIR      no function over 120 lines, no file over 700
       check_layers.py selftest CC        the checks above on small sources made to break them

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


BARE_FORBIDDEN = re.compile(r"mpi|blas|lapack|dnnl|mkl")


def check_bare(exes):
    """Each executable's shared libraries (DT_NEEDED) hold no MPI, BLAS nor oneDNN."""
    faults = []
    for exe in exes:
        out = subprocess.run(["readelf", "-d", exe], capture_output=True, text=True, check=True).stdout
        for lib in re.findall(r"\(NEEDED\).*\[(.+)\]", out):
            if BARE_FORBIDDEN.search(lib):
                faults.append(f"{exe}: needs {lib}; it should link only the folders it uses")
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


SELFTEST_SOURCES = {
    # low: a clean file, an upward use, a loop of two files, an MPI call
    "low/a.c": "int low_a(void) { return 1; }\n",
    "low/up.c": "int top_t(void);\nint low_up(void) { return top_t(); }\n",
    "low/c.c": "int low_d(int);\nint low_c(int n) { return n ? low_d(n - 1) : 0; }\n",
    "low/d.c": "int low_c(int);\nint low_d(int n) { return n ? low_c(n - 1) : 1; }\n",
    "low/m.c": "int MPI_Barrier(int);\nint low_m(void) { return MPI_Barrier(0); }\n",
    # top: a clean use of low, a BLAS call outside kernels
    "top/t.c": "int low_a(void);\nint top_t(void) { return low_a(); }\n",
    "top/b.c": "void cblas_sscal(int, float, float *, int);\n"
    "void top_b(float *x) { cblas_sscal(1, 2.0f, x, 1); }\n",
}
SELFTEST_WANT = [
    "low/m.c.o: uses MPI_Barrier",
    "low/up.c.o: uses top_t from top/t.c.o, a folder not below low",
    "top/b.c.o: uses cblas_sscal",
    "loop between files: low/c.c.o <-> low/d.c.o",
]


def selftest(cc):
    """Faults found exactly where the sources above break a rule, and none in clean ones."""
    import tempfile

    faults = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in SELFTEST_SOURCES.items():
            os.makedirs(os.path.join(tmp, os.path.dirname(name)), exist_ok=True)
            with open(os.path.join(tmp, name), "w") as fh:
                fh.write(text)
        for folder in ("low", "top"):
            objs = []
            for name in sorted(SELFTEST_SOURCES):
                if name.startswith(folder + "/"):
                    obj = os.path.join(tmp, folder, os.path.basename(name) + ".o")
                    subprocess.run([cc, "-c", "-o", obj, os.path.join(tmp, name)], check=True)
                    objs.append(obj)
            lib = os.path.join(tmp, f"libupipe_{folder}.a")
            subprocess.run(["ar", "rcs", lib] + objs, check=True)
        got = check_layers(tmp, ["low=", "top=low"])
        for want in SELFTEST_WANT:
            if not any(g.startswith(want) for g in got):
                faults.append(f"selftest: the layers check missed: {want}")
        if len(got) != len(SELFTEST_WANT):
            faults.append(f"selftest: {len(got)} layer faults, {len(SELFTEST_WANT)} expected: {got}")
        if check_layers(tmp, ["top=", "low=top"]) == []:
            faults.append("selftest: a folder declared before the one it depends on passed")
        body = "int f(void)\n{\n" + "    int x = 0;\n" * 116 + "    return x;\n}\n"
        with open(os.path.join(tmp, "low", "fits.c"), "w") as fh:
            fh.write(body)  # a function of exactly 120 lines
        if check_sizes(os.path.join(tmp, "low")):
            faults.append("selftest: a function of 120 lines was refused")
        with open(os.path.join(tmp, "low", "long.c"), "w") as fh:
            fh.write(body.replace("    return x;", "    x++;\n    return x;"))
        if len(check_sizes(os.path.join(tmp, "low"))) != 1:
            faults.append("selftest: a function of 121 lines passed")
    return faults


def main(argv):
    if len(argv) >= 3 and argv[1] == "layers":
        specs = argv[3:]
        exes = specs[specs.index("--bare") + 1 :] if "--bare" in specs else []
        specs = specs[: specs.index("--bare")] if "--bare" in specs else specs
        faults = check_layers(argv[2], specs) + check_bare(exes)
    elif len(argv) == 3 and argv[1] == "selftest":
        faults = selftest(argv[2])
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
