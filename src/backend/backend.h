// The ops interface the model is written against. One implementation per
// device: backend/cpu (the fp32 reference) and backend/cuda (bf16 storage,
// fp32 math). The model never names a device; it calls these.
//
// Tensor arguments follow backend/cpu/ops.h (same names, same order, same
// shapes); this layer checks shapes and dtypes once (op_checks.cpp) and calls
// the backend's implementation. Activations use act_dtype(); weights are in
// act_dtype() for compute with fp32 master copies; gradients of weights are fp32.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/documents.h"
#include "core/activation.h"
#include "core/memory_pools.h"
#include "core/tensor.h"

namespace ulysses {

class StepProfile;

// torch.optim.AdamW semantics; grad_scale multiplies the gradient first (clipping).
struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;  // 1-based, for the bias corrections
  double grad_scale = 1.0;
};

// One attention call's shape: S tokens, H query and Hkv key/value heads of size d,
// in `documents` documents of which the longest has `longest` tokens.
struct AttentionShape {
  int64_t S = 0, H = 0, Hkv = 0, d = 0;
  int64_t documents = 1, longest = 0;
  int64_t window = 0;  // a sliding window shorter than the longest document (Documents::window); 0: none
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;  // "cpu", "cuda:0"
  virtual DType act_dtype() const = 0;   // F32 on cpu; BF16 (default) or F32 on cuda
  virtual Allocator& allocator() = 0;    // raw device memory behind the device pools

  // Host memory for offloaded activations/checkpoints: page-locked on CUDA (fast copies), plain host on CPU.
  virtual Allocator& offload_allocator() { return host_allocator(); }
  // Host memory for collectives staged through the host (parallel/collectives.h): outside the
  // pools, reused from call to call (pinned and cached on CUDA).
  virtual Allocator& staging_allocator() { return host_allocator(); }
  // The device stream the ops run on (a cudaStream_t on CUDA; nullptr on CPU), so that a
  // communicator can order its own stream against it (see make_nccl_communicator).
  virtual void* native_stream() { return nullptr; }
  // The GPU this backend runs on (CUDA); -1 on the CPU.
  virtual int device_index() const { return -1; }

  // Every tensor the engine makes comes from a pool (core/memory_pools.h), so
  // the step's memory is accounted per pool and can be planned exactly.
  Tensor empty(const Shape& shape, DType dtype, Pool pool = Pool::Working) {
    if (pools().capturing()) pools().label_next(shape_str(shape) + " " + dtype_name(dtype));
    return Tensor::empty(shape, dtype, pools().pool(pool));
  }
  // The pools over allocator() and offload_allocator(), made on first use.
  MemoryPools& pools();
  // Bytes the device pools may still take (free device memory; on the CPU backend,
  // the host's available memory), for refusing a step that cannot fit before it starts.
  virtual size_t device_memory_available();

  // Backs the device pools with one block of device_bytes and the host pools with one
  // of host_bytes, taken now (callers pass the memory plan's peaks), so that a step
  // never calls the device allocator: cudaFree synchronises the whole device and
  // pinned host allocation costs milliseconds. Requests beyond a block fall back to
  // the raw allocators. A no-op where memory is cheap (cpu, the planner).
  virtual void reserve_memory(size_t device_bytes, size_t host_bytes) {
    (void)device_bytes;
    (void)host_bytes;
  }
  // One line on the reservation (sizes, high-water marks, fallbacks); empty when there is none.
  virtual std::string memory_reservation_report() { return ""; }

  // Starts dst <- src (same dtype and element count, host and/or device) on a transfer
  // stream, after all work enqueued so far; both tensors must stay alive and unchanged
  // until wait_transfer(id). Backends without streams copy at once and return 0.
  virtual uint64_t copy_async(Tensor& dst, const Tensor& src) {
    copy(dst, src);
    return 0;
  }
  // Work enqueued after this call runs after transfer `id` completed. Each id is waited once.
  virtual void wait_transfer(uint64_t id) { (void)id; }

  // ---- profiling (see profile_scope.h; the model opens families through ProfileScope) ----
  // Marks go to `profile` from now on; nullptr stops. Off by default, and while off
  // the hooks return at once: no events, no clock reads, no synchronisation.
  virtual void enable_profiling(StepProfile* profile) { (void)profile; }
  // Opens / closes a family of ops on the stream the ops run on. family: a string
  // that outlives the profile (a literal). absorb_nested: see StepProfile::open.
  virtual void profile_push(const char* family, bool absorb_nested) {
    (void)family;
    (void)absorb_nested;
  }
  virtual void profile_pop() {}
  // Feeds the profile every mark made so far; call after synchronize(), between
  // steps, so that resolving device timings never stalls a step.
  virtual void profile_flush() {}

