#!/usr/bin/env python3
"""bench/device/runner.py on CPU: fake cases (python3 -c printing what the real tools print) give the
JSON lines, verdicts, checks, baseline comparison, timeout and exit status the GPU machine relies on;
and the real case list is well formed and covers every CUDA test binary. Plain asserts, no pytest."""
import glob
import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNER = os.path.join(REPO, "bench", "device", "runner.py")


def py(code):
    return [sys.executable, "-c", code]


def bench_json(**fields):
    return py(f"print('step time 1 s'); print('BENCH_JSON ' + {json.dumps(json.dumps(fields))})")


CASES = {
    "suites": {"all": ["t1", "needs_crash", "regress"], "nested": ["all"]},
    "cases": [
        {"name": "bench_a", "tags": ["t1"], "timeout": 30,
         "command": py("import json; json.dump({'from_file': 7}, open('{work}/a.json', 'w')); "
                       "print('BENCH_JSON {\"tokens_per_s\": 100.0, \"peak_device_bytes\": 1000, \"reserved\": true}')"),
         "metrics": [{"json_line": "BENCH_JSON "}, {"json_file": "{work}/a.json"}],
         "baseline": {"tokens_per_s": {"better": "higher", "tol": 0.05},
                      "peak_device_bytes": {"better": "lower", "tol": 0.0, "fail": True}}},
        {"name": "bench_b", "tags": ["t1"], "timeout": 30, "command": bench_json(tokens_per_s=50.0),
         "metrics": [{"json_line": "BENCH_JSON "}],
         "bounds": {"tokens_per_s": {"min": 10, "max": 60}},
         "checks": ["bench_a.tokens_per_s / bench_b.tokens_per_s >= 1.5",
                    {"expr": "bench_a.tokens_per_s / tokens_per_s >= 3", "fail": False}]},
        {"name": "ratio_fail", "tags": ["t1"], "timeout": 30, "command": "true",
         "checks": ["bench_b.tokens_per_s / bench_a.tokens_per_s >= 1.2"]},
        {"name": "crash", "tags": ["t1"], "timeout": 30, "command": py("import sys; print('boom'); sys.exit(3)")},
        {"name": "slow", "tags": ["t1"], "timeout": 1, "command": "sleep 60 & sleep 60"},
        {"name": "missing_metric", "tags": ["t1"], "timeout": 30, "command": "echo no json here",
         "metrics": [{"json_line": "BENCH_JSON "}]},
        {"name": "after", "tags": ["t1"], "timeout": 30, "env": {"WHERE": "{work}/x"},
         "command": py("import os; print('nvls=' + os.environ['NCCL_NVLS_ENABLE']); print('where=' + os.environ['WHERE']); "
                       "print('{\"S\": 8, \"tf\": 1.5}'); print('{\"S\": 16, \"tf\": 2.5}'); "
                       "print('COMM_JSON {\"op\": \"ag\", \"bytes\": 4, \"bw\": 9}')"),
         "expect_output": "^where=/tmp/.*/x$",
         "metrics": [{"regex": {"nvls": "^nvls=(\\d+)"}}, {"json_lines": "{", "key": "S"},
                     {"json_lines": "COMM_JSON ", "key": ["op", "bytes"]}],
         "checks": ["nvls == 0", "tf_S16 / tf_S8 > 1.6"]},
        {"name": "refused", "tags": ["t1"], "timeout": 30, "expect_exit": "nonzero", "expect_output": "error: too big",
         "command": py("import sys; print('error: too big'); sys.exit(1)")},
        {"name": "needs_crash", "timeout": 30, "needs": ["crash"], "command": "true"},
        {"name": "regress", "timeout": 30, "command": bench_json(peak_device_bytes=2000),
         "metrics": [{"json_line": "BENCH_JSON "}],
         "baseline": {"peak_device_bytes": {"better": "lower", "tol": 0.5, "fail": True}}},
    ],
}
BASELINE = {"cases": {
    "bench_a": {"date": "2026-01-01", "card": "Some GPU", "metrics": {"tokens_per_s": 200.0, "peak_device_bytes": 1000}},
    "regress": {"date": "2026-01-01", "card": "Some GPU", "metrics": {"peak_device_bytes": 1000}}}}


def run(tmp, *selection, cases=CASES, record=False):
    out = os.path.join(tmp, "out")
    paths = {}
    for name, obj in (("cases.json", cases), ("baseline.json", BASELINE)):
        paths[name] = os.path.join(tmp, name)
        with open(paths[name], "w") as f:
            json.dump(obj, f)
    cmd = [sys.executable, RUNNER, "--cases", paths["cases.json"], "--baseline", paths["baseline.json"],
           "--build", "/nonexistent"] + (["--record"] if record else []) + list(selection)
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OUT=out), timeout=120)
    return p, out, time.time() - t0


