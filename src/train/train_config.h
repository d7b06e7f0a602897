// The configuration of `ulysses train`: a YAML file whose every key can be
// overridden on the command line (--optimizer.lr 1e-4, or optimizer.lr=1e-4).
// Every key has a documented default (train_config.cpp, docs/training.md);
// an unknown key is an error that names the nearest known one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/engine.h"

namespace ulysses {

struct TrainConfig {
  // model: a Hugging Face folder to start from, or model_config (a named shape or
  // a config.json) for a random init with init_seed.
  std::string model;
  std::string model_config;
  // rope_scaling: a config.json rope block (rope_type, factor, ...) replacing the model's RoPE
  // scaling for this run and in its checkpoints; null keeps the model's.
  nlohmann::json rope_scaling;
  int64_t num_layers = 0;  // > 0 overrides the model's layer count (random init only)
  uint64_t init_seed = 0;

  // data: shards made by `ulysses prepare`.
  std::string train_data;  // a folder of *.tokens (train-*) or one file
  std::string val_data;    // a folder/file for evaluation; default: val-* next to train_data
  int64_t seq_len = 1024;
  std::string data_mode = "pack";  // pack | long
  uint64_t data_seed = 0;

  int64_t batch_size = 1;  // sequences per micro-batch, over the whole world
  int64_t grad_accum = 1;  // micro-batches per optimizer step
  int64_t steps = 100;

  double lr = 3e-4, min_lr = 3e-5;  // min_lr: a tenth of lr unless set, never above it (load_train_config)
  int64_t warmup_steps = 10;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, grad_clip = 1.0;

  int64_t eval_every = 0;  // 0 = never
  int64_t eval_batches = 4;
  int64_t skip_nonfinite = 0;  // non-finite steps skipped (no update) before the run stops
  int64_t checkpoint_every = 0;  // 0 = only at the end (and on SIGINT/SIGTERM)
  int64_t log_every = 1;
  bool tensorboard = true;  // TensorBoard event files beside metrics.jsonl
  std::string out_dir = "runs/train";
  bool resume = false;
  bool reshard = false;  // resume: a checkpoint of another mesh is accepted (train/trainer.cpp)
  bool overwrite = false;  // a fresh run may write over another run's results in out_dir
  std::string save_dtype = "bfloat16";  // float32 | bfloat16 | float16
  int64_t keep_last = 0;                // > 0: only the newest N checkpoints are kept
  std::string tokenizer;                // folder of tokenizer files for the checkpoints (default: model's or data's)

  // backend, dtype, comm, sp, sp_ring, zigzag, zero, offload_optimizer, grad_dtype, memory.*: the
  // engine (train/engine.h); ZeRO stage 1 shards the AdamW state (train/optimizer.h), 2 the
  // gradients too, 3 the weights too (model/parameter_store.h).
  EngineConfig engine;
  // lora: {r, alpha, dropout, target_modules, use_rslora} into engine.lora (r 0: off); adapter: a
  // PEFT adapter folder to start the adapters from (empty: PEFT's initialisation).
  std::string lora_adapter;

  nlohmann::json as_json;  // the effective configuration, for the run folder
};

// Reads the YAML file (or none: path empty) and applies the overrides
// ("key=value" or "--key value" / "--key=value", dotted keys for nested ones).
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides);
// The defaults as YAML text, documented (for `ulysses train --print-defaults`).
std::string train_config_defaults_yaml();

}  // namespace ulysses