  // ---- ops ----
  // Each op is a non-virtual entry (op_checks.cpp) that checks its arguments once, by the
  // rules below: every tensor defined and held by this backend (index tensors, and zero/copy/
  // sum, may also be host tensors that a device backend copies in), the op's shape relations,
  // and the dtypes: activations and weights in one of the device's data dtypes, statistics,
  // losses and weight gradients in the accumulator dtype. Then it calls the backend's *_impl,
  // which checks only what needs the data (ids in range, document starts) or its own kernels.
  // A failure names the op, the argument, what it is and what was expected.

  void zero(Tensor& t);
  // dst and src: same numel; any of host/device on either side; float dtypes are converted.
  void copy(Tensor& dst, const Tensor& src);
  virtual void synchronize() = 0;
  // synchronize(), calling poll() while the device works (a communicator's progress(): MPI moves
  // nonblocking collectives only inside MPI calls, so a host that waits for the GPU in MPI's
  // stead would leave them standing). Backends without a device queue poll once.
  virtual void synchronize_polling(const std::function<void()>& poll) {
    synchronize();
    poll();
  }

  // ---- ops (see backend/cpu/ops.h for the exact semantics) ----
  void embedding_forward(Tensor& out, const Tensor& ids, const Tensor& table);
  void embedding_backward(Tensor& dtable, const Tensor& dout, const Tensor& ids);
  void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, double eps);
  // accumulate_dx: dx += the gradient (the residual branch's gradient added in the same pass).
  void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& rstd, bool accumulate_dx = false);
  // x/out: [N, H, d]; pos: [N] int32; inv_freq: [d/2] float32 (host or this backend's device).
  void rope_forward(Tensor& out, const Tensor& x, const Tensor& pos, const Tensor& inv_freq);
  void rope_backward(Tensor& dx, const Tensor& dout, const Tensor& pos, const Tensor& inv_freq);
  // docs: the row's documents (backend/documents.h), on this backend's device.
  void attention_forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Documents& docs, double scale);
  void attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& out,
                          const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Documents& docs, double scale);
  // Block-offset form, for ring attention: q, out: [Sq, H, d] are the row's tokens q0 .. q0 + Sq - 1;
  // k, v: [Sk, Hkv, d] its tokens k0 .. k0 + Sk - 1; docs: the whole row's documents (they cover
  // q0 + Sq and k0 + Sk tokens at least); lse: [H, Sq]. Query q0 + i sees key k0 + j when both lie
  // in one document and k0 + j <= q0 + i; a row that sees no key of the block gets out = 0 and
  // lse = -inf. The backward takes the rows' merged out and lse (over all their keys) and writes
  // the block's share of dq: [Sq, H, d] and dk, dv: [Sk, Hkv, d].
  void attention_forward_block(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Documents& docs, int64_t q0, int64_t k0, double scale);
  void attention_backward_block(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& out,
                                const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Documents& docs, int64_t q0, int64_t k0, double scale);
  // Log-sum-exp merge of a block's out: [S, H, d] and lse: [H, S] into the running acc: [S, H, d]
  // and acc_lse: [H, S] of the same rows, both in the accumulator dtype of out's (float32 on
  // CUDA, so bf16 partial results are merged in fp32); acc_lse = -inf marks an empty row.
  void attention_merge(Tensor& acc, Tensor& acc_lse, const Tensor& out, const Tensor& lse);
  // Scratch memory one attention call of this shape takes from the Working pool while it
  // runs (and gives back before it returns): the backend's own answer, so that the memory
  // planner counts what the kernels chosen for the call really take.
  virtual size_t attention_workspace_bytes(const AttentionShape& shape, bool backward) {
    (void)shape;
    (void)backward;
    return 0;
  }
  // The same for the block-offset form (shape.S = Sq, the query rows); backends whose
  // fused-attention library does not take offsets answer for their own kernels.
  virtual size_t attention_block_workspace_bytes(const AttentionShape& shape, bool backward) {
    (void)shape;
    (void)backward;
    return 0;
  }
  // The MLP's gated activation h = act(gate) * up (core/activation.h), and its backward.
  void gated_activation_forward(Tensor& h, const Tensor& gate, const Tensor& up, Activation act);
  void gated_activation_backward(Tensor& dgate, Tensor& dup, const Tensor& dh, const Tensor& gate, const Tensor& up,
                                 Activation act);
  // losses: [N] float32 (or the accumulator dtype; write); dlogits may alias logits.
  void cross_entropy_forward_backward(Tensor& dlogits, Tensor& losses, const Tensor& logits, const Tensor& targets,
                                      double grad_scale);
  // C = alpha * op(A) op(B) + beta * C on 2-D tensors (row-major); C in A's dtype or the accumulator dtype.
  void matmul(Tensor& C, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b, double alpha = 1.0,
              double beta = 0.0);
  // D = op(A) op(B) + R on 2-D tensors, D and R [M, N] in A's dtype (a residual branch's output
  // added to its input): one rounding of the sum, and no separate add pass where the backend
  // reads R in the product's epilogue. R may be D itself.
  void matmul_add(Tensor& D, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b, const Tensor& R);
  // Bias of a linear layer: y: [N, n] += b: [n] on every row (b in y's dtype); its backward
  // db: [n] (the accumulator dtype of dy's) += the sum of dy: [N, n] over the rows.
  void bias_add(Tensor& y, const Tensor& b);
  void bias_backward(Tensor& db, const Tensor& dy);
  void add(Tensor& y, const Tensor& a, const Tensor& b);
  // y += alpha x; y and x of one dtype, or one the other's accumulator dtype.
  void axpy(Tensor& y, const Tensor& x, double alpha);
  // x[i] = counter_uniform(seed, stream, first + i, bound) (core/counter_uniform.h), rounded to x's
  // dtype: the random initialisation made where the weights live, element by element the same as
  // on the host; first: the global index of x's first element (a shard's offset).
  void init_uniform(Tensor& x, uint64_t seed, uint64_t stream, int64_t first, float bound);
  // Sum of all elements in float64 (losses, token counts).
  double sum(const Tensor& x);
  // Sum of squares in float64 (the global gradient norm).
  double sum_squares(const Tensor& x);
  // The sum of sum_squares over all tensors (the global gradient norm): one read-back on
  // devices with streams, not one per tensor.
  double sum_squares_all(const std::vector<const Tensor*>& xs);
  // One AdamW step on fp32 master weights: master, m, v, grad: [n] in the accumulator dtype of
  // weight (float32 on CUDA); weight: the compute copy (a data dtype) written from the new
  // master (may be master itself).
  void adamw_step(Tensor& master, Tensor& m, Tensor& v, Tensor& weight, const Tensor& grad, const AdamWParams& p);
  // dst: [N, Hd, d], src: [N, Hs, d]: dst[:, dst_head0 + i] = (or +=) src[:, src_head0 + i] for i < n_heads.
  // The packing step around the Ulysses all-to-alls.
  void copy_heads(Tensor& dst, int64_t dst_head0, const Tensor& src, int64_t src_head0, int64_t n_heads,
                  bool accumulate);

  // ---- the rules the entries check by ----
  // Whether t lies where this backend's ops read and write it: on device().
  virtual bool holds(const Tensor& t) const { return t.device() == device(); }
  // The dtypes of activations and weights on this device: float32 or float64 on the CPU,
  // float32 or bfloat16 on CUDA.
  bool takes_data_dtype(DType dt) const;
  // The dtype of what an op accumulates from data of dtype dt (rstd, lse, losses, weight
  // gradients, AdamW's master and moments): dt itself on the CPU, float32 on CUDA.
  DType accumulator_dtype(DType dt) const;

 protected:
  // The implementations, called with arguments already checked (see the entries above), declared
  // once in ULYSSES_BACKEND_OPS: (return type, op, parameter types). Each refuses by default
  // through missing_op(), so that a backend without an op still builds and says which op it
  // lacks, and the planner (which overrides missing_op to count only) needs no edit for a new op.
