"""The build targets mirror the tiers of docs/ARCHITECTURE.md: engine <- distribution <- layers <- training
and saving (with io).

Checks, from the sources and from the build:
  1. includes: engine/ includes only engine/; io/ only engine/ and io/; distribution/ only
     engine/ and distribution/; layers/ nothing of training/ or saving/ (which may include
     anything of ours);
  2. what keras_engine links (its LINK_LIBRARIES and INTERFACE_LINK_LIBRARIES, written by
     CMake at generate time) names no MPI, Gloo or NCCL library;
  3. the engine-only program loads no MPI, Gloo or NCCL shared library (readelf -d NEEDED);
  4. it needs no cuBLAS, nor maps it after CPU work: a CUDA build loads cuBLAS with the first GPU
     (engine/cuda/cublas_library.h), since linked it cost every process 95 MB.

usage: check_layering.py SOURCE_DIR ENGINE_LINK_FILE ENGINE_ONLY_PROGRAM
"""
import os
import re
import subprocess
import sys

ALLOWED = {
    "engine": {"engine"},
    "io": {"engine", "io"},
    "distribution": {"engine", "distribution"},
    "layers": {"engine", "distribution", "layers", "io"},
    # A model is trained (training/) and saved (saving/); each needs the other.
    "training": {"engine", "distribution", "layers", "io", "training", "saving"},
    "saving": {"engine", "distribution", "layers", "io", "training", "saving"},
}
FORBIDDEN_IN_ENGINE = re.compile(r"mpi|gloo|nccl", re.IGNORECASE)
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)


def include_violations(source_dir):
    ours = set(ALLOWED)
    found = []
    for layer, allowed in ALLOWED.items():
        for root, _, files in os.walk(os.path.join(source_dir, layer)):
            for name in files:
                if not name.endswith((".h", ".cpp", ".cu")):
                    continue
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as handle:
                    for header in INCLUDE.findall(handle.read()):
                        top = header.split("/")[0]
                        if top in ours and top not in allowed:
                            found.append(f"{os.path.relpath(path, source_dir)} includes {header}")
                        if layer == "engine" and header in ("mpi.h", "nccl.h") or (
                                layer == "engine" and header.startswith("gloo/")):
                            found.append(f"{os.path.relpath(path, source_dir)} includes <{header}>")
    return found


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    source_dir, link_file, program = sys.argv[1:]
    problems = include_violations(source_dir)
    with open(link_file, encoding="utf-8") as handle:
        links = handle.read()
    for entry in re.split(r"[;\n]", links):
        if FORBIDDEN_IN_ENGINE.search(entry):
            problems.append(f"keras_engine links {entry!r}")
    needed = subprocess.run(["readelf", "-d", program], capture_output=True, text=True, check=True)
    libraries = re.findall(r"\(NEEDED\).*\[(.+)\]", needed.stdout)
    if not libraries:
        problems.append(f"readelf found no NEEDED entries in {program}: cannot check it")
    for library in libraries:
        if FORBIDDEN_IN_ENGINE.search(library):
            problems.append(f"the engine-only program loads {library}")
        if "cublas" in library:
            problems.append(f"the engine-only program needs {library} at start (load it with the first GPU)")
    run = subprocess.run([program], capture_output=True, text=True, timeout=60)
    if run.returncode != 0 or "engine alone: sum 12.0" not in run.stdout:
        problems.append(f"the engine-only program failed ({run.returncode}): {run.stdout}{run.stderr}")
    if "cuBLAS mapped after CPU work: no" not in run.stdout:
        problems.append(f"the engine-only program mapped cuBLAS without a GPU in use: {run.stdout}")
    if problems:
        print("layering violated:\n  " + "\n  ".join(problems))
        return 1
    print(f"layering holds: engine links {links.strip() or 'nothing'}; "
          f"the engine-only program loads {', '.join(libraries)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
