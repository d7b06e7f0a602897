#!/usr/bin/env bash
# The step-time model end to end on the CPU backend (docs/step-time-model.md): bench --profile
# --rates-out records a step's rates, plan --time on the same configuration predicts, family by
# family, exactly the seconds bench recorded (work / rate round trip: the planner's schedule is
# the step's) with the profile's call counts; a second length joins the same table; malformed
# tables and stray flags are refused with one error line; --ranks-share-gpu (all ranks on one GPU)
# prices P x one rank's compute and host-staged collectives, and the device case that validates it
# runs here on the cpu backend. No timing is asserted.
source "$(dirname "$0")/lib.sh" "$@"
cd "$TMP"

roundtrip() {  # NAME, then the options bench and plan share
  local name=$1
  shift
  rm -f rates.json
  if ! "$ULYSSES" bench --backend cpu --shape tiny --seq 256 --steps 1 --warmup 0 --profile --rates-out rates.json \
      "$@" > bench.txt 2> bench.err; then
    fail "$name: bench --rates-out"; tail -3 bench.err; return
  fi
  if ! "$ULYSSES" plan --backend cpu --shape tiny --seq 256 --time rates.json "$@" > plan.txt 2> plan.err; then
    fail "$name: plan --time"; tail -3 plan.err; return
  fi
  if python3 - bench.txt plan.txt <<'PY'
import json, sys
bench = [l for l in open(sys.argv[1]) if l.startswith("BENCH_JSON ")][0]
prof = json.loads(bench[len("BENCH_JSON "):])["profile"]
pred = json.loads([l for l in open(sys.argv[2]) if l.startswith("TIME_JSON ")][0][len("TIME_JSON "):])
fams = pred["families"]
prof.pop("accounted")
assert set(prof) == set(fams), (sorted(prof), sorted(fams))
for name, row in prof.items():
    got = fams[name]["seconds"]
    assert abs(got - row["seconds"]) <= 1e-9 * max(1e-9, row["seconds"]), (name, got, row["seconds"])
    if name != "other":
        assert fams[name]["calls"] == row["calls"], (name, fams[name]["calls"], row["calls"])
step = sum(r["seconds"] for r in prof.values())
assert abs(pred["step_s"] - step) <= 1e-9 * step, (pred["step_s"], step)
print(f"     {len(prof)} families, step {step:.6f} s predicted as {pred['step_s']:.6f} s")
PY
  then pass "$name: predicted == recorded per family, calls equal"; else fail "$name: round trip"; fi
}

roundtrip "forward + backward" --no-optimizer
roundtrip "with AdamW" 
roundtrip "checkpoints offloaded, tiled" --offload-checkpoints --tiled-mlp --tiled-loss
roundtrip "LoRA" --lora-r 4
roundtrip "optimizer offloaded" --offload-optimizer

# A second length joins the table; the attention rate is then interpolated between the two.
"$ULYSSES" bench --backend cpu --shape tiny --seq 128 --steps 1 --warmup 0 --profile --rates-out two.json \
  --no-optimizer > /dev/null 2>&1
"$ULYSSES" bench --backend cpu --shape tiny --seq 512 --steps 1 --warmup 0 --profile --rates-out two.json \
  --no-optimizer > /dev/null 2>&1
python3 -c "import json,sys; assert len(json.load(open('two.json'))['measurements']) == 2" \
  && pass "a second measurement joins the table" || fail "a second measurement joins the table"
"$ULYSSES" plan --backend cpu --shape tiny --seq 256 --no-optimizer --time two.json > two.txt 2>&1 \
  && grep -q -E "^  attention .*interpolated on log\(seq\)" two.txt \
  && pass "attention interpolated between lengths" || fail "attention interpolated between lengths"

# Several GPUs from one GPU's rates: the meshes compared and the fastest named.
"$ULYSSES" plan --backend cpu --shape tiny --seq 256 --sp 4 --no-optimizer --time two.json --compare-meshes \
  --link-gbps 100 > meshes.txt 2>&1 && grep -q "^  ulysses 4 " meshes.txt && grep -q "^  ring 4 " meshes.txt \
  && grep -q "^  hybrid: ulysses 2 x ring 2 " meshes.txt && grep -q "^fastest: " meshes.txt \
  && pass "--compare-meshes names the fastest" || { fail "--compare-meshes"; cat meshes.txt | tail -5; }

