// The resume fingerprint: everything that changes a run's maths, recorded in each
// checkpoint's trainer_state.json and compared on resume, so that a resumed run is
// the run that was checkpointed (a changed rope_theta, tokenizer, dataset, degree or
// dtype is refused, naming the key and both values, instead of silently training on).
//
// Recorded: the model's shape and constants (config.json's fields that enter the
// maths, rope included), the data (tokenizer, shards' counts and hashes), the mesh
// (world, sp, dp), the precision (backend, compute dtype) and the training maths
// (batch_size, grad_accum, data.seq_len/mode/seed, every optimizer key).
// Not recorded, so free to change: steps (a run can be extended; the schedule is then
// the new total's), logging/eval/checkpoint cadence, out_dir, save_dtype, the memory
// options and comm (the same maths up to rounding: a resume that changes them is
// exact only up to that rounding).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "io/hf_config.h"
#include "train/train_config.h"

namespace ulysses {

struct CheckpointMesh;

nlohmann::json run_fingerprint(const TrainConfig& config, const ModelConfig& model, const CheckpointMesh& mesh,
                               const nlohmann::json& data);

// Throws an Error naming the first key whose value differs (with both values) and how
// many others differ; `checkpoint` names the folder the recorded one comes from.
// ignore_mesh: the mesh may differ (a resume that reshards: the same maths, summed in
// another order).
void check_resume_fingerprint(const nlohmann::json& recorded, const nlohmann::json& current,
                              const std::string& checkpoint, bool ignore_mesh = false);

}  // namespace ulysses
