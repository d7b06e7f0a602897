#include "train/step_time.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "core/error.h"
#include "io/regular_file.h"

namespace ulysses {

WorkLedger plan_step_work(PlanRequest req) {
  WorkLedger ledger;
  req.work = &ledger;
  (void)plan_step_memory(req);
  return ledger;
}

WorkUnit work_unit_of(const FamilyWork& f) {
  if (f.flops() > 0) return WorkUnit::Flop;
  if (f.bytes > 0) return WorkUnit::Byte;
  return WorkUnit::Call;
}

double work_in(const FamilyWork& f, WorkUnit unit) {
  switch (unit) {
    case WorkUnit::Flop: return f.flops();
    case WorkUnit::Byte: return f.bytes;
    case WorkUnit::Call: return static_cast<double>(f.calls);
  }
  return 0;
}

const char* work_unit_name(WorkUnit unit) {
  switch (unit) {
    case WorkUnit::Flop: return "flop";
    case WorkUnit::Byte: return "byte";
    case WorkUnit::Call: return "call";
  }
  return "?";
}

double bus_factor(const std::string& kind, int n) {
  const double r = n > 1 ? double(n - 1) / double(n) : 0.0;
  if (kind == "all-reduce") return 2 * r;
  if (kind == "all-to-all" || kind == "all-gather" || kind == "reduce-scatter") return r;
  return 1.0;  // sendrecv, broadcast: the bytes cross one link
}

double staged_copy_bytes(const std::string& kind, int n, double bytes) {
  const double block = n > 0 ? bytes / double(n) : bytes;
  // all-gather: its own block down, the gathered buffer up; reduce-scatter: the whole input
  // down, its block up; the others (all-to-all, all-reduce in place, sendrecv) the buffer both ways.
  if (kind == "all-gather" || kind == "reduce-scatter") return bytes + block;
  return 2 * bytes;
}

void add_host_staged(RatesTable& rates, const std::string& kind, const HostStagedRate& h) {
  std::vector<HostStagedRate>& v = rates.host_staged[kind];
  std::erase_if(v, [&](const HostStagedRate& e) { return e.ranks == h.ranks; });
  v.push_back(h);
  std::sort(v.begin(), v.end(), [](const HostStagedRate& a, const HostStagedRate& b) { return a.ranks < b.ranks; });
}

const HostStagedRate* host_staged_rate(const RatesTable& rates, const std::string& kind, int group) {
  const auto it = rates.host_staged.find(kind);
  if (it == rates.host_staged.end()) return nullptr;
  const HostStagedRate* best = nullptr;
  double best_d = 0;
  for (const HostStagedRate& e : it->second) {  // ascending: a tie goes to the larger group
    const double d = std::abs(std::log(double(e.ranks) / double(std::max(1, group))));
    if (!best || d <= best_d) best = &e, best_d = d;
  }
  return best;
}

double host_staged_seconds(const RatesTable& rates, const CollectiveWork& c, int ranks_on_gpu, bool& measured) {
  const double latency = (rates.latency_us >= 0 ? rates.latency_us : kDefaultLatencyUs) * 1e-6;
  const double p = std::max(1, ranks_on_gpu);
  const HostStagedRate* h = host_staged_rate(rates, c.kind, c.group);
  measured = h != nullptr;
  if (measured) {
    // The staging copies of every rank on the GPU share its link: measured with k ranks on it,
    // the figure is k/p of itself with p ranks (1 when the group's own size was measured on the
    // whole job's ranks).
    const double per_gpu = std::max(1, h->ranks_per_gpu);
    const double gbps = h->bus_gbps * per_gpu / p;
    return bus_factor(c.kind, c.group) * c.bytes / (gbps * 1e9) + double(c.calls) * latency;
  }
  const double pcie = (rates.pcie_gbps > 0 ? rates.pcie_gbps : kDefaultPcieGbps) * 1e9;
  return p * staged_copy_bytes(c.kind, c.group, c.bytes) / pcie + double(c.calls) * latency;
}

// ---- the table as JSON ----

nlohmann::json RatesTable::to_json() const {
  nlohmann::json j = {{"format", "ulysses-rates"}, {"version", kVersion}, {"device", device}};
  j["measurements"] = nlohmann::json::array();
  for (const RatesMeasurement& m : measurements) {
    nlohmann::json fam = nlohmann::json::object();
    for (const auto& [name, e] : m.families)
      fam[name] = {{"unit", work_unit_name(e.unit)}, {"seconds", e.seconds}, {"work", e.work},
                   {"calls", e.calls}, {"rate", e.rate()}};
    j["measurements"].push_back({{"seq_len", m.seq_len}, {"local_tokens", m.local_tokens}, {"ranks", m.ranks},
                                 {"sp", m.sp}, {"ring", m.ring}, {"model", m.model}, {"families", fam}});
  }
  if (!bus_gbps.empty()) {
    j["collectives"] = nlohmann::json::object();
    for (const auto& [kind, g] : bus_gbps) j["collectives"][kind] = {{"bus_gbps", g}};
  }
  if (!host_staged.empty()) {
    j["host_staged"] = nlohmann::json::object();
    for (const auto& [kind, v] : host_staged) {
      nlohmann::json a = nlohmann::json::array();
      for (const HostStagedRate& h : v)
        a.push_back({{"bus_gbps", h.bus_gbps}, {"ranks", h.ranks}, {"ranks_per_gpu", h.ranks_per_gpu}});
      j["host_staged"][kind] = a;
    }
  }
  if (latency_us >= 0) j["latency_us"] = latency_us;
  if (pcie_gbps > 0) j["pcie_gbps"] = pcie_gbps;
  return j;
}

namespace {

// Field readers: every refusal is one sentence naming the file and the field.
struct Reader {
  const std::string& file;
  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    ULY_CHECK(false, "rates table " << file << ": field '" << field << "' " << what
                                    << " (record one with: ulysses bench --profile --rates-out FILE)");
    throw;  // unreachable
  }
  const nlohmann::json& at(const nlohmann::json& j, const std::string& key, const std::string& field) const {
    if (!j.is_object() || !j.contains(key)) fail(field, "is missing");
    return j.at(key);
  }
  double number(const nlohmann::json& j, const std::string& field, bool positive) const {
    if (!j.is_number()) fail(field, "must be a number");
    const double v = j.get<double>();
    if (!std::isfinite(v) || v < 0 || (positive && v == 0))
      fail(field, std::string("must be a finite ") + (positive ? "positive" : "non-negative") + " number");
    return v;
  }
};

}  // namespace

