#include "io/rope_config.h"

#include <cmath>

#include "io/json_fields.h"

namespace ulysses {
namespace {

using nlohmann::json;

// transformers' yarn_get_mscale: 0.1 * mscale * ln(scale) + 1 above a factor of 1.
double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// One rope block: the 4.x `rope_scaling` object or the 5.x `rope_parameters`.
void parse_block(const json& block, const char* block_name, const std::string& source, int64_t original_default,
                 int64_t max_positions, RopeConfig* rope) {
  JsonFields f(block, source, std::string(block_name) + ".");
  std::optional<std::string> type = f.opt_string("rope_type");
  if (!type) type = f.opt_string("type");  // the older spelling in 4.x configs
  rope->type = type.value_or("default");
  const std::string& t = rope->type;
  if (t == "default") return;
  auto factor = [&] {
    return check_in_range(source + ": field '" + f.name("factor") + "'", f.number("factor"), limits::kRopeFactor);
  };
  if (t == "linear") {
    rope->factor = factor();
    return;
  }
  if (t == "dynamic") {  // NTK-aware: the base grows with the sequence past max_position_embeddings
    rope->factor = factor();
    rope->original_max_position_embeddings = max_positions;
    return;
  }
  if (t == "llama3") {
    rope->factor = factor();
    rope->low_freq_factor = f.positive_number("low_freq_factor");
    rope->high_freq_factor = f.positive_number("high_freq_factor");
    rope->original_max_position_embeddings = f.positive("original_max_position_embeddings");
    // The llama3 schedule interpolates between the two wavelengths 1/low and 1/high.
    ULY_CHECK(rope->high_freq_factor > rope->low_freq_factor,
              source << ": field '" << block_name << ".high_freq_factor' (" << rope->high_freq_factor
                     << ") must be larger than '" << block_name << ".low_freq_factor' (" << rope->low_freq_factor
                     << ")");
    return;
  }
  ULY_CHECK(t == "yarn", source << ": rope type '" << t << "' in '" << block_name
                                << "' is not supported (supported: " << kSupportedRopeTypes << ")");
  rope->original_max_position_embeddings = f.opt_positive("original_max_position_embeddings", original_default);
  // transformers: without a factor, the ratio of the context to the pretrained one.
  rope->factor = f.has("factor") ? factor()
                                 : static_cast<double>(max_positions) /
                                       static_cast<double>(rope->original_max_position_embeddings);
  rope->beta_fast = f.opt_positive_number("beta_fast", 32.0);
  rope->beta_slow = f.opt_positive_number("beta_slow", 1.0);
  rope->truncate = f.opt_bool("truncate", true);
  if (f.has("attention_factor")) {
    rope->attention_factor = f.positive_number("attention_factor");
  } else {
    const double mscale = f.has("mscale") ? f.number("mscale") : 0.0;
    const double mscale_all = f.has("mscale_all_dim") ? f.number("mscale_all_dim") : 0.0;
    rope->attention_factor = mscale != 0.0 && mscale_all != 0.0
                                 ? yarn_mscale(rope->factor, mscale) / yarn_mscale(rope->factor, mscale_all)
                                 : yarn_mscale(rope->factor, 1.0);
  }
}

}  // namespace

json RopeConfig::scaling_fields() const {
  if (type == "linear" || type == "dynamic") return {{"factor", factor}};
  if (type == "llama3")
    return {{"factor", factor},
            {"low_freq_factor", low_freq_factor},
            {"high_freq_factor", high_freq_factor},
            {"original_max_position_embeddings", original_max_position_embeddings}};
  if (type == "yarn")
    return {{"factor", factor},
            {"original_max_position_embeddings", original_max_position_embeddings},
            {"beta_fast", beta_fast},
            {"beta_slow", beta_slow},
            {"truncate", truncate},
            {"attention_factor", attention_factor}};
  return json::object();
}

RopeConfig parse_rope(const json& j, const std::string& src, int64_t max_positions) {
  JsonFields f(j, src);
  RopeConfig rope;
  // A top-level original_max_position_embeddings (Phi-3 style) is yarn's default, as transformers takes it.
  const int64_t original = f.opt_positive("original_max_position_embeddings", max_positions);
  const double top_theta = f.opt_number_in("rope_theta", 10000.0, limits::kRopeTheta);
  const bool v5 = f.has("rope_parameters"), v4 = f.has("rope_scaling");
  if (v5 && v4) {
    // Both spellings present: accepted only when they say the same thing.
    RopeConfig a, b;
    parse_block(f.object("rope_parameters"), "rope_parameters", src, original, max_positions, &a);
    parse_block(f.object("rope_scaling"), "rope_scaling", src, original, max_positions, &b);
    ULY_CHECK(a.type == b.type && a.scaling_fields() == b.scaling_fields(),
              src << ": 'rope_parameters' (" << j["rope_parameters"].dump() << ") and 'rope_scaling' ("
                  << j["rope_scaling"].dump() << ") disagree; keep one of them");
  }
  if (v5) {
    const json& rp = f.object("rope_parameters");
    parse_block(rp, "rope_parameters", src, original, max_positions, &rope);
    JsonFields rf(rp, src, "rope_parameters.");
    rope.theta = rf.opt_number_in("rope_theta", top_theta, limits::kRopeTheta);
    // Both the top-level rope_theta and rope_parameters' present: only when they agree.
    ULY_CHECK(!f.has("rope_theta") || !rf.has("rope_theta") || rope.theta == top_theta,
              src << ": 'rope_theta' (" << top_theta << ") and 'rope_parameters.rope_theta' (" << rope.theta
                  << ") disagree; keep one of them");
  } else {
    rope.theta = top_theta;
    if (v4) parse_block(f.object("rope_scaling"), "rope_scaling", src, original, max_positions, &rope);
  }
  return rope;
}

void write_rope(const RopeConfig& rope, json& j) {
  const bool v5 = j.contains("rope_parameters") && !j["rope_parameters"].is_null();
  // Every scaling key we know, erased before the type's own are written back.
  auto set_fields = [&](json& block) {
    for (const char* k : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
                          "beta_fast", "beta_slow", "truncate", "attention_factor", "mscale", "mscale_all_dim"})
      block.erase(k);
    const json fields = rope.scaling_fields();  // items() must not outlive the object it walks
    for (const auto& [k, v] : fields.items()) block[k] = v;
  };
  if (v5) {
    json rp = j["rope_parameters"].is_object() ? j["rope_parameters"] : json::object();
    rp.erase("type");
    rp["rope_type"] = rope.type;
    rp["rope_theta"] = rope.theta;
    set_fields(rp);
    j["rope_parameters"] = rp;
    if (j.contains("rope_theta")) j["rope_theta"] = rope.theta;
    if (j.contains("rope_scaling")) j.erase("rope_scaling");
    return;
  }
  j["rope_theta"] = rope.theta;
  if (rope.type == "default") {
    j["rope_scaling"] = nullptr;
    return;
  }
  json rs = j.contains("rope_scaling") && j["rope_scaling"].is_object() ? j["rope_scaling"] : json::object();
  // Keep the key spelling the file used ("type" in older 4.x files).
  const char* key = rs.contains("type") && !rs.contains("rope_type") ? "type" : "rope_type";
  rs[key] = rope.type;
  set_fields(rs);
  j["rope_scaling"] = rs;
}

}  // namespace ulysses