def read_results(out):
    with open(os.path.join(out, "results.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    return lines[0], {r["case"]: r for r in lines[1:]}


def test_full_run(tmp):
    p, out, secs = run(tmp, "nested", record=True)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    header, res = read_results(out)
    assert header["header"] and "cudnn_lib" in header and "card" in header, header
    assert list(res) == [c["name"] for c in CASES["cases"]], list(res)  # file order, everything once
    status = {n: r["status"] for n, r in res.items()}
    assert status == {"bench_a": "pass", "bench_b": "pass", "ratio_fail": "fail", "crash": "fail", "slow": "timeout",
                      "missing_metric": "fail", "after": "pass", "refused": "pass", "needs_crash": "skip",
                      "regress": "fail"}, status
    a = res["bench_a"]
    assert a["metrics"] == {"tokens_per_s": 100.0, "peak_device_bytes": 1000.0, "reserved": 1.0, "from_file": 7.0}
    base = {b["metric"]: b for b in a["baseline"]}
    assert base["tokens_per_s"]["regressed"] and base["tokens_per_s"]["ratio"] == 0.5  # reported, not failed
    assert not base["peak_device_bytes"]["regressed"]
    checks = res["bench_b"]["checks"]
    assert [c["ok"] for c in checks] == [True, False, True, True], checks  # 2 checks, then bounds min and max
    assert "2 vs 1.5" in checks[0]["text"], checks[0]
    assert any("0.5 vs 1.2" in x for x in res["ratio_fail"]["problems"]), res["ratio_fail"]
    assert res["crash"]["exit"] == 3 and "boom" in res["crash"]["tail"], res["crash"]
    assert secs < 30 and res["slow"]["seconds"] < 10, (secs, res["slow"])
    assert res["after"]["metrics"] == {"nvls": 0.0, "S_S8": 8.0, "tf_S8": 1.5, "S_S16": 16.0, "tf_S16": 2.5,
                                       "bytes_opag_bytes4": 4.0, "bw_opag_bytes4": 9.0}, res["after"]["metrics"]
    assert any("regressed" in x for x in res["regress"]["problems"]), res["regress"]
    # The verdicts stream in order; the summary table comes last.
    lines = p.stdout.strip().splitlines()
    assert lines[-1].startswith("runner: 4/10 cases passed"), lines[-1]
    table = lines[-11:-1]
    assert [ln.split()[:2] for ln in table] == [[n, s.upper()] for n, s in status.items()], table
    assert "x0.500 REGRESSED" in p.stdout and "below target: bench_a.tokens_per_s / tokens_per_s >= 3" in p.stdout
    # --record: this run's figures for the cases that passed, the old ones for the others.
    with open(os.path.join(out, "baseline.json")) as f:
        rec = json.load(f)["cases"]
    assert rec["bench_a"]["metrics"] == {"tokens_per_s": 100.0, "peak_device_bytes": 1000.0}, rec["bench_a"]
    assert rec["regress"]["metrics"] == {"peak_device_bytes": 1000}, rec["regress"]
    with tarfile.open(os.path.join(out, "logs.tgz")) as t:
        assert b"boom" in t.extractfile("crash.log").read()
        assert "a.json" in t.getnames()


def test_selection(tmp):
    # One case pulls in the cases it compares with; nothing else runs.
    p, out, _ = run(tmp, "bench_b")
    assert p.returncode == 0, p.stdout + p.stderr
    assert list(read_results(out)[1]) == ["bench_a", "bench_b"]
    p, _, _ = run(tmp, "no_such_thing")
    assert p.returncode == 2 and "no suite, case or tag" in p.stderr, p.stderr
    later = {"cases": [{"name": "x", "command": "true", "checks": ["y.a >= 1"]}, {"name": "y", "command": "true"}]}
    p, _, _ = run(tmp, "x", cases=later)
    assert p.returncode == 2 and "not a case defined before it" in p.stderr, p.stderr


def test_real_case_list():
    spec = importlib.util.spec_from_file_location("runner", RUNNER)
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    suites, cases, order = runner.load_cases(os.path.join(REPO, "bench", "device", "cases.json"))
    for suite in suites:
        assert runner.select([suite], suites, cases, order), suite
    for tag in ("long", "train", "multigpu"):  # run.sh's other modes
        assert runner.select([tag], suites, cases, order), tag
    for src in glob.glob(os.path.join(REPO, "tests", "cuda", "*_test.cpp")):  # a new CUDA test needs a case
        name = "cuda_" + os.path.basename(src)[:-4]
        assert name in cases and "tests" in cases[name]["tags"], f"{name}: no case in bench/device/cases.json"
    with open(os.path.join(REPO, "bench", "device", "baseline.json")) as f:
        for name, rec in json.load(f)["cases"].items():
            assert name in cases and set(rec["metrics"]) <= set(cases[name]["baseline"]), name


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        test_full_run(d)
    with tempfile.TemporaryDirectory() as d:
        test_selection(d)
    test_real_case_list()
    print("runner_test: ok")
