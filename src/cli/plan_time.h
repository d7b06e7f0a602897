// plan's --time and its flags (cli/plan_time.cpp).
#pragma once
#include <vector>

#include "cli/args.h"
#include "train/memory_plan.h"

namespace ulysses {

std::vector<OptionSpec> plan_time_specs();
// The prediction for `req` with the table --time names; returns plan's exit status.
int run_plan_time(const Args& args, const PlanRequest& req);

}  // namespace ulysses
