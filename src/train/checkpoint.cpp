#include "train/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/json_depth.h"
#include "core/limits.h"
#include "io/atomic_file.h"
#include "io/checksums.h"
#include "io/model_folder.h"
#include "io/regular_file.h"
#include "io/safetensors.h"

namespace ulysses {
namespace fs = std::filesystem;

namespace {

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%07lld", static_cast<long long>(step));
  return buf;
}

}  // namespace

std::string checkpoint_staging_dir(const std::string& out_dir, int64_t step) {
  return (fs::path(out_dir) / "checkpoints" / (".tmp-" + step_name(step))).string();
}

void prepare_checkpoint_dir(const std::string& out_dir, int64_t step) {
  const fs::path tmp = checkpoint_staging_dir(out_dir, step);
  std::error_code ec;
  fs::remove_all(tmp, ec);
  try {
    fs::create_directories(tmp / "optimizer");
  } catch (const fs::filesystem_error& e) {
    ULY_FAIL("saving checkpoint: cannot make " << tmp.string() << ": " << e.what()
                                               << "; the previous checkpoint is untouched");
  }
}

void abandon_checkpoint(const std::string& out_dir, int64_t step) {
  std::error_code ec;
  fs::remove_all(checkpoint_staging_dir(out_dir, step), ec);
}

std::string optimizer_shard_file(const std::string& checkpoint_dir, int rank, int ranks) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "rank-%05d-of-%05d.safetensors", rank, ranks);
  return (fs::path(checkpoint_dir) / "optimizer" / buf).string();
}

std::string save_checkpoint(const std::string& out_dir, const ModelConfig& model_config,
                            const OptimizerSnapshot& optimizer,
                            const TrainerState& state, const CheckpointSaveOptions& options) {
  const fs::path root = fs::path(out_dir) / "checkpoints";
  fs::create_directories(root);
  const fs::path final_dir = root / step_name(state.step);
  const fs::path tmp = checkpoint_staging_dir(out_dir, state.step);
  std::error_code ec;
  if (!options.sharded_optimizer) fs::remove_all(tmp, ec);
  try {
    fs::create_directories(tmp);
    if (options.lora) {
      save_peft_adapter((tmp / "adapter").string(), *options.lora, optimizer.master);
    } else {
      save_model_folder((tmp / "model").string(), model_config, optimizer.master, options.dtype);
      copy_model_assets(options.asset_dirs, (tmp / "model").string());
    }
    if (!options.sharded_optimizer)
      write_safetensors((tmp / "optimizer.safetensors").string(), optimizer.state,
                        {{"steps_taken", std::to_string(optimizer.steps_taken)}});
    nlohmann::json j;
    j["step"] = state.step;
    if (state.optimizer_shards > 0) j["optimizer_shards"] = state.optimizer_shards;
    j["loader"] = state.loader;
    j["mesh"] = {{"world", state.mesh.world}, {"sp", state.mesh.sp}, {"dp", state.mesh.dp}};
    j["config"] = state.config;
    j["fingerprint"] = state.fingerprint;
    j["format_version"] = 1;
    write_file_atomic((tmp / "trainer_state.json").string(), j.dump(2));
    // Checksums of what was written, before COMPLETE: model/ has its own list (checked when the
    // folder is loaded as a model), the checkpoint's covers every file (checked at resume);
    // adapter/ holds PEFT's two files alone.
    if (!options.lora) write_checksums((tmp / "model").string());
    write_checksums(tmp.string());
    if (options.before_commit) options.before_commit(state.step);
    write_file_atomic((tmp / "COMPLETE").string(), "ok\n");
    if (fs::exists(final_dir)) fs::remove_all(final_dir);
    fs::rename(tmp, final_dir);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    ULY_FAIL("saving checkpoint " << final_dir.string() << " failed: " << e.what()
                                  << "; the previous checkpoint is untouched");
  } catch (const Error& e) {
    fs::remove_all(tmp, ec);
    ULY_FAIL("saving checkpoint " << final_dir.string() << " failed: " << e.message()
                                  << "; the previous checkpoint is untouched");
  }
  write_file_atomic((root / "latest").string(), step_name(state.step) + "\n");
  if (options.keep_last > 0) rotate_checkpoints(out_dir, options.keep_last);
  return final_dir.string();
}