RatesTable parse_rates_table(const std::string& text, const std::string& file) {
  const Reader rd{file};
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    ULY_CHECK(false, "rates table " << file << ": not JSON (" << e.what() << ")");
  }
  if (!j.is_object()) rd.fail("(top)", "must be a JSON object");
  const nlohmann::json& format = rd.at(j, "format", "format");
  if (format != "ulysses-rates") rd.fail("format", "must be \"ulysses-rates\"");
  const nlohmann::json& version = rd.at(j, "version", "version");
  if (!version.is_number_integer() || version.get<int64_t>() != RatesTable::kVersion)
    rd.fail("version", "must be " + std::to_string(RatesTable::kVersion) + " (this build's format), got " +
                           version.dump());
  RatesTable t;
  if (j.contains("device")) {
    if (!j["device"].is_string()) rd.fail("device", "must be a string");
    t.device = j["device"].get<std::string>();
  }
  const nlohmann::json& ms = rd.at(j, "measurements", "measurements");
  if (!ms.is_array() || ms.empty()) rd.fail("measurements", "must be a non-empty array");
  for (size_t i = 0; i < ms.size(); ++i) {
    const std::string mf = "measurements[" + std::to_string(i) + "]";
    const nlohmann::json& m = ms[i];
    if (!m.is_object()) rd.fail(mf, "must be an object");
    RatesMeasurement out;
    out.seq_len = static_cast<int64_t>(rd.number(rd.at(m, "seq_len", mf + ".seq_len"), mf + ".seq_len", true));
    out.local_tokens =
        static_cast<int64_t>(rd.number(rd.at(m, "local_tokens", mf + ".local_tokens"), mf + ".local_tokens", true));
    if (m.contains("ranks")) out.ranks = static_cast<int>(rd.number(m["ranks"], mf + ".ranks", true));
    if (m.contains("sp")) out.sp = static_cast<int>(rd.number(m["sp"], mf + ".sp", true));
    if (m.contains("ring")) out.ring = static_cast<int>(rd.number(m["ring"], mf + ".ring", true));
    if (m.contains("model") && m["model"].is_string()) out.model = m["model"].get<std::string>();
    const nlohmann::json& fam = rd.at(m, "families", mf + ".families");
    if (!fam.is_object() || fam.empty()) rd.fail(mf + ".families", "must be a non-empty object");
    for (const auto& [name, e] : fam.items()) {
      const std::string ff = mf + ".families." + name;
      if (!e.is_object()) rd.fail(ff, "must be an object");
      RatesMeasurement::Entry entry;
      const nlohmann::json& unit = rd.at(e, "unit", ff + ".unit");
      if (unit == "flop") entry.unit = WorkUnit::Flop;
      else if (unit == "byte") entry.unit = WorkUnit::Byte;
      else if (unit == "call") entry.unit = WorkUnit::Call;
      else rd.fail(ff + ".unit", "must be \"flop\", \"byte\" or \"call\", got " + unit.dump());
      entry.seconds = rd.number(rd.at(e, "seconds", ff + ".seconds"), ff + ".seconds", false);
      entry.work = rd.number(rd.at(e, "work", ff + ".work"), ff + ".work", false);
      if (e.contains("calls")) entry.calls = rd.number(e["calls"], ff + ".calls", false);
      // Work without time (or time without work) gives no rate to divide by.
      if ((entry.work > 0) != (entry.seconds > 0) && entry.unit != WorkUnit::Call)
        rd.fail(ff, "has work " + std::to_string(entry.work) + " in " + std::to_string(entry.seconds) +
                        " s: no rate can be taken from it");
      out.families[name] = entry;
    }
    t.measurements.push_back(out);
  }
  if (j.contains("collectives")) {
    const nlohmann::json& c = j["collectives"];
    if (!c.is_object()) rd.fail("collectives", "must be an object");
    for (const auto& [kind, e] : c.items())
      t.bus_gbps[kind] = rd.number(rd.at(e, "bus_gbps", "collectives." + kind + ".bus_gbps"),
                                   "collectives." + kind + ".bus_gbps", true);
  }
  if (j.contains("host_staged")) {
    const nlohmann::json& c = j["host_staged"];
    if (!c.is_object()) rd.fail("host_staged", "must be an object");
    // A kind holds one figure per group size (an array), or one figure (an object: tables written
    // before figures were kept per size).
    const auto entry = [&](const nlohmann::json& e, const std::string& kind, const std::string& f) {
      HostStagedRate h;
      h.bus_gbps = rd.number(rd.at(e, "bus_gbps", f + ".bus_gbps"), f + ".bus_gbps", true);
      h.ranks = static_cast<int>(rd.number(rd.at(e, "ranks", f + ".ranks"), f + ".ranks", true));
      h.ranks_per_gpu =
          static_cast<int>(rd.number(rd.at(e, "ranks_per_gpu", f + ".ranks_per_gpu"), f + ".ranks_per_gpu", true));
      if (h.ranks < 2 || h.ranks_per_gpu > h.ranks)
        rd.fail(f, "must have ranks >= 2 and ranks_per_gpu <= ranks, got ranks " + std::to_string(h.ranks) +
                       ", ranks_per_gpu " + std::to_string(h.ranks_per_gpu));
      add_host_staged(t, kind, h);
    };
    for (const auto& [kind, e] : c.items()) {
      const std::string f = "host_staged." + kind;
      if (!e.is_array()) {
        entry(e, kind, f);
        continue;
      }
      for (size_t i = 0; i < e.size(); ++i) entry(e[i], kind, f + "[" + std::to_string(i) + "]");
    }
  }
  if (j.contains("latency_us")) t.latency_us = rd.number(j["latency_us"], "latency_us", false);
  if (j.contains("pcie_gbps")) t.pcie_gbps = rd.number(j["pcie_gbps"], "pcie_gbps", true);
  return t;
}

