#include "model/batch.h"

#include <algorithm>

#include "io/safetensors.h"

namespace ulysses {

std::vector<int32_t> shift_labels(const std::vector<int32_t>& labels, const std::vector<int32_t>& positions,
                                  int64_t B, int64_t S) {
  std::vector<int32_t> t(B * S, kIgnoreIndex);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i + 1 < S; ++i) {
      const int64_t next = b * S + i + 1;
      if (positions[next] != 0) t[b * S + i] = labels[next];
    }
  return t;
}

static std::vector<int32_t> read_2d(const SafetensorsFile& f, const std::string& name, int64_t B, int64_t S) {
  const SafetensorsInfo& info = f.info(name);
  ULY_CHECK(info.dtype == DType::I32 || info.dtype == DType::I64,
            f.path() << ": '" << name << "' has dtype " << dtype_name(info.dtype) << "; expected int32 or int64");
  ULY_CHECK(info.shape == Shape({B, S}), f.path() << ": '" << name << "' has shape " << shape_str(info.shape)
                                                  << " but input_ids is " << shape_str({B, S}));
  Tensor t = f.read_i32(name);
  const int32_t* p = t.data<int32_t>();
  return std::vector<int32_t>(p, p + B * S);
}

TokenBatch load_batch_file(const std::string& path, int64_t vocab_size) {
  SafetensorsFile f = SafetensorsFile::open(path);
  ULY_CHECK(f.contains("input_ids"), path << ": no 'input_ids' tensor (expected int32/int64 [B, S])");
  const SafetensorsInfo& ids_info = f.info("input_ids");
  ULY_CHECK(ids_info.shape.size() == 2 && ids_info.shape[0] > 0 && ids_info.shape[1] > 0,
            path << ": 'input_ids' has shape " << shape_str(ids_info.shape) << "; expected [B, S] with B, S > 0");
  TokenBatch b;
  b.B = ids_info.shape[0];
  b.S = ids_info.shape[1];
  b.ids = read_2d(f, "input_ids", b.B, b.S);
  for (int64_t i = 0; i < b.B * b.S; ++i)
    ULY_CHECK(b.ids[i] >= 0 && b.ids[i] < vocab_size,
              path << ": input_ids[" << i / b.S << ", " << i % b.S << "] = " << b.ids[i]
                   << " is outside the vocabulary [0, " << vocab_size << ")");
  if (f.contains("position_ids")) {
    b.positions = read_2d(f, "position_ids", b.B, b.S);
    for (int32_t p : b.positions) ULY_CHECK(p >= 0, path << ": position_ids has a negative entry " << p);
  } else {
    b.positions.resize(b.B * b.S);
    for (int64_t i = 0; i < b.B * b.S; ++i) b.positions[i] = static_cast<int32_t>(i % b.S);
  }
  ULY_CHECK(!(f.contains("shift_labels") && f.contains("labels")),
            path << ": has both 'labels' and 'shift_labels'; give one");
  if (f.contains("shift_labels")) {
    b.targets = read_2d(f, "shift_labels", b.B, b.S);
  } else {
    const auto labels = f.contains("labels") ? read_2d(f, "labels", b.B, b.S) : b.ids;
    b.targets = shift_labels(labels, b.positions, b.B, b.S);
  }
  const char* which = f.contains("shift_labels") ? "shift_labels" : "labels";
  for (int64_t i = 0; i < b.B * b.S; ++i)
    ULY_CHECK(b.targets[i] == kIgnoreIndex || (b.targets[i] >= 0 && b.targets[i] < vocab_size),
              path << ": " << which << " entry " << b.targets[i] << " at [" << i / b.S << ", " << i % b.S
                   << "] is outside the vocabulary [0, " << vocab_size << ") and is not -100");
  // The loss is a mean over the targets: with none it is 0/0, and the gradients are all zero.
  const bool any_target = std::any_of(b.targets.begin(), b.targets.end(), [](int32_t t) { return t != kIgnoreIndex; });
  ULY_CHECK(any_target, path << ": no position has a target (every " << which << " entry is -100"
                             << (f.contains("shift_labels") || f.contains("labels") ? "" : ", or each row is one token")
                             << "); the loss would be 0/0: give a batch with at least one target");
  return b;
}

std::vector<int32_t> document_starts(const std::vector<int32_t>& positions) {
  std::vector<int32_t> start(positions.size());
  int32_t current = 0;
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] == 0) current = static_cast<int32_t>(i);
    start[i] = current;
  }
  return start;
}

SequenceShard shard_sequence(const TokenBatch& batch, int64_t row, Communicator& sp_group) {
  return shard_sequence(batch, row, sp_group, TokenLayout(sp_group.size()));
}

SequenceShard shard_sequence(const TokenBatch& batch, int64_t row, Communicator& sp_group, const TokenLayout& layout) {
  const int64_t P = sp_group.size(), r = sp_group.rank();
  ULY_CHECK(layout.sp() == P, "shard_sequence: a layout for " << layout.sp() << " ranks on a group of " << P);
  SequenceShard s;
  s.S_global = layout.padded_length(batch.S);
  const int64_t S_l = s.S_global / P;
  const std::vector<int64_t> mine = layout.rank_tokens(s.S_global, r);
  s.offset = mine[0];
  s.ids.assign(S_l, 0);
  s.targets.assign(S_l, kIgnoreIndex);
  s.positions.resize(S_l);
  for (int64_t i = 0; i < S_l; ++i) {
    const int64_t g = mine[i];
    if (g < batch.S) {
      s.ids[i] = batch.ids[row * batch.S + g];
      s.targets[i] = batch.targets[row * batch.S + g];
      s.positions[i] = batch.positions[row * batch.S + g];
    } else {
      s.positions[i] = static_cast<int32_t>(g - batch.S);  // padding: a document of its own
    }
  }
  std::vector<int32_t> all(s.S_global), in_order(s.S_global);
  sp_group.all_gather(s.positions.data(), all.data(), static_cast<size_t>(S_l), DType::I32);
  for (int64_t q = 0; q < P; ++q) {
    const std::vector<int64_t> theirs = layout.rank_tokens(s.S_global, q);
    for (int64_t i = 0; i < S_l; ++i) in_order[theirs[i]] = all[q * S_l + i];
  }
  s.doc_start = document_starts(in_order);
  for (int64_t g = 0; g < batch.S; ++g) s.rope_length = std::max<int64_t>(s.rope_length, in_order[g] + 1);
  return s;
}

}  // namespace ulysses
