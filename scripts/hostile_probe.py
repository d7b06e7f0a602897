#!/usr/bin/env python3
"""Hostile-input probe of the ulysses command line (issue 28's last acceptance row).

Every subcommand is fed hostile files and flags, as an attacker and as a careless user
would: deep and wide JSON, YAML, tokenizer.json and chat templates; huge, negative,
overflowing and non-numeric values in every numeric flag and config key; empty values;
stray positional arguments; unusable paths (folders, FIFOs, /dev/zero, dangling symlinks,
files where folders are expected); malformed and truncated safetensors; duplicate keys.
The cases are generated here (none is taken from tests/fuzz/corpus).

Each case runs the binary under a timeout and is classified:
  crash    a signal, a sanitizer report, "internal error", an uncaught exception
  hang     the timeout was reached
  wrong    exit 0 where the case says a refusal is due
  unclean  a refusal that is not exactly one line containing "error:", repeats the
           "error:" prefix or the command's name, shows a source path (foo.cpp:123) or a
           number from a signed overflow that the input did not contain
  ok       anything else
A table by class is printed; the exit status is 1 on any finding.

usage: python3 scripts/hostile_probe.py --ulysses build/ulysses [--jobs 2] [--filter X]
                                        [--quick] [--timeout S] [--list] [--verbose]
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "fixtures")

REFUSE = "refuse"  # a refusal is due: exit 0 is "silently wrong"
ANY = "any"        # either outcome is fine, as long as it is clean

INT64_MIN = "-9223372036854775808"
OVERFLOW_NUMBERS = ["9223372036854775808", "-9223372036854775809", "18446744073709551616",
                    "9223372036854775807", "-9223372036854775808", "4294967296", "2147483648",
                    "-2147483649", "18446744073709551615"]


class Case:
    def __init__(self, name, argv, expect=REFUSE, stdin=b"", setup=None, cwd=None, produces=()):
        self.name = name
        # numbers the input itself computes (a template's `-9223372036854775807 - 1`): shown in a
        # message, they are the input's own values, not an overflow of the engine's
        self.produces = tuple(produces)
        self.argv = argv          # after the binary; may contain "{W}" (the case's folder)
        self.expect = expect
        self.stdin = stdin
        self.setup = setup        # callable(case_dir) writing the case's files
        self.cwd = cwd


# ---------------------------------------------------------------- fixtures of the run

def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    mode = "wb" if isinstance(data, (bytes, bytearray)) else "w"
    with open(path, mode) as f:
        f.write(data)


def safetensors_bytes(tensors, header_extra=None, raw_header=None, pad=True):
    """tensors: list of (name, dtype, shape, bytes)."""
    header = {}
    blob = b""
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    if header_extra:
        header.update(header_extra)
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def ids_bytes(rows, dtype="<i8"):
    import array
    flat = [v for r in rows for v in r]
    code = "q" if dtype == "<i8" else "i"
    return array.array(code, flat).tobytes()


class World:
    """The shared, valid inputs every case starts from (built once per probe run)."""

    def __init__(self, ulysses, base):
        self.ulysses = ulysses
        self.base = base
        self.model = os.path.join(FIX, "generate", "model")
        self.small_model = os.path.join(FIX, "gqa", "model")
        self.batch = os.path.join(FIX, "gqa", "batch.safetensors")
        self.lora_model = os.path.join(FIX, "lora", "untied", "model")
        self.lora_adapter = os.path.join(FIX, "lora", "untied", "adapter")
        self.tokenizer = os.path.join(self.model, "tokenizer.json")
        self.text = os.path.join(base, "text.txt")
        write(self.text, "The quick brown fox jumps over the lazy dog.\n" * 200)
        self.jsonl = os.path.join(base, "chat.jsonl")
        write(self.jsonl, "".join(json.dumps({"messages": [{"role": "user", "content": "hi %d" % i},
                                                            {"role": "assistant", "content": "ok %d" % i}]}) + "\n"
                                  for i in range(20)))
        self.data = os.path.join(base, "data")
        subprocess.run([ulysses, "prepare", "--input", self.text, "--out", self.data, "--val-fraction", "0.2",
                        "--quiet"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        self.metrics = os.path.join(base, "metrics.jsonl")
        write(self.metrics, "".join(json.dumps({"step": i, "loss": 5.0 / i, "lr": 1e-3}) + "\n" for i in range(1, 30)))
        self.fifo = os.path.join(base, "fifo")
        os.mkfifo(self.fifo)
        self.dangling = os.path.join(base, "dangling")
        os.symlink(os.path.join(base, "nowhere", "x"), self.dangling)
        self.loop = os.path.join(base, "loop")
        os.symlink(self.loop, self.loop)
        self.a_dir = os.path.join(base, "a_dir")
        os.makedirs(self.a_dir)
        self.a_file = os.path.join(base, "a_file")
        write(self.a_file, "not a folder\n")
        self.empty = os.path.join(base, "empty")
        write(self.empty, b"")
        self.garbage = os.path.join(base, "garbage")
        write(self.garbage, bytes((i * 131 + 7) % 256 for i in range(4096)))

    def train_yaml(self, extra=""):
        return ("model_config: tiny\nnum_layers: 1\ndata:\n  train: %s\n  seq_len: 64\nsteps: 1\n"
                "tensorboard: false\n" % self.data) + extra


def unusable_paths(w):
    return {"dir": w.a_dir, "fifo": w.fifo, "devzero": "/dev/zero", "devnull": "/dev/null",
            "dangling": w.dangling, "symloop": w.loop, "missing": os.path.join(w.base, "no", "such"),
            "empty": w.empty, "garbage": w.garbage, "emptyname": "", "file_as_dir": os.path.join(w.a_file, "x")}


# ---------------------------------------------------------------- the cases

def base_argv(w, command):
    """A valid, fast invocation of each command (the output paths under {W})."""
    return {
        "loss-grad": ["loss-grad", "--model", w.small_model, "--batch", w.batch, "--out", "{W}/out.safetensors"],
        "prepare": ["prepare", "--input", w.text, "--out", "{W}/prep", "--quiet"],
        "tokenize": ["tokenize", "--tokenizer", w.tokenizer],
        "train": ["train", "{W}/train.yaml", "out_dir={W}/run"],
        "plot": ["plot", w.metrics, "--out", "{W}/plot.png"],
        "generate": ["generate", "--model", w.model, "--prompt", "hello", "--max-new-tokens", "2"],
        "bench": ["bench", "--shape", "tiny", "--layers", "1", "--seq", "64", "--steps", "1", "--warmup", "0"],
        "merge-lora": ["merge-lora", "--model", w.lora_model, "--adapter", w.lora_adapter, "--out", "{W}/merged"],
        "plan": ["plan", "--shape", "tiny", "--seq", "1024"],
        "comm-bench": ["comm-bench", "--max-bytes", "4096", "--iters", "1", "--warmup", "0"],
    }[command]


def with_flag(argv, flag, value):
    """argv with --flag set to value (replacing a given one)."""
    out = []
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--" + flag:
            skip = True
            continue
        if a.startswith("--" + flag + "="):
            continue
        out.append(a)
    return out + ["--" + flag, value]


def train_setup(w, extra=""):
    def setup(d):
        write(os.path.join(d, "train.yaml"), w.train_yaml(extra))
    return setup


NUMERIC_FLAGS = {
    "loss-grad": ["sp", "sp-ring", "zero", "tiled-mlp", "tiled-loss", "offload-checkpoints", "checkpoint-segment",
                  "head-chunks", "memory-limit"],
    "prepare": ["chunk-bytes", "shard-tokens", "val-fraction", "seed", "threads"],
    "plot": ["width", "height"],
    "generate": ["max-new-tokens", "temperature", "top-k", "top-p", "seed"],
    "bench": ["layers", "seq", "batch", "steps", "warmup", "host-mem-limit", "sp", "sp-ring", "zero", "tiled-mlp",
              "tiled-loss", "checkpoint-segment", "head-chunks", "memory-limit"],
    "plan": ["layers", "seq", "memory-limit", "host-mem-limit", "sp", "sp-ring", "zero", "tiled-loss",
             "offload-checkpoints", "checkpoint-segment", "head-chunks"],
    "comm-bench": ["min-bytes", "max-bytes", "factor", "warmup", "iters"],
}
NUMERIC_KEYS = ["steps", "batch_size", "grad_accum", "data.seq_len", "data.seed", "init_seed", "num_layers",
                "optimizer.lr", "optimizer.min_lr", "optimizer.warmup_steps", "optimizer.weight_decay",
                "optimizer.beta1", "optimizer.beta2", "optimizer.eps", "optimizer.grad_clip", "eval_every",
                "eval_batches", "checkpoint_every", "skip_nonfinite", "log_every", "keep_last", "sp", "sp_ring",
                "zero", "memory.tiled_mlp", "memory.tiled_loss", "memory.checkpoint_segment", "lora.r",
                "lora.alpha"]

# Values no numeric option may take: refused, whatever the option.
BAD_NUMBERS = [INT64_MIN, "9223372036854775808", "18446744073709551616", "1e309", "-1e309", "nan", "-nan",
               "inf", "-Infinity", "", "12abc", "0x10", "--1", "1e", "1,5", "٣"]
# Values some options may take (negative, huge in range, fractional): any clean outcome.
ODD_NUMBERS = ["-1", "0", "9223372036854775807", "4294967297", "1e18", "2.5", "1e-320", "-0", " 7"]


# Options that take a real number: a big integer is a (finite) real.
REAL_FLAGS = {"val-fraction", "memory-limit", "host-mem-limit", "temperature", "top-p", "factor"}
# Options whose in-range values are work asked for (steps to run, bytes to move): a huge one runs
# as long as asked, so only the values that must be refused are tried.
WORK_FLAGS = {"steps", "warmup", "iters", "max-bytes", "min-bytes", "max-new-tokens"}


def numeric_cases(w):
    cases = []
    for command, flags in NUMERIC_FLAGS.items():
        for flag in flags:
            for i, v in enumerate(BAD_NUMBERS + ODD_NUMBERS):
                expect = REFUSE if v in BAD_NUMBERS else ANY
                if "seed" in flag and v == INT64_MIN:
                    expect = ANY  # any 64-bit seed is a seed
                if flag in REAL_FLAGS and v in ("9223372036854775808", "18446744073709551616", INT64_MIN):
                    expect = ANY
                if flag in WORK_FLAGS and v in ("4294967297", "1e18", "9223372036854775807"):
                    continue
                # A flag with an optional value takes "--f=v" only.
                argv = [a for a in base_argv(w, command)]
                if flag in ("tiled-mlp", "tiled-loss", "offload-checkpoints"):
                    argv = argv + ["--%s=%s" % (flag, v)]
                else:
                    argv = with_flag(argv, flag, v)
                cases.append(Case("num/%s/--%s/%d:%s" % (command, flag, i, v or "<empty>"), argv, expect))
            # the "=" spelling with nothing after it
            cases.append(Case("num/%s/--%s=" % (command, flag), base_argv(w, command) + ["--%s=" % flag], REFUSE))
    for key in NUMERIC_KEYS:
        for i, v in enumerate(BAD_NUMBERS + ODD_NUMBERS):
            expect = REFUSE if v in BAD_NUMBERS else ANY
            if "seed" in key and v == INT64_MIN:
                expect = ANY
            if v in ("", " 7"):
                continue  # a YAML empty value is null: covered below with the override spelling
            # in the YAML file, nested keys as nested mappings
            parts = key.split(".")
            yaml_v = json.dumps(v) if v in ("12abc", "0x10", "--1", "1e", "1,5", "٣") else v
            if v in ("nan", "-nan", "inf", "-Infinity"):
                yaml_v = {"nan": ".nan", "-nan": "-.nan", "inf": ".inf", "-Infinity": "-.inf"}[v]
            text = "\n" + "".join("  " * k + p + ":\n" for k, p in enumerate(parts[:-1]))
            text += "  " * (len(parts) - 1) + parts[-1] + ": " + yaml_v + "\n"
            cases.append(Case("key/yaml/%s/%d:%s" % (key, i, v), ["train", "{W}/train.yaml", "out_dir={W}/run"],
                              expect, setup=train_setup(w, text)))
        for v in [INT64_MIN, "1e309", "nan", "", "99999999999999999999"]:
            cases.append(Case("key/override/%s=%s" % (key, v or "<empty>"),
                              ["train", "{W}/train.yaml", "out_dir={W}/run", "%s=%s" % (key, v)], REFUSE,
                              setup=train_setup(w)))
        cases.append(Case("key/flag/--%s ''" % key, ["train", "{W}/train.yaml", "out_dir={W}/run", "--" + key, ""],
                          REFUSE, setup=train_setup(w)))
    return cases


def flag_shape_cases(w):
    """Empty values, stray positionals, repeated and unknown flags, in every command."""
    cases = []
    string_flags = {
        "loss-grad": ["model", "batch", "out", "backend", "dtype", "comm", "grad-dtype", "keep-attention"],
        "prepare": ["input", "out", "tokenizer", "eos-token", "text-column", "text-key", "chat-template"],
        "tokenize": ["tokenizer"],
        "plot": ["out", "title"],
        "generate": ["model", "tokenizer", "prompt-ids", "chat-template-kwargs", "backend"],
        "bench": ["model", "shape", "json", "backend", "dtype"],
        "merge-lora": ["model", "adapter", "out", "dtype"],
        "plan": ["model", "shape", "backend", "optimizer"],
        "comm-bench": ["backend", "comm", "dtype", "ops"],
    }
    for command, flags in string_flags.items():
        for flag in flags:
            # an empty plot title means no title (docs/reliability.md: empty values that mean something)
            expect = ANY if (command, flag) == ("plot", "title") else REFUSE
            cases.append(Case("empty/%s/--%s ''" % (command, flag), with_flag(base_argv(w, command), flag, ""), expect,
                              stdin=b"hello"))
            cases.append(Case("empty/%s/--%s=" % (command, flag), base_argv(w, command) + ["--%s=" % flag], expect,
                              stdin=b"hello"))
    for command in ["loss-grad", "tokenize", "generate", "bench", "merge-lora", "plan", "comm-bench"]:
        for j, stray in enumerate(["extra", "-", "-x", "--", "key=value", "/etc/passwd"]):
            cases.append(Case("stray/%s/%d:%s" % (command, j, stray), base_argv(w, command) + [stray], REFUSE,
                              stdin=b"hello"))
    cases.append(Case("stray/plot/two files", base_argv(w, "plot") + [w.metrics], REFUSE))
    cases.append(Case("stray/train/second config", ["train", "{W}/train.yaml", "{W}/train.yaml", "out_dir={W}/run"],
                      REFUSE, setup=train_setup(w)))
    cases.append(Case("stray/train/bare word", ["train", "{W}/train.yaml", "steps", "out_dir={W}/run"], REFUSE,
                      setup=train_setup(w)))
    for command in ["loss-grad", "prepare", "tokenize", "train", "plot", "generate", "bench", "merge-lora", "plan",
                    "comm-bench"]:
        cases.append(Case("flag/%s/unknown" % command, base_argv(w, command) + ["--no-such-flag"], REFUSE,
                          setup=train_setup(w)))
        cases.append(Case("flag/%s/single dash" % command, base_argv(w, command) + ["-h"], ANY, setup=train_setup(w)))
        cases.append(Case("flag/%s/missing value" % command, base_argv(w, command) + ["--out" if command != "train"
                                                                                     else "--steps"],
                          REFUSE, setup=train_setup(w)))
        cases.append(Case("flag/%s/nul-ish" % command, base_argv(w, command) + ["--\x01"], REFUSE,
                          setup=train_setup(w)))
    for bad in ["--help=yes", "--zigzag=1", "--dry-run=no"]:
        cases.append(Case("flag/bench/%s" % bad, base_argv(w, "bench") + [bad], REFUSE))
    for word in ["trian", "", "-", "LOSS-GRAD", "x" * 5000]:
        cases.append(Case("command/%r" % word[:20], [word], REFUSE))
    return cases


def path_cases(w):
    cases = []
    inputs = {
        "loss-grad": ["model", "batch", "lora-adapter"],
        "prepare": ["input", "tokenizer", "chat-template"],
        "tokenize": ["tokenizer"],
        "generate": ["model", "tokenizer", "prompt-ids"],
        "bench": ["model"],
        "merge-lora": ["model", "adapter"],
        "plan": ["model"],
    }
    outputs = {"loss-grad": ["out"], "prepare": ["out"], "plot": ["out"], "merge-lora": ["out"], "bench": ["json"]}
    for command, flags in inputs.items():
        for flag in flags:
            for kind, p in unusable_paths(w).items():
                expect = REFUSE
                if command == "prepare" and flag == "input" and kind == "devnull":
                    expect = ANY  # an empty text is refused or gives no document: either is clean
                argv = base_argv(w, command)
                if command == "prepare" and flag == "chat-template":  # read for conversations only
                    argv = with_flag(with_flag(argv, "input", w.jsonl), "tokenizer", w.tokenizer)
                cases.append(Case("path/%s/--%s/%s" % (command, flag, kind), with_flag(argv, flag, p), expect,
                                  stdin=b"hi"))
    for command, flags in outputs.items():
        for flag in flags:
            for kind, p in unusable_paths(w).items():
                if kind in ("missing", "empty", "garbage") or (command in ("prepare", "merge-lora") and kind == "dir"):
                    continue  # a new file, a file replaced, an empty folder filled: fine
                cases.append(Case("path/%s/--%s/%s" % (command, flag, kind), with_flag(base_argv(w, command), flag, p),
                                  REFUSE))
    for kind, p in unusable_paths(w).items():
        cases.append(Case("path/plot/metrics/%s" % kind, ["plot", p, "--out", "{W}/p.png"], REFUSE))
        cases.append(Case("path/train/config/%s" % kind, ["train", p, "out_dir={W}/run"], REFUSE))
        for key in ["model", "model_config", "data.train", "data.val", "tokenizer", "lora.adapter"]:
            extra = ["lora.r=4", "model_config=", "model=%s" % w.small_model] if key == "lora.adapter" else []
            if key == "model":
                extra = ["model_config="]
            cases.append(Case("path/train/%s/%s" % (key, kind),
                              ["train", "{W}/train.yaml", "out_dir={W}/run"] + extra + ["%s=%s" % (key, p)],
                              REFUSE if kind != "emptyname" or key in ("data.train",) else ANY,
                              setup=train_setup(w)))
        if kind not in ("missing",):
            cases.append(Case("path/train/out_dir/%s" % kind, ["train", "{W}/train.yaml", "out_dir=%s" % p], REFUSE,
                              setup=train_setup(w)))
    return cases


def deep_json(depth, kind):
    if kind == "list":
        return "[" * depth + "]" * depth
    if kind == "obj":
        return '{"a":' * depth + "1" + "}" * depth
    return '[{"a":' * (depth // 2) + "0" + "}]" * (depth // 2)


def model_dir_setup(w, config_edit=None, files=None, src=None):
    src = src or w.model

    def setup(d):
        m = os.path.join(d, "model")
        shutil.copytree(src, m)
        if config_edit is not None:
            p = os.path.join(m, "config.json")
            if callable(config_edit):
                with open(p) as f:
                    cfg = json.load(f)
                text = config_edit(cfg)
                write(p, text if isinstance(text, str) else json.dumps(cfg))
            else:
                write(p, config_edit)
        for name, data in (files or {}).items():
            write(os.path.join(m, name), data)
    return setup


def set_key(key, value):
    def edit(cfg):
        cur = cfg
        parts = key.split(".")
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = value
        return None
    return edit


def set_key_raw(key, raw):
    """The value spelled as raw JSON text (numbers JSON cannot hold in a double, etc.)."""
    def edit(cfg):
        cfg[key] = "@@RAW@@"
        return json.dumps(cfg).replace('"@@RAW@@"', raw)
    return edit


def config_cases(w):
    cases = []
    keys = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "rope_theta",
            "bos_token_id", "eos_token_id", "sliding_window", "tie_word_embeddings"]
    raws = ["-1", "0", INT64_MIN, "9223372036854775808", "1e309", "1e-309", "-1e-5", "2.5", "\"12\"", "null",
            "[]", "1e300"]
    for key in keys:
        for j, raw in enumerate(raws):
            expect = REFUSE
            if key in ("bos_token_id", "eos_token_id", "sliding_window") or (raw == "null" and key in (
                    "rope_theta", "tie_word_embeddings", "head_dim", "max_position_embeddings", "rms_norm_eps")):
                # null is read as the key absent: its default (head_dim: hidden_size / heads, as transformers
                # reads a None there; docs/reliability.md)
                expect = ANY  # ids the tokenizer's files decide, a key Llama does not read, a spelling given twice
            for command in (["generate"] if j % 2 else ["plan", "generate"]):
                argv = (["plan", "--model", "{W}/model", "--seq", "64"] if command == "plan" else
                        ["generate", "--model", "{W}/model", "--prompt", "hi", "--max-new-tokens", "2"])
                cases.append(Case("config/%s/%s=%s" % (command, key, raw), argv, expect,
                                  setup=model_dir_setup(w, set_key_raw(key, raw))))
    for eps in ["1e-31", "1.5", "1e-40", "0.0", "100"]:
        cases.append(Case("config/rms_norm_eps=%s" % eps, ["generate", "--model", "{W}/model", "--prompt", "hi",
                                                           "--max-new-tokens", "1"], REFUSE,
                          setup=model_dir_setup(w, set_key_raw("rms_norm_eps", eps))))
    structural = {
        "deep list 100000": deep_json(100000, "list"),
        "deep obj 5000": deep_json(5000, "obj"),
        "deep mixed 3000": deep_json(3000, "mixed"),
        "deep in a key": '{"architectures":["LlamaForCausalLM"],"x":' + deep_json(20000, "list") + "}",
        "wide 300k keys": "{" + ",".join('"k%d":%d' % (i, i) for i in range(300000)) + "}",
        "truncated": json.dumps({"architectures": ["LlamaForCausalLM"], "vocab_size": 816})[:-7],
        "not an object": "[1,2,3]",
        "bare string": '"LlamaForCausalLM"',
        "trailing garbage": '{"a":1} xyz',
        "bom + comment": "\ufeff// comment\n{}",
        "nul byte": '{"architectures":["Llama\u0000ForCausalLM"]}',
        "architectures empty": '{"architectures":[]}',
        "architectures object": '{"architectures":{"a":1}}',
        "architecture unknown": '{"architectures":["GPTNeoXForCausalLM"]}',
        "invalid utf8": b'{"architectures":["\xff\xfe"]}',
        "empty file": "",
        "lone surrogate": '{"model_type":"\\ud800"}',
        "long string": '{"model_type":"' + "x" * (2 << 20) + '"}',
    }
    for name, text in structural.items():
        cases.append(Case("config/structure/%s" % name, ["plan", "--model", "{W}/model", "--seq", "64"], REFUSE,
                          setup=model_dir_setup(w, text)))
    dup = open(os.path.join(w.model, "config.json")).read().replace('"vocab_size": 816', '"vocab_size": 816, "vocab_size": 12')
    cases.append(Case("config/duplicate vocab_size", ["plan", "--model", "{W}/model", "--seq", "64"], ANY,
                      setup=model_dir_setup(w, dup)))
    rope_variants = {
        "yarn factor 0": {"rope_type": "yarn", "factor": 0, "rope_theta": 10000.0},
        "yarn factor nan": {"rope_type": "yarn", "factor": "nan", "rope_theta": 10000.0},
        "linear factor -1": {"rope_type": "linear", "factor": -1, "rope_theta": 10000.0},
        "llama3 low>high": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 1,
                            "original_max_position_embeddings": 128, "rope_theta": 10000.0},
        "llama3 orig 0": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
                          "original_max_position_embeddings": 0, "rope_theta": 10000.0},
        "unknown type": {"rope_type": "longrope", "rope_theta": 10000.0},
        "theta 0": {"rope_type": "default", "rope_theta": 0},
        "theta 1e13": {"rope_type": "default", "rope_theta": 1e13},
        "type number": {"rope_type": 7, "rope_theta": 10000.0},
        "deep inside": {"rope_type": "default", "rope_theta": 10000.0, "x": json.loads(deep_json(60, "list"))},
        "dynamic factor 1e308": {"rope_type": "dynamic", "factor": 1e308, "rope_theta": 10000.0},
    }
    for name, rp in rope_variants.items():
        expect = ANY if name == "deep inside" else REFUSE
        cases.append(Case("config/rope/%s" % name, ["generate", "--model", "{W}/model", "--prompt", "hi",
                                                    "--max-new-tokens", "1"], expect,
                          setup=model_dir_setup(w, set_key("rope_parameters", rp))))
    return cases


def tensor_f32(n):
    return struct.pack("<%df" % n, *([0.01] * n))


def safetensors_cases(w):
    cases = []
    rows = [[1, 2, 3, 4, 5, 6, 7, 8]]
    good_ids = ids_bytes(rows)
    variants = {
        "header len huge": struct.pack("<Q", 1 << 62) + b"{}",
        "header len max": struct.pack("<Q", (1 << 64) - 1) + b"{}",
        "header len 0": struct.pack("<Q", 0),
        "shorter than 8": b"\x10\x00",
        "header past end": struct.pack("<Q", 4096) + b'{"a":1}',
        "header not json": safetensors_bytes([], raw_header=b"not json at all"),
        "header a list": safetensors_bytes([], raw_header=b"[1,2,3]"),
        "header deep": safetensors_bytes([], raw_header=deep_json(50000, "list").encode()),
        "header deep obj": safetensors_bytes([], raw_header=deep_json(3000, "obj").encode()),
        "offsets past end": safetensors_bytes([], header_extra={"input_ids": {"dtype": "I64", "shape": [1, 8],
                                                                              "data_offsets": [0, 1 << 40]}}),
        "offsets reversed": safetensors_bytes([("input_ids", "I64", [1, 8], good_ids)],
                                              header_extra={"x": {"dtype": "I64", "shape": [1],
                                                                  "data_offsets": [8, 0]}}),
        "offsets negative": safetensors_bytes([], header_extra={"input_ids": {"dtype": "I64", "shape": [1, 8],
                                                                              "data_offsets": [-64, 0]}}),
        "shape overflow": safetensors_bytes([], header_extra={"input_ids": {"dtype": "I64",
                                                                            "shape": [1 << 62, 1 << 62],
                                                                            "data_offsets": [0, 0]}}),
        "shape negative": safetensors_bytes([], header_extra={"input_ids": {"dtype": "I64", "shape": [-1, -8],
                                                                            "data_offsets": [0, 64]}}),
        "shape float": safetensors_bytes([], header_extra={"input_ids": {"dtype": "I64", "shape": [1.5, 8],
                                                                         "data_offsets": [0, 64]}}),
        "shape size mismatch": safetensors_bytes([("input_ids", "I64", [2, 8], good_ids)]),
        "dtype unknown": safetensors_bytes([("input_ids", "Q7", [1, 8], good_ids)]),
        "dtype float ids": safetensors_bytes([("input_ids", "F32", [1, 8], tensor_f32(8))]),
        "dtype bool ids": safetensors_bytes([("input_ids", "BOOL", [1, 8], b"\x01" * 8)]),
        "ids 1-d": safetensors_bytes([("input_ids", "I64", [8], good_ids)]),
        "ids 3-d": safetensors_bytes([("input_ids", "I64", [1, 1, 8], good_ids)]),
        "ids empty": safetensors_bytes([("input_ids", "I64", [1, 0], b"")]),
        "ids zero rows": safetensors_bytes([("input_ids", "I64", [0, 8], b"")]),
        "ids out of vocab": safetensors_bytes([("input_ids", "I64", [1, 8], ids_bytes([[1, 2, 3, 4, 5, 6, 7, 1 << 40]]))]),
        "ids negative": safetensors_bytes([("input_ids", "I64", [1, 8], ids_bytes([[1, 2, -3, 4, 5, 6, 7, 8]]))]),
        "ids int64 min": safetensors_bytes([("input_ids", "I64", [1, 8], ids_bytes([[-(1 << 63)] * 8]))]),
        "no input_ids": safetensors_bytes([("tokens", "I64", [1, 8], good_ids)]),
        "no targets at all": safetensors_bytes([("input_ids", "I64", [1, 8], good_ids),
                                                ("shift_labels", "I64", [1, 8], ids_bytes([[-100] * 8]))]),
        "labels all ignored": safetensors_bytes([("input_ids", "I64", [1, 8], good_ids),
                                                 ("labels", "I64", [1, 8], ids_bytes([[-100] * 8]))]),
        "labels one token": safetensors_bytes([("input_ids", "I64", [1, 1], ids_bytes([[5]]))]),
        "labels -101": safetensors_bytes([("input_ids", "I64", [1, 8], good_ids),
                                          ("shift_labels", "I64", [1, 8], ids_bytes([[-101] * 8]))]),
        "labels shape": safetensors_bytes([("input_ids", "I64", [1, 8], good_ids),
                                           ("shift_labels", "I64", [2, 4], good_ids)]),
        "both label kinds": safetensors_bytes([("input_ids", "I64", [1, 8], good_ids),
                                               ("shift_labels", "I64", [1, 8], good_ids),
                                               ("labels", "I64", [1, 8], good_ids)]),
        "positions negative": safetensors_bytes([("input_ids", "I64", [1, 8], good_ids),
                                                 ("position_ids", "I64", [1, 8], ids_bytes([[-1] * 8]))]),
        "positions huge": safetensors_bytes([("input_ids", "I64", [1, 8], good_ids),
                                             ("position_ids", "I64", [1, 8], ids_bytes([[1 << 40] * 8]))]),
        "positions float": safetensors_bytes([("input_ids", "I64", [1, 8], good_ids),
                                              ("position_ids", "F32", [1, 8], tensor_f32(8))]),
        "duplicate name": safetensors_bytes([], raw_header=(
            '{"input_ids":{"dtype":"I64","shape":[1,8],"data_offsets":[0,64]},'
            '"input_ids":{"dtype":"I64","shape":[1,4],"data_offsets":[0,32]}}').encode()) + good_ids,
        "metadata not strings": safetensors_bytes([("input_ids", "I64", [1, 8], good_ids)],
                                                  header_extra={"__metadata__": {"a": [1, 2]}}),
        "metadata deep": safetensors_bytes([("input_ids", "I64", [1, 8], good_ids)],
                                           header_extra={"__metadata__": json.loads(deep_json(150, "obj"))}),
        "truncated data": safetensors_bytes([("input_ids", "I64", [1, 8], good_ids)])[:-9],
        "overlapping": safetensors_bytes([], raw_header=(
            '{"input_ids":{"dtype":"I64","shape":[1,8],"data_offsets":[0,64]},'
            '"labels":{"dtype":"I64","shape":[1,8],"data_offsets":[8,72]}}').encode()) + good_ids + good_ids[:8],
        "gap before data (any)": safetensors_bytes([], raw_header=(
            '{"input_ids":{"dtype":"I64","shape":[1,8],"data_offsets":[64,128]}}').encode()) + good_ids * 2,
        "many entries": safetensors_bytes([], raw_header=("{" + ",".join(
            '"t%d":{"dtype":"I8","shape":[0],"data_offsets":[0,0]}' % i for i in range(200000)) + "}").encode()),
        "random bytes": bytes((i * 37 + 11) % 256 for i in range(512)),
    }
    for name, data in variants.items():
        expect = ANY if name in ("metadata deep",) or "(any)" in name else REFUSE

        def setup(d, data=data):
            write(os.path.join(d, "batch.safetensors"), data)
        cases.append(Case("safetensors/batch/%s" % name,
                          ["loss-grad", "--model", w.small_model, "--batch", "{W}/batch.safetensors", "--out",
                           "{W}/out.safetensors"], expect, setup=setup))
    weight_variants = ["header len huge", "header not json", "header deep", "offsets past end", "shape overflow",
                       "dtype unknown", "duplicate name", "truncated data", "overlapping", "many entries",
                       "random bytes", "header len 0"]
    for name in weight_variants:
        cases.append(Case("safetensors/weights/%s" % name, ["generate", "--model", "{W}/model", "--prompt", "hi",
                                                            "--max-new-tokens", "1"], REFUSE,
                          setup=model_dir_setup(w, files={"model.safetensors": variants[name]})))
    # the real weights, cut short or with one byte of the header changed
    real = open(os.path.join(w.small_model, "model.safetensors"), "rb").read()
    hlen = struct.unpack("<Q", real[:8])[0]
    for j, cut in enumerate([7, 8, 9, 8 + hlen // 2, 8 + hlen, len(real) // 2, len(real) - 1]):
        cases.append(Case("safetensors/weights/cut at %d" % cut, ["plan", "--model", "{W}/model", "--seq", "64"]
                          if j % 2 else ["loss-grad", "--model", "{W}/model", "--batch", w.batch, "--out",
                                         "{W}/o.safetensors"], REFUSE if j % 2 == 0 else ANY,
                          setup=model_dir_setup(w, files={"model.safetensors": real[:cut]}, src=w.small_model)))
    index_variants = {
        "weight_map escapes": {"weight_map": {"model.embed_tokens.weight": "../../etc/passwd"}},
        "weight_map absolute": {"weight_map": {"model.embed_tokens.weight": "/etc/passwd"}},
        "weight_map not a map": {"weight_map": [1, 2]},
        "weight_map empty": {"weight_map": {}},
        "weight_map to a dir": {"weight_map": {"model.embed_tokens.weight": "."}},
        "deep index": json.loads(deep_json(120, "obj")),
    }
    for name, idx in index_variants.items():
        def setup(d, idx=idx):
            m = os.path.join(d, "model")
            shutil.copytree(w.small_model, m)
            os.rename(os.path.join(m, "model.safetensors"), os.path.join(m, "shard.safetensors"))
            write(os.path.join(m, "model.safetensors.index.json"), json.dumps(idx))
        cases.append(Case("safetensors/index/%s" % name, ["loss-grad", "--model", "{W}/model", "--batch", w.batch,
                                                          "--out", "{W}/o.safetensors"], REFUSE, setup=setup))
    return cases


def tokenizer_cases(w):
    cases = []
    base = json.load(open(w.tokenizer))

    def tok_case(name, text, expect=REFUSE, stdin=b"hello world"):
        def setup(d):
            write(os.path.join(d, "tokenizer.json"), text)
        cases.append(Case("tokenizer/%s" % name, ["tokenize", "--tokenizer", "{W}/tokenizer.json"], expect,
                          stdin=stdin, setup=setup))

    def edited(path, value):
        t = json.loads(json.dumps(base))
        cur = t
        for p in path[:-1]:
            cur = cur.setdefault(p, {}) if isinstance(cur, dict) else cur[p]
        cur[path[-1]] = value
        return json.dumps(t)

    def nested_seq(field, kind, depth, leaf):
        """tokenizer.json with `field` a Sequence nested `depth` deep (spelled as text: deeper than Python's
        own json module recurses)."""
        text = '{"type": "Sequence", "%s": [' % kind
        return edited([field], "@@NEST@@").replace('"@@NEST@@"', text * depth + json.dumps(leaf) + "]}" * depth)
    for depth in [17, 40, 2000]:
        tok_case("normalizer Sequence %d deep" % depth, nested_seq("normalizer", "normalizers", depth, {"type": "NFC"}))
        tok_case("pre_tokenizer Sequence %d deep" % depth,
                 nested_seq("pre_tokenizer", "pretokenizers", depth, {"type": "ByteLevel"}), ANY)
        tok_case("decoder Sequence %d deep" % depth, nested_seq("decoder", "decoders", depth, {"type": "ByteLevel"}))
    tok_case("deep json 200000", deep_json(200000, "list"))
    tok_case("deep json in vocab", edited(["model", "vocab"], json.loads(deep_json(300, "obj"))))
    tok_case("vocab id -1", edited(["model", "vocab", "a"], -1))
    tok_case("vocab id 2^31", edited(["model", "vocab", "a"], 1 << 31))
    tok_case("vocab id 2^22", edited(["model", "vocab", "a"], 1 << 22))
    tok_case("vocab id float", edited(["model", "vocab", "a"], 3.5))
    tok_case("vocab id string", edited(["model", "vocab", "a"], "7"))
    tok_case("vocab a list", edited(["model", "vocab"], ["a", "b"]))
    tok_case("vocab empty", edited(["model", "vocab"], {}))
    tok_case("merges not pairs", edited(["model", "merges"], ["a b c", "x"]))
    tok_case("merges of unknown tokens", edited(["model", "merges"], ["zzzq qqqz"]), ANY)
    tok_case("merges numbers", edited(["model", "merges"], [1, 2, 3]))
    tok_case("model type unknown", edited(["model", "type"], "Unigram9"))
    tok_case("model null", edited(["model"], None))
    tok_case("added_tokens id huge", edited(["added_tokens"], [{"id": 1 << 40, "content": "<x>", "special": True}]))
    tok_case("added_tokens id negative", edited(["added_tokens"], [{"id": -5, "content": "<x>", "special": True}]))
    tok_case("added_tokens empty content", edited(["added_tokens"], [{"id": 3, "content": "", "special": True}]))
    tok_case("added_tokens not a list", edited(["added_tokens"], {"id": 3}))
    tok_case("added_tokens 100k", edited(["added_tokens"], [{"id": 900 + i, "content": "<t%d>" % i, "special": True}
                                                            for i in range(100000)]), ANY)
    tok_case("normalizer type unknown", edited(["normalizer"], {"type": "Lowercase9"}))
    tok_case("normalizer replace bad regex", edited(["normalizer"], {"type": "Replace", "pattern": {"Regex": "(("},
                                                                     "content": "x"}))
    tok_case("pre_tokenizer split catastrophic regex",
             edited(["pre_tokenizer"], {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated",
                                        "invert": False}), ANY, stdin=b"a" * 40 + b"!")
    tok_case("pre_tokenizer split bad regex",
             edited(["pre_tokenizer"], {"type": "Split", "pattern": {"Regex": "[z-a]"}, "behavior": "Isolated",
                                        "invert": False}))
    tok_case("truncated", json.dumps(base)[: len(json.dumps(base)) // 2])
    tok_case("empty", "")
    tok_case("a number", "42")
    tok_case("nul bytes", b"\x00" * 100)
    tok_case("wide object", "{" + ",".join('"k%d":0' % i for i in range(200000)) + "}")
    tok_case("post_processor deep", edited(["post_processor"], json.loads(deep_json(126, "list"))), ANY)
    # decode: ids that are not int32
    for j, text in enumerate(["[4294967296]", "[-1]", "[2147483648]", "[-2147483649]", "[1e10]", "[2.5]", "[1e309]",
                              "[\"5\"]", "[[1,2]]", deep_json(100000, "list"), "[" + ",".join(["1"] * 200000) + "]",
                              "{\"ids\":[1]}", "[null]", "", "[9223372036854775808]", "[true]", "[816]"]):
        expect = ANY if text.startswith("[" + ",".join(["1"] * 3)) else REFUSE
        cases.append(Case("tokenizer/decode/%d:%s" % (j, text[:24]), ["tokenize", "--tokenizer", w.tokenizer,
                                                                      "--decode"], expect, stdin=text.encode()))
    for j, data in enumerate([b"\xff\xfe\xfd", b"\x00" * 1000, "\U0001F600".encode() * 10000, b"a" * 3000000]):
        cases.append(Case("tokenizer/encode stdin/%d" % j, ["tokenize", "--tokenizer", w.tokenizer], ANY, stdin=data))
    return cases


def template_cases(w):
    cases = []
    templates = {
        "infinite-ish nested loops": "{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}"
                                     "{% endfor %}{% endfor %}{% endfor %}",
        "string doubling": "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                           "{% endfor %}{{ ns.s|length }}",
        "string repeat": "{{ 'x' * 9223372036854775807 }}",
        "string repeat negative": "{{ 'x' * -9223372036854775808 }}",
        "list repeat": "{{ ([1] * 100000000)|length }}",
        "range huge": "{{ range(9223372036854775807)|length }}",
        "range step 0": "{{ range(0, 10, 0)|list }}",
        "deep parens": "{{ " + "(" * 50000 + "1" + ")" * 50000 + " }}",
        "deep ifs": "{% if true %}" * 5000 + "x" + "{% endif %}" * 5000,
        "deep list literal": "{{ " + "[" * 20000 + "]" * 20000 + " }}",
        "unclosed tag": "{% for m in messages %}{{ m.content }}",
        "unclosed expression": "{{ messages[0].content ",
        "unknown filter": "{{ messages|frobnicate }}",
        "raise_exception": "{{ raise_exception('nope') }}",
        "divide by zero": "{{ 1 // 0 }}",
        "modulo zero": "{{ 1 % 0 }}",
        "int overflow add": "{{ 9223372036854775807 + 1 }}",
        "int overflow mul": "{{ 9223372036854775807 * 2 }}",
        "int min negate": "{{ -(-9223372036854775807 - 1) }}",
        "int min div -1": "{{ (-9223372036854775807 - 1) // -1 }}",
        "int min mod -1": "{{ (-9223372036854775807 - 1) % -1 }}",
        "huge literal": "{{ 99999999999999999999999999999999 }}",
        "float literal huge": "{{ 1e999 }}",
        "power huge": "{{ 2 ** 100000 }}",
        "renders nothing": "",
        "only whitespace": "{{- '' -}}   ",
        "slice step 0": "{{ 'abc'[::0] }}",
        "slice huge": "{{ 'abc'[9223372036854775807:-9223372036854775808] }}",
        "macro recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "namespace self nest": "{% set ns = namespace(a=[]) %}{% for i in range(100000) %}{% set ns.a = [ns.a] %}"
                               "{% endfor %}{{ ns.a|length }}",
        # within the stated bound (a value nests at most 100 levels: 90 lists in a namespace) it
        # renders; past it, built or given (a kwargs value within JSON's 128 levels), it is refused
        "tojson deep": "{% set ns = namespace(a=1) %}{% for i in range(90) %}{% set ns.a = [ns.a] %}{% endfor %}"
                       "{{ ns.a|tojson(indent=1) }}",
        "tojson past the depth bound": "{% set ns = namespace(a=1) %}{% for i in range(100) %}{% set ns.a = [ns.a] %}"
                                       "{% endfor %}{{ ns.a|tojson }}",
        "tojson of a deep given value": "{{ deep|tojson }}{{ messages[0].content }}",
        "tojson indent huge": "{{ messages|tojson(indent=9223372036854775807) }}",
        "join huge": "{{ (range(1000000)|list)|join('xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx') }}",
        "loop over string chars": "{% for c in 'abc' * 1000000 %}{{ c }}{% endfor %}",
        "nul in template": "{{ 'a\x00b' }}",
        "invalid utf8": b"{{ '\xff\xfe' }}",
        "comment unclosed": "{# never closed",
        "raw unclosed": "{% raw %}forever",
        "set undefined attr": "{% set x.y = 1 %}",
        "call a string": "{{ 'abc'() }}",
        "attribute of none": "{{ none.x.y.z }}",
        "index out of range": "{{ messages[99999999999] }}",
        "index int min": "{{ messages[-9223372036854775808] }}",
        "filter chain": "{{ messages" + "|list" * 50000 + " }}",
        "many turns": "{% for m in messages %}{% for n in messages %}{{ m.content }}{% endfor %}{% endfor %}",
    }
    # the input's own expression computes the smallest integer: a message may quote it
    computes_int64_min = ("int min negate", "int min div -1", "int min mod -1")
    for name, tpl in templates.items():
        # `% -1` is 0 for every integer (docs/reliability.md), the smallest one too
        expect = ANY if name in ("many turns", "nul in template", "attribute of none", "tojson deep",
                                 "int min mod -1") else REFUSE
        produces = (INT64_MIN,) if name in computes_int64_min else ()
        kwargs = ["--chat-template-kwargs", '{"deep": %s}' % deep_json(110, "list")] \
            if name == "tojson of a deep given value" else []
        gen_expect = ANY if name == "invalid utf8" else expect  # written into JSON as text: valid UTF-8 there

        def setup(d, tpl=tpl):
            write(os.path.join(d, "t.jinja"), tpl)
        cases.append(Case("template/prepare/%s" % name,
                          ["prepare", "--input", w.jsonl, "--out", "{W}/prep", "--tokenizer", w.tokenizer,
                           "--chat-template", "{W}/t.jinja", "--quiet"] + kwargs, expect, setup=setup,
                          produces=produces))
        cfg = json.load(open(os.path.join(w.model, "tokenizer_config.json")))
        cfg["chat_template"] = tpl if isinstance(tpl, str) else tpl.decode("latin-1")
        cases.append(Case("template/generate/%s" % name,
                          ["generate", "--model", "{W}/model", "--prompt", "hi", "--chat", "--max-new-tokens", "1"]
                          + kwargs, gen_expect, setup=model_dir_setup(w, files={"tokenizer_config.json": json.dumps(cfg)}),
                          produces=produces))
    # one argument holds at most 128 KiB (MAX_ARG_STRLEN)
    kwargs = ["[1,2]", "{", deep_json(20000, "obj"), '{"a":1,"a":2}', "null", "", '{"tools":' +
              deep_json(200, "list") + "}", '"x"', '{"add_generation_prompt":"yes"}']
    for j, kw in enumerate(kwargs):
        expect = ANY if kw == '{"a":1,"a":2}' else REFUSE
        cases.append(Case("template/kwargs/%d:%s" % (j, kw[:20]),
                          ["generate", "--model", w.model, "--prompt", "hi", "--chat", "--max-new-tokens", "1",
                           "--chat-template-kwargs", kw], expect))
    # records that are not conversations
    records = ['{"messages":[]}', '{"messages":"hi"}', '{"messages":[{"role":"user"}]}',
               '{"messages":[{"role":"user","content":' + deep_json(50000, "list") + '}]}',
               '{"messages":[' + ",".join(['{"role":"user","content":"x"}'] * 5000) + ']}',
               '{"messages":[{"role":7,"content":"x"}]}', "[1,2,3]", '{"text": 12}', "{", "\x00\x00\x00",
               '{"text":"a","text":"b"}']
    for j, rec in enumerate(records):
        def setup(d, rec=rec):
            write(os.path.join(d, "in.jsonl"), rec + "\n")
        expect = ANY if rec == '{"text":"a","text":"b"}' else REFUSE
        cases.append(Case("records/%d:%s" % (j, rec[:24]),
                          ["prepare", "--input", "{W}/in.jsonl", "--out", "{W}/prep", "--tokenizer", w.tokenizer,
                           "--quiet"], expect, setup=setup))
    return cases


def yaml_cases(w):
    cases = []
    head = "model_config: tiny\nnum_layers: 1\nsteps: 1\ntensorboard: false\n"
    data = "data:\n  train: %s\n  seq_len: 64\n" % w.data
    docs = {
        "deep mapping 5000": head + data + "".join("  " * i + "k%d:\n" % i for i in range(5000)) + "  " * 5000 + "x: 1\n",
        "deep flow 100000": head + data + "x: " + "[" * 100000 + "]" * 100000 + "\n",
        "deep flow map": head + data + "x: " + "{a: " * 20000 + "1" + "}" * 20000 + "\n",
        "alias bomb": head + data + "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                      "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                      "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
                      "g: [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\n",
        "wide 200k keys": head + data + "".join("k%d: 1\n" % i for i in range(200000)),
        "duplicate top": head + data + "steps: 2\n",
        "duplicate nested": head + "data:\n  train: %s\n  seq_len: 64\n  seq_len: 32\n" % w.data,
        "duplicate via merge key": head + data + "optimizer:\n  <<: {lr: 1.0}\n  lr: 0.1\n",
        "second document": head + data + "---\nsteps: 5\n",
        "document end then more": head + data + "...\nsteps: 5\n",
        "tab indentation": head + "data:\n\ttrain: %s\n" % w.data,
        "not a mapping": "- a\n- b\n",
        "scalar": "42\n",
        "empty": "",
        "only comment": "# nothing\n",
        "unknown key": head + data + "stpes: 3\n",
        "unknown nested key": head + data + "optimizer:\n  lrr: 1\n",
        "key is a list": head + data + "[a, b]: 1\n",
        "value a map for a number": head + data + "batch_size: {a: 1}\n",
        "value a list for a string": head + "data:\n  train: [a, b]\n",
        "bool as number": head + data + "grad_accum: true\n",
        "number as bool": head + data + "overwrite: 2\n",
        "yes/no": head + data + "overwrite: yes\n",
        "octal": head + data + "batch_size: 0o17\n",
        "binary tag": head + data + "steps: !!binary AAAA\n",
        "custom tag": head + data + "steps: !mytag 3\n",
        "invalid utf8": (head + data).encode() + b"x: \xff\xfe\n",
        "nul byte": head + data + "x: \x00\n",
        "unterminated quote": head + data + "out_dir: \"abc\n",
        "huge string": head + data + "out_dir: " + "a" * (20 << 20) + "\n",
        "mode unknown": head + "data:\n  train: %s\n  seq_len: 64\n  mode: everything\n" % w.data,
        "backend unknown": head + data + "backend: tpu\n",
        "save_dtype unknown": head + data + "save_dtype: int4\n",
        "rope_scaling nonsense": head + data + "rope_scaling: {rope_type: yarn, factor: -3}\n",
        "rope_scaling deep": head + data + "rope_scaling: " + "{a: " * 60 + "1" + "}" * 60 + "\n",
        "lora r huge": head + data + "lora:\n  r: 9223372036854775807\n",
        "lora dropout": head + data + "model: %s\nmodel_config: \"\"\nlora:\n  r: 2\n  dropout: 0.5\n" % w.small_model,
        "lora target unknown": head + data + "lora:\n  r: 2\n  target_modules: [qq_proj]\n",
        "min_lr above lr": head + data + "optimizer:\n  lr: 0.001\n  min_lr: 0.01\n",
        "warmup beyond steps": head + data + "optimizer:\n  warmup_steps: 9223372036854775807\n",
        "seq_len not divisible": head + "data:\n  train: %s\n  seq_len: 63\nsp: 2\n" % w.data,
        "model and model_config": head + data + "model: %s\n" % w.small_model,
        "neither model": "num_layers: 1\nsteps: 1\n" + data,
        "val of another tokenizer": head + "data:\n  train: %s\n  val: %s\n  seq_len: 64\n" % (w.data, w.text),
        "val a folder without shards": head + "data:\n  train: %s\n  val: %s\n  seq_len: 64\n" % (w.data, w.a_dir),
        "val garbage": head + "data:\n  train: %s\n  val: %s\n  seq_len: 64\n" % (w.data, w.garbage),
    }
    for name, text in docs.items():
        def setup(d, text=text):
            write(os.path.join(d, "train.yaml"), text)
        cases.append(Case("yaml/%s" % name, ["train", "{W}/train.yaml", "out_dir={W}/run"], REFUSE, setup=setup))
    overrides = ["steps", "=3", "a.b.c.d.e.f=1", "data=1", "optimizer=x", "data.train.x=1", "out_dir",
                 "steps=1=2", "--steps", ".steps=1", "steps.=1", "x" * 100000 + "=1", "data.seq_len=[1,2]",
                 "steps={a: 1}", "steps=!!str 3", "steps=*alias"]
    for j, o in enumerate(overrides):
        cases.append(Case("yaml/override/%d:%s" % (j, o[:20]), ["train", "{W}/train.yaml", "out_dir={W}/run", o],
                          REFUSE, setup=train_setup(w)))
    return cases


def data_cases(w):
    """Damaged token shards and manifests in a copy of the prepared data."""
    cases = []
    shard = sorted(f for f in os.listdir(w.data) if f.startswith("train-"))[0]
    raw = open(os.path.join(w.data, shard), "rb").read()
    manifest = open(os.path.join(w.data, "manifest.json")).read() if os.path.exists(
        os.path.join(w.data, "manifest.json")) else None
    damages = {
        "shard truncated": lambda d: write(os.path.join(d, shard), raw[: len(raw) // 2]),
        "shard empty": lambda d: write(os.path.join(d, shard), b""),
        "shard header only": lambda d: write(os.path.join(d, shard), raw[:16]),
        "shard garbage": lambda d: write(os.path.join(d, shard), bytes(reversed(raw))),
        "shard grown": lambda d: write(os.path.join(d, shard), raw + b"\x00" * 13),
        "shard is a dir": lambda d: (os.remove(os.path.join(d, shard)), os.makedirs(os.path.join(d, shard))),
        "shard is a fifo": lambda d: (os.remove(os.path.join(d, shard)), os.mkfifo(os.path.join(d, shard))),
        "shard dangling": lambda d: (os.remove(os.path.join(d, shard)), os.symlink("/nonexistent/x",
                                                                                   os.path.join(d, shard))),
        "manifest deep": lambda d: write(os.path.join(d, "manifest.json"), deep_json(100000, "list")),
        "manifest garbage": lambda d: write(os.path.join(d, "manifest.json"), "{{{{"),
        "manifest empty": lambda d: write(os.path.join(d, "manifest.json"), ""),
        "manifest escapes": lambda d: write(os.path.join(d, "manifest.json"),
                                            (manifest or "{}").replace(shard, "../" + shard)),
        "manifest absolute": lambda d: write(os.path.join(d, "manifest.json"),
                                             (manifest or "{}").replace(shard, "/etc/passwd")),
        "no shards": lambda d: [os.remove(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".tokens")],
    }
    for name, damage in damages.items():
        def setup(d, damage=damage):
            dd = os.path.join(d, "data")
            shutil.copytree(w.data, dd)
            damage(dd)
            write(os.path.join(d, "train.yaml"), w.train_yaml().replace(w.data, dd))
        cases.append(Case("data/%s" % name, ["train", "{W}/train.yaml", "out_dir={W}/run"], REFUSE, setup=setup))
        cases.append(Case("data/val %s" % name, ["train", "{W}/train.yaml", "out_dir={W}/run", "eval_every=1",
                                                 "data.val={W}/data"], REFUSE, setup=setup_val(w, damage)))
    return cases


def setup_val(w, damage):
    def setup(d):
        dd = os.path.join(d, "data")
        shutil.copytree(w.data, dd)
        damage(dd)
        write(os.path.join(d, "train.yaml"), w.train_yaml())
    return setup


def plot_cases(w):
    cases = []
    metrics = {
        "empty": "",
        "no loss": '{"step": 1}\n',
        "nan loss": '{"step": 1, "loss": NaN}\n{"step": 2, "loss": 1}\n',
        "inf loss": '{"step": 1, "loss": 1e999}\n{"step": 2, "loss": 1}\n',
        "negative steps": '{"step": -9223372036854775808, "loss": 1}\n{"step": 9223372036854775807, "loss": 2}\n',
        "deep line": deep_json(100000, "list") + "\n",
        "deep in a line": '{"step":1,"loss":' + deep_json(100000, "list") + "}\n",
        "one point": '{"step": 1, "loss": 1}\n',
        "garbage": "\x00\x01\x02 not json\n",
        "string loss": '{"step": 1, "loss": "1"}\n',
        "huge line (any)": '{"step": 1, "loss": 1, "x": "' + "a" * (8 << 20) + '"}\n',
        "log-y non-positive": '{"step": 1, "loss": 0}\n{"step": 2, "loss": -1}\n',
        "many points": "".join('{"step": %d, "loss": %f}\n' % (i, 1.0 / (i + 1)) for i in range(300000)),
        "same step twice": '{"step": 1, "loss": 1}\n{"step": 1, "loss": 2}\n',
        "loss 1e308": '{"step": 1, "loss": 1e308}\n{"step": 2, "loss": -1e308}\n',
    }
    for name, text in metrics.items():
        def setup(d, text=text):
            write(os.path.join(d, "m.jsonl"), text)
        expect = ANY if "(any)" in name or name in ("many points", "same step twice", "one point", "nan loss", "inf loss",
                                 "loss 1e308", "negative steps", "log-y non-positive") else REFUSE
        argv = ["plot", "{W}/m.jsonl", "--out", "{W}/p.png"] + (["--log-y"] if "log-y" in name else [])
        cases.append(Case("plot/%s" % name, argv, expect, setup=setup))
    for wv in ["0", "1", "-1", "100000", "1000000000", "2147483647", "4294967296", INT64_MIN]:
        cases.append(Case("plot/width=%s" % wv, ["plot", w.metrics, "--out", "{W}/p.png", "--width", wv],
                          REFUSE, setup=None))
        cases.append(Case("plot/height=%s" % wv, ["plot", w.metrics, "--out", "{W}/p.png", "--height", wv],
                          REFUSE, setup=None))
    return cases


def generate_cases(w):
    cases = []
    g = ["generate", "--model", w.model]
    for v in ["1073741825", "2147483648", "9223372036854775807", "0", "-1", INT64_MIN, "1e9", ""]:
        cases.append(Case("generate/max-new-tokens=%s" % (v or "<empty>"), g + ["--prompt", "hi", "--max-new-tokens", v],
                          REFUSE))
    for v in ["1000000000", "100000000"]:
        cases.append(Case("generate/max-new-tokens=%s (cache too big)" % v, g + ["--prompt", "hi", "--max-new-tokens",
                                                                                 v], ANY))
    for ids in ["1,2,3,-1", "1,,2", "999999999999", "a,b", "", ",", "1 2 3", "816", "2147483648", "[1,2]"]:
        cases.append(Case("generate/prompt-ids=%s" % (ids or "<empty>"), g + ["--prompt-ids", ids,
                                                                              "--max-new-tokens", "1"], REFUSE))
    for extra in [["--prompt", "hi", "--prompt-ids", "1"], [], ["--temperature", "-1", "--prompt", "x"],
                  ["--top-p", "0", "--prompt", "x"], ["--top-p", "1.5", "--prompt", "x"],
                  ["--top-k", "-5", "--prompt", "x"], ["--backend", "tpu", "--prompt", "x"],
                  ["--prompt", "x" * 3000, "--max-new-tokens", "1"]]:
        expect = ANY if extra and extra[-1] == "1" and len(extra[1]) > 1000 else REFUSE
        cases.append(Case("generate/%s" % " ".join(extra)[:40], g + extra, expect))
    return cases


def lora_cases(w):
    cases = []
    cfg = json.load(open(os.path.join(w.lora_adapter, "adapter_config.json")))
    variants = {"r 0": ("r", 0), "r negative": ("r", -4), "r huge": ("r", 1 << 40), "alpha nan": ("lora_alpha", "nan"),
                "alpha inf": ("lora_alpha", 1e999), "targets empty": ("target_modules", []),
                "targets deep": ("target_modules", json.loads(deep_json(150, "list"))),
                "targets unknown": ("target_modules", ["qq_proj"]), "dropout": ("lora_dropout", 0.5),
                "peft type": ("peft_type", "PREFIX_TUNING")}
    for name, (k, v) in variants.items():
        def setup(d, k=k, v=v):
            a = os.path.join(d, "adapter")
            shutil.copytree(w.lora_adapter, a)
            c = dict(cfg)
            c[k] = v
            write(os.path.join(a, "adapter_config.json"), json.dumps(c).replace('"nan"', "NaN")
                  .replace("Infinity", "1e999"))
        expect = ANY if name == "dropout" else REFUSE
        cases.append(Case("lora/merge/%s" % name, ["merge-lora", "--model", w.lora_model, "--adapter", "{W}/adapter",
                                                   "--out", "{W}/merged"], expect, setup=setup))
    weights = open(os.path.join(w.lora_adapter, "adapter_model.safetensors"), "rb").read()
    for name, data in {"weights cut": weights[:len(weights) // 3], "weights empty": b"",
                       "weights garbage": bytes(reversed(weights))}.items():
        def setup(d, data=data):
            a = os.path.join(d, "adapter")
            shutil.copytree(w.lora_adapter, a)
            write(os.path.join(a, "adapter_model.safetensors"), data)
        cases.append(Case("lora/merge/%s" % name, ["merge-lora", "--model", w.lora_model, "--adapter", "{W}/adapter",
                                                   "--out", "{W}/merged"], REFUSE, setup=setup))
    cases.append(Case("lora/merge/out is the model", ["merge-lora", "--model", w.lora_model, "--adapter",
                                                      w.lora_adapter, "--out", w.lora_model], REFUSE))
    return cases


def all_cases(w):
    cases = []
    for gen in (numeric_cases, flag_shape_cases, path_cases, config_cases, safetensors_cases, tokenizer_cases,
                template_cases, yaml_cases, data_cases, plot_cases, generate_cases, lora_cases):
        cases += gen(w)
    names = set()
    for c in cases:
        while c.name in names:
            c.name += "'"
        names.add(c.name)
    return cases


# ---------------------------------------------------------------- running and judging

SOURCE_PATH = re.compile(r"[\w/.-]+\.(?:cpp|cc|cu|h|hpp|cuh):\d+")
OVERFLOWED = re.compile(r"-?\b(?:9223372036854775808|9223372036854775807|18446744073709551615|"
                        r"18446744073709551616|4294967295|2147483648|2147483647)\b")
CRASH_MARKS = ["AddressSanitizer", "UndefinedBehaviorSanitizer", "runtime error:", "LeakSanitizer",
               "internal error", "terminate called", "Segmentation fault", "core dumped", "Assertion `",
               "stack-overflow", "what():", "MPI_ABORT was invoked"]


def classify(case, rc, out, err, timed_out, inputs_text):
    if timed_out:
        return "hang", "no exit within the timeout"
    for m in CRASH_MARKS:
        if m in err:
            if m == "MPI_ABORT was invoked":
                continue
            line = next((l for l in err.splitlines() if m in l), m)
            return "crash", line.strip()[:200]
    if rc < 0 or rc >= 128:
        return "crash", "killed by signal %d" % (-rc if rc < 0 else rc - 128)
    if rc == 0:
        if case.expect == REFUSE:
            return "wrong", "exit 0 where a refusal is due"
        return "ok", ""
    lines = [l for l in err.splitlines() if "error:" in l]
    if len(lines) != 1:
        return "unclean", "%d lines with 'error:': %s" % (len(lines), (err.strip().splitlines() or ["<none>"])[0][:160])
    line = lines[0]
    if len(line) > 4096:  # (and the patterns below backtrack for minutes over megabytes of one word)
        return "unclean", "a refusal line of %d bytes: %s" % (len(line), line[:160])
    if line.count("error:") > 1:
        return "unclean", "'error:' repeated: " + line[:200]
    m = re.match(r"ulysses ([\w-]+): error: (.*)$", line)
    if m and (m.group(2).startswith(m.group(1) + ":") or m.group(2).startswith("ulysses")):
        return "unclean", "command prefix repeated: " + line[:200]
    if SOURCE_PATH.search(line):
        return "unclean", "source path shown: " + line[:200]
    # a stated range ("must be in [0, 2147483647]") quotes the engine's bounds, not a value
    shown = OVERFLOWED.findall(re.sub(r"must be in [\[(][^\])]*[\])]", "", line))
    given = inputs_text() if shown else ""
    for num in shown:
        if num in case.produces:
            continue
        if num.lstrip("-") not in given:
            return "unclean", "overflowed number %s shown: %s" % (num, line[:200])
    return "ok", ""


def run_case(case, ulysses, base, timeout):
    d = tempfile.mkdtemp(prefix="case.", dir=base)
    try:
        if case.setup:
            case.setup(d)
        argv = [a.replace("{W}", d) for a in case.argv]
        def inputs_text():
            """What the case gave the binary, as text: a number shown that is in it was not made by
            an overflow. Read only when a message shows such a number (the files are gone later)."""
            text = " ".join(argv) + " " + case.stdin.decode("latin-1")[:100000]
            for root, _, files in os.walk(d):
                for f in files:
                    p = os.path.join(root, f)
                    if os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) < (4 << 20):
                        data = open(p, "rb").read()
                        text += data.decode("latin-1")
                        # a binary file's 8-byte words, as a message may quote them (a header length, an id)
                        if p.endswith(".safetensors") or p.endswith(".tokens"):
                            head = data[:1 << 16]
                            words = []
                            for k in range(8):  # at every byte offset
                                n = (len(head) - k) // 8 * 8
                                if n > 0:
                                    words += ["%d %d" % (q, q & 0xFFFFFFFFFFFFFFFF)
                                              for (q,) in struct.iter_unpack("<q", head[k:k + n])]
                            text += " ".join(words)
            return text
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        start = time.time()
        p = subprocess.Popen([ulysses] + argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             cwd=d, env=env, start_new_session=True)
        timed_out = False
        try:
            out, err = p.communicate(case.stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
        except BrokenPipeError:
            out, err = p.communicate()
        elapsed = time.time() - start
        err_s = err.decode("utf-8", "replace")
        cls, why = classify(case, p.returncode, out, err_s, timed_out, inputs_text)
        return case, cls, why, elapsed, p.returncode, err_s
    except Exception as e:  # the probe's own setup failing is reported, not hidden
        return case, "probe-error", repr(e)[:200], 0.0, None, ""
    finally:
        shutil.rmtree(d, ignore_errors=True)


CLASSES = ["crash", "hang", "wrong", "unclean", "probe-error", "ok"]


def self_test():
    """The judge on fixed outcomes (ctest hostile_probe_self_test): a number the input computes is
    its own; one it neither holds nor computes, or a sign flipped, is an overflow shown."""
    given = "-9223372036854775807 - 1"
    line = "ulysses prepare: error: t.jinja: integer overflow in '%s // -1' (integers are 64-bit here)\n"
    computes = Case("computes", [], produces=(INT64_MIN,))
    plain = Case("plain", [])
    checks = [
        (computes, line % INT64_MIN, "ok"),                 # the input's own value
        (plain, line % INT64_MIN, "unclean"),               # not declared: an overflow shown
        (computes, line % "9223372036854775808", "unclean"),  # the sign lost: an overflow
        (plain, "ulysses bench: error: --steps must be in [1, 1099511627776], got -9223372036854775808\n", "unclean"),
        (plain, "ulysses prepare: error: x: error: y\n", "unclean"),
        (plain, "ulysses prepare: error: prepare: y\n", "unclean"),
        (plain, "ulysses prepare: error: one line\n", "ok"),
        (plain, "ulysses tokenize: error: id must be in [0, 2147483647] (a token id: int32), got -1\n", "ok"),
        (plain, "ulysses tokenize: error: id must be in [0, 2147483647] (a token id: int32), got 2147483648\n",
         "unclean"),
        (plain, "ulysses generate: error: model_type '" + "x" * (2 << 20) + "'\n", "unclean"),  # judged at once
    ]
    bad = 0
    for case, err, want in checks:
        got, why = classify(case, 1, b"", err, False, lambda: given)
        if got != want:
            bad += 1
            print("self-test: %r judged %s (%s), expected %s" % (err.strip(), got, why, want))
    print("self-test: %d of %d judgements as expected" % (len(checks) - bad, len(checks)))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ulysses", help="the binary to probe")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--filter", default="", help="only cases whose name contains this (a regular expression)")
    ap.add_argument("--quick", action="store_true", help="a fixed subset (one case in twelve), for CI")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds per case before it counts as a hang")
    ap.add_argument("--list", action="store_true", help="list the cases and stop")
    ap.add_argument("--verbose", action="store_true", help="print every case's outcome")
    ap.add_argument("--self-test", action="store_true", help="check the judge on fixed outcomes and stop")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.ulysses:
        ap.error("--ulysses is required (but with --self-test)")
    ulysses = os.path.abspath(args.ulysses)
    base = tempfile.mkdtemp(prefix="hostile_probe.")
    try:
        w = World(ulysses, base)
        cases = all_cases(w)
        total = len(cases)
        if args.filter:
            cases = [c for c in cases if re.search(args.filter, c.name)]
        if args.quick:
            cases = [c for i, c in enumerate(cases) if i % 12 == 0]
        if args.list:
            for c in cases:
                print("%-7s %s" % (c.expect, c.name))
            print("%d of %d cases" % (len(cases), total))
            return 0
        counts = {c: 0 for c in CLASSES}
        findings = []
        start = time.time()
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [pool.submit(run_case, c, ulysses, base, args.timeout) for c in cases]
            for f in concurrent.futures.as_completed(futures):
                case, cls, why, elapsed, rc, err = f.result()
                counts[cls] += 1
                if cls != "ok":
                    findings.append((cls, case.name, why, rc))
                if args.verbose:
                    print("%-8s %6.2fs rc=%s %s%s" % (cls, elapsed, rc, case.name, (": " + why) if why else ""),
                          flush=True)
        findings.sort()
        for cls, name, why, rc in findings:
            print("%-8s %s (exit %s): %s" % (cls, name, rc, why))
        print()
        print("hostile probe: %d cases (%d generated) against %s in %.0f s" % (len(cases), total, args.ulysses,
                                                                                time.time() - start))
        print("%-12s %6s" % ("class", "cases"))
        for c in CLASSES:
            print("%-12s %6d" % (c, counts[c]))
        return 1 if any(counts[c] for c in CLASSES if c != "ok") else 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
