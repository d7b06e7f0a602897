// The work of one training step per op family, as the planner counts it (GEMM and attention
// FLOPs, bytes the memory-bound ops touch, host<->device copy bytes, and every collective), so
// that a time model can turn it into seconds with rates measured per family (train/step_time.h).
// Families nest as the profile's do (core/step_profile.h): work goes to the innermost open family,
// an absorbing family keeps what is opened inside it, and calls are counted by the same rule, so
// the ledger's families and counts are those `bench --profile` reports for the same step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/family_stack.h"

namespace ulysses {

// One kind of collective, sized as nccl-tests sizes it (all-to-all: the send buffer; all-gather:
// the gathered buffer; reduce-scatter: the input; all-reduce: the buffer; sendrecv: what is sent).
struct CollectiveWork {
  std::string kind;  // "all-to-all", "all-gather", "reduce-scatter", "all-reduce", "sendrecv", "broadcast"
  int group = 1;     // ranks in the group
  double bytes = 0;  // summed over the calls
  int64_t calls = 0;
};

struct FamilyWork {
  std::string family;
  int64_t calls = 0;
  double gemm_flops = 0;       // 2·M·N·K per GEMM
  double attention_flops = 0;  // 4·d per visible (query, key) pair and head, forward; 2.5× that backward
  double bytes = 0;            // read + written by memory-bound ops (norms, rope, copies, ...)
  double transfer_bytes = 0;   // host <-> device copies (offloaded checkpoints, optimizer state)
  std::vector<CollectiveWork> collectives;
  double flops() const { return gemm_flops + attention_flops; }
  double collective_bytes() const;
};

class WorkLedger {
 public:
  void open(const char* family, bool absorb_nested);
  void close();
  void add_gemm(double flops) { current().gemm_flops += flops; }
  void add_attention(double flops) { current().attention_flops += flops; }
  void add_bytes(double bytes) { current().bytes += bytes; }
  void add_transfer(double bytes) { current().transfer_bytes += bytes; }
  // A collective over `group` ranks; a group of one moves nothing and is not recorded.
  void add_collective(const char* kind, int group, double bytes);
  // Families in order of first use; work done outside any family is the row "(none)" if any.
  const std::vector<FamilyWork>& families() const { return families_; }
  const FamilyWork* find(const std::string& family) const;

 private:
  FamilyWork& current();
  size_t index_of(const char* name);
  std::vector<FamilyWork> families_;
  FamilyStack stack_;
};

}  // namespace ulysses
