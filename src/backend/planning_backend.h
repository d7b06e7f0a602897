// A backend that runs nothing and allocates nothing: every tensor is a
// placeholder whose bytes are counted in the pools. Running the real step code
// on it gives the step's exact memory plan (same code path, same allocations,
// same order) in milliseconds, before any real memory is touched.
#pragma once
#include <memory>

#include "backend/backend.h"

namespace ulysses {

class WorkLedger;

// act_dtype / device: those of the backend being planned for. runtime: that backend itself
// when it exists, which then answers for its own scratch memory (attention workspaces:
// cuDNN's depend on the library and the GPU); without it, a CUDA plan counts the
// workspaces of our own attention kernels (an estimate when cuDNN will run).
// work: where each op's work goes, per profile family (core/step_work.h), for the step-time model.
std::unique_ptr<Backend> make_planning_backend(DType act_dtype, Device device, Backend* runtime = nullptr,
                                               WorkLedger* work = nullptr);

}  // namespace ulysses
