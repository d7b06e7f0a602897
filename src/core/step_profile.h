// Where a training step's time goes, per op family ("attention", "mlp", ...).
// Backends feed it open/close marks on one clock as their timings resolve (host
// clock on the CPU, CUDA events on the compute stream); time is attributed to
// the innermost open family, so the families tile the step without counting
// any interval twice, and whatever no family covers is reported as "other".
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/family_stack.h"

namespace ulysses {

class StepProfile {
 public:
  struct Row {
    std::string family;
    double seconds = 0;  // per profiled step
    double share = 0;    // of the step time
    double calls = 0;    // per profiled step
  };

  // t: seconds on one clock, never decreasing. A family opened with absorb_nested
  // keeps the time of the families opened inside it (the recompute of a layer is
  // one cost of checkpointing, not more attention and MLP).
  void open(const char* family, bool absorb_nested, double t);
  void close(double t);
  // The wall time of one profiled step, whose marks have all been fed.
  void add_step(double seconds);
  void reset();

  int64_t steps() const { return steps_; }
  // Families by time, "other" (the step time no family covers) last.
  std::vector<Row> rows() const;
  // The share of the step time the families cover: 1 - other / step.
  double accounted() const;
  std::string table() const;
  // {family: {"seconds", "share", "calls"}, ..., "accounted": share}
  nlohmann::json json() const;

 private:
  struct Family {
    std::string name;
    double seconds = 0;
    int64_t calls = 0;
  };
  size_t index_of(const char* name);

  std::vector<Family> families_;  // few: a linear search beats a map
  FamilyStack stack_;
  double last_t_ = 0;
  double step_seconds_ = 0;
  int64_t steps_ = 0;
};

}  // namespace ulysses
