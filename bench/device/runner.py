#!/usr/bin/env python3
"""Runs GPU checks and benchmarks from a declarative case list (bench/device/cases.json).

    python3 bench/device/runner.py --build .carry/build verify          # a suite
    python3 bench/device/runner.py --build .carry/build compare --record
    python3 bench/device/runner.py --build .carry/build ulysses_8b_32k  # one case (+ the cases it needs)
    python3 bench/device/runner.py --build .carry/build fixtures bench  # tags; several selections add up
    python3 bench/device/runner.py --list

A selection is a suite name, a case name or a tag (tried in that order). Cases run one at a time in
the file's order, each under its timeout, and print a one-line verdict as they finish. Every case
gives one JSON line in $OUT/results.jsonl (after a header line: card, driver, cuDNN folder); its full
log goes to a scratch folder that ends up as $OUT/logs.tgz (the device tool brings back only a few
files). The summary table is printed last (the device tool keeps only the end of the output) and
the exit status is 1 if any case or failing check failed, 2 on a bad case list or selection.

A case (see cases.json for real ones):
  name, tags, command (list: run as is; string: run by bash), timeout (s), env, needs (cases that
  must pass first), expect_exit (0 by default; "nonzero" for a refusal), expect_output (a regex),
  metrics: sources of numbers, any of
    {"json_line": "BENCH_JSON "}                 the JSON after that prefix on a line of the output
    {"json_lines": "{", "key": "S"}              every such line; field f of the line with S=8192 -> f_S8192
    {"json_lines": "COMM_JSON ", "key": ["op", "bytes"]}   prefix dropped; f of op=x, bytes=8 -> f_opx_bytes8
    {"json_file": "{work}/x.json"}               a JSON object the command wrote
    {"regex": {"name": "pattern (group 1)"}}     a number from the output
  bounds: {"metric": {"min": a, "max": b}}
  checks: ["metric_or_case.metric [/ other] OP number_or_metric", or {"expr": ..., "fail": false}]
  baseline: {"metric": {"better": "higher"|"lower", "tol": 0.05, "fail": false}}
Commands may use {build} (--build), {work} (the scratch folder, shared by all cases) and {gpus}
(number of GPUs); they run in the repository root.

Baseline: baseline.json holds the last recorded value of each case's baseline metrics (with date and
card). Each is printed next to this run's value; a move in the worse direction beyond tol is a
regression, which fails the case only where the metric says "fail": true (timings on a shared GPU
are noisy, so the default is to report). --record writes $OUT/baseline.json with this run's figures
for the cases that passed, for a human to review and commit.
"""
import argparse
import atexit
import datetime
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRATCH = "/tmp/ulysses_runner"
OPS = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b,
       "!=": lambda a, b: a != b, ">": lambda a, b: a > b, "<": lambda a, b: a < b}
CHECK_RE = re.compile(r"^\s*(.+?)\s*(>=|<=|==|!=|>|<)\s*(.+?)\s*$")
REF_RE = re.compile(r"^[A-Za-z_][\w.]*$")


class CaseListError(Exception):
    pass


# ---------------------------------------------------------------- case list

def parse_check(check):
    """'a / b >= 1.2' -> (lhs terms, op, rhs terms, fail); a side is one or two operands divided."""
    if isinstance(check, str):
        check = {"expr": check}
    m = CHECK_RE.match(check["expr"])
    if not m:
        raise CaseListError(f"check {check['expr']!r}: expected 'LEFT OP RIGHT' with OP one of {' '.join(OPS)}")
    sides = []
    for side in (m.group(1), m.group(3)):
        terms = [t.strip() for t in side.split("/")]
        if len(terms) > 2 or not all(terms):
            raise CaseListError(f"check {check['expr']!r}: a side is 'x' or 'x / y'")
        sides.append(terms)
    return {"expr": check["expr"], "lhs": sides[0], "op": m.group(2), "rhs": sides[1],
            "fail": check.get("fail", True)}


