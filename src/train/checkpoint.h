// Training checkpoints: OUT/checkpoints/step-NNNNNNN/ holding
//   model/                 a Hugging Face folder (loads in transformers as it is: weights in save_dtype,
//                          tokenizer, chat template and generation config copied from the source)
//   optimizer.safetensors  fp32 master weights and AdamW moments
//   trainer_state.json     step, data-loader state, mesh, the effective config
//   COMPLETE               written last: a folder without it is ignored
// Written into a temporary folder and renamed into place, then OUT/checkpoints/
// latest is replaced atomically, so a crash or a full disk mid-save never
// replaces the last good checkpoint.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/hf_config.h"
#include "train/optimizer.h"

namespace ulysses {

struct CheckpointMesh {
  int world = 1, sp = 1, dp = 1;
};

struct TrainerState {
  int64_t step = 0;
  nlohmann::json loader;
  CheckpointMesh mesh;
  nlohmann::json config;
  nlohmann::json fingerprint;  // train/fingerprint.h: what a resume must not change (null in older checkpoints)
};

struct CheckpointSaveOptions {
  DType dtype = DType::BF16;            // of model/'s weights (the fp32 masters are in optimizer.safetensors)
  std::vector<std::string> asset_dirs;  // tokenizer, chat template, generation config copied into model/ from these
  int64_t keep_last = 0;                // > 0: remove older step-* folders beyond the newest N
};

// Rank 0 writes (the optimizer snapshot gathered by every rank); returns the checkpoint folder.
std::string save_checkpoint(const std::string& out_dir, const ModelConfig& model_config,
                            const OptimizerSnapshot& optimizer,
                            const TrainerState& state, const CheckpointSaveOptions& options);

// Removes complete and incomplete step-* folders of out_dir beyond the newest `keep_last`
// (by step number), never the one `latest` names nor the newest. Returns the names removed.
std::vector<std::string> rotate_checkpoints(const std::string& out_dir, int64_t keep_last);

// The newest complete checkpoint under out_dir, if any.
std::optional<std::string> latest_checkpoint(const std::string& out_dir);
TrainerState read_trainer_state(const std::string& checkpoint_dir);

}  // namespace ulysses
