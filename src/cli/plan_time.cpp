// plan --time RATES.json: the predicted step time and tokens/s of the planned configuration
// (train/step_time.h), per op family, and with --compare-meshes the same step on Ulysses, ring
// and hybrid meshes of the same sp degree, the fastest named.
#include <cstdio>
#include <fstream>
#include <iostream>

#include "cli/plan_time.h"
#include "parallel/sequence_attention.h"
#include "train/step_time.h"

namespace ulysses {

std::vector<OptionSpec> plan_time_specs() {
  return {
      {"time", true, false, "predict the step time and tokens/s from a rates table recorded on the GPU by `bench "
                            "--profile --rates-out FILE` (docs/step-time-model.md)"},
      {"link-gbps", true, false, "with --time: the interconnect's bus bandwidth in GB/s for every collective (default: "
                                 "the table's measured figure per kind, else 370, NVLink on H100/H200)"},
      {"compare-meshes", false, false, "with --time: predict Ulysses (ring 1), ring (ring = sp) and the hybrid "
                                       "(ring 2) at the given --sp, and name the fastest"},
      {"time-json", true, false, "with --time: also write the prediction as JSON to this file"},
      {"ranks-share-gpu", false, false, "with --time: predict the step with all --sp ranks on ONE GPU over --comm mpi "
                                        "(how one GPU runs a mesh): compute --sp times one rank's, collectives "
                                        "through host memory at the table's host_staged bandwidths "
                                        "(mpirun -np N comm-bench --comm mpi --dtype fp32 --rates-out on that GPU)"},
  };
}

namespace {

std::string mesh_name(const PlanRequest& r) {
  if (r.ring == 1) return "ulysses " + std::to_string(r.sp);
  if (r.ring == r.sp) return "ring " + std::to_string(r.sp);
  return "hybrid: ulysses " + std::to_string(r.sp / r.ring) + " x ring " + std::to_string(r.ring);
}

std::string gpus_text(const PlanRequest& r, const TimeOptions& o) {
  return o.ranks_share_gpu > 1 ? "all " + std::to_string(r.sp) + " ranks on ONE GPU" : std::to_string(r.sp) + " GPUs";
}

StepTime predict(const PlanRequest& req, const RatesTable& rates, const TimeOptions& options) {
  return predict_step_time(plan_step_work(req), rates, req.seq_len, local_tokens(req), req.config.num_hidden_layers,
                           options);
}

}  // namespace

int run_plan_time(const Args& args, const PlanRequest& req) {
  const std::string path = args.get("time");
  const RatesTable rates = read_rates_table(path);
  TimeOptions options;
  if (args.has("link-gbps")) {
    options.link_gbps = args.get_double("link-gbps", 0, RealRange{0, 1e6, true, false, "GB/s of bus bandwidth"});
  }
  options.overlap = req.options.overlap_communication;
  if (args.has("ranks-share-gpu")) {
    ULY_CHECK(!args.has("link-gbps"),
              "plan: --ranks-share-gpu and --link-gbps contradict: ranks sharing one GPU exchange through host "
              "memory, not over a link; drop --link-gbps (the table's host_staged figures price the collectives)");
    ULY_CHECK(req.sp > 1, "plan: --ranks-share-gpu with --sp " << req.sp << ": one rank has the GPU to itself; "
                                                                  "give the mesh with --sp 2 or more");
    options.ranks_share_gpu = req.sp;
  }
  const StepTime t = predict(req, rates, options);
  const double tokens = static_cast<double>(req.seq_len);
  const bool shared = options.ranks_share_gpu > 1;
  if (shared) {
    std::cout << "SHARED-GPU prediction: the " << req.sp << " ranks of " << mesh_name(req)
              << " on one GPU over MPI (--comm mpi), not " << req.sp << " GPUs\n";
    if (req.ring > 1 && !req.zigzag)
      std::cout << "  note: ring without --zigzag: the ranks' attention work differs and " << req.sp
                << " x the planned (fullest) rank's overstates the GPU's sum; add --zigzag to predict it well\n";
  }
  std::cout << "step time: " << req.config.num_hidden_layers << " layers, hidden " << req.config.hidden_size
            << ", sequence " << req.seq_len << ", " << mesh_name(req) << " (" << local_tokens(req)
            << " tokens per rank), rates from " << path << (rates.device.empty() ? "" : " (" + rates.device + ")")
            << "\n"
            << t.table()
            << (shared ? "  compute: each family's is " + std::to_string(req.sp) +
                             " x one rank's (the GPU runs one rank's kernels at a time); collectives: MPI through "
                             "host memory, staging copies included\n"
                       : "")
            << "  overlap: the all-to-alls and the optimizer's all-gather exposed; ring K/V exchange behind the "
               "block attention; gradient reductions and weight gathers behind the next layer's compute "
            << (options.overlap ? "(the last layer's share exposed)" : "(--no-comm-overlap: all exposed)")
            << "; offloaded copies behind the compute\n";
  if (shared)
    std::printf("predicted step %.6f s, %.1f tokens/s (%d ranks sharing one GPU)\n", t.step_s, tokens / t.step_s,
                req.sp);
  else
    std::printf("predicted step %.6f s, %.1f tokens/s (%.1f per GPU over %d GPUs)\n", t.step_s, tokens / t.step_s,
                tokens / t.step_s / req.sp, req.sp);
  nlohmann::json j = t.json();
  j["seq_len"] = req.seq_len;
  j["sp"] = req.sp;
  j["ring"] = req.ring;
  j["tokens_per_s"] = tokens / t.step_s;
  if (args.has("compare-meshes")) {
    std::vector<int> rings = {1, req.sp};
    if (req.sp >= 4 && req.sp % 2 == 0) rings.push_back(2);
    std::string best;
    double best_s = 0;
    nlohmann::json meshes = nlohmann::json::array();
    std::cout << "meshes at sp " << req.sp << " (" << gpus_text(req, options) << "):\n";
    for (int ring : rings) {
      if (ring == 1 && req.sp == 1 && ring != rings.front()) continue;
      PlanRequest alt = req;
      alt.ring = ring;
      alt.zigzag = ring > 1 && req.zigzag;
      try {
        const StepTime a = predict(alt, rates, options);
        std::printf("  %-34s %12.6f s %14.1f tokens/s\n", mesh_name(alt).c_str(), a.step_s, tokens / a.step_s);
        meshes.push_back({{"mesh", mesh_name(alt)}, {"step_s", a.step_s}, {"tokens_per_s", tokens / a.step_s}});
        if (best.empty() || a.step_s < best_s) best = mesh_name(alt), best_s = a.step_s;
      } catch (const Error& e) {
        std::printf("  %-34s not possible: %s\n", mesh_name(alt).c_str(), e.what());
      }
      if (req.sp == 1) break;
    }
    if (!best.empty()) std::cout << "fastest: " << best << "\n";
    j["meshes"] = meshes;
    j["fastest"] = best;
  }
  std::cout << "TIME_JSON " << j.dump() << std::endl;
  if (args.has("time-json")) std::ofstream(args.get("time-json")) << j.dump(2) << "\n";
  return 0;
}

}  // namespace ulysses
