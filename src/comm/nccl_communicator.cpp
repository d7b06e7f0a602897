// The Communicator interface on NCCL, for device buffers. Collectives run on
// the communicator's own stream, ordered by events against the compute stream
// (see nccl_communicator.h); the asynchronous calls let the compute stream run on
// until the result is needed, so communication overlaps independent compute.
#include "comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <sstream>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "core/error.h"

namespace ulysses {
namespace {

// NCCL results (CUDA's: core/cuda_check.h): a failure throws ulysses::Error naming the
// call, NCCL's error string and file:line.
[[noreturn]] void fail_nccl(int result, const char* call, const char* file, int line) {
  std::ostringstream os;
  os << "NCCL call failed: " << call << " -> " << ncclGetErrorString(static_cast<ncclResult_t>(result))
     << " (code " << result << "); set NCCL_DEBUG=WARN for details";
  throw Error(os.str(), file, line);
}

#define NCCL_CHECK(call)                                                                    \
  do {                                                                                      \
    const int uly_nccl_res_ = static_cast<int>(call);                                       \
    if (uly_nccl_res_ != 0) ::ulysses::fail_nccl(uly_nccl_res_, #call, __FILE__, __LINE__); \
  } while (0)

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::U8: return ncclUint8;
  }
  ULY_FAIL("nccl: unsupported dtype " << static_cast<int>(t));
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Max ? ncclMax : ncclSum; }

const char* at(const void* p, size_t elements, DType t) {
  return static_cast<const char*>(p) + elements * dtype_size(t);
}
char* at(void* p, size_t elements, DType t) { return static_cast<char*>(p) + elements * dtype_size(t); }

// NCCL calls queued on the communicator's stream, with an event recorded after them.
// With a compute stream, wait() makes it wait for the event (the host goes on);
// without one, wait() blocks the host until the event.
class NcclRequest final : public CommRequest {
 public:
  NcclRequest(cudaStream_t comm_stream, cudaStream_t compute) : compute_(compute) {
    CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    const cudaError_t err = cudaEventRecord(done_, comm_stream);
    if (err != cudaSuccess) {
      cudaEventDestroy(done_);
      CUDA_CHECK(err);
    }
  }
  ~NcclRequest() override {
    try {
      wait();
    } catch (const std::exception&) {
      // A destructor cannot throw; a failure here follows another one already on its way up.
    }
    cudaEventDestroy(done_);
  }
  void wait() override {
    if (waited_) return;
    waited_ = true;
    if (compute_ != nullptr)
      CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
    else
      CUDA_CHECK(cudaEventSynchronize(done_));
  }