std::vector<std::string> rotate_checkpoints(const std::string& out_dir, int64_t keep_last) {
  const fs::path root = fs::path(out_dir) / "checkpoints";
  std::vector<std::string> steps, removed;
  std::error_code ec;
  if (keep_last <= 0 || !fs::is_directory(root, ec)) return removed;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step-", 0) == 0 && e.is_directory()) steps.push_back(n);
  }
  std::sort(steps.begin(), steps.end());  // zero-padded: name order is step order
  std::string latest;
  std::ifstream(root / "latest") >> latest;
  const auto keep_from = static_cast<int64_t>(steps.size()) - keep_last;
  for (int64_t i = 0; i < keep_from; ++i) {
    if (steps[i] == latest || i + 1 == static_cast<int64_t>(steps.size())) continue;
    fs::remove_all(root / steps[i], ec);
    if (!ec) removed.push_back(steps[i]);
  }
  return removed;
}

std::optional<std::string> latest_checkpoint(const std::string& out_dir) {
  const fs::path root = fs::path(out_dir) / "checkpoints";
  std::error_code ec;
  if (fs::exists(root / "latest", ec)) {
    // latest names a checkpoint folder next to it; anything else ("../x", "/x") is refused, not followed.
    std::string name = read_text_file((root / "latest").string(), "checkpoint pointer", 4096);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    const std::string dir = confined_path(root.string(), name, (root / "latest").string(), "the latest checkpoint");
    ULY_CHECK(name.rfind("step-", 0) == 0, (root / "latest").string()
                                                << ": names '" << name << "', not a checkpoint folder (step-NNNNNNN)");
    if (fs::exists(fs::path(dir) / "COMPLETE")) return dir;
  }
  // Fall back to the newest complete folder (latest may point at a removed one).
  std::optional<std::string> best;
  if (!fs::exists(root)) return best;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("step-", 0) == 0 && fs::exists(e.path() / "COMPLETE"))
      if (!best || n > fs::path(*best).filename().string()) best = e.path().string();
  }
  return best;
}

TrainerState read_trainer_state(const std::string& dir) {
  const std::string path = dir + "/trainer_state.json";
  const std::string text = read_text_file(path, "trainer state", limits::kMaxJsonBytes);
  TrainerState s;
  try {
    check_json_depth(text, path);
    const nlohmann::json j = nlohmann::json::parse(text);
    // An integer within the steps limit (a float or a huge count would convert silently and
    // resume a run that trains nothing).
    const nlohmann::json& step = j.at("step");
    ULY_CHECK(step.is_number_integer(), path << ": invalid trainer state: step " << step.dump() << " is not an integer");
    s.step = check_in_range(path + ": step", step.is_number_unsigned() && step.get<uint64_t>() > uint64_t(limits::kInt64Max)
                                                 ? limits::kInt64Max : step.get<int64_t>(),
                            limits::kStepCount);
    s.loader = j.at("loader");
    s.mesh.world = j.at("mesh").at("world");
    s.mesh.sp = j.at("mesh").at("sp");
    s.mesh.dp = j.at("mesh").at("dp");
    s.config = j.value("config", nlohmann::json::object());
    s.fingerprint = j.value("fingerprint", nlohmann::json());
    s.optimizer_shards = j.value("optimizer_shards", 0);
  } catch (const nlohmann::json::exception& e) {
    ULY_FAIL(path << ": invalid trainer state: " << e.what());
  }
  ULY_CHECK(s.optimizer_shards >= 0 && s.optimizer_shards <= limits::kSpDegree.hi,
            path << ": invalid trainer state: optimizer_shards " << s.optimizer_shards);
  return s;
}

}  // namespace ulysses
