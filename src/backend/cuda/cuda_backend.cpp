// CudaBackend: device selection, memory, copies, reductions, GEMM, optimizer, profiling marks.
// The per-op dispatch lives in cuda_backend_ops.cpp.
#include "backend/cuda/cuda_backend.h"

#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backend/cuda/adamw.h"
#include "backend/cuda/check.h"
#include "backend/cuda/cuda_allocator.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/hopper_attention.h"
#include "backend/cuda/reduce.h"
#include "backend/cuda/dispatch.h"
#include "backend/device_arch.h"
#include "backend/op_checks.h"
#include "core/error.h"
#include "core/step_profile.h"

namespace ulysses {
namespace cuda {

namespace {

// Converts n elements between float dtypes on the host (through float32, or straight to float64).
void host_convert(void* dst, DType dst_type, const void* src, DType src_type, size_t n) {
  if (dst_type == src_type) {
    std::memcpy(dst, src, n * dtype_size(dst_type));
  } else if (dst_type == DType::F64) {
    convert_to_f64(static_cast<double*>(dst), src, src_type, n);
  } else {
    std::vector<float> tmp(n);
    convert_to_f32(tmp.data(), src, src_type, n);
    convert_from_f32(dst, dst_type, tmp.data(), n);
  }
}

int select_device(int device_index) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    ULY_FAIL("no CUDA device visible (cudaGetDeviceCount: " << cudaGetErrorName(err) << ": "
                                                            << cudaGetErrorString(err) << "); run with --backend cpu");
  }
  ULY_CHECK(count > 0, "no CUDA device visible (cudaGetDeviceCount: 0 devices); run with --backend cpu");
  ULY_CHECK(device_index >= 0 && device_index < count,
            "CUDA device index " << device_index << " is out of range: " << count << " device(s) visible");
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_index));
  const std::string unsupported = unsupported_gpu_reason(device_index, prop.name, prop.major, prop.minor);
  ULY_CHECK(unsupported.empty(), unsupported);
  CUDA_CHECK(cudaSetDevice(device_index));
  return device_index;
}

}  // namespace

