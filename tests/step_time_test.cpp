// The step-time model: the ledger counts as the profile counts, the predictor's arithmetic on a
// hand-made rates table (every expected figure computed by hand below), attention's rate
// interpolated on log(seq) and clamped, the overlap rules, and malformed tables refused with
// the file and the field named. No timing is asserted anywhere.
#include "train/step_time.h"

#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.h"

namespace ulysses::test {
namespace {

const FamilyTime& family(const StepTime& t, const std::string& name) {
  for (const FamilyTime& f : t.families)
    if (f.family == name) return f;
  static const FamilyTime missing;
  ADD_FAILURE() << "no family '" << name << "'";
  return missing;
}

RatesMeasurement::Entry entry(WorkUnit unit, double seconds, double work, double calls = 1) {
  RatesMeasurement::Entry e;
  e.unit = unit;
  e.seconds = seconds;
  e.work = work;
  e.calls = calls;
  return e;
}

RatesMeasurement measurement(int64_t seq, double attention_rate) {
  RatesMeasurement m;
  m.seq_len = seq;
  m.local_tokens = seq;
  m.families["mlp"] = entry(WorkUnit::Flop, 2.0, 1e12);            // 5e11 FLOP/s
  m.families["rmsnorm"] = entry(WorkUnit::Byte, 0.5, 1e12);        // 2e12 B/s
  m.families["attention"] = entry(WorkUnit::Flop, 1.0, attention_rate);
  m.families["zero grads"] = entry(WorkUnit::Call, 0.004, 2, 2);   // 2 ms a call
  m.families["other"] = entry(WorkUnit::Call, 0.25, 1, 1);
  return m;
}

TEST(WorkLedger, CountsCallsAsTheProfileDoes) {
  WorkLedger w;
  w.open("mlp", false);
  w.add_gemm(10);
  w.open("mlp", false);  // a helper re-entering its own family: one call
  w.add_gemm(5);
  w.close();
  w.close();
  w.open("recompute", true);
  w.open("attention", false);  // absorbed: its work is the recompute's
  w.add_attention(7);
  w.close();
  w.close();
  w.open("all-to-all", false);
  w.add_collective("all-to-all", 4, 100);
  w.add_collective("all-to-all", 4, 50);
  w.add_collective("all-to-all", 1, 999);  // a group of one moves nothing
  w.close();
  ASSERT_NE(w.find("mlp"), nullptr);
  EXPECT_EQ(w.find("mlp")->calls, 1);
  EXPECT_EQ(w.find("mlp")->gemm_flops, 15);
  EXPECT_EQ(w.find("attention"), nullptr);
  EXPECT_EQ(w.find("recompute")->attention_flops, 7);
  const FamilyWork& a = *w.find("all-to-all");
  ASSERT_EQ(a.collectives.size(), 1u);
  EXPECT_EQ(a.collectives[0].bytes, 150);
  EXPECT_EQ(a.collectives[0].calls, 2);
}

TEST(StepTime, ArithmeticOnASyntheticTable) {
  RatesTable rates;
  rates.measurements.push_back(measurement(1024, 1e12));
  WorkLedger w;
  w.open("zero grads", false);
  w.close();
  w.open("mlp", false);
  w.add_gemm(3e12);  // 3e12 / 5e11 = 6 s
  w.close();
  w.open("rmsnorm", false);
  w.add_bytes(4e11);  // 4e11 / 2e12 = 0.2 s
  w.close();
  w.open("all-to-all", false);  // 2 calls of 4 ranks, 3.7e9 bytes: 0.75 * 3.7e9 / 370e9 + 2 * 20 µs
  w.add_collective("all-to-all", 4, 1.85e9);
  w.add_collective("all-to-all", 4, 1.85e9);
  w.close();
  w.open("grad all-reduce", false);  // 1.5 * 7.4e9 / 370e9 + 20 µs = 0.03002 s, overlapped
  w.add_collective("all-reduce", 4, 7.4e9);
  w.close();
  w.open("checkpoint store", false);
  w.add_transfer(55e9 * 10);  // 10 s at 55 GB/s, behind 6.2 s of compute: 3.8 s exposed
  w.close();
  const StepTime t = predict_step_time(w, rates, 1024, 1024, /*layers=*/10, TimeOptions{});
  EXPECT_DOUBLE_EQ(family(t, "mlp").compute_s, 6.0);
  EXPECT_DOUBLE_EQ(family(t, "rmsnorm").compute_s, 0.2);
  EXPECT_DOUBLE_EQ(family(t, "zero grads").compute_s, 0.002);
  EXPECT_NEAR(family(t, "all-to-all").comm_s, 0.0075 + 4e-5, 1e-12);
  EXPECT_NEAR(family(t, "all-to-all").comm_exposed_s, 0.0075 + 4e-5, 1e-12);
  EXPECT_NEAR(family(t, "grad all-reduce").comm_s, 0.03002, 1e-12);
  // Overlapped with 6.202 s of compute: the last of 10 layers' share is left.
  EXPECT_NEAR(family(t, "grad all-reduce").comm_exposed_s, 0.003002, 1e-12);
  EXPECT_DOUBLE_EQ(family(t, "other").compute_s, 0.25);
  EXPECT_NEAR(t.transfer_s, 10.0, 1e-9);
  EXPECT_NEAR(t.transfer_exposed_s, 10.0 - 6.202, 1e-9);
  EXPECT_NEAR(t.step_s, 6.0 + 0.2 + 0.002 + 0.00754 + 0.003002 + 0.25 + (10.0 - 6.202), 1e-9);

  // --no-comm-overlap: the reduction is all exposed; --link-gbps replaces the bandwidth.
  TimeOptions serial;
  serial.overlap = false;
  serial.link_gbps = 37;
  const StepTime s = predict_step_time(w, rates, 1024, 1024, 10, serial);
  EXPECT_NEAR(family(s, "grad all-reduce").comm_exposed_s, 0.3 + 2e-5, 1e-12);
  EXPECT_NEAR(family(s, "all-to-all").comm_s, 0.075 + 4e-5, 1e-12);
}

// Ranks sharing one GPU (plan --time --ranks-share-gpu): compute P x one rank's, "other" once,
// collectives at the host-staged figures (scaled from the ranks per GPU they were measured with to
// P) or, without one, every rank's staging copies through the GPU's link at pcie_gbps; the overlap
// rules against the GPU's compute of all ranks; offloaded copies of every rank through the link.
TEST(StepTime, RanksSharingOneGpu) {
  RatesTable rates;
  rates.measurements.push_back(measurement(1024, 1e12));
  rates.pcie_gbps = 50;
  add_host_staged(rates, "all-to-all", HostStagedRate{10, 2, 2});
  add_host_staged(rates, "sendrecv", HostStagedRate{1, 2, 2});
  WorkLedger w;
  w.open("mlp", false);
  w.add_gemm(3e12);  // 6 s a rank at 5e11 FLOP/s: 12 s for 2 ranks on the GPU
  w.close();
  w.open("attention", false);
  w.add_attention(1e12);  // 1 s a rank: 2 s
  w.close();
  w.open("all-to-all", false);  // 0.5 · 2e9 / (10 GB/s · 2/2) + 2 · 20 µs = 0.10004 s, exposed
  w.add_collective("all-to-all", 2, 1e9);
  w.add_collective("all-to-all", 2, 1e9);
  w.close();
  w.open("ring exchange", false);  // 1 · 3e9 / 1 GB/s + 20 µs = 3.00002 s, beyond 2 s of attention: 1.00002
  w.add_collective("sendrecv", 2, 3e9);
  w.close();
  w.open("grad all-reduce", false);  // no figure: 2 ranks · 2 · 1e9 B / 50 GB/s + 20 µs = 0.08002 s;
  w.add_collective("all-reduce", 2, 1e9);  // overlapped: the last of 4 layers' share, 0.020005 s
  w.close();
  w.open("checkpoint store", false);
  w.add_transfer(50e9 * 8);  // 8 s a rank at 50 GB/s, 16 s for 2, behind 14 s of compute: 2 s exposed
  w.close();
  TimeOptions shared;
  shared.ranks_share_gpu = 2;
  const StepTime t = predict_step_time(w, rates, 1024, 1024, /*layers=*/4, shared);
  EXPECT_EQ(t.ranks_share_gpu, 2);
  EXPECT_DOUBLE_EQ(family(t, "mlp").compute_s, 12.0);
  EXPECT_DOUBLE_EQ(family(t, "attention").compute_s, 2.0);
  EXPECT_NEAR(family(t, "all-to-all").comm_exposed_s, 0.10004, 1e-12);
  EXPECT_NEAR(family(t, "ring exchange").comm_s, 3.00002, 1e-12);
  EXPECT_NEAR(family(t, "ring exchange").comm_exposed_s, 1.00002, 1e-12);
  EXPECT_NEAR(family(t, "grad all-reduce").comm_s, 0.08002, 1e-12);
  EXPECT_NEAR(family(t, "grad all-reduce").comm_exposed_s, 0.020005, 1e-12);
  EXPECT_DOUBLE_EQ(family(t, "other").compute_s, 0.25);  // host time: once
  EXPECT_NEAR(t.transfer_s, 16.0, 1e-9);
  EXPECT_NEAR(t.transfer_exposed_s, 2.0, 1e-9);
  EXPECT_NEAR(t.step_s, 12.0 + 2.0 + 0.10004 + 1.00002 + 0.020005 + 0.25 + 2.0, 1e-9);
  bool default_said = false;
  for (const std::string& n : t.notes) default_said |= n.find("'all-reduce': DEFAULT from pcie_gbps") != std::string::npos;
  EXPECT_TRUE(default_said);

  // The same step on 2 GPUs: one rank's compute, the NVLink default (370 GB/s) for the all-to-all.
  const StepTime sep = predict_step_time(w, rates, 1024, 1024, 4, TimeOptions{});
  EXPECT_DOUBLE_EQ(family(sep, "mlp").compute_s, 6.0);
  EXPECT_NEAR(family(sep, "all-to-all").comm_s, 0.5 * 2e9 / 370e9 + 4e-5, 1e-12);

  // 4 ranks on the GPU with figures measured with 2 on it: the all-to-all at 10 · 2/4 = 5 GB/s.
  shared.ranks_share_gpu = 4;
  const StepTime four = predict_step_time(w, rates, 1024, 1024, 4, shared);
  EXPECT_DOUBLE_EQ(family(four, "mlp").compute_s, 24.0);
  EXPECT_NEAR(family(four, "all-to-all").comm_s, 0.5 * 2e9 / 5e9 + 4e-5, 1e-12);
  // and the all-reduce's default: 4 ranks' copies, 4 · 2e9 / 50e9 + 20 µs
  EXPECT_NEAR(family(four, "grad all-reduce").comm_s, 0.16002, 1e-12);

  // A link bandwidth makes no sense for ranks on one GPU.
  shared.link_gbps = 50;
  EXPECT_ERROR(predict_step_time(w, rates, 1024, 1024, 4, shared), "no link_gbps");
}

TEST(StepTime, StagingCopiesPerKind) {
  EXPECT_DOUBLE_EQ(staged_copy_bytes("all-to-all", 4, 4e9), 8e9);
  EXPECT_DOUBLE_EQ(staged_copy_bytes("all-reduce", 4, 4e9), 8e9);
  EXPECT_DOUBLE_EQ(staged_copy_bytes("sendrecv", 2, 4e9), 8e9);
  EXPECT_DOUBLE_EQ(staged_copy_bytes("all-gather", 4, 4e9), 5e9);      // its block down, all up
  EXPECT_DOUBLE_EQ(staged_copy_bytes("reduce-scatter", 4, 4e9), 5e9);  // all down, its block up
}

TEST(StepTime, AttentionRateInterpolatedOnLogSeqAndClamped) {
  RatesTable rates;
  rates.measurements.push_back(measurement(1024, 1e12));
  rates.measurements.push_back(measurement(4096, 2e12));
  WorkLedger w;
  w.open("attention", false);
  w.add_attention(3e12);
  w.close();
  // 2048 is halfway on log(seq): 1.5e12 FLOP/s, 2 s.
  StepTime t = predict_step_time(w, rates, 2048, 2048, 1, TimeOptions{});
  EXPECT_NEAR(family(t, "attention").rate, 1.5e12, 1e-3);
  EXPECT_NEAR(family(t, "attention").compute_s, 2.0, 1e-12);
  EXPECT_EQ(family(t, "attention").note, "interpolated on log(seq)");
  t = predict_step_time(w, rates, 65536, 65536, 1, TimeOptions{});
  EXPECT_DOUBLE_EQ(family(t, "attention").rate, 2e12);
  EXPECT_EQ(family(t, "attention").note, "clamped to the longest measured sequence");
  t = predict_step_time(w, rates, 16, 16, 1, TimeOptions{});
  EXPECT_DOUBLE_EQ(family(t, "attention").rate, 1e12);
  EXPECT_EQ(family(t, "attention").note, "clamped to the shortest measured sequence");
}

TEST(StepTime, BusFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor("all-reduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor("all-to-all", 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_factor("all-gather", 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor("reduce-scatter", 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor("sendrecv", 2), 1.0);
}

// Host-staged figures are kept per group size: MPI's reductions in host memory run on every
// rank's core at once, so the bus bandwidth of 4 ranks is not 2 ranks' scaled. A group takes its
// own size's figure (scaled only by the ranks on the GPU then / now), else the nearest size's.
TEST(StepTime, HostStagedFigureOfTheGroupsOwnSize) {
  RatesTable rates;
  add_host_staged(rates, "all-reduce", HostStagedRate{1, 2, 2});
  add_host_staged(rates, "all-reduce", HostStagedRate{2, 4, 4});
  add_host_staged(rates, "all-reduce", HostStagedRate{3, 4, 4});  // replaces the 4-rank figure
  ASSERT_EQ(rates.host_staged.at("all-reduce").size(), 2u);
  EXPECT_EQ(host_staged_rate(rates, "all-reduce", 4)->bus_gbps, 3);
  EXPECT_EQ(host_staged_rate(rates, "all-reduce", 2)->bus_gbps, 1);
  EXPECT_EQ(host_staged_rate(rates, "all-reduce", 3)->ranks, 4) << "log-nearest, a tie to the larger";
  EXPECT_EQ(host_staged_rate(rates, "all-reduce", 16)->ranks, 4);
  EXPECT_EQ(host_staged_rate(rates, "all-to-all", 2), nullptr);
  rates.latency_us = 0;
  bool measured = false;
  // 4 ranks on the GPU, a group of 4: 2 (n-1)/n x 6e9 B / 3 GB/s = 3 s, as measured (4 on the GPU).
  EXPECT_DOUBLE_EQ(host_staged_seconds(rates, CollectiveWork{"all-reduce", 4, 6e9, 1}, 4, measured), 3.0);
  EXPECT_TRUE(measured);
  // A group of 2 among 4 ranks on the GPU: 2 (1/2) x 6e9 / (1 GB/s x 2/4) = 12 s.
  EXPECT_DOUBLE_EQ(host_staged_seconds(rates, CollectiveWork{"all-reduce", 2, 6e9, 1}, 4, measured), 12.0);
}

TEST(RatesTable, RoundTripsThroughJson) {
  RatesTable rates;
  rates.device = "cuda:0";
  rates.measurements.push_back(measurement(1024, 1e12));
  rates.bus_gbps["all-to-all"] = 330;
  add_host_staged(rates, "all-to-all", HostStagedRate{9, 4, 4});
  add_host_staged(rates, "all-to-all", HostStagedRate{7.5, 2, 2});
  const RatesTable back = parse_rates_table(rates.to_json().dump(), "r.json");
  ASSERT_EQ(back.host_staged.at("all-to-all").size(), 2u);
  EXPECT_EQ(back.host_staged.at("all-to-all")[0].bus_gbps, 7.5);  // ascending ranks
  EXPECT_EQ(back.host_staged.at("all-to-all")[0].ranks, 2);
  EXPECT_EQ(back.host_staged.at("all-to-all")[0].ranks_per_gpu, 2);
  EXPECT_EQ(back.host_staged.at("all-to-all")[1].ranks, 4);
  // A table of one figure per kind (an object, as written before the figures were kept per size).
  nlohmann::json old = rates.to_json();
  old["host_staged"]["all-to-all"] = {{"bus_gbps", 6}, {"ranks", 2}, {"ranks_per_gpu", 2}};
  const RatesTable one = parse_rates_table(old.dump(), "r.json");
  ASSERT_EQ(one.host_staged.at("all-to-all").size(), 1u);
  EXPECT_EQ(one.host_staged.at("all-to-all")[0].bus_gbps, 6);
  ASSERT_EQ(back.measurements.size(), 1u);
  EXPECT_EQ(back.device, "cuda:0");
  EXPECT_EQ(back.bus_gbps.at("all-to-all"), 330);
  EXPECT_DOUBLE_EQ(back.measurements[0].families.at("mlp").rate(), 5e11);
}

TEST(RatesTable, MalformedTablesAreRefusedNamingFileAndField) {
  RatesTable rates;
  rates.measurements.push_back(measurement(1024, 1e12));
  const nlohmann::json good = rates.to_json();
  auto refused = [&](nlohmann::json j, const std::string& field) {
    EXPECT_ERROR(parse_rates_table(j.dump(), "rates.json"), "rates.json", field);
  };
  EXPECT_ERROR(parse_rates_table("{not json", "rates.json"), "rates.json", "not JSON");
  nlohmann::json j = good;
  j["version"] = 99;
  refused(j, "'version'");
  j = good;
  j.erase("format");
  refused(j, "'format'");
  j = good;
  j["measurements"] = nlohmann::json::array();
  refused(j, "'measurements'");
  j = good;
  j["measurements"][0].erase("seq_len");
  refused(j, "'measurements[0].seq_len'");
  j = good;
  j["measurements"][0]["families"]["mlp"]["seconds"] = -1;
  refused(j, "'measurements[0].families.mlp.seconds'");
  j = good;
  j["measurements"][0]["families"]["mlp"]["unit"] = "watt";
  refused(j, "'measurements[0].families.mlp.unit'");
  j = good;
  j["measurements"][0]["families"]["mlp"]["seconds"] = 0;
  refused(j, "'measurements[0].families.mlp'");
  j = good;
  j["collectives"] = {{"all-to-all", {{"bus_gbps", "fast"}}}};
  refused(j, "'collectives.all-to-all.bus_gbps'");
  j = good;
  j["host_staged"] = {{"all-to-all", {{"bus_gbps", 5}, {"ranks", 2}}}};
  refused(j, "'host_staged.all-to-all.ranks_per_gpu'");
  j = good;
  j["host_staged"] = {{"all-to-all", {{"bus_gbps", 5}, {"ranks", 2}, {"ranks_per_gpu", 3}}}};
  refused(j, "'host_staged.all-to-all' must have ranks >= 2 and ranks_per_gpu <= ranks");
  j = good;
  j["host_staged"] = {{"all-to-all", nlohmann::json::array({{{"bus_gbps", 5}, {"ranks", 2}, {"ranks_per_gpu", 2}},
                                                            {{"bus_gbps", 5}, {"ranks", 1}, {"ranks_per_gpu", 1}}})}};
  refused(j, "'host_staged.all-to-all[1]' must have ranks >= 2");
}

}  // namespace
}  // namespace ulysses::test
