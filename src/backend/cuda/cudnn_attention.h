// Causal attention through cuDNN's fused SDPA (the cuDNN frontend's graph API),
// with the semantics of cpu::attention_forward/backward: GQA without expanding
// K/V, packed documents as a variable-length batch (one batch entry per
// document, ragged offsets into our [S, H, d] tensors: never an O(S^2) mask),
// the natural-log log-sum-exp returned as lse [H, S], bf16 in, fp32 softmax
// and accumulation. Graphs are built once per problem and cached; the frontend
// is confined to cudnn_attention.cpp.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ulysses::cuda {

// One attention call: S tokens, H query and Hkv key/value heads of size d, in
// `documents` documents of which the longest has `longest` tokens.
struct AttentionProblem {
  int64_t S = 0, H = 0, Hkv = 0, d = 0;
  int64_t documents = 1, longest = 0;
  double scale = 1.0;
};

class CudnnAttention {
 public:
  struct Options {
    // Packed rows run as a batch of documents padded to the next power of two with
    // empty entries, so that rows with similar document counts share one graph.
    bool pad_batch = true;
    // Ragged offsets in int64 even where int32 would hold them (they must past 2^31 elements).
    bool int64_offsets = false;
    // Packed rows: softmax statistics as a ragged token-major [T, H] tensor (compact); otherwise
    // padded per document, [batch, H, seq] (batch x seq can be up to 4x the row's tokens).
    bool ragged_stats = true;
    // Packed rows of equal documents as a dense batch (no offsets, statistics in place): what a
    // batch of equal sequences costs, measurably faster than the ragged form (docs/benchmarks.md).
    bool dense_batch = true;
    // Build every plan cuDNN's heuristics offer (modes A and B) and time them on a problem's first
    // call, with its own buffers (each plan overwrites the same outputs), keeping the fastest; the
    // plans considered need no more workspace than the heuristic's first choice, which is what
    // workspace_bytes() reports. Off: the heuristic's first choice, no timing.
    bool autotune = false;
  };
  // Throws an Error when the cuDNN library cannot be loaded or a handle not created.
  explicit CudnnAttention(cudaStream_t stream, Options options);
  CudnnAttention(cudaStream_t stream);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // "9.19.0": the cuDNN library loaded at run time.
  static std::string runtime_version();

  // Whether cuDNN has an engine for this problem (builds and caches the graph);
  // `why` gets cuDNN's reason when it has none.
  bool supports(const AttentionProblem& p, bool backward, std::string* why = nullptr);
  // Device scratch of one call (cuDNN's workspace, the ragged offsets and the token-major
  // statistics of packed rows), 0 when none; the problem must be supported.
  size_t workspace_bytes(const AttentionProblem& p, bool backward);

  // out, q: [S, H, d]; k, v: [S, Hkv, d]; lse: [H, S] float32; bounds: [documents + 1]
  // int32 device (0 = b_0 < ... = S). workspace: workspace_bytes(p, false) bytes.
  void forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
               const __nv_bfloat16* v, const int32_t* bounds, const AttentionProblem& p, void* workspace);
  // dq: [S, H, d], dk, dv: [S, Hkv, d] (write); dout, out: [S, H, d]; lse: [H, S] from forward.
  void backward(__nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, const __nv_bfloat16* dout,
                const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* q, const __nv_bfloat16* k,
                const __nv_bfloat16* v, const int32_t* bounds, const AttentionProblem& p, void* workspace);

  // How a supported problem runs: "one sequence", "dense batch" (equal documents) or "ragged batch";
  // with sizes, "dense batch of 8 x 4096" (cuDNN's B x S). For logs and tests.
  std::string form(const AttentionProblem& p, bool backward);
  std::string describe(const AttentionProblem& p, bool backward);

  // Graphs built so far (for tests and logs).
  size_t cached_graphs() const;
  // The plans of a supported problem's graph among which autotune chooses (1 without it), and the
  // one in use: -1 until its first call has timed them.
  size_t candidate_plans(const AttentionProblem& p, bool backward);
  int64_t chosen_plan(const AttentionProblem& p, bool backward);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ulysses::cuda
