// The step-time model (docs/step-time-model.md): the planner's exact schedule of one step (each
// profile family's GEMM and attention FLOPs, memory-bound bytes, host<->device copies and
// collectives: core/step_work.h) turned into seconds with rates measured per family on the GPU
// (`bench --profile --rates-out FILE`) and a bandwidth per collective kind.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/step_work.h"
#include "train/memory_plan.h"

namespace ulysses {

// The work of the step the request describes, per family, as bench times it (zero grads,
// forward + backward, gradient reduction, optimizer): one dry run on the planning backend.
WorkLedger plan_step_work(PlanRequest req);

// What each family's rate divides: FLOPs (GEMMs, attention), bytes (memory-bound), or calls
// (a family with neither, such as a collective on one rank: seconds per call).
enum class WorkUnit { Flop, Byte, Call };
WorkUnit work_unit_of(const FamilyWork& f);
double work_in(const FamilyWork& f, WorkUnit unit);
const char* work_unit_name(WorkUnit unit);

// One measured step: per family its seconds and the work the planner counts for it.
struct RatesMeasurement {
  struct Entry {
    WorkUnit unit = WorkUnit::Call;
    double seconds = 0, work = 0, calls = 0;
    double rate() const { return seconds > 0 ? work / seconds : 0; }  // work per second
  };
  int64_t seq_len = 0, local_tokens = 0;
  int ranks = 1, sp = 1, ring = 1;
  std::string model;  // "32 layers, hidden 4096" (for people)
  std::map<std::string, Entry> families;  // "other" (no family: host time) as calls
};

// A collective's bus bandwidth over MPI through host memory (`comm-bench --comm mpi --rates-out`):
// on the cuda backend it includes the staging copies device -> host -> device of every rank, so
// it holds for as many ranks on one GPU as it was measured with (ranks_per_gpu).
struct HostStagedRate {
  double bus_gbps = 0;
  int ranks = 0;         // the communicator's size comm-bench ran with
  int ranks_per_gpu = 0; // of them, how many shared rank 0's GPU (on the cpu backend: its host)
};

struct RatesTable {
  static constexpr int kVersion = 1;
  std::string device;
  std::vector<RatesMeasurement> measurements;
  std::map<std::string, double> bus_gbps;  // measured bus bandwidth by collective kind (GB/s), NCCL
  // By kind, one figure per communicator size measured (ascending ranks): MPI through host memory
  // (optional). Host-side MPI reductions run on every rank's core at once, so a figure holds for its
  // own group size only: the prediction takes the group's own, else the nearest (add_host_staged).
  std::map<std::string, std::vector<HostStagedRate>> host_staged;
  double latency_us = -1;                  // per collective call; < 0: the default
  double pcie_gbps = -1;                   // host <-> device copies; < 0: the default
  nlohmann::json to_json() const;
};

// The table in `text`, read from `file`; a malformed one is refused with an Error naming the
// file and the field.
RatesTable parse_rates_table(const std::string& text, const std::string& file);
RatesTable read_rates_table(const std::string& path);
// A measurement from a profiled step (StepProfile::json()) and the planner's work for it.
RatesMeasurement make_measurement(const nlohmann::json& profile, const WorkLedger& work);

// Defaults where the table has no figure: NVLink on H100/H200 (nccl-tests bus bandwidth of an
// all-to-all, 2026-12-04: 330 GB/s on two H200s; ~370 GB/s on 8), pinned PCIe copies 55 GB/s
// (DESIGN §6), 20 µs a collective call.
constexpr double kDefaultBusGbps = 370, kDefaultPcieGbps = 55, kDefaultLatencyUs = 20;

struct TimeOptions {
  double link_gbps = -1;  // > 0: every collective's bus bandwidth (the interconnect), over the table's
  bool overlap = true;    // the engine overlaps its gradient collectives (--no-comm-overlap: it does not)
  // > 1: that many ranks share ONE GPU (plan --ranks-share-gpu; --comm mpi): the GPU runs one
  // rank's kernels at a time, so each family's compute is this many times one rank's; the
  // collectives are MPI through host memory at the table's host_staged bandwidths (else the
  // staging copies at pcie_gbps); offloaded copies of every rank cross the one GPU's link.
  // Incompatible with link_gbps.
  int ranks_share_gpu = 0;
};

struct FamilyTime {
  std::string family;
  WorkUnit unit = WorkUnit::Call;
  double work = 0, rate = 0;
  double compute_s = 0;      // work / rate
  double comm_s = 0;         // the family's collectives at bus bandwidth + latency
  double comm_exposed_s = 0; // what the overlap leaves on the step
  double calls = 0;
  std::string note;          // which measurement, interpolated or clamped
  double seconds() const { return compute_s + comm_exposed_s; }
};

struct StepTime {
  std::vector<FamilyTime> families;  // "other" last
  int ranks_share_gpu = 0;           // TimeOptions::ranks_share_gpu the prediction was made for
  double transfer_s = 0, transfer_exposed_s = 0;
  double step_s = 0;
  std::vector<std::string> notes;
  std::string table() const;
  nlohmann::json json() const;
};

// seq_len: the global sequence; local_tokens: per rank. L: layers (the share of overlapped
// collectives left exposed is the last layer's).
StepTime predict_step_time(const WorkLedger& work, const RatesTable& rates, int64_t seq_len, int64_t local_tokens,
                           int64_t layers, const TimeOptions& options);

// Bus-bandwidth factor of one collective over n ranks, as nccl-tests defines it: time =
// factor · bytes / bus bandwidth.
double bus_factor(const std::string& kind, int n);

// Bytes one rank copies device -> host and back to stage one collective of `bytes` (sized as
// nccl-tests sizes it) over n ranks through host memory (parallel/collectives.cpp staged()).
double staged_copy_bytes(const std::string& kind, int n, double bytes);

// Seconds of one kind of collective over MPI through host memory when `ranks_on_gpu` ranks share
// one GPU: factor · bytes / (measured bus bandwidth × measured ranks per GPU / ranks_on_gpu) + calls
// · latency; without a measured figure, every rank's staging copies through the one GPU's link
// (ranks_on_gpu · staged_copy_bytes / pcie) + calls · latency, the host-memory MPI copy left out.
// `measured` says which (for the row's note).
// Sets the host-staged figure of `kind` for h.ranks ranks (replacing one of that size).
void add_host_staged(RatesTable& rates, const std::string& kind, const HostStagedRate& h);
// The figure of `kind` measured with `group` ranks, else the nearest size measured; null if none.
const HostStagedRate* host_staged_rate(const RatesTable& rates, const std::string& kind, int group);
double host_staged_seconds(const RatesTable& rates, const CollectiveWork& c, int ranks_on_gpu, bool& measured);

}  // namespace ulysses
