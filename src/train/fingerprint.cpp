#include "train/fingerprint.h"

#include <map>
#include <sstream>

#include "core/error.h"
#include "train/checkpoint.h"

namespace ulysses {
namespace {

using nlohmann::json;

// {"a": {"b": 1, "c": [x, y]}} -> {"a.b": 1, "a.c[0]": x, "a.c[1]": y}
void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) flatten(*it, prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else if (j.is_array()) {
    out[prefix + ".count"] = j.size();
    for (size_t i = 0; i < j.size(); ++i) flatten(j[i], prefix + "[" + std::to_string(i) + "]", out);
  } else {
    out[prefix] = j;
  }
}

std::string shown(const std::map<std::string, json>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? std::string("absent") : it->second.dump();
}

}  // namespace

json run_fingerprint(const TrainConfig& c, const ModelConfig& m, const CheckpointMesh& mesh, const json& data) {
  json model = {{"vocab_size", m.vocab_size},
                {"hidden_size", m.hidden_size},
                {"intermediate_size", m.intermediate_size},
                {"num_hidden_layers", m.num_hidden_layers},
                {"num_attention_heads", m.num_attention_heads},
                {"num_key_value_heads", m.num_key_value_heads},
                {"head_dim", m.head_dim},
                {"rms_norm_eps", m.rms_norm_eps},
                {"tie_word_embeddings", m.tie_word_embeddings},
                {"rope_type", m.rope.type},
                {"rope_theta", m.rope.theta}};
  // Written only where they differ from Llama's, so checkpoints from before they existed still match.
  const json rope = m.rope.scaling_fields();  // items() must not outlive the object it walks
  for (const auto& [k, v] : rope.items()) model["rope_" + k] = v;
  if (m.architecture != "LlamaForCausalLM") model["architecture"] = m.architecture;
  if (m.qkv_bias) model["qkv_bias"] = true;
  if (m.o_bias) model["o_bias"] = true;
  if (m.qk_norm) model["qk_norm"] = true;
  if (m.sliding_window > 0) model["sliding_window"] = m.sliding_window;
  const json& cfg = c.as_json;
  json mesh_json = {{"world", mesh.world}, {"sp", mesh.sp}, {"dp", mesh.dp}};
  // The ring degree and the token layout change which rank holds which tokens and the
  // order of the sums: not the maths, but the bits a resume promises. Written only when
  // not the default, so checkpoints from before they existed still match a plain run.
  if (c.engine.ring != 1) mesh_json["sp_ring"] = c.engine.ring;
  if (c.engine.zigzag) mesh_json["zigzag"] = true;
  return {{"model", model},
          {"data", data},
          {"mesh", mesh_json},
          {"precision",
           {{"backend", backend_kind_name(c.engine.backend)},
            {"dtype", c.engine.act_dtype == DType::F32 ? "fp32" : "bf16"}}},
          {"training",
           {{"batch_size", cfg["batch_size"]},
            {"grad_accum", cfg["grad_accum"]},
            {"data.seq_len", cfg["data"]["seq_len"]},
            {"data.mode", cfg["data"]["mode"]},
            {"data.seed", cfg["data"]["seed"]},
            {"optimizer", cfg["optimizer"]}}}};
}

void check_resume_fingerprint(const json& recorded, const json& current, const std::string& checkpoint,
                              bool ignore_mesh) {
  std::map<std::string, json> was, now;
  flatten(recorded, "", was);
  flatten(current, "", now);
  if (ignore_mesh)
    for (auto* m : {&was, &now}) std::erase_if(*m, [](const auto& kv) { return kv.first.rfind("mesh.", 0) == 0; });
  std::vector<std::string> differ;
  for (const auto& [k, v] : now)
    if (auto it = was.find(k); it == was.end() || it->second != v) differ.push_back(k);
  for (const auto& [k, v] : was)
    if (now.count(k) == 0) differ.push_back(k);
  if (differ.empty()) return;
  // The most telling key first: a count before the entries it counts.
  std::string first = differ.front();
  for (const auto& k : differ)
    if (k.size() > 6 && k.compare(k.size() - 6, 6, ".count") == 0) {
      first = k;
      break;
    }
  std::ostringstream others;
  if (differ.size() > 1) others << " (and " << differ.size() - 1 << " other value" << (differ.size() > 2 ? "s" : "") << ")";
  ULY_FAIL("resume would change the run's maths: '" << first << "' is " << shown(now, first) << " in this run but was "
                                                    << shown(was, first) << " in " << checkpoint << others.str()
                                                    << "; resume with the settings and data the checkpoint was written "
                                                       "with, or start a new run (another out_dir, or overwrite=true)");
}

}  // namespace ulysses