RatesTable read_rates_table(const std::string& path) {
  return parse_rates_table(read_text_file(path, "rates table", size_t(64) << 20), path);
}

RatesMeasurement make_measurement(const nlohmann::json& profile, const WorkLedger& work) {
  RatesMeasurement m;
  for (const auto& [name, row] : profile.items()) {
    if (name == "accounted" || !row.is_object()) continue;
    RatesMeasurement::Entry e;
    e.seconds = row.value("seconds", 0.0);
    e.calls = row.value("calls", 0.0);
    const FamilyWork* f = work.find(name);
    if (name == "other" || f == nullptr) {
      // Host time outside every family (or a family the planner does not run): seconds a step.
      e.unit = WorkUnit::Call;
      e.work = 1;
      e.calls = 1;
    } else {
      e.unit = work_unit_of(*f);
      e.work = work_in(*f, e.unit);
      if (e.seconds <= 0 && e.unit != WorkUnit::Call) {
        // Too fast for the clock: kept as time per call (zero), not as an infinite rate.
        e.unit = WorkUnit::Call;
        e.work = static_cast<double>(f->calls);
      }
    }
    m.families[name] = e;
  }
  return m;
}

// ---- prediction ----

namespace {

// The family's rate at this shape, and a note on where it came from. Attention's rate is
// interpolated on log(sequence) between the measured lengths (its FLOPs grow as S², its rate
// with S too); the others take the measurement nearest in tokens per rank.
double rate_for(const RatesTable& rates, const std::string& family, WorkUnit& unit, int64_t seq, int64_t local,
                std::string& note) {
  std::vector<const RatesMeasurement*> have;
  for (const RatesMeasurement& m : rates.measurements)
    if (m.families.count(family)) have.push_back(&m);
  if (have.empty()) return 0;
  if (family == "attention" && have.size() > 1) {
    std::vector<std::pair<double, double>> pts;  // (log seq, rate)
    for (const RatesMeasurement* m : have) {
      const auto& e = m->families.at(family);
      if (e.unit == WorkUnit::Flop && e.seconds > 0) pts.emplace_back(std::log(double(m->seq_len)), e.rate());
    }
    std::sort(pts.begin(), pts.end());
    if (pts.size() > 1) {
      unit = WorkUnit::Flop;
      const double x = std::log(double(seq));
      if (x <= pts.front().first) {
        note = x < pts.front().first ? "clamped to the shortest measured sequence" : "measured";
        return pts.front().second;
      }
      if (x >= pts.back().first) {
        note = x > pts.back().first ? "clamped to the longest measured sequence" : "measured";
        return pts.back().second;
      }
      for (size_t i = 1; i < pts.size(); ++i)
        if (x <= pts[i].first) {
          const double w = (x - pts[i - 1].first) / (pts[i].first - pts[i - 1].first);
          note = "interpolated on log(seq)";
          return pts[i - 1].second + w * (pts[i].second - pts[i - 1].second);
        }
    }
  }
  const RatesMeasurement* best = have.front();
  double best_d = 1e300;
  for (const RatesMeasurement* m : have) {
    const double d = std::fabs(std::log(double(local) / double(m->local_tokens)));
    if (d < best_d) best_d = d, best = m;
  }
  const auto& e = best->families.at(family);
  unit = e.unit;
  note = "at " + std::to_string(best->local_tokens) + " tokens/rank";
  if (e.unit == WorkUnit::Call) return e.calls > 0 ? e.calls / std::max(e.seconds, 1e-300) : 0;
  return e.rate();
}

bool overlapped_collectives(const std::string& family) {
  return family == "grad all-reduce" || family == "grad reduce-scatter" || family == "weight all-gather";
}

}  // namespace

