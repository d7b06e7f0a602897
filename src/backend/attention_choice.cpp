#include "backend/attention_choice.h"

#include <sstream>

namespace ulysses {

namespace {
// H100 (the device tool's card), 2026-12-07, `bash bench/device/hopper_quick.sh` and the same binaries
// by hand in the same session (attention_bench --impl cudnn / hopper3 for the forward,
// hopper_bwd_bench --impl cudnn / hopper2 for the backward alone), causal, 32 / 8 heads.
constexpr const char* kH100_1207 = "H100, 2026-12-07, hopper_quick.sh";
}  // namespace

const std::vector<AttentionChoiceRow>& attention_choice_table() {
  static const std::vector<AttentionChoiceRow> rows = {
      // d 128 forward, variant 3: 4K, 32K, 128K (packed 8 x 4K: 0.88, as the 4K row)
      {128, false, 0, 3, 473.5 / 527.5, kH100_1207},
      {128, false, 16384, 3, 597.2 / 613.4, kH100_1207},
      {128, false, 65536, 3, 575.7 / 561.3, kH100_1207},
      // d 128 backward: variant 2 (variant 3 within 2% of it); at 128K only variant 3 was timed
      {128, true, 0, 2, 269.7 / 412.5, kH100_1207},
      {128, true, 16384, 2, 445.7 / 531.6, kH100_1207},
      {128, true, 65536, 3, 436.8 / 534.7, kH100_1207},
      // d 64: 4K, 32K
      {64, false, 0, 3, 312.6 / 360.3, kH100_1207},
      {64, false, 16384, 3, 440.8 / 485.5, kH100_1207},
      {64, true, 0, 2, 202.9 / 311.6, kH100_1207},
      {64, true, 16384, 2, 367.9 / 422.5, kH100_1207},
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