def operand_case(term, own):
    """The case a term refers to: 'case.metric' -> case, 'metric' -> own, a number -> None."""
    try:
        float(term)
        return None
    except ValueError:
        pass
    if not REF_RE.match(term):
        raise CaseListError(f"{own}: {term!r} is neither a number nor a metric")
    return term.split(".", 1)[0] if "." in term else own


def load_cases(path):
    """Reads and validates the case list: names unique, references to earlier cases only."""
    with open(path) as f:
        spec = json.load(f)
    cases, order = {}, []
    for c in spec["cases"]:
        name = c["name"]
        if name in cases:
            raise CaseListError(f"case {name} defined twice")
        c.setdefault("tags", [])
        c.setdefault("timeout", 600)
        c.setdefault("needs", [])
        c.setdefault("baseline", {})
        checks = [parse_check(x) for x in c.get("checks", [])]
        for metric, b in c.get("bounds", {}).items():  # bounds are checks with a number on one side
            checks += [parse_check(f"{metric} >= {b['min']}")] if "min" in b else []
            checks += [parse_check(f"{metric} <= {b['max']}")] if "max" in b else []
        c["checks"] = checks
        refs = {operand_case(t, name) for ch in checks for t in ch["lhs"] + ch["rhs"]} - {None, name}
        for other in set(c["needs"]) | refs:
            if other not in cases:
                raise CaseListError(f"case {name} refers to {other}, which is not a case defined before it")
        c["refs"] = sorted(refs)
        cases[name] = c
        order.append(name)
    return spec.get("suites", {}), cases, order


def select(args, suites, cases, order):
    """Names of the cases to run, in file order: the selections plus every case they need or compare with."""
    chosen = set()

    def add(sel, seen=()):
        if sel in suites:
            if sel in seen:
                raise CaseListError(f"suite {sel} includes itself")
            for s in suites[sel]:
                add(s, seen + (sel,))
        elif sel in cases:
            chosen.add(sel)
        else:
            tagged = [n for n in order if sel in cases[n]["tags"]]
            if not tagged:
                raise CaseListError(f"{sel!r} is no suite, case or tag (see --list)")
            chosen.update(tagged)

    for sel in args:
        add(sel)
    for name in reversed(order):  # a case's needs and refs are defined before it: one backward pass closes the set
        if name in chosen:
            chosen.update(cases[name]["needs"], cases[name]["refs"])
    return [n for n in order if n in chosen]


# ---------------------------------------------------------------- machine