#define ULYSSES_BACKEND_OPS(X)                                                                                   \
  X(void, zero, (Tensor&))                                                                                       \
  X(void, copy, (Tensor&, const Tensor&))                                                                        \
  X(void, embedding_forward, (Tensor&, const Tensor&, const Tensor&))                                            \
  X(void, embedding_backward, (Tensor&, const Tensor&, const Tensor&))                                           \
  X(void, rmsnorm_forward, (Tensor&, Tensor&, const Tensor&, const Tensor&, double))                             \
  X(void, rmsnorm_backward, (Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool)) \
  X(void, rope_forward, (Tensor&, const Tensor&, const Tensor&, const Tensor&))                                  \
  X(void, rope_backward, (Tensor&, const Tensor&, const Tensor&, const Tensor&))                                 \
  X(void, attention_forward, (Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Documents&,   \
                              double))                                                                           \
  X(void, attention_backward, (Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,          \
                               const Tensor&, const Tensor&, const Tensor&, const Documents&, double))          \
  X(void, attention_forward_block, (Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,              \
                                    const Documents&, int64_t, int64_t, double))                                 \
  X(void, attention_backward_block, (Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,    \
                                     const Tensor&, const Tensor&, const Tensor&, const Documents&, int64_t,    \
                                     int64_t, double))                                                           \
  X(void, attention_merge, (Tensor&, Tensor&, const Tensor&, const Tensor&))                                     \
  X(void, gated_activation_forward, (Tensor&, const Tensor&, const Tensor&, Activation))                        \
  X(void, gated_activation_backward, (Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, Activation)) \
  X(void, cross_entropy_forward_backward, (Tensor&, Tensor&, const Tensor&, const Tensor&, double))              \
  X(void, matmul, (Tensor&, const Tensor&, const Tensor&, bool, bool, double, double))                           \
  X(void, bias_add, (Tensor&, const Tensor&))                                                                    \
  X(void, bias_backward, (Tensor&, const Tensor&))                                                               \
  X(void, add, (Tensor&, const Tensor&, const Tensor&))                                                          \
  X(void, axpy, (Tensor&, const Tensor&, double))                                                                \
  X(void, init_uniform, (Tensor&, uint64_t, uint64_t, int64_t, float))                                          \
  X(double, sum, (const Tensor&))                                                                                \
  X(double, sum_squares, (const Tensor&))                                                                        \
  X(void, adamw_step, (Tensor&, Tensor&, Tensor&, Tensor&, const Tensor&, const AdamWParams&))                  \
  X(void, copy_heads, (Tensor&, int64_t, const Tensor&, int64_t, int64_t, bool))
