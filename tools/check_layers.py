#!/usr/bin/env python3
"""The layer check: no file of src/ includes a layer above its own.

The layers are the folders of src/, in the order of ULYSSES_LAYERS in CMakeLists.txt,
bottom to top (docs/architecture.md). A file under src/<layer>/ may include
"<other>/..." only when <other> is <layer> or below it, and may include a layer's
subfolder ("backend/cuda/...") only from inside that layer: a subfolder is the
layer's private part. Only quoted includes whose first component is a layer are
read; system headers (<...>) and same-folder includes are not.

    python3 tools/check_layers.py [--src DIR] [--layers core,backend,...]

Without --layers, the order is read from the CMakeLists.txt beside DIR (the one the
build uses). Prints every offending include as FILE:LINE with the two layers and
exits 1; exits 0 when there is none. Run by ctest as `layer_check` (make test);
tests/check_layers_test.py checks this script.
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inc")


def layers_from_cmake(cmake_file):
    """The ULYSSES_LAYERS list of set(ULYSSES_LAYERS a b c ...) in cmake_file."""
    with open(cmake_file, encoding="utf-8") as f:
        m = re.search(r"set\(\s*ULYSSES_LAYERS\s+([^)]*)\)", f.read())
    if not m:
        raise SystemExit(f"check_layers: error: no set(ULYSSES_LAYERS ...) in {cmake_file}")
    return m.group(1).split()


def check(src, layers):
    """Returns (problems, files, includes): one line per offending include or folder."""
    rank = {name: i for i, name in enumerate(layers)}
    top = os.path.dirname(os.path.abspath(src))

    def shown(p):  # src/... as in the repository
        return os.path.relpath(p, top)

    order = " < ".join(layers)
    problems, files, includes = [], 0, 0
    for entry in sorted(os.listdir(src)):
        path = os.path.join(src, entry)
        if os.path.isdir(path) and entry not in rank:
            problems.append(f"{shown(path)}: folder '{entry}' is not a layer (order: {order}); "
                            f"add it to ULYSSES_LAYERS in CMakeLists.txt")
    for layer in layers:
        root = os.path.join(src, layer)
        if not os.path.isdir(root):
            problems.append(f"{shown(root)}: layer '{layer}' has no folder")
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                file = os.path.join(dirpath, name)
                files += 1
                with open(file, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = m.group(1)
                        parts = target.split("/")
                        other = parts[0]
                        if len(parts) < 2 or other not in rank:
                            continue
                        includes += 1
                        where = f"{shown(file)}:{lineno}"
                        if rank[other] > rank[layer]:
                            problems.append(f"{where}: {layer} includes \"{target}\", but {other} is above {layer} "
                                            f"(order: {order})")
                        elif other != layer and len(parts) > 2:
                            problems.append(f"{where}: {layer} includes \"{target}\", a private part of {other} "
                                            f"({other}/{parts[1]}/ is for {other} only)")
    return problems, files, includes


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description="Fails on an include against the layer order of src/.")
    ap.add_argument("--src", default=os.path.join(here, "..", "src"), help="the source folder (default: src/)")
    ap.add_argument("--layers", help="the order, bottom first, comma- or semicolon-separated "
                                     "(default: ULYSSES_LAYERS of the CMakeLists.txt beside --src)")
    args = ap.parse_args(argv)
    src = os.path.normpath(args.src)
    if args.layers:
        layers = [x for x in re.split(r"[,;\s]+", args.layers) if x]
    else:
        layers = layers_from_cmake(os.path.join(os.path.dirname(os.path.abspath(src)), "CMakeLists.txt"))
    if len(set(layers)) != len(layers) or not layers:
        print(f"check_layers: error: the order must name each layer once: {layers}", file=sys.stderr)
        return 2
    problems, files, includes = check(src, layers)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check_layers: {len(problems)} include(s) against the layer order in {src}", file=sys.stderr)
        return 1
    print(f"check_layers: {files} files, {includes} includes of layers, none against {' < '.join(layers)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