def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def setup_environment():
    """What every case runs with; returns the header of results.jsonl."""
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast is off on these machines (KINDS.md)
    os.environ.setdefault("OMP_NUM_THREADS", "4")
    libs = []
    packed = os.path.join(REPO, ".carry", "build.tar.xz")  # the binaries, compressed by pack.sh
    unpacked = os.path.join(REPO, ".carry", "build")
    if os.path.isfile(packed) and not os.path.isdir(unpacked):
        with tarfile.open(packed) as t:
            t.extractall(os.path.join(REPO, ".carry"), **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        # The device tool copies the carried paths back to the development machine, where the
        # unpacked 50+ MB would push the next call's tree over its 64 MiB limit: remove them at exit.
        atexit.register(shutil.rmtree, unpacked, True)
    carried = os.path.join(REPO, ".carry", "libs.tar.xz")  # shared libraries the GPU machine lacks (pack.sh)
    if os.path.isfile(carried):
        with tarfile.open(carried) as t:
            t.extractall("/tmp/ulysses_libs", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        libs.append("/tmp/ulysses_libs/libs")
    cudnn = None
    spec = importlib.util.find_spec("nvidia.cudnn") if importlib.util.find_spec("nvidia") else None
    if spec and spec.submodule_search_locations:
        # Our binaries need cuDNN >= 9.19 at run time; the pip wheel next to torch is newer than the system's.
        cand = os.path.join(list(spec.submodule_search_locations)[0], "lib")
        cudnn = cand if os.path.isdir(cand) else None
    libs = ([cudnn] if cudnn else []) + libs
    if libs:
        os.environ["LD_LIBRARY_PATH"] = ":".join(libs + [p for p in [os.environ.get("LD_LIBRARY_PATH")] if p])
    gpu = sh(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]).splitlines()
    return {"header": True, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "card": gpu[0].split(",")[0].strip() if gpu else None, "gpus": len(gpu), "nvidia_smi": gpu,
            "cudnn_lib": cudnn, "ld_library_path": os.environ.get("LD_LIBRARY_PATH", ""),
            "commit": sh(["git", "-C", REPO, "rev-parse", "HEAD"]) or None}


# ---------------------------------------------------------------- one case

def expand(text, values):
    # Only our own placeholders: commands may hold other braces (JSON, python -c).
    return re.sub(r"\{(build|work|gpus)\}", lambda m: values[m.group(1)], text)


def run_command(case, values, log_path):
    """Runs the case's command with its output in log_path; returns (exit code or 'timeout', seconds)."""
    cmd = case["command"]
    argv = ["bash", "-c", expand(cmd, values)] if isinstance(cmd, str) else [expand(a, values) for a in cmd]
    env = dict(os.environ, **{k: expand(str(v), values) for k, v in case.get("env", {}).items()})
    t0 = time.time()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        try:
            # A session of its own, so a timeout ends mpirun and all its ranks, not only the launcher.
            p = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            log.write(f"runner: cannot start: {e}\n")
            return 127, time.time() - t0
        try:
            rc = p.wait(timeout=case["timeout"])
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = "timeout"
    return rc, time.time() - t0


def flatten(obj, suffix=""):
    """The numbers of a JSON object (booleans as 0/1), named key + suffix."""
    return {k + suffix: float(v) for k, v in obj.items() if isinstance(v, (int, float))}


def extract_metrics(case, output, values):
    """Numbers named by the case's metric sources; a source that finds nothing is a problem."""
    metrics, problems = {}, []
    for src in case.get("metrics", []):
        if "json_line" in src:
            found = [ln[len(src["json_line"]):] for ln in output.splitlines() if ln.startswith(src["json_line"])]
            if found:
                metrics.update(flatten(json.loads(found[-1])))
            else:
                problems.append(f"no line starting {src['json_line']!r}")
        elif "json_lines" in src:
            # The prefix is dropped, except a "{" that starts the object itself.
            p = src["json_lines"]
            found = [json.loads(ln[len(p) - 1:] if p.endswith("{") else ln[len(p):])
                     for ln in output.splitlines() if ln.startswith(p)]
            keys = src.get("key", [])
            keys = [keys] if isinstance(keys, str) else keys
            for obj in found:
                metrics.update(flatten(obj, "".join(f"_{k}{obj[k]}" for k in keys)))
            if not found:
                problems.append(f"no line starting {src['json_lines']!r}")
        elif "json_file" in src:
            path = expand(src["json_file"], values)
            try:
                with open(path) as f:
                    metrics.update(flatten(json.load(f)))
            except (OSError, ValueError) as e:
                problems.append(f"{path}: {e}")
        for name, pattern in src.get("regex", {}).items():
            m = re.search(pattern, output, re.M)
            if m:
                metrics[name] = float(m.group(1))
            else:
                problems.append(f"{name}: no match for /{pattern}/")
    return metrics, problems


def evaluate(check, own, results):
    """(ok, text); a metric that is missing fails the check."""
    def value(term):
        try:
            return float(term)
        except ValueError:
            name = operand_case(term, own)
            metric = term.split(".", 1)[1] if "." in term else term
            got = results.get(name, {}).get("metrics", {}).get(metric)
            if got is None:
                raise KeyError(f"{name}.{metric} not measured")
            return got

    try:
        lhs, rhs = ([value(t) for t in side] for side in (check["lhs"], check["rhs"]))
        lv = lhs[0] / lhs[1] if len(lhs) == 2 else lhs[0]
        rv = rhs[0] / rhs[1] if len(rhs) == 2 else rhs[0]
    except (KeyError, ZeroDivisionError) as e:
        return False, f"{check['expr']}: {e}"
    return OPS[check["op"]](lv, rv), f"{check['expr']}: {lv:.6g} vs {rv:.6g}"


def compare_baseline(case, metrics, recorded, card):
    """One row per baseline metric: value, last recorded value, ratio, regression."""
    rows = []
    for metric, spec in case["baseline"].items():
        base = recorded.get("metrics", {}).get(metric)
        row = {"metric": metric, "value": metrics.get(metric), "baseline": base, "fail": spec.get("fail", False)}
        if base is not None and row["value"] is not None:
            row["ratio"] = row["value"] / base if base else None
            tol = spec.get("tol", 0.05)
            worse = (row["value"] < base * (1 - tol)) if spec.get("better", "higher") == "higher" \
                else (row["value"] > base * (1 + tol))
            row["regressed"] = worse
            if recorded.get("card") and card and recorded["card"] != card:
                row["note"] = f"baseline on {recorded['card']}"
        rows.append(row)
    return rows


def run_case(case, values, results, baseline, card):
    name = case["name"]
    res = {"case": name, "tags": case["tags"], "log": f"{name}.log", "metrics": {}, "checks": [], "baseline": [],
           "tail": []}
    failed_needs = [n for n in case["needs"] if results.get(n, {}).get("status") != "pass"]
    if failed_needs:
        return dict(res, status="skip", problems=[f"needs {' '.join(failed_needs)}, which did not pass"])
    log_path = os.path.join(values["work"], f"{name}.log")
    rc, secs = run_command(case, values, log_path)
    with open(log_path, errors="replace") as f:
        output = f.read()
    problems = []
    expected = case.get("expect_exit", 0)
    if rc == "timeout":
        problems.append(f"timed out after {case['timeout']} s")
    elif (rc == 0) if expected == "nonzero" else (rc != expected):
        problems.append(f"exit {rc}, expected {expected}")
    if "expect_output" in case and not re.search(case["expect_output"], output, re.M):
        problems.append(f"output does not match /{case['expect_output']}/")
    try:
        metrics, metric_problems = extract_metrics(case, output, values)
    except (ValueError, KeyError) as e:
        metrics, metric_problems = {}, [f"metrics: {type(e).__name__}: {e}"]
    problems += metric_problems
    res.update(exit=rc, seconds=round(secs, 2), metrics=metrics)
    results[name] = res  # checks may refer to this case's own metrics through the results
    for check in case["checks"]:
        ok, text = evaluate(check, name, results)
        res["checks"].append({"expr": check["expr"], "ok": ok, "fail": check["fail"], "text": text})
        if not ok and check["fail"]:
            problems.append(text)
    res["baseline"] = compare_baseline(case, metrics, baseline.get("cases", {}).get(name, {}), card)
    problems += [f"{r['metric']} regressed: {r['value']:.6g} vs baseline {r['baseline']:.6g}"
                 for r in res["baseline"] if r.get("regressed") and r["fail"]]
    res["status"] = "timeout" if rc == "timeout" else ("fail" if problems else "pass")
    res["problems"] = problems
    res["tail"] = output.splitlines()[-8:] if problems else []
    return res


# ---------------------------------------------------------------- report

def verdict_line(res):
    parts = [f"{res['status'].upper():7} {res['case']:<28} {res.get('seconds', 0):8.1f}s"]
    for r in res["baseline"]:
        if r["value"] is not None:
            flag = " REGRESSED" if r.get("regressed") else ""
            base = f" (baseline {r['baseline']:.6g}, x{r['ratio']:.3f}{flag}{', ' + r['note'] if 'note' in r else ''})" \
                if r.get("ratio") is not None else " (no baseline)"
            parts.append(f"{r['metric']}={r['value']:.6g}{base}")
    reported = [c["text"] for c in res["checks"] if not c["ok"] and not c["fail"]]
    parts += [f"below target: {t}" for t in reported]
    return "  ".join(parts)


def record(baseline, results, cases, header, out):
    """A copy of the baseline with this run's figures for the cases that passed."""
    new = json.loads(json.dumps(baseline))
    for name, res in results.items():
        metrics = {m: res["metrics"][m] for m in cases[name]["baseline"] if m in res["metrics"]}
        if res["status"] == "pass" and metrics:
            new.setdefault("cases", {})[name] = {"date": header["date"][:10], "card": header["card"],
                                                "commit": header["commit"], "metrics": metrics}
    with open(os.path.join(out, "baseline.json"), "w") as f:
        json.dump(new, f, indent=2, sort_keys=True)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("select", nargs="*", help="suites, cases or tags (default: full)")
    ap.add_argument("--build", default=".carry/build", help="folder of the binaries (default .carry/build)")
    ap.add_argument("--cases", default=os.path.join(HERE, "cases.json"))
    ap.add_argument("--baseline", default=os.path.join(HERE, "baseline.json"))
    ap.add_argument("--record", action="store_true", help="write $OUT/baseline.json with this run's figures")
    ap.add_argument("--list", action="store_true", help="print suites and cases, run nothing")
    args = ap.parse_args()
    try:
        suites, cases, order = load_cases(args.cases)
        names = select(args.select or ["full"], suites, cases, order)
    except (CaseListError, OSError, ValueError, KeyError) as e:
        print(f"runner: {args.cases}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if args.list:
        for s, members in suites.items():
            print(f"suite {s:<10} {' '.join(members)}")
        for n in order:
            print(f"case  {n:<28} [{' '.join(cases[n]['tags'])}] {cases[n]['timeout']}s")
        return 0
    baseline = {}
    if os.path.isfile(args.baseline):
        with open(args.baseline) as f:
            baseline = json.load(f)

    out = os.environ.get("OUT", "/tmp/out")
    shutil.rmtree(SCRATCH, ignore_errors=True)
    os.makedirs(SCRATCH)
    os.makedirs(out, exist_ok=True)
    header = setup_environment()
    header.update(selection=args.select or ["full"], cases=names, build=args.build)
    values = {"build": args.build, "work": SCRATCH, "gpus": str(max(header["gpus"], 1))}
    print(f"runner: {len(names)} cases on {header['card'] or 'no GPU'}; cuDNN {header['cudnn_lib'] or 'of the system'}",
          flush=True)

    results = {}
    with open(os.path.join(out, "results.jsonl"), "w") as jl:
        jl.write(json.dumps(header) + "\n")
        for name in names:
            try:
                res = run_case(cases[name], values, results, baseline, header["card"])
            except Exception as e:  # a bug or a bad field in one case must not lose the others' results
                res = {"case": name, "tags": cases[name]["tags"], "status": "fail", "metrics": {}, "checks": [],
                       "baseline": [], "tail": [], "problems": [f"runner: {type(e).__name__}: {e}"]}
            results[name] = res
            jl.write(json.dumps(res) + "\n")
            jl.flush()
            print(verdict_line(res), flush=True)
            for line in res["problems"] + ["| " + t for t in res["tail"]]:
                print("        " + line[:200], flush=True)

    with tarfile.open(os.path.join(out, "logs.tgz"), "w:gz") as t:
        for root, _, files in os.walk(SCRATCH):  # the logs and small outputs, not datasets or checkpoints
            for fn in files:
                p = os.path.join(root, fn)
                if fn.endswith((".log", ".json", ".jsonl", ".txt", ".xml")) and os.path.getsize(p) <= 2 << 20:
                    t.add(p, arcname=os.path.relpath(p, SCRATCH))
    if args.record:
        record(baseline, results, cases, header, out)

    bad = [r for r in results.values() if r["status"] != "pass"]
    print(f"\n{'case':<28} {'result':<8} {'seconds':>8}  notes")
    for r in results.values():
        missed = [c["expr"] for c in r["checks"] if not c["ok"] and not c["fail"]]
        regressed = [b["metric"] for b in r["baseline"] if b.get("regressed")]
        note = "; ".join(r["problems"] + [f"below target: {m}" for m in missed]
                         + [f"slower/larger than baseline: {' '.join(regressed)}"] * bool(regressed))
        print(f"{r['case']:<28} {r['status'].upper():<8} {r.get('seconds', 0):>8.1f}  {note[:120]}")
    print(f"runner: {len(results) - len(bad)}/{len(results)} cases passed; results in {out}/results.jsonl"
          + (f"; baseline written to {out}/baseline.json" if args.record else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