#define ULY_DECLARE_OP_IMPL(ret, op, params) virtual ret op##_impl params;
  ULYSSES_BACKEND_OPS(ULY_DECLARE_OP_IMPL)
#undef ULY_DECLARE_OP_IMPL
  // Ops built from the others by default, overridden where a device does better.
  // matmul_add: R copied into D (unless they are one buffer), then matmul_impl with beta 1.
  virtual void matmul_add_impl(Tensor& D, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b,
                               const Tensor& R);
  // sum_squares_all: the sum of sum_squares_impl over the tensors.
  virtual double sum_squares_all_impl(const std::vector<const Tensor*>& xs);
  // What an op that this backend lacks does: refuse, naming the op and the backend.
  virtual void missing_op(const char* op);

  // For backends that count instead of allocating (the planner).
  void set_pools(std::unique_ptr<MemoryPools> pools) { pools_ = std::move(pools); }

 private:
  std::unique_ptr<MemoryPools> pools_;
};

// The host's available memory (MemAvailable), for the host pools.
size_t host_memory_available();

// lagging_transfers: copy_async() leaves its destination NaN until wait_transfer()
// copies, as a transfer stream that runs late would; tests use it to show that
// every asynchronous copy is waited for before its data is used.
std::unique_ptr<Backend> make_cpu_backend(bool lagging_transfers = false);
// Throws a clear error when the build has no CUDA or no GPU is visible.
// act_dtype: BF16 (training) or F32 (checking against float64 references).
std::unique_ptr<Backend> make_cuda_backend(int device_index, DType act_dtype = DType::BF16);
bool cuda_backend_compiled_in();
// The GPU a process with this node-local rank uses: local_rank % visible GPUs (ranks beyond
// the GPUs share them). With one_per_rank (--comm nccl: NCCL needs a GPU of its own per rank),
// a local rank at or beyond the visible GPUs is an error naming both; `rank_source` is the
// launcher variable the local rank came from, for that message. A rank that sees one GPU
// (CUDA_VISIBLE_DEVICES set per task, e.g. srun --gpus-per-task=1) always takes it.
int cuda_device_for_local_rank(int local_rank, bool one_per_rank = false, const std::string& rank_source = "");
// The GPU's PCI bus id ("0000:19:00.0"): the same physical GPU has the same one in every
// process, whatever CUDA_VISIBLE_DEVICES numbers it; "" in builds without CUDA or on failure.
std::string cuda_device_bus_id(int device_index);
// Whether p points into CUDA device (or managed) memory; false in builds without CUDA.
bool cuda_device_pointer(const void* p);

}  // namespace ulysses