StepTime predict_step_time(const WorkLedger& work, const RatesTable& rates, int64_t seq_len, int64_t local_tokens,
                           int64_t layers, const TimeOptions& options) {
  StepTime out;
  const int shared = options.ranks_share_gpu > 1 ? options.ranks_share_gpu : 0;
  ULY_CHECK(!(shared && options.link_gbps > 0),
            "step time: ranks sharing one GPU exchange through host memory, not over a link: no link_gbps");
  out.ranks_share_gpu = shared;
  // Ranks sharing one GPU: it runs one rank's kernels at a time, so every family's compute
  // (the same on each rank: the planned rank is the slowest) counts that many times.
  const double gpu_ranks = shared ? double(shared) : 1.0;
  std::set<std::string> staged_default;  // kinds priced by the default (no host_staged figure)
  int staged_measured = 0;
  const double latency = (rates.latency_us >= 0 ? rates.latency_us : kDefaultLatencyUs) * 1e-6;
  const double pcie = (rates.pcie_gbps > 0 ? rates.pcie_gbps : kDefaultPcieGbps) * 1e9;
  double compute = 0, transfer_bytes = 0;
  std::vector<std::string> missing;
  for (const FamilyWork& f : work.families()) {
    // Ops outside every family: the measurement's "other" row carries their time.
    if (f.family == "(none)") continue;
    FamilyTime t;
    t.family = f.family;
    t.calls = static_cast<double>(f.calls);
    t.unit = work_unit_of(f);
    double r = rate_for(rates, f.family, t.unit, seq_len, local_tokens, t.note);
    if (r <= 0 && t.unit != WorkUnit::Call) {
      // A family the measurement did not have (ZeRO's, the all-to-all's packing on one GPU): its
      // work at the rate of a measured family of the same kind, GEMMs as the MLP's, bytes as RMSNorm's.
      const char* stand_in = t.unit == WorkUnit::Flop ? "mlp" : "rmsnorm";
      WorkUnit u = t.unit;
      r = rate_for(rates, stand_in, u, seq_len, local_tokens, t.note);
      if (u != t.unit) r = 0;
      if (r > 0) t.note = std::string("as '") + stand_in + "' (not measured itself)";
    }
    t.work = t.unit == WorkUnit::Call ? t.calls : work_in(f, t.unit);
    t.rate = r;  // work per second (calls per second for unit "call")
    if (r > 0) t.compute_s = gpu_ranks * t.work / r;
    else if (t.unit != WorkUnit::Call) missing.push_back(f.family);
    for (const CollectiveWork& c : f.collectives) {
      if (shared) {
        bool measured = false;
        t.comm_s += host_staged_seconds(rates, c, shared, measured);
        if (measured) ++staged_measured;
        else staged_default.insert(c.kind);
        continue;
      }
      const auto it = rates.bus_gbps.find(c.kind);
      const double gbps = options.link_gbps > 0 ? options.link_gbps
                          : it != rates.bus_gbps.end() ? it->second
                                                       : kDefaultBusGbps;
      t.comm_s += bus_factor(c.kind, c.group) * c.bytes / (gbps * 1e9) + double(c.calls) * latency;
    }
    transfer_bytes += f.transfer_bytes;
    compute += t.compute_s;
    out.families.push_back(t);
  }
  // "other": the host time the measurement had outside every family, carried as it was.
  {
    FamilyTime t;
    t.family = "other";
    t.unit = WorkUnit::Call;
    t.work = 1;
    t.rate = rate_for(rates, "other", t.unit, seq_len, local_tokens, t.note);
    t.compute_s = t.rate > 0 ? 1.0 / t.rate : 0;
    out.families.push_back(t);
  }
  // The overlap the engine has (docs/step-time-model.md): the Ulysses all-to-alls and the
  // optimizer's all-gather wait on the compute stream (exposed); ring attention sends the next
  // K/V block during the current block's attention; the gradient all-reduce / reduce-scatter and
  // ZeRO-3's weight gathers run during the next layer's compute, leaving the last layer's share
  // exposed (all of it with --no-comm-overlap); offloaded checkpoints move on a transfer stream.
  // Ranks sharing a GPU over MPI keep these rules against the GPU's compute of all ranks: the
  // staged all-to-alls are blocking (collectives.cpp staged_now); the asynchronous staged forms
  // (ring exchange, gradient reductions) start the MPI transfer and it moves on while the host
  // waits for the device (synchronize_polling and MPI_Wait progress it).
  double attention_s = 0;
  for (const FamilyTime& t : out.families)
    if (t.family == "attention") attention_s = t.compute_s;
  for (FamilyTime& t : out.families) {
    if (t.comm_s <= 0) continue;
    if (t.family == "ring exchange")
      t.comm_exposed_s = std::max(0.0, t.comm_s - attention_s);
    else if (overlapped_collectives(t.family) && options.overlap)
      t.comm_exposed_s = std::max(t.comm_s / double(std::max<int64_t>(1, layers)), t.comm_s - compute);
    else
      t.comm_exposed_s = t.comm_s;
  }
  // Every rank's offloaded copies cross the one GPU's link.
  out.transfer_s = gpu_ranks * transfer_bytes / pcie;
  out.transfer_exposed_s = std::max(0.0, out.transfer_s - compute);
  for (const FamilyTime& t : out.families) out.step_s += t.seconds();
  out.step_s += out.transfer_exposed_s;
  if (!missing.empty()) {
    std::string s = "no measured rate for";
    for (const std::string& m : missing) s += " '" + m + "'";
    out.notes.push_back(s + ": counted as 0 s (record a table with these families)");
  }
  if (shared) {
    out.notes.push_back(std::to_string(shared) + " ranks share one GPU: compute " + std::to_string(shared) +
                        " x one rank's (one context at a time, no MPS); 'other' (host time) once, beside the "
                        "other ranks' kernels");
    if (staged_measured > 0) {
      std::set<std::pair<int, int>> sizes;  // (ranks, of them on one GPU) measured
      int fewest_per_gpu = shared;
      for (const auto& [kind, v] : rates.host_staged)
        for (const HostStagedRate& h : v) sizes.insert({h.ranks, h.ranks_per_gpu});
      std::string measured_on;
      for (const auto& [ranks, per_gpu] : sizes) {
        measured_on += (measured_on.empty() ? "" : "; ") + std::to_string(ranks) + " ranks, " +
                       std::to_string(per_gpu) + " on one GPU";
        fewest_per_gpu = std::min(fewest_per_gpu, per_gpu);
      }
      out.notes.push_back("collectives over MPI through host memory at the table's host_staged bus bandwidths for "
                          "the group's size, else the nearest measured (measured on " + measured_on +
                          "; scaled by the ranks on the GPU then / " + std::to_string(shared) + ")");
      if (fewest_per_gpu < 2)
        out.notes.push_back("the host_staged figures were measured on ranks with a GPU each, not sharing one: "
                            "record them with mpirun -np N comm-bench --comm mpi --dtype fp32 --rates-out on one GPU");
    }
    if (!staged_default.empty()) {
      std::string kinds;
      for (const std::string& k : staged_default) kinds += " '" + k + "'";
      out.notes.push_back("no host_staged bus bandwidth in the table for" + kinds + ": DEFAULT from pcie_gbps, every rank's staging copies through the "
                          "one GPU's link at " + std::to_string(int(pcie / 1e9)) +
                          " GB/s, the MPI copy in host memory not counted (record the figures with: mpirun -np " +
                          std::to_string(shared) + " ulysses comm-bench --backend cuda --comm mpi --dtype fp32 --rates-out FILE)");
    }
  }
  for (const RatesMeasurement& m : rates.measurements)
    if (m.ranks > 1) {
      out.notes.push_back("a measurement was recorded on " + std::to_string(m.ranks) +
                          " ranks: its families' rates include their communication");
      break;
    }
  return out;
}