 private:
  cudaStream_t compute_;
  cudaEvent_t done_ = nullptr;
  bool waited_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int device, cudaStream_t compute, Communicator* bootstrap)
      : comm_(comm), device_(device), compute_(compute), bootstrap_(bootstrap) {
    try {
      NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
      NCCL_CHECK(ncclCommCount(comm_, &size_));
      CUDA_CHECK(cudaSetDevice(device_));
      CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
      CUDA_CHECK(cudaMalloc(&barrier_buf_, sizeof(int32_t)));
      CUDA_CHECK(cudaMemset(barrier_buf_, 0, sizeof(int32_t)));
    } catch (...) {
      release();
      throw;
    }
  }
  ~NcclCommunicator() override { release(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  bool device_buffers() const override { return true; }
  bool reduces_bf16(const void*) const override { return true; }

  void all_to_all(const void* send, void* recv, size_t count, DType dtype) override {
    if (count == 0) return;
    const ncclDataType_t t = nccl_type(dtype);
    run([&] {
      NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < size_; ++r) {
        NCCL_CHECK(ncclSend(at(send, r * count, dtype), count, t, r, comm_, stream_));
        NCCL_CHECK(ncclRecv(at(recv, r * count, dtype), count, t, r, comm_, stream_));
      }
      NCCL_CHECK(ncclGroupEnd());
    });
  }

  void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                    const size_t* recv_counts, const size_t* recv_displs, DType dtype) override {
    const ncclDataType_t t = nccl_type(dtype);
    run([&] {
      NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < size_; ++r) {  // a zero count is skipped on both sides (the counts must agree)
        if (send_counts[r] > 0)
          NCCL_CHECK(ncclSend(at(send, send_displs[r], dtype), send_counts[r], t, r, comm_, stream_));
        if (recv_counts[r] > 0)
          NCCL_CHECK(ncclRecv(at(recv, recv_displs[r], dtype), recv_counts[r], t, r, comm_, stream_));
      }
      NCCL_CHECK(ncclGroupEnd());
    });
  }

  void all_gather(const void* send, void* recv, size_t count, DType dtype) override {
    all_gather_async(send, recv, count, dtype)->wait();
  }
  CommHandle all_gather_async(const void* send, void* recv, size_t count, DType dtype) override {
    if (count == 0) return completed_request();
    return enqueue([&] { NCCL_CHECK(ncclAllGather(send, recv, count, nccl_type(dtype), comm_, stream_)); });
  }

  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    reduce_scatter_async(send, recv, count, dtype, op)->wait();
  }
  CommHandle reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    if (count == 0) return completed_request();
    return enqueue(
        [&] { NCCL_CHECK(ncclReduceScatter(send, recv, count, nccl_type(dtype), nccl_op(op), comm_, stream_)); });
  }

  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    all_reduce_async(send, recv, count, dtype, op)->wait();
  }
  CommHandle all_reduce_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    if (count == 0) return completed_request();
    return enqueue(
        [&] { NCCL_CHECK(ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), comm_, stream_)); });
  }

  void broadcast(void* buf, size_t count, DType dtype, int root) override {
    ULY_CHECK(root >= 0 && root < size_, "nccl broadcast: root " << root << " outside [0, " << size_ << ")");
    if (count == 0) return;
    run([&] { NCCL_CHECK(ncclBroadcast(buf, buf, count, nccl_type(dtype), root, comm_, stream_)); });
  }

  // NCCL has no tags: messages between one pair of ranks match in call order.
  void send(const void* buf, size_t count, DType dtype, int peer, int /*tag*/) override {
    check_peer(peer, "send");
    run([&] { NCCL_CHECK(ncclSend(buf, count, nccl_type(dtype), peer, comm_, stream_)); });
  }
  void recv(void* buf, size_t count, DType dtype, int peer, int /*tag*/) override {
    check_peer(peer, "recv");
    run([&] { NCCL_CHECK(ncclRecv(buf, count, nccl_type(dtype), peer, comm_, stream_)); });
  }

  void sendrecv(const void* send, size_t send_count, int dest, void* recv, size_t recv_count, int source,
                DType dtype, int tag) override {
    sendrecv_async(send, send_count, dest, recv, recv_count, source, dtype, tag)->wait();
  }
  CommHandle sendrecv_async(const void* send, size_t send_count, int dest, void* recv, size_t recv_count, int source,
                            DType dtype, int /*tag*/) override {
    check_peer(dest, "sendrecv");
    check_peer(source, "sendrecv");
    const ncclDataType_t t = nccl_type(dtype);
    return enqueue([&] {
      NCCL_CHECK(ncclGroupStart());
      if (send_count > 0) NCCL_CHECK(ncclSend(send, send_count, t, dest, comm_, stream_));
      if (recv_count > 0) NCCL_CHECK(ncclRecv(recv, recv_count, t, source, comm_, stream_));
      NCCL_CHECK(ncclGroupEnd());
    });
  }

  // Host-blocking: returns when every rank has reached it (and this rank's queued work is done).
  void barrier() override {
    run([&] { NCCL_CHECK(ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclInt32, ncclSum, comm_, stream_)); });
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    ULY_CHECK(color >= 0, "nccl split: color must be >= 0, got " << color);
    CUDA_CHECK(cudaSetDevice(device_));
    ncclComm_t sub = nullptr;
    NCCL_CHECK(ncclCommSplit(comm_, color, key, &sub, nullptr));
    ULY_CHECK(sub != nullptr, "nccl split: ncclCommSplit returned no communicator for color " << color);
    return std::make_unique<NcclCommunicator>(sub, device_, compute_, bootstrap_);
  }

  [[noreturn]] void abort(int exit_code) override {
    if (comm_ != nullptr) ncclCommAbort(comm_);  // unblocks our kernels; the result does not matter now
    comm_ = nullptr;
    if (bootstrap_ != nullptr) bootstrap_->abort(exit_code);
    std::_Exit(exit_code);
  }

 private:
  void check_peer(int peer, const char* what) const {
    ULY_CHECK(peer >= 0 && peer < size_, "nccl " << what << ": peer " << peer << " outside [0, " << size_ << ")");
  }

  // Queues NCCL calls on stream_ after the compute stream's queued work (without a
  // compute stream: after the whole device's), returning the request that waits for them.
  template <class F>
  CommHandle enqueue(F&& calls) {
    CUDA_CHECK(cudaSetDevice(device_));
    if (compute_ != nullptr) {
      CUDA_CHECK(cudaEventRecord(ready_, compute_));
      CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
    } else {
      CUDA_CHECK(cudaDeviceSynchronize());
    }
    calls();
    return std::make_unique<NcclRequest>(stream_, compute_);
  }
  // A blocking call: queued, then waited for (see make_nccl_communicator).
  template <class F>
  void run(F&& calls) {
    enqueue(std::forward<F>(calls))->wait();
  }

  void release() noexcept {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    comm_ = nullptr;
    if (barrier_buf_ != nullptr) cudaFree(barrier_buf_);
    barrier_buf_ = nullptr;
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    ready_ = nullptr;
    stream_ = nullptr;
  }

  ncclComm_t comm_ = nullptr;
  int device_;
  cudaStream_t compute_;
  Communicator* bootstrap_;
  int rank_ = 0, size_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  void* barrier_buf_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device_index, void* compute_stream) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) cudaGetLastError();
  ULY_CHECK(err == cudaSuccess && count > 0,
            "NCCL communicator: no CUDA device visible (cudaGetDeviceCount: "
                << (err == cudaSuccess ? "0 devices" : cudaGetErrorString(err)) << "); use --comm mpi");
  ULY_CHECK(device_index >= 0 && device_index < count,
            "NCCL communicator: device index " << device_index << " out of range: " << count << " visible");
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  bootstrap.broadcast(&id, sizeof(id), DType::U8, 0);
  CUDA_CHECK(cudaSetDevice(device_index));
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()));
  // On failure the constructor releases comm itself.
  return std::make_unique<NcclCommunicator>(comm, device_index, static_cast<cudaStream_t>(compute_stream), &bootstrap);
}

}  // namespace ulysses
