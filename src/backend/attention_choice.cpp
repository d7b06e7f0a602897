#include "backend/attention_choice.h"

#include <sstream>

namespace ulysses {

namespace {
// H100 (the device tool's card), 2026-12-06, `bash bench/device/hopper_vs_cudnn.sh` (attention_bench
// --impl cudnn / --impl ours: forward variant 3, backward variant 2), causal, 32 / 8 heads.
constexpr const char* kH100_1206 = "H100, 2026-12-06, hopper_vs_cudnn.sh";
}  // namespace

const std::vector<AttentionChoiceRow>& attention_choice_table() {
  static const std::vector<AttentionChoiceRow> rows = {
      // d 128 forward: 4K, 32K, 128K (packed 8 x 4K: 0.75, as the 4K row)
      {128, false, 0, 3, 0.78, kH100_1206},
      {128, false, 16384, 3, 0.85, kH100_1206},
      {128, false, 65536, 3, 0.94, kH100_1206},
      // d 128 backward
      {128, true, 0, 2, 0.58, kH100_1206},
      {128, true, 16384, 2, 0.76, kH100_1206},
      {128, true, 65536, 2, 0.77, kH100_1206},
      // d 64: 4K, 32K
      {64, false, 0, 3, 0.73, kH100_1206},
      {64, false, 16384, 3, 0.75, kH100_1206},
      {64, true, 0, 2, 0.60, kH100_1206},
      {64, true, 16384, 2, 0.83, kH100_1206},
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
