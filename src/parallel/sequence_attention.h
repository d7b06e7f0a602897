// Attention over a sequence that may be split across the ranks of a
// sequence-parallel group. The model hands over its local q/k/v (its S/P
// tokens, all heads, RoPE applied with global positions) and gets back the
// attention output for the same tokens; how the work is distributed (local,
// Ulysses all-to-all, later ring or hybrid) is this layer's business.
#pragma once
#include <memory>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "parallel/mesh.h"

namespace ulysses {

// What the backward pass needs, in whatever layout the attention ran in.
struct AttentionSaved {
  Tensor q, k, v, out, lse;
};

class SequenceAttention {
 public:
  virtual ~SequenceAttention() = default;
  // out: [S_local, H, d] (write); q: [S_local, H, d]; k, v: [S_local, Hkv, d];
  // docs: the documents of the whole row (S_global tokens), on the backend's device.
  virtual void forward(Tensor& out, AttentionSaved& saved, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Documents& docs) = 0;
  // dq: [S_local, H, d], dk, dv: [S_local, Hkv, d] (write); dout: [S_local, H, d].
  virtual void backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const AttentionSaved& saved,
                        const Documents& docs) = 0;
  // forward() again on the same inputs, given the out and lse that an earlier forward saved
  // (its saved.out and saved.lse): the layouts and communication are redone, the kernel is not.
  virtual void restore(Tensor& out, AttentionSaved& saved, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Documents& docs, const Tensor& kept_out, const Tensor& kept_lse) = 0;
  // Head-chunked backward (--head-chunks): the forward kept only saved.lse (and saved.out where
  // it was kept); this rebuilds saved.q/k/v from the local q, k, v (layouts and communication
  // redone) and, when saved.out is undefined, saved.out from the local output out_local
  // ([S_local, H, d]), so that backward() can run.
  virtual void prepare_backward(AttentionSaved& saved, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out_local) = 0;
};

// Checks that heads H and kv heads Hkv can be spread over P ranks, and that
// each rank gets at least one token of S; throws an Error naming the valid degrees.
void check_ulysses_degree(int64_t H, int64_t Hkv, int64_t P, int64_t S_global);

// Checks that `chunks` head chunks hold whole KV groups (H and Hkv divisible by it) and that each
// chunk's H/chunks and Hkv/chunks heads can still be spread over P ranks.
void check_head_chunks(int64_t H, int64_t Hkv, int64_t P, int64_t chunks);

// Local attention when the group has one rank, Ulysses otherwise. H, Hkv: the heads of one call
// (a head chunk's, with --head-chunks).
// scale: the softmax scale (ModelConfig::attention_scale: 1/sqrt(d), times YaRN's factor squared).
std::unique_ptr<SequenceAttention> make_sequence_attention(Backend& backend, Communicator& sp_group, int64_t H,
                                                           int64_t Hkv, int64_t d, double scale);
// The hybrid mesh (parallel/mesh.h): Ulysses all-to-all inside `ulysses_group`, ring
// attention across `ring_group` (rows laid out by parallel/token_layout.h, zigzag or not).
// A group of one rank drops out: ring 1 is the call above, ulysses 1 is pure ring attention
// (no head-count limit). Both groups must outlive the attention.
std::unique_ptr<SequenceAttention> make_sequence_attention(Backend& backend, Communicator& ulysses_group,
                                                           Communicator& ring_group, bool zigzag, int64_t H,
                                                           int64_t Hkv, int64_t d, double scale);
// The same over a mesh's Ulysses and ring groups.
std::unique_ptr<SequenceAttention> make_sequence_attention(Backend& backend, const ProcessMesh& mesh, int64_t H,
                                                           int64_t Hkv, int64_t d, double scale);

}  // namespace ulysses