CudaBackend::CudaBackend(int device_index, DType act_dtype)
    : device_index_(select_device(device_index)),
      act_dtype_(act_dtype),
      device_arena_(std::make_unique<ArenaAllocator>(device_allocator(device_index_),
                                                     "cuda:" + std::to_string(device_index_))),
      host_arena_(std::make_unique<ArenaAllocator>(pinned_host_allocator(), "pinned-host")),
      staging_(std::make_unique<CachingAllocator>(pinned_host_allocator(), "pinned-staging")) {
  ULY_CHECK(act_dtype == DType::BF16 || act_dtype == DType::F32,
            "the CUDA backend computes in bfloat16 or float32, not " << dtype_name(act_dtype));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  try {
    CUDA_CHECK(cudaStreamCreateWithFlags(&transfer_stream_, cudaStreamNonBlocking));
    gemm_ = std::make_unique<CublasLtGemm>(allocator());
    scalar_ = empty({1}, DType::F64);
    if (const char* a = std::getenv("ULYSSES_ATTENTION")) {
      const std::string v = a;
      ULY_CHECK(v == "auto" || v == "cudnn" || v == "own" || v == "hopper",
                "ULYSSES_ATTENTION=" << v << " is not one of auto (cuDNN where it runs, our kernels elsewhere), "
                                     << "cudnn (cuDNN or an error), own (our kernels) and hopper (the forward on "
                                     << "our sm_90a wgmma kernel where it runs, otherwise as auto)");
      attention_kernels_ = v == "cudnn"    ? AttentionKernels::Cudnn
                           : v == "own"    ? AttentionKernels::Own
                           : v == "hopper" ? AttentionKernels::Hopper
                                           : AttentionKernels::Auto;
    }
    // A bad ULYSSES_HOPPER_VARIANT fails here rather than at the first forward.
    if (attention_kernels_ == AttentionKernels::Hopper) hopper_forward_ = hopper_attention_variant();
    if (const char* b = std::getenv("ULYSSES_HOPPER_BWD")) {
      const std::string v = b;
      ULY_CHECK(v != "1", "ULYSSES_HOPPER_BWD=1: that variant of the Hopper backward was removed (2026-12-07; "
                          "variant 2 supersedes it); ask for 2 to 7 or 9 (6 the fastest at d 128, 7 at d 64)");
      ULY_CHECK(v.empty() || (v.size() == 1 && (v[0] == '0' || (v[0] >= '2' && v[0] <= '7') || v[0] == '9')),
                "ULYSSES_HOPPER_BWD=" << v << " is not 0, 2 to 7 or 9 (2 to 7, 9: with ULYSSES_ATTENTION=hopper, the "
                                      << "backward on that variant of our sm_90a wgmma kernel too)");
      hopper_backward_ = v.empty() ? 0 : v[0] - '0';
    }
    if (const char* d = std::getenv("ULYSSES_HOPPER_DETERMINISTIC")) {
      const std::string v = d;
      ULY_CHECK(v == "0" || v == "1" || v.empty(),
                "ULYSSES_HOPPER_DETERMINISTIC=" << v << " is not 0 or 1 (1: the Hopper backward adds dQ's partial "
                                                << "sums in a fixed order, bitwise reproducible)");
      hopper_deterministic_ = v == "1";
      ULY_CHECK(!hopper_deterministic_ || hopper_backward_ == 3,
                "ULYSSES_HOPPER_DETERMINISTIC=1 needs ULYSSES_HOPPER_BWD=3 (the deterministic dQ order is the "
                "Hopper backward variant 3's), not ULYSSES_HOPPER_BWD="
                    << hopper_backward_);
    }
  } catch (...) {
    gemm_.reset();
    if (transfer_stream_ != nullptr) cudaStreamDestroy(transfer_stream_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

CudaBackend::~CudaBackend() {
  // Work still queued may use memory that the members below free.
  cudaStreamSynchronize(transfer_stream_);
  cudaStreamSynchronize(stream_);
  scalar_ = Tensor();
  cudnn_.reset();
  gemm_.reset();
  drop_profile_marks();
  for (cudaEvent_t e : spare_timing_events_) cudaEventDestroy(e);
  for (auto& [id, e] : transfers_) cudaEventDestroy(e);
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  cudaStreamDestroy(transfer_stream_);
  cudaStreamDestroy(stream_);
}

Allocator& CudaBackend::allocator() { return *device_arena_; }
Allocator& CudaBackend::offload_allocator() { return *host_arena_; }

void CudaBackend::reserve_memory(size_t device_bytes, size_t host_bytes) {
  synchronize();
  // Slack for the arena's 256-byte rounding and for fragmentation; capped by what
  // the device has, less room for what grows outside the pools (cuBLASLt, NCCL).
  constexpr size_t kHeadroom = size_t{512} << 20;
  size_t want = device_bytes + std::max<size_t>(size_t{64} << 20, device_bytes / 50);
  const size_t free_b = device_memory_available();
  if (want + kHeadroom > free_b) want = free_b > kHeadroom ? free_b - kHeadroom : 0;
  if (want > 0) device_arena_->reserve(want);
  if (host_bytes > 0) host_arena_->reserve(host_bytes + std::max<size_t>(size_t{64} << 20, host_bytes / 50));
}

std::string CudaBackend::memory_reservation_report() {
  auto line = [](const ArenaAllocator& a) {
    const ArenaAllocator::Stats s = a.stats();
    return a.name() + " " + format_bytes(s.reserved) + " reserved, " + format_bytes(s.high_water) +
           " high water, " + std::to_string(s.fallbacks) + " fallbacks (" + format_bytes(s.fallback_bytes) + ")";
  };
  std::string r;
  if (device_arena_->stats().reserved > 0) r = "memory arena: " + line(*device_arena_);
  if (host_arena_->stats().reserved > 0) r += (r.empty() ? "memory arena: " : "; ") + line(*host_arena_);
  return r;
}

cudaEvent_t CudaBackend::take_event() {
  if (!spare_events_.empty()) {
    cudaEvent_t e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

uint64_t CudaBackend::copy_async(Tensor& dst, const Tensor& src) {
  ULY_CHECK(dst.defined() && src.defined(), "copy_async: undefined tensor");
  ULY_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel(),
            "copy_async: " << dst.describe() << " <- " << src.describe()
                           << ": asynchronous copies take one dtype and one element count");
  if (dst.numel() == 0) return 0;
  if (dst.device() == Device::CPU && src.device() == Device::CPU) {
    copy(dst, src);
    return 0;
  }
  // The transfer stream starts after everything enqueued so far (src is written, dst's old readers are done).
  cudaEvent_t ready = take_event();
  CUDA_CHECK(cudaEventRecord(ready, stream_));
  CUDA_CHECK(cudaStreamWaitEvent(transfer_stream_, ready, 0));
  spare_events_.push_back(ready);  // the wait has captured it; it may be recorded again
  CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), dst.nbytes(), cudaMemcpyDefault, transfer_stream_));
  cudaEvent_t done = take_event();
  CUDA_CHECK(cudaEventRecord(done, transfer_stream_));
  const uint64_t id = next_transfer_++;
  transfers_[id] = done;
  return id;
}

void CudaBackend::wait_transfer(uint64_t id) {
  if (id == 0) return;
  auto it = transfers_.find(id);
  ULY_CHECK(it != transfers_.end(), "wait_transfer: transfer " << id << " is unknown or was already waited for");
  CUDA_CHECK(cudaStreamWaitEvent(stream_, it->second, 0));
  spare_events_.push_back(it->second);
  transfers_.erase(it);
}

void CudaBackend::enable_profiling(StepProfile* profile) {
  if (profile != profile_) drop_profile_marks();
  profile_ = profile;
}

void CudaBackend::profile_push(const char* family, bool absorb_nested) {
  if (profile_ == nullptr) return;
  nvtxRangePushA(family);
  profile_mark(family, absorb_nested);
}

void CudaBackend::profile_pop() {
  if (profile_ == nullptr) return;
  profile_mark(nullptr, false);
  nvtxRangePop();
}

void CudaBackend::profile_mark(const char* family, bool absorb_nested) {
  cudaEvent_t e = nullptr;
  if (spare_timing_events_.empty()) {
    CUDA_CHECK(cudaEventCreate(&e));
  } else {
    e = spare_timing_events_.back();
    spare_timing_events_.pop_back();
  }
  profile_marks_.push_back(ProfileMark{e, family, absorb_nested});
  CUDA_CHECK(cudaEventRecord(e, stream_));
}

// The time between two consecutive marks is what the stream spent under the
// family innermost between them; gaps where the stream idled (the host was
// busy, or waited on another rank) belong to that family too, or to "other".
void CudaBackend::profile_flush() {
  if (profile_ == nullptr || profile_marks_.empty()) return;
  CUDA_CHECK(cudaEventSynchronize(profile_marks_.back().event));
  for (const ProfileMark& m : profile_marks_) {
    if (profile_last_ != nullptr) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, profile_last_, m.event));
      profile_clock_ += 1e-3 * ms;
      spare_timing_events_.push_back(profile_last_);
    }
    profile_last_ = m.event;
    if (m.family != nullptr)
      profile_->open(m.family, m.absorb_nested, profile_clock_);
    else
      profile_->close(profile_clock_);
  }
  profile_marks_.clear();
}