# comm-bench on 2 MPI ranks writes each collective's bus bandwidth into the table, as host-staged
# figures (MPI through host memory: what ranks sharing one GPU use), with the ranks on the device.
if command -v mpirun > /dev/null; then
  if timeout 120 $MPIRUN -np 2 "$ULYSSES" comm-bench --min-bytes 4096 --max-bytes 65536 --iters 3 \
      --rates-out two.json > comm.txt 2>&1 && python3 - two.json <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert "collectives" not in j, j.get("collectives")  # MPI figures are not the interconnect's (--comm nccl)
c = j["host_staged"]
assert set(c) == {"all-to-all", "all-gather", "reduce-scatter", "all-reduce", "sendrecv"}, c
assert all(len(v) == 1 and v[0]["bus_gbps"] > 0 and v[0]["ranks"] == 2 and v[0]["ranks_per_gpu"] == 2
           for v in c.values()), c
PY
  then pass "comm-bench --comm mpi --rates-out adds host-staged bus bandwidths"; else fail "comm-bench --rates-out"; tail -3 comm.txt; fi

  # plan --time --ranks-share-gpu: every family's compute is P x what plan --time gives one rank of
  # P GPUs; "other" (host time) once; the collectives at the host-staged figures, scaled to P ranks.
  for mesh in "--sp 2" "--sp 2 --sp-ring 2 --zigzag" "--sp 4 --sp-ring 2 --zigzag"; do
    "$ULYSSES" plan --backend cpu --shape tiny --seq 256 $mesh --no-optimizer --time two.json > sep.txt 2>&1
    if "$ULYSSES" plan --backend cpu --shape tiny --seq 256 $mesh --no-optimizer --time two.json --ranks-share-gpu \
        > shared.txt 2>&1 && grep -q "^SHARED-GPU prediction: the [24] ranks of .* on one GPU" shared.txt \
        && python3 - sep.txt shared.txt <<'PY'
import json, sys
def time_json(path):
    return json.loads([l for l in open(path) if l.startswith("TIME_JSON ")][0][len("TIME_JSON "):])
sep, sh = time_json(sys.argv[1]), time_json(sys.argv[2])
p = sh["sp"]
assert sh["ranks_share_gpu"] == p and sep["ranks_share_gpu"] == 0, (sh["ranks_share_gpu"], sep["ranks_share_gpu"])
for name, f in sep["families"].items():
    want = f["compute_s"] * (1 if name == "other" else p)
    assert abs(sh["families"][name]["compute_s"] - want) <= 1e-12 + 1e-9 * want, (name, sh["families"][name], want)
notes = " ".join(sh["notes"])
assert f"measured on 2 ranks, 2 on one GPU; scaled by the ranks on the GPU then / {p}" in notes, notes
assert "DEFAULT" not in notes, notes  # every kind the step uses was measured
step = sum(f["seconds"] for f in sh["families"].values()) + sh["transfer_exposed_s"]
assert abs(step - sh["step_s"]) <= 1e-9 * step, (step, sh["step_s"])
PY
    then pass "--ranks-share-gpu ($mesh): compute P x one rank's, host-staged collectives"
    else fail "--ranks-share-gpu ($mesh)"; tail -3 shared.txt; fi
  done
  # Without host-staged figures: the default from pcie_gbps, said so.
  python3 -c "
