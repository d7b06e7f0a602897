// Runs the engine on a committed Hugging Face fixture (fixtures/<case>/) and
// compares with its float64 reference loss and gradients.
#pragma once
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/llama.h"

namespace ulysses::test {

// Case directories under fixtures/ that hold a reference.safetensors, sorted.
std::vector<std::string> fixture_cases();

struct FixtureResult {
  double loss = 0, ref_loss = 0;
  double loss_rel = 0;        // |loss - ref| / |ref|
  double worst_grad_rel = 0;  // max over parameters of ||g - ref|| / ||ref||
  std::string worst_grad;     // its name
  int compared = 0;           // gradients compared (must be all of the reference's)
};

// The step over the case's whole batch on the given world (mesh dp × sp).
// ring > 1: the hybrid mesh (Ulysses sp / ring × ring attention over ring), zigzag or not.
FixtureResult run_fixture(const std::string& case_dir, Communicator& world, int sp, const StepOptions& options,
                          int ring = 1, bool zigzag = false);

// LoRA cases (fixtures/lora/<case>/ with adapter/: tools/make_lora_fixtures.py), sorted.
std::vector<std::string> lora_fixture_cases();
// The same with the case's PEFT adapter: the base frozen, the adapters' gradients compared.
FixtureResult run_lora_fixture(const std::string& case_dir, Communicator& world, int sp, const StepOptions& options,
                               int ring = 1, bool zigzag = false);

}  // namespace ulysses::test