void CudaBackend::drop_profile_marks() {
  // Destroyed rather than reused: a dropped mark may still be pending on the stream.
  for (const ProfileMark& m : profile_marks_) cudaEventDestroy(m.event);
  profile_marks_.clear();
  if (profile_last_ != nullptr) cudaEventDestroy(profile_last_);
  profile_last_ = nullptr;
}

void CudaBackend::synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(transfer_stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::synchronize_polling(const std::function<void()>& poll) {
  cudaEvent_t done[2] = {nullptr, nullptr};
  cudaStream_t streams[2] = {transfer_stream_, stream_};
  try {
    for (int i = 0; i < 2; ++i) {
      CUDA_CHECK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
      CUDA_CHECK(cudaEventRecord(done[i], streams[i]));
    }
    for (int i = 0; i < 2; ++i) {
      for (;;) {
        const cudaError_t e = cudaEventQuery(done[i]);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
        poll();
      }
    }
  } catch (...) {
    for (cudaEvent_t e : done)
      if (e != nullptr) cudaEventDestroy(e);
    throw;
  }
  for (cudaEvent_t e : done) cudaEventDestroy(e);
  poll();
}

size_t CudaBackend::device_memory_available() {
  CUDA_CHECK(cudaSetDevice(device_index_));
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return free_b;
}

void CudaBackend::zero_impl(Tensor& t) {
  if (t.numel() == 0) return;
  if (t.device() == Device::CUDA) CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream_));
  else t.zero_();
}

