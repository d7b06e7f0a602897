#include "backend/attention_choice.h"

#include <sstream>

namespace ulysses {

namespace {
// H100 (the device tool's card), 2026-12-07, `bash bench/device/hopper_quick.sh` and the same binaries
// by hand in the same session (attention_bench --impl cudnn / hopper3 for the forward,
// hopper_bwd_bench --impl cudnn / hopper2 for the backward alone), causal, 32 / 8 heads.
constexpr const char* kH100_1207 = "H100, 2026-12-07, hopper_quick.sh";
// The next session (same day, the kernels with the heaviest-first CTA order and backward variant 4):
// `bash bench/device/hopper_probe.sh` on an H100, cuDNN in the same call.
constexpr const char* kH100_1207b = "H100, 2026-12-07 (19th session), hopper_probe.sh";
// The twentieth session's second call (backward variant 6 with the per-tile descriptors, the backward's
// CTA order by the longest document): `bash bench/device/hopper_probe.sh`, cuDNN in the same call; the
// forward from its attention_bench runs (--impl ours: forward variant 3).
constexpr const char* kH100_1207c = "H100, 2026-12-07 (20th session, call 2), hopper_probe.sh";
// Its third call: the forward with the per-tile descriptors, attention_bench --impl cudnn / hopper3 by
// hand (docs/benchmarks.md); 32K: the mean of three --reps 15 runs against cuDNN's run after them.
constexpr const char* kH100_1207d = "H100, 2026-12-07 (20th session, call 3), attention_bench";
// The twenty-first session's first call: `bash bench/device/hopper_probe.sh`, its sliding-window lines
// (attention_bench --window 4096 --impl own / ours, 32K tokens) and backward variant 7 at d 64.
constexpr const char* kH100_1207e = "H100, 2026-12-07 (21st session, call 1), hopper_probe.sh";
// Its second call: `bash bench/device/hopper_window_check.sh` (the windowed lines at d 64; the d 64
// backward at 4K against cuDNN in three alternated rounds, the row their mean).
constexpr const char* kH100_1207f = "H100, 2026-12-07 (21st session, call 2), hopper_window_check.sh";
}  // namespace

const std::vector<AttentionChoiceRow>& attention_choice_table(bool windowed) {
  // A window of 4,096 over 32K tokens against our FA2 kernels (d 128 at 128K: 2.41x forward, 2.26x
  // backward). d 64's forward: variant 4 ran 1.8% above 3, within the noise; 3 stays.
  static const std::vector<AttentionChoiceRow> windowed_rows = {
      {128, false, 0, 3, 607.7 / 244.3, kH100_1207e},
      {128, true, 0, 6, 446.7 / 202.2, kH100_1207e},
      {64, false, 0, 3, 396.0 / 225.3, kH100_1207f},
      {64, true, 0, 7, 372.5 / 199.4, kH100_1207f},
  };
  if (windowed) return windowed_rows;
  static const std::vector<AttentionChoiceRow> rows = {
      // d 128 forward, variant 3: 4K, 32K, 128K (packed 8 x 4K: 0.88, as the 4K row). Its figure at
      // 32K moved by up to 10% between this session's calls (0.94-1.04x cuDNN).
      {128, false, 0, 3, 525.0 / 522.8, kH100_1207d},
      {128, false, 16384, 3, 580.8 / 618.5, kH100_1207d},
      {128, false, 65536, 3, 580.4 / 560.3, kH100_1207d},
      // d 128 backward: variant 6 (variant 2: 0.83, 0.84, 0.85 in the same call)
      {128, true, 0, 6, 374.8 / 419.7, kH100_1207c},
      {128, true, 16384, 6, 488.2 / 538.0, kH100_1207c},
      {128, true, 65536, 6, 479.6 / 538.2, kH100_1207c},
      // d 64: 4K, 32K. The backward: variant 7 (the dQ reductions by a producer warp; variant 4 in
      // the same rounds: 1.048x at 4K, 0.944x at 32K).
      {64, false, 0, 3, 312.6 / 360.3, kH100_1207},
      {64, false, 16384, 3, 440.8 / 485.5, kH100_1207},
      {64, true, 0, 7, 336.5 / 314.9, kH100_1207f},
      {64, true, 16384, 7, 414.9 / 429.9, kH100_1207e},
  };
  return rows;
}

const AttentionChoiceRow* attention_choice_row(int64_t d, bool backward, int64_t longest, bool windowed) {
  const AttentionChoiceRow* found = nullptr;
  for (const auto& r : attention_choice_table(windowed))
    if (r.d == d && r.backward == backward && r.from_longest <= longest) found = &r;
  return found;
}

bool hopper_measured_faster(int64_t d, bool backward, int64_t longest, bool windowed, std::string* why) {
  const AttentionChoiceRow* r = attention_choice_row(d, backward, longest, windowed);
  if (why) {
    why->clear();
    if (r) {
      std::ostringstream s;
      s << "measured " << r->speedup << (windowed ? "x our FA2 kernels (cuDNN does not take a sliding window)" : "x cuDNN")
        << " at d " << d << ", longest document from " << r->from_longest << " tokens (variant " << r->variant
        << ", " << r->measured << ")";
      *why = s.str();
    }
  }
  return r != nullptr && r->speedup >= kOursMargin;
}

}  // namespace ulysses