std::string StepTime::table() const {
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "  %-22s %12s %5s %12s %11s %11s %11s  %s\n", "family", "work", "unit", "rate/s",
                "compute s", "comm s", "exposed s", "rate from");
  os << line;
  for (const FamilyTime& t : families) {
    std::snprintf(line, sizeof line, "  %-22s %12.4g %5s %12.4g %11.6f %11.6f %11.6f  %s\n", t.family.c_str(), t.work,
                  work_unit_name(t.unit), t.rate, t.compute_s, t.comm_s, t.seconds(), t.note.c_str());
    os << line;
  }
  std::snprintf(line, sizeof line, "  %-22s %12s %5s %12s %11.6f %11s %11.6f  %s\n", "host<->device copies", "", "",
                "", transfer_s, "", transfer_exposed_s, "on the transfer stream, beside the compute");
  os << line;
  for (const std::string& n : notes) os << "  note: " << n << "\n";
  return os.str();
}

nlohmann::json StepTime::json() const {
  nlohmann::json j = {{"step_s", step_s}, {"transfer_s", transfer_s}, {"transfer_exposed_s", transfer_exposed_s},
                      {"ranks_share_gpu", ranks_share_gpu}};
  nlohmann::json f = nlohmann::json::object();
  for (const FamilyTime& t : families)
    f[t.family] = {{"unit", work_unit_name(t.unit)}, {"work", t.work},         {"rate", t.rate},
                   {"compute_s", t.compute_s},        {"comm_s", t.comm_s},    {"seconds", t.seconds()},
                   {"calls", t.calls},                {"rate_from", t.note}};
  j["families"] = f;
  j["notes"] = notes;
  return j;
}

}  // namespace ulysses