void CudaBackend::copy_impl(Tensor& dst, const Tensor& src) {
  const size_t n = static_cast<size_t>(dst.numel());
  if (n == 0) return;
  const DType dt = dst.dtype(), st = src.dtype();
  const bool dst_dev = dst.device() == Device::CUDA, src_dev = src.device() == Device::CUDA;
  if (!dst_dev && !src_dev) {
    host_convert(dst.raw(), dt, src.raw(), st, n);
    return;
  }
  if (dt == st) {
    const cudaMemcpyKind kind = dst_dev && src_dev ? cudaMemcpyDeviceToDevice
                                : dst_dev          ? cudaMemcpyHostToDevice
                                                   : cudaMemcpyDeviceToHost;
    CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), dst.nbytes(), kind, stream_));
    if (kind != cudaMemcpyDeviceToDevice) CUDA_CHECK(cudaStreamSynchronize(stream_));
    return;
  }
  if (dst_dev && src_dev) {
    if (dt == DType::BF16 && st == DType::F32) {
      cast(ptr<__nv_bfloat16>(dst), ptr<const float>(src), static_cast<int64_t>(n), stream_);
      return;
    }
    if (dt == DType::F32 && st == DType::BF16) {
      cast(ptr<float>(dst), ptr<const __nv_bfloat16>(src), static_cast<int64_t>(n), stream_);
      return;
    }
  }
  // Any other conversion: convert on the host, moving each side in its own dtype.
  std::vector<char> src_host;
  const void* sp = src.raw();
  if (src_dev) {
    src_host.resize(src.nbytes());
    CUDA_CHECK(cudaMemcpyAsync(src_host.data(), src.raw(), src.nbytes(), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    sp = src_host.data();
  }
  if (dst_dev) {
    std::vector<char> dst_host(dst.nbytes());
    host_convert(dst_host.data(), dt, sp, st, n);
    CUDA_CHECK(cudaMemcpyAsync(dst.raw(), dst_host.data(), dst.nbytes(), cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  } else {
    host_convert(dst.raw(), dt, sp, st, n);
  }
}

double CudaBackend::read_back_scalar() {
  double v = 0;
  CUDA_CHECK(cudaMemcpyAsync(&v, scalar_.raw(), sizeof(double), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return v;
}

double CudaBackend::sum_impl(const Tensor& x) {
  const int64_t n = x.numel();
  if (x.device() == Device::CPU) {
    double s = 0;
    if (is_float(x.dtype())) {
      std::vector<double> v(n);
      convert_to_f64(v.data(), x.raw(), x.dtype(), n);
      for (double e : v) s += e;
    } else if (x.dtype() == DType::I32) {
      for (int64_t i = 0; i < n; ++i) s += static_cast<const int32_t*>(x.raw())[i];
    } else if (x.dtype() == DType::I64) {
      for (int64_t i = 0; i < n; ++i) s += static_cast<double>(static_cast<const int64_t*>(x.raw())[i]);
    } else {
      ULY_FAIL("sum: unsupported dtype " << x.describe());
    }
    return s;
  }
  CUDA_CHECK(cudaMemsetAsync(scalar_.raw(), 0, sizeof(double), stream_));
  double* acc = ptr<double>(scalar_);
  switch (x.dtype()) {
    case DType::F32: sum_accumulate(acc, ptr<const float>(x), n, stream_); break;
    case DType::BF16: sum_accumulate(acc, ptr<const __nv_bfloat16>(x), n, stream_); break;
    case DType::I32: sum_accumulate(acc, ptr<const int32_t>(x), n, stream_); break;
    default: ULY_FAIL("sum: unsupported dtype on the device: " << x.describe() << " (float32, bfloat16 or int32)");
  }
  return read_back_scalar();
}

double CudaBackend::sum_squares_all_impl(const std::vector<const Tensor*>& xs) {
  CUDA_CHECK(cudaMemsetAsync(scalar_.raw(), 0, sizeof(double), stream_));
  double* acc = ptr<double>(scalar_);
  for (const Tensor* t : xs) {
    if (t->dtype() == DType::F32) sum_squares_accumulate(acc, ptr<const float>(*t), t->numel(), stream_);
    else sum_squares_accumulate(acc, ptr<const __nv_bfloat16>(*t), t->numel(), stream_);
  }
  return read_back_scalar();
}

double CudaBackend::sum_squares_impl(const Tensor& x) {
  if (x.device() == Device::CPU) {
    std::vector<double> v(static_cast<size_t>(x.numel()));
    convert_to_f64(v.data(), x.raw(), x.dtype(), v.size());
    double s = 0;
    for (double e : v) s += e * e;
    return s;
  }
  return sum_squares_all_impl({&x});
}

void CudaBackend::scale(Tensor& x, double alpha) {
  OpCheck(*this, "scale").data(x, "x");
  dispatch_act(x.dtype(), "scale", [&]<class T>() { cuda::scale(ptr<T>(x), alpha, x.numel(), stream_); });
}

void CudaBackend::adamw_step_impl(Tensor& master, Tensor& m, Tensor& v, Tensor& weight, const Tensor& grad,
                                  const AdamWParams& p) {
  const int64_t n = master.numel();
  dispatch_act(weight.dtype(), "adamw_step", [&]<class W>() {
    dispatch_act(grad.dtype(), "adamw_step", [&]<class G>() {
      cuda::adamw_step<W, G>(ptr<float>(master), ptr<float>(m), ptr<float>(v), ptr<W>(weight), ptr<const G>(grad),
                             n, p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.step, p.grad_scale, stream_);
    });
  });
}

namespace {
bool overlaps(const Tensor& a, const Tensor& b) {
  const auto a0 = reinterpret_cast<uintptr_t>(a.raw()), b0 = reinterpret_cast<uintptr_t>(b.raw());
  return a.nbytes() > 0 && b.nbytes() > 0 && a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}
}  // namespace

void CudaBackend::matmul_impl(Tensor& C, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b, double alpha,
                              double beta) {
  const int64_t M = C.dim(0), N = C.dim(1), K = trans_a ? A.dim(0) : A.dim(1);
  ULY_CHECK(!overlaps(C, A) && !overlaps(C, B), "matmul: C overlaps A or B in memory; use a separate output");
  gemm_->matmul(C.raw(), C.dtype(), A.raw(), B.raw(), A.dtype(), M, N, K, trans_a, trans_b, alpha, beta, stream_);
}

void CudaBackend::matmul_add_impl(Tensor& D, const Tensor& A, const Tensor& B, bool trans_a, bool trans_b,
                                  const Tensor& R) {
  const int64_t M = D.dim(0), N = D.dim(1), K = trans_a ? A.dim(0) : A.dim(1);
  ULY_CHECK(!overlaps(D, A) && !overlaps(D, B), "matmul_add: D overlaps A or B in memory; use a separate output");
  ULY_CHECK(R.raw() == D.raw() || !overlaps(D, R), "matmul_add: R partly overlaps D (it may be D itself)");
  // cuBLASLt's epilogue reads R as the C of D = op(A) op(B) + 1 * C.
  gemm_->matmul(D.raw(), D.dtype(), A.raw(), B.raw(), A.dtype(), M, N, K, trans_a, trans_b, 1.0, 1.0, stream_,
                R.raw());
}

}  // namespace cuda

bool cuda_backend_compiled_in() { return true; }

bool cuda_device_pointer(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();  // plain host memory on old runtimes
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

std::string cuda_device_bus_id(int device_index) {
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, sizeof(id), device_index) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return id;
}

int cuda_device_for_local_rank(int local_rank, bool one_per_rank, const std::string& rank_source) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= 0) {
    cudaGetLastError();
    return local_rank;  // make_cuda_backend reports the missing GPU
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  // One visible GPU under a per-task CUDA_VISIBLE_DEVICES is this rank's own (srun --gpus-per-task=1);
  // the one-GPU-per-rank check of --comm nccl (parallel/step_communicator.cpp) still compares ranks.
  const bool bound_per_task = count == 1 && visible != nullptr && *visible != '\0';
  ULY_CHECK(!one_per_rank || local_rank < count || bound_per_task,
            "node-local rank " << local_rank << (rank_source.empty() ? "" : " (" + rank_source + ")")
                               << " but this process sees only " << count << " GPU" << (count == 1 ? "" : "s")
                               << " (CUDA_VISIBLE_DEVICES=" << (visible ? visible : "unset")
                               << "): --comm nccl needs one GPU per rank, so this node runs more ranks than it has "
                                  "GPUs; start at most " << count << " rank" << (count == 1 ? "" : "s")
                               << " per node (torchrun --nproc-per-node, srun --ntasks-per-node, mpirun --map-by "
                                  "ppr:N:node), or use --comm mpi, which lets ranks share a GPU");
  // Ranks beyond the visible GPUs share them round-robin (several ranks on one
  // GPU is how a single-GPU machine runs sequence parallelism).
  return local_rank % count;
}

std::unique_ptr<Backend> make_cuda_backend(int device_index, DType act_dtype) {
  return std::make_unique<cuda::CudaBackend>(device_index, act_dtype);
}

}  // namespace ulysses
