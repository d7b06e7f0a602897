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
}  // namespace

const std::vector<AttentionChoiceRow>& attention_choice_table() {
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
      // d 64: 4K, 32K; the backward's variant 4 (K and V in registers)
      {64, false, 0, 3, 312.6 / 360.3, kH100_1207},
      {64, false, 16384, 3, 440.8 / 485.5, kH100_1207},
      {64, true, 0, 4, 332.2 / 318.6, kH100_1207c},
      {64, true, 16384, 4, 399.0 / 421.1, kH100_1207c},
  };
  return rows;
}

const AttentionChoiceRow* attention_choice_row(int64_t d, bool backward, int64_t longest) {
  const AttentionChoiceRow* found = nullptr;
  for (const auto& r : attention_choice_table())
    if (r.d == d && r.backward == backward && r.from_longest <= longest) found = &r;
  return found;
}

bool hopper_measured_faster(int64_t d, bool backward, int64_t longest, std::string* why) {
  const AttentionChoiceRow* r = attention_choice_row(d, backward, longest);
  if (why) {
    why->clear();
    if (r) {
      std::ostringstream s;
      s << "measured " << r->ours_over_cudnn << "x cuDNN at d " << d << ", longest document from "
        << r->from_longest << " tokens (variant " << r->variant << ", " << r->measured << ")";
      *why = s.str();
    }
  }
  return r != nullptr && r->ours_over_cudnn >= kOursMargin;
}

}  // namespace ulysses
