#!/usr/bin/env python3
"""tools/check_layers.py, on trees made here: a clean one passes; one include of a layer above,
of another layer's private subfolder, or a folder that is no layer fails, naming the file, the
line and the two layers; a copy of the real src/ passes with the order of the real CMakeLists.txt
and fails once a back-arrow is added to one of its files. Plain asserts, no pytest."""
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = os.path.join(REPO, "tools", "check_layers.py")
ORDER = "core,backend,io,comm,parallel,model,data,train,cli"


def run(src, layers=ORDER):
    cmd = [sys.executable, CHECK, "--src", src] + (["--layers", layers] if layers else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def fixture(tmp):
    """A small clean tree: every layer a file, includes only downward or within the layer."""
    src = os.path.join(tmp, "src")
    write(src, "core/tensor.h", "#pragma once\n#include <vector>\n")
    write(src, "core/tensor.cpp", '#include "core/tensor.h"\n')
    write(src, "backend/backend.h", '#pragma once\n#include "core/tensor.h"\n')
    write(src, "backend/cuda/check.h", '#pragma once\n#include "core/tensor.h"\n')
    # A layer's own subfolder, a same-folder include and a system header named like a layer are fine.
    write(src, "backend/cuda/ops.cu", '#include "backend/cuda/check.h"\n#include "check.h"\n#include <parallel/algorithm>\n')
    write(src, "io/file.h", '#pragma once\n#include "core/tensor.h"\n')
    write(src, "comm/comm.cpp", '#include "backend/backend.h"\n#include "io/file.h"\n')
    write(src, "parallel/mesh.h", '#pragma once\n#include "comm/comm.h"\n')
    write(src, "model/llama.cpp", '  #  include "parallel/mesh.h"\n#include "model/llama.h"\n')
    write(src, "data/loader.h", '#pragma once\n#include "io/file.h"\n')
    write(src, "train/step.cpp", '#include "model/llama.h"\n#include "data/loader.h"\n')
    write(src, "cli/main.cpp", '#include "train/step.h"\n#include "core/tensor.h"\n')
    write(src, "cli/notes.txt", '#include "nothing/here.h"\n')  # not a source file: not read
    return src


def test_clean_fixture_passes():
    with tempfile.TemporaryDirectory() as tmp:
        src = fixture(tmp)
        rc, out = run(src)
        assert rc == 0, out
        assert "none against core < backend < io" in out, out


def test_upward_include_fails_naming_file_line_and_layers():
    with tempfile.TemporaryDirectory() as tmp:
        src = fixture(tmp)
        write(src, "data/loader.h", '#pragma once\n#include "io/file.h"\n#include "train/step.h"\n')
        rc, out = run(src)
        assert rc == 1, out
        assert 'src/data/loader.h:3: data includes "train/step.h", but train is above data' in out, out
        assert "1 include(s) against the layer order" in out, out
        # Every offender is listed, not just the first.
        write(src, "core/tensor.cpp", '#include "core/tensor.h"\n#include "cli/args.h"\n')
        rc, out = run(src)
        assert rc == 1, out
        assert 'src/core/tensor.cpp:2: core includes "cli/args.h", but cli is above core' in out, out
        assert "2 include(s) against the layer order" in out, out


def test_private_part_of_a_lower_layer_fails():
    with tempfile.TemporaryDirectory() as tmp:
        src = fixture(tmp)
        write(src, "comm/nccl.cpp", '#include "comm/comm.h"\n#include "backend/cuda/check.h"\n')
        rc, out = run(src)
        assert rc == 1, out
        assert 'src/comm/nccl.cpp:2: comm includes "backend/cuda/check.h", a private part of backend' in out, out


def test_folder_that_is_no_layer_fails():
    with tempfile.TemporaryDirectory() as tmp:
        src = fixture(tmp)
        write(src, "extras/thing.cpp", '#include "core/tensor.h"\n')
        rc, out = run(src)
        assert rc == 1, out
        assert "src/extras: folder 'extras' is not a layer" in out, out


def test_order_is_read_from_cmakelists():
    with tempfile.TemporaryDirectory() as tmp:
        src = fixture(tmp)
        write(tmp, "CMakeLists.txt", "set(ULYSSES_LAYERS core backend io comm parallel model data train cli)\n")
        rc, out = run(src, layers=None)
        assert rc == 0, out
        # The same tree against another order: now data sits below model, and train below model.
        write(tmp, "CMakeLists.txt", "set(ULYSSES_LAYERS\n  core backend io comm parallel data train model cli)\n")
        rc, out = run(src, layers=None)
        assert rc == 1, out
        assert 'src/train/step.cpp:1: train includes "model/llama.h", but model is above train' in out, out


def test_real_tree_passes_and_a_back_arrow_in_it_fails():
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(os.path.join(REPO, "src"), os.path.join(tmp, "src"))
        shutil.copy(os.path.join(REPO, "CMakeLists.txt"), os.path.join(tmp, "CMakeLists.txt"))
        src = os.path.join(tmp, "src")
        rc, out = run(src, layers=None)
        assert rc == 0, out
        # The back-arrow this check was written for: train reaching up into the CLI.
        victim = os.path.join(src, "train", "train_config.cpp")
        with open(victim) as f:
            lines = f.read().split("\n")
        lines.insert(2, '#include "cli/args.h"')
        with open(victim, "w") as f:
            f.write("\n".join(lines))
        rc, out = run(src, layers=None)
        assert rc == 1, out
        assert 'src/train/train_config.cpp:3: train includes "cli/args.h", but cli is above train' in out, out


if __name__ == "__main__":
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_") and callable(v)]
    for t in tests:
        t()
        print(f"ok {t.__name__}")
    print(f"check_layers_test: {len(tests)} tests passed")
