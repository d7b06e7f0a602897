// ulysses comm-bench [--backend cuda --comm nccl] [--ops LIST] [--min-bytes B] [--max-bytes B]
// The collectives of a training step measured alone, as nccl-tests reports them:
// per operation and message size, the time of one call (the slowest rank's mean
// over --iters calls after --warmup), the algorithm bandwidth (bytes / time) and
// the bus bandwidth (algorithm bandwidth × the fraction of the data that must
// cross links: 2(n-1)/n for all-reduce, 1 for sendrecv, (n-1)/n for the others), so that figures
// compare across rank counts and with nccl-tests. The buffers and the path are
// the step's: device tensors on NCCL, or staged through host memory on MPI.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "core/limits.h"
#include "io/atomic_file.h"
#include "parallel/collectives.h"
#include "parallel/step_communicator.h"
#include "train/step_time.h"

namespace ulysses {
namespace {

constexpr IntRange kMessageBytes{1, int64_t{1} << 36, "bytes"};
constexpr IntRange kCommIters{1, 1 << 20, "calls"};

struct CollectiveSpec {
  const char* name;  // the planner's kind with '_' for '-' (bus bandwidth = algbw × bus_factor(kind, n))
};

// sendrecv: every rank sends its buffer to the next rank and receives the previous one's, as the
// ring attention passes K/V blocks on (bus factor 1).
const CollectiveSpec kCollectives[] = {{"all_to_all"}, {"all_gather"}, {"reduce_scatter"}, {"all_reduce"},
                                       {"sendrecv"}};

std::string kind_of(const CollectiveSpec& op) {
  std::string kind = op.name;
  for (char& ch : kind) ch = ch == '_' ? '-' : ch;
  return kind;
}

const CollectiveSpec* find_collective(const std::string& name) {
  for (const auto& c : kCollectives)
    if (name == c.name) return &c;
  return nullptr;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// One call of `op` on buffers for a message of `bytes` (nccl-tests' size: the
// whole all-to-all or all-reduce buffer, the gathered output, the scattered input).
std::function<void()> make_call(const std::string& op, Communicator& comm, Backend& backend, int64_t elements,
                                DType dtype, std::vector<Tensor>& keep) {
  const int64_t n = comm.size();
  const int64_t block = elements / n;
  if (op == "all_to_all") {
    keep = {backend.empty({n * block}, dtype), backend.empty({n * block}, dtype)};
    return [&comm, &backend, &keep] { all_to_all(comm, backend, keep[0], keep[1]); };
  }
  if (op == "all_gather") {
    keep = {backend.empty({block}, dtype), backend.empty({n * block}, dtype)};
    return [&comm, &backend, &keep] { all_gather(comm, backend, keep[0], keep[1]); };
  }
  if (op == "reduce_scatter") {
    keep = {backend.empty({n * block}, dtype), backend.empty({block}, dtype)};
    return [&comm, &backend, &keep] { reduce_scatter_sum(comm, backend, keep[0], keep[1]); };
  }
  if (op == "sendrecv") {
    keep = {backend.empty({n * block}, dtype), backend.empty({n * block}, dtype)};
    const int next = (comm.rank() + 1) % comm.size(), prev = (comm.rank() + comm.size() - 1) % comm.size();
    return [&comm, &backend, &keep, next, prev] { sendrecv(comm, backend, keep[0], next, keep[1], prev); };
  }
  keep = {backend.empty({n * block}, dtype)};
  return [&comm, &backend, &keep] { all_reduce_sum(comm, backend, keep[0]); };
}

// How many ranks of the world are on rank 0's GPU (on the cpu backend: its host), compared by
// host name and PCI bus id: what a host-staged figure was measured with (collective).
int ranks_on_rank0_gpu(Communicator& world, const Backend& backend) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const int device = backend.device_index();
  const std::string gpu = device >= 0 ? cuda_device_bus_id(device) + "#" + std::to_string(device) : "host";
  const int64_t mine[2] = {static_cast<int64_t>(std::hash<std::string>{}(host)),
                           static_cast<int64_t>(std::hash<std::string>{}(gpu))};
  std::vector<int64_t> all(2 * static_cast<size_t>(world.size()));
  world.all_gather(mine, all.data(), 2, DType::I64);
  int same = 0;
  for (int r = 0; r < world.size(); ++r) same += all[2 * r] == all[0] && all[2 * r + 1] == all[1];
  return same;
}

}  // namespace

int run_comm_bench(int argc, char** argv, Communicator& world) {
  std::vector<OptionSpec> specs = {
      {"backend", true, false, "cpu (default; host buffers) or cuda (device buffers)"},
      {"comm", true, false, "mpi (default; device buffers staged through host memory) or nccl (cuda only)"},
      {"dtype", true, false, "bf16 (default on cuda) or fp32"},
      {"ops", true, false, "comma-separated: all_to_all,all_gather,reduce_scatter,all_reduce,sendrecv (default: all five; "
                             "sendrecv: each rank to the next, as the ring attention)"},
      {"min-bytes", true, false, "smallest message (default 1 MiB)"},
      {"max-bytes", true, false, "largest message (default 256 MiB on cuda, 16 MiB on cpu)"},
      {"factor", true, false, "size multiplier between messages (default 4)"},
      {"warmup", true, false, "untimed calls per size (default 3)"},
      {"iters", true, false, "timed calls per size (default 10)"},
      {"rates-out", true, false, "write each operation's bus bandwidth at the largest message into the rates table "
                                 "FILE that bench --profile --rates-out made, for plan --time "
                                 "(docs/step-time-model.md): --comm nccl as the interconnect's figures "
                                 "(\"collectives\"), --comm mpi as host-staged ones (\"host_staged\", for plan "
                                 "--time --ranks-share-gpu: run it on ranks sharing one GPU)"},
      {"help", false, false, "show this help"},
  };
  Args args("comm-bench", specs, argc, argv, 2);
  if (args.has("help")) {
    std::cout << Args::usage("comm-bench", specs);
    return 0;
  }
  const EngineConfig engine = engine_config_from(args, /*optimizer=*/false);
  const bool cuda = engine.backend == BackendKind::Cuda;
  const DType dtype = engine.act_dtype;
  const int64_t min_bytes = args.get_int("min-bytes", int64_t{1} << 20, kMessageBytes);
  const int64_t max_bytes = args.get_int("max-bytes", cuda ? int64_t{256} << 20 : int64_t{16} << 20, kMessageBytes);
  const int64_t factor = args.get_int("factor", 4, IntRange{2, 1 << 10, "a multiplier"});
  const int64_t warmup = args.get_int("warmup", 3, limits::kStepCount);
  const int64_t iters = args.get_int("iters", 10, kCommIters);
  ULY_CHECK(min_bytes <= max_bytes, "comm-bench: --min-bytes " << min_bytes << " is above --max-bytes " << max_bytes);
  std::vector<const CollectiveSpec*> ops;
  for (const auto& name : split_list(args.get("ops", "all_to_all,all_gather,reduce_scatter,all_reduce,sendrecv"))) {
    const CollectiveSpec* c = find_collective(name);
    ULY_CHECK(c != nullptr, "comm-bench: unknown --ops entry '"
                                << name << "' (choose from all_to_all, all_gather, reduce_scatter, all_reduce, sendrecv)");
    ops.push_back(c);
  }
  ULY_CHECK(!ops.empty(), "comm-bench: --ops names no operation");
  // Read (and so checked) before any timing: the table bench made, which gets the bandwidths.
  RatesTable rates;
  if (args.has("rates-out")) rates = read_rates_table(args.get("rates-out"));

  std::unique_ptr<Backend> backend = make_backend(engine, world.rank());
  StepCommunicator step_comm(world, *backend, comm_kind_name(engine.comm));
  Communicator& comm = step_comm.get();
  const int64_t n = comm.size();
  // MPI moves host buffers: device tensors are staged through host memory, and the figure is
  // only right for as many ranks on one GPU as it was measured with.
  const bool host_staged = !comm.device_buffers();
  const int ranks_per_gpu = host_staged ? ranks_on_rank0_gpu(world, *backend) : 0;
  const int64_t unit = static_cast<int64_t>(dtype_size(dtype)) * n;  // a message holds n equal blocks
  // Two buffers of the largest message: say so before allocating when they cannot fit.
  const size_t need = 2 * static_cast<size_t>(max_bytes);
  const size_t room = backend->device_memory_available();
  ULY_CHECK(need <= room, "comm-bench: --max-bytes " << max_bytes << " needs " << need << " bytes of "
                                                     << (cuda ? "device" : "host") << " memory, " << room
                                                     << " are free; give a smaller --max-bytes");
  if (comm.rank() == 0)
    std::cout << "comm-bench: " << n << " ranks, " << comm.name() << ", " << backend->name() << ", "
              << dtype_name(dtype) << ", mean of " << iters << " calls after " << warmup
              << " (time: the slowest rank)\n"
              << "op                     bytes    time_us   algbw_GB/s   busbw_GB/s\n";
  int measured = 0;  // kinds with a bus bandwidth from this run
  for (const CollectiveSpec* op : ops) {
    double last_busbw = 0;
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
      const int64_t elements = std::max<int64_t>(1, bytes / unit) * n;
      const int64_t message = elements * static_cast<int64_t>(dtype_size(dtype));
      std::vector<Tensor> buffers;
      std::function<void()> call = make_call(op->name, comm, *backend, elements, dtype, buffers);
      for (auto& b : buffers) backend->zero(b);
      for (int64_t i = 0; i < warmup; ++i) call();
      backend->synchronize();
      world.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < iters; ++i) call();
      backend->synchronize();
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
      world.all_reduce(&seconds, &seconds, 1, DType::F64, ReduceOp::Max);
      const double algbw = static_cast<double>(message) / seconds / 1e9;
      const double busbw = algbw * bus_factor(kind_of(*op), static_cast<int>(n));
      if (comm.rank() == 0) {
        char line[160];
        std::snprintf(line, sizeof line, "%-16s %12lld %10.1f %12.2f %12.2f\n", op->name,
                      static_cast<long long>(message), seconds * 1e6, algbw, busbw);
        std::cout << line;
        std::cout << "COMM_JSON {\"op\": \"" << op->name << "\", \"bytes\": " << message << ", \"ranks\": " << n
                  << ", \"comm\": \"" << comm.name() << "\", \"time_us\": " << seconds * 1e6
                  << ", \"algbw_gbs\": " << algbw << ", \"busbw_gbs\": " << busbw << "}\n"
                  << std::flush;
      }
      last_busbw = busbw;
      if (bytes > max_bytes / factor) break;  // the next size would pass the largest (and could overflow)
    }
    // The step's collectives are large: the largest message's bus bandwidth stands for the kind
    // (the table's kinds are spelled as the planner's, "all-to-all"). One rank moves nothing.
    const std::string kind = kind_of(*op);
    if (last_busbw <= 0 || n < 2) continue;  // one rank's "sendrecv" is a copy to itself
    ++measured;
    if (host_staged)
      add_host_staged(rates, kind, HostStagedRate{last_busbw, static_cast<int>(n), ranks_per_gpu});
    else
      rates.bus_gbps[kind] = last_busbw;
  }
  if (args.has("rates-out") && comm.rank() == 0) {
    ULY_CHECK(measured > 0, "comm-bench --rates-out: one rank moves nothing; run it on the ranks of the "
                                       "interconnect to measure (mpirun -np N)");
    write_file_atomic(args.get("rates-out"), rates.to_json().dump(2) + "\n");
    if (host_staged)
      std::cout << "rates: host-staged (MPI through host memory) bus bandwidth of " << measured
                << " collectives, " << n << " ranks, " << ranks_per_gpu << " on rank 0's "
                << (backend->device() == Device::CPU ? "host" : "GPU") << ", written to " << args.get("rates-out")
                << " (host_staged: for plan --time --ranks-share-gpu)\n";
    else
      std::cout << "rates: bus bandwidth of " << measured << " collectives written to " << args.get("rates-out")
                << "\n";
  }
  return 0;
}

}  // namespace ulysses
