// The measured choice between cuDNN's fused attention and our Hopper (sm_90a) kernels when
// ULYSSES_ATTENTION is `auto` (the default): a table of ours-over-cuDNN TFLOPS ratios from
// side-by-side runs (bench/device/hopper_probe.sh, hopper_vs_cudnn.sh), per head size, direction
// and longest-document length. Our kernel runs where its row's ratio is at least kOursMargin; cuDNN
// everywhere else, and wherever no row applies. Rows with a sliding window (Mistral's) have their own
// table: cuDNN does not take windowed rows (docs/attention.md), so there the alternative is our FA2
// kernels and the ratio is over theirs. Plain C++ (the CPU tests read it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ulysses {

struct AttentionChoiceRow {
  int64_t d = 0;            // head size
  bool backward = false;    // the backward alone (else the forward)
  int64_t from_longest = 0;  // applies from this longest-document length up to the next row's
  int variant = 0;          // our kernel's variant that was timed
  double speedup = 0;         // our TFLOPS over the alternative's (cuDNN; windowed: our FA2 kernels), one call
  const char* measured = "";   // card, date, command
};

// A ratio above 1 by less than this is within the noise of these timings: cuDNN stays. Runs of one
// call agree within 1-2%, but two calls of one session (H100s, 2026-12-07, the same binaries) put the
// forward at 32K at 1.04x and then 0.97x cuDNN, the backward at d 64, 4K at 1.00x and 1.04x.
constexpr double kOursMargin = 1.05;

// The rows, grouped by (d, backward), each group in increasing from_longest; `windowed`: the table for
// rows with a sliding window.
const std::vector<AttentionChoiceRow>& attention_choice_table(bool windowed = false);

// The row for a problem (the last of its group with from_longest <= longest), or nullptr.
const AttentionChoiceRow* attention_choice_row(int64_t d, bool backward, int64_t longest, bool windowed = false);

// Whether the table says our Hopper kernel beats the alternative on this problem (by kOursMargin);
// *why gets the row's figures either way (empty without a row).
bool hopper_measured_faster(int64_t d, bool backward, int64_t longest, bool windowed, std::string* why = nullptr);

}  // namespace ulysses
