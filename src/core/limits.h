// Stated limits. Every count or number that comes from a file or a flag is
// checked against a range stated once here, before anything is allocated for it
// or any work depends on it, and every refusal reads alike:
//   "<what> must be in [lo, hi] (<note>), got <value>"
// docs/reliability.md lists the limits and the tests that check them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

namespace ulysses {

struct IntRange {
  int64_t lo, hi;
  const char* note = "";  // what the values mean ("0 = all ranks"), shown with the range
};

struct RealRange {
  double lo, hi;
  bool lo_open = false, hi_open = false;  // (lo, ... and ..., hi)
  const char* note = "";
};

// "[1, 1073741824]", "(0, 1)"; an unbounded side reads "..." ("[0, ...)").
std::string describe_range(const IntRange& r);
std::string describe_range(const RealRange& r);

// Throws the one refusal of too deep a nesting: "<file>: nesting deeper than <limit> at <where>".
[[noreturn]] void refuse_nesting(const std::string& file, int limit, const std::string& where);

// Returns v, or throws an Error "<what> must be in <range> (<note>), got <v>".
int64_t check_in_range(const std::string& what, int64_t v, const IntRange& r);
// Also refuses NaN and infinity.
double check_in_range(const std::string& what, double v, const RealRange& r);

// The number of threads a --threads option may ask for: 4 x this host's hardware threads
// (an OpenMP runtime asked for millions of threads crashes instead of failing).
int64_t max_threads();

namespace limits {

inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Sequences, batches and steps (options and train-config keys).
// Positions are int32 on the device; 2^30 tokens leaves room for every offset computed from them.
inline constexpr IntRange kSeqLen{1, int64_t{1} << 30, "tokens per sequence"};
inline constexpr IntRange kBatch{1, int64_t{1} << 20, "sequences"};
inline constexpr IntRange kSteps{1, int64_t{1} << 40, "steps"};
inline constexpr IntRange kStepCount{0, int64_t{1} << 40, "steps; 0 = never"};
inline constexpr IntRange kSeed{0, kInt64Max, "a non-negative integer"};
// Ranks of one job: the sequence-parallel degree and the like (0 = all ranks).
inline constexpr IntRange kSpDegree{0, int64_t{1} << 20, "0 = all ranks"};
inline constexpr IntRange kRingDegree{1, int64_t{1} << 20, "1 = no ring attention"};
inline constexpr IntRange kMlpTiles{0, int64_t{1} << 30, "0 = ceil(tokens / hidden)"};
inline constexpr IntRange kLossTile{0, int64_t{1} << 30, "tokens per tile; 0 = off"};
inline constexpr IntRange kLossTileOption{1, int64_t{1} << 30, "tokens per tile"};
inline constexpr IntRange kOffloadLayers{-1, 1 << 16, "layers; -1 = all"};
inline constexpr IntRange kCheckpointSegment{1, 1 << 16, "layers per checkpoint segment"};
inline constexpr IntRange kHeadChunks{1, 1 << 12, "head chunks per attention call"};
inline constexpr IntRange kKeepLast{0, 1 << 20, "checkpoints; 0 = keep every one"};
// Tokens `generate` adds: 2^30 (positions are int32); the KV cache they need is checked too.
inline constexpr IntRange kNewTokens{1, int64_t{1} << 30, "tokens to generate"};
// `plot`'s image, in pixels.
inline constexpr IntRange kPlotWidth{200, 8000, "pixels"};
inline constexpr IntRange kPlotHeight{150, 8000, "pixels"};

// Optimizer hyperparameters.
inline constexpr RealRange kLearningRate{0, kInf, false, true, "non-negative"};
inline constexpr RealRange kWeightDecay{0, kInf, false, true, "non-negative"};
inline constexpr RealRange kBeta{0, 1, false, true, "a moment's decay rate"};
inline constexpr RealRange kAdamEps{0, kInf, true, true, "positive"};
inline constexpr RealRange kGradClip{0, kInf, false, true, "a gradient norm; 0 = off"};
// GiB budgets (--memory-limit, --host-mem-limit): up to 1 PiB.
inline constexpr RealRange kGiB{0, 1 << 20, true, false, "GiB"};

// Model shape (config.json, --layers, num_layers). Generous for any Llama made so far,
// small enough that the counts derived from them (parameters, bytes) stay far from overflow.
inline constexpr IntRange kLayers{1, 1024, "layers"};
inline constexpr IntRange kHidden{1, 1 << 17, "hidden_size"};
inline constexpr IntRange kIntermediate{1, 1 << 19, "intermediate_size"};
inline constexpr IntRange kHeads{1, 1 << 12, "attention heads"};
inline constexpr IntRange kHeadDim{2, 1 << 12, "head_dim"};
// The RoPE base: the frequencies are theta^(-2i/d). Models use 1e4 .. 1e7; below 1 the
// rotations speed up with the dimension, and far above 1e12 every frequency but the first
// rounds to 0 (a run then trains a model without positions, silently).
inline constexpr RealRange kRopeTheta{1, 1e12, false, false, "the RoPE base"};
// A RoPE scaling factor (linear, dynamic, llama3, yarn): (0, 1024]. Models use 2 .. 64; at
// 1e308 every position divides to ~0 (a model without positions, silently).
inline constexpr RealRange kRopeFactor{0, 1024, true, false, "a RoPE scaling factor"};
// RMSNorm's epsilon: 1e-30 .. 1. Models use 1e-6 .. 1e-5; 0 or a denormal divides by ~0 on an
// all-zero row (a NaN), and above 1 it swamps the activations it normalises.
inline constexpr RealRange kRmsNormEps{1e-30, 1, false, false, "RMSNorm's epsilon"};
// Token ids are int32.
inline constexpr IntRange kVocab{1, std::numeric_limits<int32_t>::max(), "vocab_size"};
// A token id given as text (`tokenize --decode`, `generate --prompt-ids`): checked before the
// int32 it becomes (a cast would turn 4294967296 into 0).
inline constexpr IntRange kTokenId{0, std::numeric_limits<int32_t>::max(), "a token id: int32"};
// A tokenizer.json's token ids: 2^22 (16× the largest vocabulary in use, Gemma's 262K). The id ->
// token tables are sized by the largest id, so an unchecked id in a hostile file could ask for
// gigabytes (found by tokenizer_fuzz).
inline constexpr int64_t kMaxTokenizerId = (int64_t{1} << 22) - 1;
inline constexpr IntRange kPositions{1, int64_t{1} << 31, "max_position_embeddings"};
// Parameters of the whole model: 2^42 (4.4 trillion).
inline constexpr int64_t kMaxParameters = int64_t{1} << 42;

// Files read whole into memory. Bigger files are refused before reading.
inline constexpr size_t kMaxJsonBytes = size_t{64} << 20;        // config.json, index, manifest, state
inline constexpr size_t kMaxTokenizerBytes = size_t{1} << 30;    // tokenizer.json (Llama 3's: 9 MB)
inline constexpr size_t kMaxYamlBytes = size_t{16} << 20;        // train configs
inline constexpr size_t kMaxTokenizeBytes = size_t{1} << 30;     // `tokenize`'s stdin (whole in memory)
inline constexpr size_t kMaxYamlNodes = size_t{1} << 20;         // nodes after alias expansion
inline constexpr size_t kMaxSafetensorsHeader = size_t{100} << 20;  // as Hugging Face's reader
// Tensors in one safetensors file: 2^20 (a shard of the largest models holds a few thousand;
// DeepSeek-V3 has 91K in all). Counted while the header is parsed, before any entry is checked.
inline constexpr size_t kMaxSafetensorsEntries = size_t{1} << 20;

// Nesting. Every reader that recurses (or whose values are later walked recursively: copies,
// comparisons, dumps) checks the depth before it goes one level deeper, so that a file of a
// million '[' is refused with one line instead of overflowing the stack. A config.json or
// tokenizer.json nests 6 levels, a training config 2; the limits leave room for any real file.
inline constexpr int kMaxJsonDepth = 128;   // every JSON document read (files, JSON Lines records, stdin)
inline constexpr int kMaxYamlDepth = 64;    // training configs
inline constexpr int kMaxTokenizerSequenceDepth = 16;  // normalizer / pre-tokenizer / decoder Sequences

// Chat templates (io/chat_template.cpp): a template comes with a model folder, so what it can
// make the renderer do is bounded. Nesting of tags and of expressions (the parser and the
// evaluator recurse), evaluation steps per render (nodes run and expressions evaluated: a
// loop over range(10**9) stops), and the size of any string or list a render builds.
inline constexpr int kMaxTemplateDepth = 100;
// 2^20 steps: a conversation of the 1024 messages an SFT record may hold renders in about 50K
// with the largest templates we know (Qwen 3 with tools); a loop step costs about 1 us.
inline constexpr int64_t kMaxTemplateSteps = int64_t{1} << 20;
// And the CPU time of one render: 4 s (the steps alone can take minutes when each step is
// slow: a join or a filter over a million items). A job of many renders (prepare) stops at its
// first refusal, so this bounds the whole job's time in a runaway template, not each record's
// (at 10 s and 2^24 steps per render, a 20-record file took minutes).
inline constexpr double kMaxTemplateSeconds = 4.0;
// The output, and any string value: 64 MiB (a million-token conversation renders to a few MB; at
// 256 MiB one input of chat_template_fuzz built strings for 13 s under the sanitizers).
inline constexpr size_t kMaxTemplateBytes = size_t{64} << 20;
inline constexpr size_t kMaxTemplateItems = size_t{1} << 20;    // a list (range(), list + list)
// Messages in one SFT record. The loss mask is found by rendering the conversation up to and
// through each assistant turn, so a record's work grows with the square of its messages: 1024
// bounds it (agent traces run to a few hundred).
inline constexpr size_t kMaxChatMessages = 1024;

}  // namespace limits
}  // namespace ulysses
