// Training checkpoints: OUT/checkpoints/step-NNNNNNN/ holding
//   model/                 a Hugging Face folder (loads in transformers as it is: weights in save_dtype,
//                          tokenizer, chat template and generation config copied from the source), or
//   adapter/               with LoRA: the adapters as PEFT writes them (adapter_config.json +
//                          adapter_model.safetensors, float32; PeftModel.from_pretrained loads it on the base)
//   optimizer.safetensors  fp32 master weights and AdamW moments, whole (the state on one rank), or
//   optimizer/rank-RRRRR-of-PPPPP.safetensors  each rank's shard of them (the state sharded over P
//                          ranks, ZeRO 1-3): master., exp_avg., exp_avg_sq.<name> as the rank's flat
//                          elements of each parameter (shard_range's blocks), written by that rank
//   trainer_state.json     step, data-loader state, mesh, the effective config
//   COMPLETE               written last: a folder without it is ignored
// Written into a temporary folder and renamed into place, then OUT/checkpoints/
// latest is replaced atomically, so a crash or a full disk mid-save never
// replaces the last good checkpoint.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/hf_config.h"
#include "io/peft_adapter.h"
#include "train/optimizer.h"

namespace ulysses {

struct CheckpointMesh {
  int world = 1, sp = 1, dp = 1;
};

struct TrainerState {
  int64_t step = 0;
  int optimizer_shards = 0;  // ranks whose files optimizer/ holds; 0: optimizer.safetensors holds it whole
  nlohmann::json loader;
  CheckpointMesh mesh;
  nlohmann::json config;
  nlohmann::json fingerprint;  // train/fingerprint.h: what a resume must not change (null in older checkpoints)
};

struct CheckpointSaveOptions {
  DType dtype = DType::BF16;            // of model/'s weights (the fp32 masters are in optimizer.safetensors)
  std::vector<std::string> asset_dirs;  // tokenizer, chat template, generation config copied into model/ from these
  int64_t keep_last = 0;                // > 0: remove older step-* folders beyond the newest N
  // The staging folder was prepared (prepare_checkpoint_dir) and every rank wrote its optimizer
  // shard into it; the snapshot then holds the masters only (for model/).
  bool sharded_optimizer = false;
  // Runs when every file is written and checksummed, before COMPLETE marks the folder whole: the
  // tests' fault injection (a kill here must leave the previous checkpoint the latest).
  std::function<void(int64_t step)> before_commit;
  // LoRA: the snapshot's masters are the adapters, written as adapter/ instead of model/.
  const LoraConfig* lora = nullptr;
};

// The folder a checkpoint of `step` is assembled in before it is renamed into place: every rank
// can name it; rank 0 makes it (empty, with optimizer/) with prepare_checkpoint_dir, and removes
// it with abandon_checkpoint when a rank could not write its part.
std::string checkpoint_staging_dir(const std::string& out_dir, int64_t step);
void prepare_checkpoint_dir(const std::string& out_dir, int64_t step);
void abandon_checkpoint(const std::string& out_dir, int64_t step);
// Rank `rank` of `ranks`' optimizer shard in a checkpoint (or staging) folder.
std::string optimizer_shard_file(const std::string& checkpoint_dir, int rank, int ranks);

// Rank 0 writes (the optimizer snapshot gathered by every rank, or with options.sharded_optimizer
// the masters only, the ranks' shards already in the staging folder); returns the checkpoint folder.
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