import json; j = json.load(open('two.json')); del j['host_staged']; json.dump(j, open('nohost.json', 'w'))"
  "$ULYSSES" plan --backend cpu --shape tiny --seq 256 --sp 2 --no-optimizer --time nohost.json --ranks-share-gpu \
    > nohost.txt 2>&1 && grep -q "no host_staged bus bandwidth in the table for 'all-reduce' 'all-to-all': DEFAULT from pcie_gbps" nohost.txt \
    && pass "--ranks-share-gpu without host-staged figures: the pcie default, said so" \
    || { fail "--ranks-share-gpu default"; grep note nohost.txt; }

  # The device case bench/device/time_model_shared_gpu.sh end to end on the cpu backend (no
  # timing asserted: 2 cpu ranks run side by side, they do not time-slice one device).
  if OUT="$TMP" SHARED_GPU_BACKEND="--backend cpu" SHARED_GPU_SHAPE="--shape tiny" SHARED_GPU_SEQ=256 \
      SHARED_GPU_RATE_SEQS="128 256" \
      SHARED_GPU_MPIRUN="$MPIRUN" SHARED_GPU_MIN_BYTES=4096 SHARED_GPU_MAX_BYTES=65536 \
      timeout 120 bash "$ROOT/bench/device/time_model_shared_gpu.sh" "$(dirname "$ULYSSES")" > case.txt 2>&1 \
      && [ "$(grep -c -E '^PREDICT (ulysses_sp2|ring_sp2|hybrid_2x2) [0-9.e+-]+ [0-9.e+-]+ [0-9.e+-]+$' case.txt)" = 3 ]
  then pass "the device case time_model_shared_gpu runs on the cpu backend: 3 PREDICT lines"
  else fail "time_model_shared_gpu.sh on the cpu backend"; tail -5 case.txt; fi
fi
expect_error "comm-bench --rates-out on one rank" "one rank moves nothing" \
  "$ULYSSES" comm-bench --min-bytes 4096 --max-bytes 4096 --iters 1 --rates-out two.json
expect_error "--ranks-share-gpu with --link-gbps" "--ranks-share-gpu and --link-gbps contradict.*drop --link-gbps" \
  "$ULYSSES" plan --shape tiny --seq 256 --sp 2 --time two.json --ranks-share-gpu --link-gbps 50
expect_error "--ranks-share-gpu with --sp 1" "--ranks-share-gpu with --sp 1.*--sp 2 or more" \
  "$ULYSSES" plan --shape tiny --seq 256 --time two.json --ranks-share-gpu
expect_error "--ranks-share-gpu without --time" "go with --time" "$ULYSSES" plan --shape tiny --seq 256 --sp 2 --ranks-share-gpu
python3 -c "
import json; j = json.load(open('two.json')); j['host_staged'] = {'all-to-all': {'bus_gbps': 5, 'ranks': 1, 'ranks_per_gpu': 1}}
json.dump(j, open('badhost.json', 'w'))"
expect_error "a host-staged figure of one rank" "badhost.json: field 'host_staged.all-to-all' must have ranks >= 2" \
  "$ULYSSES" plan --shape tiny --seq 256 --sp 2 --time badhost.json --ranks-share-gpu

# Refusals: one error line naming the file and the field.
echo '{"format": "ulysses-rates", "version": 7, "measurements": []}' > v7.json
expect_error "wrong version" "v7.json: field 'version'" "$ULYSSES" plan --shape tiny --seq 256 --time v7.json
python3 -c "
import json; j = json.load(open('two.json')); j['measurements'][0]['families']['mlp']['rate'] = 1
j['measurements'][1]['families']['mlp']['unit'] = 'watt'; json.dump(j, open('bad.json', 'w'))"
expect_error "bad unit" "bad.json: field 'measurements\[1\].families.mlp.unit'" \
  "$ULYSSES" plan --shape tiny --seq 256 --time bad.json
echo 'nope' > nope.json
expect_error "not JSON" "nope.json: not JSON" "$ULYSSES" plan --shape tiny --seq 256 --time nope.json
expect_error "missing table" "missing.json" "$ULYSSES" plan --shape tiny --seq 256 --time missing.json
expect_error "--link-gbps without --time" "go with --time" "$ULYSSES" plan --shape tiny --seq 256 --link-gbps 50
expect_error "--rates-out without --profile" "add --profile" \
  "$ULYSSES" bench --backend cpu --shape tiny --seq 64 --steps 1 --warmup 0 --rates-out x.json
# A malformed table is never overwritten by bench.
expect_error "bench refuses to add to a malformed table" "nope.json: not JSON" \
  "$ULYSSES" bench --backend cpu --shape tiny --seq 64 --steps 1 --warmup 0 --profile --rates-out nope.json
finish
