// The MPI communicator: each collective maps onto its MPI counterpart.
//
// MPI counts and displacements are int. Calls whose counts exceed mpi_max_count()
// (INT_MAX unless a test lowers it) are split:
//  - all_reduce, broadcast, send, recv: consecutive slices of the buffer;
//  - all_to_all, all_gather: rounds over slices of every block, each round one
//    collective on a derived type "c elements with the extent of a whole block";
//  - reduce_scatter: rounds that pack slice k of every block into a bounded
//    scratch buffer (MPI's built-in ops are defined on predefined types only);
//  - all_to_all_v: one call whose unit is a contiguous type of u elements, u
//    dividing every count and displacement. Each rank picks u alone: MPI matches
//    messages by type signature (a sequence of basic elements), so ranks may use
//    different units. Buffers with no such u throw (never in practice: counts
//    there are multiples of tokens × heads × head_dim).
// The decision to split depends only on arguments that a collective requires to
// be equal on every rank (count, dtype), so all ranks take the same path.
//
// Asynchronous calls: all_reduce_async is MPI_Iallreduce per slice; sendrecv_async
// posts MPI_Irecv then MPI_Isend per slice (the blocking sendrecv waits on it);
// all_gather_async is MPI_Iallgather and reduce_scatter_async MPI_Ireduce_scatter_block
// when the call fits one MPI call. Beyond that they run the blocking split rounds
// above and return a completed request: the rounds of reduce_scatter share one
// scratch buffer, so they cannot be in flight together, and calls that large (over
// INT_MAX elements outside tests) are too rare to be worth overlapping. The
// request's wait() is MPI_Waitall plus the check of each receive's element count.
#include "comm/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "core/error.h"

namespace ulysses {
namespace {

size_t g_max_count = INT_MAX;
MPI_Comm g_failure_channel = MPI_COMM_NULL;
// How long a failing rank waits for the others to fail too before ending the job.
constexpr double kFailTogetherSeconds = 3.0;

// Returns when every rank has entered the failure barrier (they all failed) or
// after kFailTogetherSeconds (some did not: MPI_Abort must end them).
void wait_for_failing_peers() {
  if (g_failure_channel == MPI_COMM_NULL) return;
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Ibarrier(g_failure_channel, &request) != MPI_SUCCESS) return;
  const double deadline = MPI_Wtime() + kFailTogetherSeconds;
  int done = 0;
  while (!done && MPI_Wtime() < deadline) {
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}
constexpr size_t kScratchBytes = size_t{256} << 20;  // reduce_scatter split path

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::U8: return MPI_UINT8_T;
    case DType::BF16:
    case DType::F16: return MPI_UINT16_T;  // moved as raw 16-bit words; never reduced
  }
  ULY_FAIL("unknown dtype " << static_cast<int>(t));
}

MPI_Datatype reducible_type(DType t, const char* call) {
  ULY_CHECK(t != DType::BF16 && t != DType::F16,
            call << " on " << dtype_name(t) << ": MPI has no " << dtype_name(t)
                 << " arithmetic, so the MPI communicator cannot reduce it; convert to float32 (or reduce on "
                    "the GPU with --comm nccl)");
  return mpi_type(t);
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Sum ? MPI_SUM : MPI_MAX; }
const char* op_name(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : "max"; }

// A committed derived datatype, freed on scope exit.
class TypeHandle {
 public:
  TypeHandle() = default;
  ~TypeHandle() {
    if (t_ != MPI_DATATYPE_NULL) MPI_Type_free(&t_);
  }
  TypeHandle(const TypeHandle&) = delete;
  TypeHandle& operator=(const TypeHandle&) = delete;
  // `elems` contiguous elements of `base`; the next one starts `extent_bytes` later
  // (0: right after the last element).
  void make(MPI_Datatype base, size_t elems, size_t extent_bytes) {
    ULY_CHECK(elems <= static_cast<size_t>(INT_MAX), "derived type of " << elems << " elements exceeds INT_MAX");
    MPI_Datatype contig = MPI_DATATYPE_NULL;
    ULY_MPI_CHECK(MPI_Type_contiguous(static_cast<int>(elems), base, &contig), "MPI_Type_contiguous(" << elems << ")");
    if (extent_bytes == 0) {
      t_ = contig;
    } else {
      const int rc = MPI_Type_create_resized(contig, 0, static_cast<MPI_Aint>(extent_bytes), &t_);
      MPI_Type_free(&contig);
      ULY_MPI_CHECK(rc, "MPI_Type_create_resized(extent " << extent_bytes << " bytes)");
    }
    ULY_MPI_CHECK(MPI_Type_commit(&t_), "MPI_Type_commit");
  }
  MPI_Datatype get() const { return t_; }

 private:
  MPI_Datatype t_ = MPI_DATATYPE_NULL;
};

const char* cptr(const void* p, size_t off) { return static_cast<const char*>(p) + off; }
char* ptr(void* p, size_t off) { return static_cast<char*>(p) + off; }

// MPI forbids aliased send and receive buffers except through MPI_IN_PLACE.
void check_disjoint(const char* call, const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return;
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  ULY_CHECK(pa + a_bytes <= pb || pb + b_bytes <= pa,
            call << ": the send and receive buffers overlap without being the in-place form; use separate "
                    "buffers or pass the same pointer for an in-place call");
}

// The smallest unit u (in elements) that divides every value and brings every
// quotient to at most `limit`; 0 when there is none (checked within a bounded search).
size_t pick_unit(const std::vector<size_t>& values, size_t limit) {
  size_t mx = 0, g = 0;
  for (size_t v : values) {
    mx = std::max(mx, v);
    g = std::gcd(g, v);
  }
  if (mx <= limit) return 1;
  const size_t need = (mx + limit - 1) / limit;
  const size_t last = std::min<size_t>({g, need + (size_t{1} << 16), static_cast<size_t>(INT_MAX)});
  for (size_t d = need; d <= last; ++d)
    if (g % d == 0) return d;
  return 0;
}

// Non-blocking MPI calls in flight. wait() completes them all and checks that each
// receive got the element count it expected (a mismatch means the ranks disagree).
class MpiRequest final : public CommRequest {
 public:
  // type: of every call's elements; capacity: the most calls this request will hold
  // (add() hands out pointers into one array).
  MpiRequest(std::string what, MPI_Datatype type, size_t capacity) : what_(std::move(what)), type_(type) {
    requests_.reserve(capacity);
    expected_.reserve(capacity);
  }
  ~MpiRequest() override {
    try {
      wait();
    } catch (const std::exception&) {
      // A destructor cannot throw; a failure here follows another one already on its way up.
    }
  }
  // The slot for one more call's request; expect: the elements a receive must bring
  // (SIZE_MAX for sends and collectives: nothing to check).
  MPI_Request* add(size_t expect = SIZE_MAX) {
    ULY_CHECK(requests_.size() < requests_.capacity(), what_ << ": more MPI calls than reserved");
    requests_.push_back(MPI_REQUEST_NULL);
    expected_.push_back(expect);
    return &requests_.back();
  }
  void wait() override {
    if (requests_.empty()) return;
    std::vector<MPI_Status> st(requests_.size());
    const int rc = MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), st.data());
    const std::vector<size_t> expected = std::move(expected_);
    expected_.clear();
    requests_.clear();
    ULY_MPI_CHECK(rc, "MPI_Waitall(" << what_ << ")");
    for (size_t i = 0; i < st.size(); ++i) {
      if (expected[i] == SIZE_MAX) continue;
      int got = 0;
      ULY_MPI_CHECK(MPI_Get_count(&st[i], type_, &got), "MPI_Get_count");
      ULY_CHECK(static_cast<size_t>(got) == expected[i], what_ << " expected " << expected[i] << " elements but got "
                                                               << got << ": the ranks disagree on the size");
    }
  }

 private:
  std::string what_;
  MPI_Datatype type_;
  std::vector<MPI_Request> requests_;
  std::vector<size_t> expected_;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    try {
      ULY_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
      ULY_MPI_CHECK(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
      ULY_MPI_CHECK(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
      void* attr = nullptr;
      int flag = 0;
      ULY_MPI_CHECK(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &attr, &flag), "MPI_Comm_get_attr(MPI_TAG_UB)");
      tag_ub_ = flag ? *static_cast<int*>(attr) : 32767;  // 32767 is the least the standard allows
    } catch (...) {
      release();
      throw;
    }
  }
  ~MpiCommunicator() override { release(); }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  void all_to_all(const void* send, void* recv, size_t count, DType dtype) override {
    const size_t es = dtype_size(dtype), block = count * es, P = size_;
    const bool in_place = send == recv;
    if (!in_place) check_disjoint("all_to_all", send, P * block, recv, P * block);
    if (count == 0) return;
    const MPI_Datatype T = mpi_type(dtype);
    const size_t L = g_max_count;
    if (count <= L) {
      ULY_MPI_CHECK(MPI_Alltoall(in_place ? MPI_IN_PLACE : send, static_cast<int>(count), T, recv,
                                 static_cast<int>(count), T, comm_),
                    "MPI_Alltoall(" << count << " " << dtype_name(dtype) << " per rank, " << size_ << " ranks)");
      return;
    }
    for (size_t off = 0; off < count; off += L) {
      const size_t c = std::min(L, count - off);
      TypeHandle slice;
      slice.make(T, c, block);
      ULY_MPI_CHECK(MPI_Alltoall(in_place ? MPI_IN_PLACE : cptr(send, off * es), 1, slice.get(),
                                 ptr(recv, off * es), 1, slice.get(), comm_),
                    "MPI_Alltoall(slice of " << c << " of " << count << " " << dtype_name(dtype) << " per rank)");
    }
  }

  void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                    const size_t* recv_counts, const size_t* recv_displs, DType dtype) override {
    const int P = size_;
    const bool in_place = send == recv;
    std::vector<size_t> values;
    values.reserve(4 * P);
    for (int r = 0; r < P; ++r) {
      if (in_place)
        ULY_CHECK(send_counts[r] == recv_counts[r] && send_displs[r] == recv_displs[r],
                  "in-place all_to_all_v needs equal send and receive layouts; rank " << r << " has send "
                      << send_counts[r] << "@" << send_displs[r] << " vs receive " << recv_counts[r] << "@"
                      << recv_displs[r]);
      values.insert(values.end(), {send_counts[r], send_displs[r], recv_counts[r], recv_displs[r]});
    }
    const size_t u = pick_unit(values, g_max_count);
    ULY_CHECK(u > 0, "all_to_all_v: counts/displacements up to "
                         << *std::max_element(values.begin(), values.end()) << " " << dtype_name(dtype)
                         << " exceed MPI's int range (" << g_max_count
                         << ") and share no common factor that brings them into it; split the exchange into "
                            "smaller calls");
    std::vector<int> sc(P), sd(P), rc(P), rd(P);
    for (int r = 0; r < P; ++r) {
      sc[r] = static_cast<int>(send_counts[r] / u);
      sd[r] = static_cast<int>(send_displs[r] / u);
      rc[r] = static_cast<int>(recv_counts[r] / u);
      rd[r] = static_cast<int>(recv_displs[r] / u);
    }
    TypeHandle unit;
    MPI_Datatype T = mpi_type(dtype);
    if (u > 1) {
      unit.make(T, u, 0);
      T = unit.get();
    }
    ULY_MPI_CHECK(MPI_Alltoallv(in_place ? MPI_IN_PLACE : send, sc.data(), sd.data(), T, recv, rc.data(), rd.data(),
                                T, comm_),
                  "MPI_Alltoallv(" << dtype_name(dtype) << ", " << size_ << " ranks, unit " << u << ")");
  }

  void all_gather(const void* send, void* recv, size_t count, DType dtype) override {
    const bool in_place = check_all_gather(send, recv, count, dtype);
    if (count == 0) return;
    if (count > g_max_count) {
      all_gather_split(send, recv, count, dtype, in_place);
      return;
    }
    const MPI_Datatype T = mpi_type(dtype);
    ULY_MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(count), T, recv,
                                static_cast<int>(count), T, comm_),
                  "MPI_Allgather(" << count << " " << dtype_name(dtype) << " per rank, " << size_ << " ranks)");
  }

  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    const bool in_place = check_reduce_scatter(send, recv, count, dtype);
    if (count == 0) return;
    if (!fits_one_reduce_scatter(count)) {
      reduce_scatter_split(send, recv, count, dtype, op);
      return;
    }
    ULY_MPI_CHECK(MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : send, recv, static_cast<int>(count),
                                           mpi_type(dtype), mpi_op(op), comm_),
                  "MPI_Reduce_scatter_block(" << op_name(op) << ", " << count << " " << dtype_name(dtype)
                                              << " per rank, " << size_ << " ranks)");
  }

  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    const MPI_Datatype T = reducible_type(dtype, "all_reduce");
    const size_t es = dtype_size(dtype);
    const bool in_place = send == recv;
    if (!in_place) check_disjoint("all_reduce", send, count * es, recv, count * es);
    for (size_t off = 0; off < count; off += g_max_count) {
      const size_t c = std::min(g_max_count, count - off);
      ULY_MPI_CHECK(MPI_Allreduce(in_place ? MPI_IN_PLACE : cptr(send, off * es), ptr(recv, off * es),
                                  static_cast<int>(c), T, mpi_op(op), comm_),
                    "MPI_Allreduce(" << op_name(op) << ", " << c << " " << dtype_name(dtype) << ", " << size_
                                     << " ranks)");
    }
  }

  void broadcast(void* buf, size_t count, DType dtype, int root) override {
    ULY_CHECK(root >= 0 && root < size_, "broadcast from root " << root << " in a group of " << size_ << " ranks");
    const size_t es = dtype_size(dtype);
    for (size_t off = 0; off < count; off += g_max_count) {
      const size_t c = std::min(g_max_count, count - off);
      ULY_MPI_CHECK(MPI_Bcast(ptr(buf, off * es), static_cast<int>(c), mpi_type(dtype), root, comm_),
                    "MPI_Bcast(" << c << " " << dtype_name(dtype) << " from rank " << root << ")");
    }
  }

  void send(const void* buf, size_t count, DType dtype, int peer, int tag) override {
    check_peer("send to", peer, tag);
    const size_t es = dtype_size(dtype);
    // Slices go out in order on one (peer, tag): MPI does not let messages overtake each other.
    size_t off = 0;
    do {
      const size_t c = std::min(g_max_count, count - off);
      ULY_MPI_CHECK(MPI_Send(cptr(buf, off * es), static_cast<int>(c), mpi_type(dtype), peer, tag, comm_),
                    "MPI_Send(" << c << " " << dtype_name(dtype) << " to rank " << peer << ", tag " << tag << ")");
      off += c;
    } while (off < count);
  }

  void recv(void* buf, size_t count, DType dtype, int peer, int tag) override {
    check_peer("recv from", peer, tag);
    const size_t es = dtype_size(dtype);
    size_t off = 0;
    do {
      const size_t c = std::min(g_max_count, count - off);
      MPI_Status st;
      ULY_MPI_CHECK(MPI_Recv(ptr(buf, off * es), static_cast<int>(c), mpi_type(dtype), peer, tag, comm_, &st),
                    "MPI_Recv(" << c << " " << dtype_name(dtype) << " from rank " << peer << ", tag " << tag << ")");
      int got = 0;
      ULY_MPI_CHECK(MPI_Get_count(&st, mpi_type(dtype), &got), "MPI_Get_count");
      ULY_CHECK(static_cast<size_t>(got) == c, "recv from rank " << peer << " (tag " << tag << ") expected " << c
                                                                  << " " << dtype_name(dtype) << " but got " << got
                                                                  << ": sender and receiver disagree on the size");
      off += c;
    } while (off < count);
  }

  void sendrecv(const void* send, size_t send_count, int dest, void* recv, size_t recv_count, int source,
                DType dtype, int tag) override {
    sendrecv_async(send, send_count, dest, recv, recv_count, source, dtype, tag)->wait();
  }

  CommHandle all_reduce_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    const MPI_Datatype T = reducible_type(dtype, "all_reduce");
    const size_t es = dtype_size(dtype);
    const bool in_place = send == recv;
    if (!in_place) check_disjoint("all_reduce", send, count * es, recv, count * es);
    auto request = std::make_unique<MpiRequest>(
        "MPI_Iallreduce(" + std::to_string(count) + " " + dtype_name(dtype) + ", " + std::to_string(size_) + " ranks)",
        T, (count + g_max_count - 1) / g_max_count);
    for (size_t off = 0; off < count; off += g_max_count) {
      const size_t c = std::min(g_max_count, count - off);
      ULY_MPI_CHECK(MPI_Iallreduce(in_place ? MPI_IN_PLACE : cptr(send, off * es), ptr(recv, off * es),
                                   static_cast<int>(c), T, mpi_op(op), comm_, request->add()),
                    "MPI_Iallreduce(" << op_name(op) << ", " << c << " " << dtype_name(dtype) << ", " << size_
                                      << " ranks)");
    }
    return request;
  }

  CommHandle all_gather_async(const void* send, void* recv, size_t count, DType dtype) override {
    const bool in_place = check_all_gather(send, recv, count, dtype);
    if (count == 0) return completed_request();
    if (count > g_max_count) {  // split rounds, blocking (see the header comment)
      all_gather_split(send, recv, count, dtype, in_place);
      return completed_request();
    }
    const MPI_Datatype T = mpi_type(dtype);
    const std::string what =
        "MPI_Iallgather(" + std::to_string(count) + " " + dtype_name(dtype) + " per rank, " + std::to_string(size_) +
        " ranks)";
    auto request = std::make_unique<MpiRequest>(what, T, 1);
    ULY_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(count), T, recv,
                                 static_cast<int>(count), T, comm_, request->add()),
                  what);
    return request;
  }

  CommHandle reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    const bool in_place = check_reduce_scatter(send, recv, count, dtype);
    if (count == 0) return completed_request();
    if (!fits_one_reduce_scatter(count)) {  // packed rounds, blocking (see the header comment)
      reduce_scatter_split(send, recv, count, dtype, op);
      return completed_request();
    }
    const MPI_Datatype T = mpi_type(dtype);
    const std::string what = "MPI_Ireduce_scatter_block(" + std::string(op_name(op)) + ", " + std::to_string(count) +
                             " " + dtype_name(dtype) + " per rank, " + std::to_string(size_) + " ranks)";
    auto request = std::make_unique<MpiRequest>(what, T, 1);
    ULY_MPI_CHECK(MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : send, recv, static_cast<int>(count), T,
                                            mpi_op(op), comm_, request->add()),
                  what);
    return request;
  }

  CommHandle sendrecv_async(const void* send, size_t send_count, int dest, void* recv, size_t recv_count, int source,
                            DType dtype, int tag) override {
    check_peer("sendrecv to", dest, tag);
    check_peer("sendrecv from", source, tag);
    const size_t es = dtype_size(dtype);
    check_disjoint("sendrecv", send, send_count * es, recv, recv_count * es);
    const MPI_Datatype T = mpi_type(dtype);
    const size_t L = g_max_count;
    auto request = std::make_unique<MpiRequest>(
        "sendrecv from rank " + std::to_string(source) + " (tag " + std::to_string(tag) + ")", T,
        (send_count + L - 1) / L + (recv_count + L - 1) / L + 2);
    // Slices in order on one (peer, tag), as sendrecv sends them: MPI does not let messages overtake.
    size_t off = 0;
    do {
      const size_t c = std::min(L, recv_count - off);
      ULY_MPI_CHECK(MPI_Irecv(ptr(recv, off * es), static_cast<int>(c), T, source, tag, comm_, request->add(c)),
                    "MPI_Irecv(" << c << " " << dtype_name(dtype) << " from rank " << source << ", tag " << tag << ")");
      off += c;
    } while (off < recv_count);
    off = 0;
    do {
      const size_t c = std::min(L, send_count - off);
      ULY_MPI_CHECK(MPI_Isend(cptr(send, off * es), static_cast<int>(c), T, dest, tag, comm_, request->add()),
                    "MPI_Isend(" << c << " " << dtype_name(dtype) << " to rank " << dest << ", tag " << tag << ")");
      off += c;
    } while (off < send_count);
    return request;
  }

  void barrier() override { ULY_MPI_CHECK(MPI_Barrier(comm_), "MPI_Barrier(" << size_ << " ranks)"); }

  // Any MPI call runs the library's progress engine; a probe receives nothing.
  void progress() override {
    int flag = 0;
    ULY_MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE), "MPI_Iprobe");
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    ULY_CHECK(color >= 0, "split with negative color " << color << " (every rank must join a group)");
    MPI_Comm sub = MPI_COMM_NULL;
    ULY_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub),
                  "MPI_Comm_split(color " << color << ", key " << key << ")");
    return std::make_unique<MpiCommunicator>(sub, /*owned=*/true);
  }

  [[noreturn]] void abort(int exit_code) override {
    wait_for_failing_peers();
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort does not return; this keeps [[noreturn]] honest if it ever does
  }

 private:
  // all_gather's argument checks (both forms); true when send is this rank's block of recv (in place).
  bool check_all_gather(const void* send, const void* recv, size_t count, DType dtype) const {
    const size_t block = count * dtype_size(dtype), P = size_;
    const bool in_place = send == cptr(recv, rank_ * block);
    if (!in_place) check_disjoint("all_gather", send, block, recv, P * block);
    return in_place;
  }

  // reduce_scatter's argument checks (both forms); true when send == recv (in place).
  bool check_reduce_scatter(const void* send, const void* recv, size_t count, DType dtype) const {
    reducible_type(dtype, "reduce_scatter");
    const size_t block = count * dtype_size(dtype), P = size_;
    const bool in_place = send == recv;
    if (!in_place) check_disjoint("reduce_scatter", send, P * block, recv, block);
    return in_place;
  }

  // The whole send buffer (P × count) is one MPI argument for some implementations.
  bool fits_one_reduce_scatter(size_t count) const { return count <= g_max_count / static_cast<size_t>(size_); }

  // all_gather of count > mpi_max_count(): rounds over slices of every block.
  void all_gather_split(const void* send, void* recv, size_t count, DType dtype, bool in_place) {
    const size_t es = dtype_size(dtype), block = count * es;
    const MPI_Datatype T = mpi_type(dtype);
    const size_t L = g_max_count;
    for (size_t off = 0; off < count; off += L) {
      const size_t c = std::min(L, count - off);
      TypeHandle slice;
      slice.make(T, c, block);
      // In place, MPI reads this rank's slice from recv + off + rank * extent, where it already is.
      ULY_MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : cptr(send, off * es), static_cast<int>(c), T,
                                  ptr(recv, off * es), 1, slice.get(), comm_),
                    "MPI_Allgather(slice of " << c << " of " << count << " " << dtype_name(dtype) << ")");
    }
  }

  // reduce_scatter too large for one call: rounds that pack slice k of every block into scratch.
  void reduce_scatter_split(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) {
    const size_t es = dtype_size(dtype), block = count * es, P = size_;
    const MPI_Datatype T = mpi_type(dtype);
    const size_t c_max = std::max<size_t>(1, std::min(g_max_count / P, kScratchBytes / (P * es)));
    const size_t c_first = std::min(c_max, count);
    std::unique_ptr<char[]> scratch(new char[P * c_first * es]);
    // In place, round k writes recv[off, off + c), rank 0's slice, which this round has already packed
    // and no later round reads.
    for (size_t off = 0; off < count; off += c_max) {
      const size_t c = std::min(c_max, count - off);
      for (size_t r = 0; r < P; ++r) std::memcpy(scratch.get() + r * c * es, cptr(send, r * block + off * es), c * es);
      ULY_MPI_CHECK(MPI_Reduce_scatter_block(scratch.get(), ptr(recv, off * es), static_cast<int>(c), T, mpi_op(op),
                                             comm_),
                    "MPI_Reduce_scatter_block(slice of " << c << " of " << count << " " << dtype_name(dtype) << ")");
    }
  }

  void check_peer(const char* what, int peer, int tag) const {
    ULY_CHECK(peer >= 0 && peer < size_, what << " rank " << peer << " in a group of " << size_ << " ranks");
    ULY_CHECK(tag >= 0 && tag <= tag_ub_, "tag " << tag << " outside MPI's range [0, " << tag_ub_ << "]");
  }
  void release() {
    if (!owned_ || comm_ == MPI_COMM_NULL) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);  // a destructor cannot throw: the return code is dropped here only
    comm_ = MPI_COMM_NULL;
  }

  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1, tag_ub_ = 32767;
};

}  // namespace

void set_mpi_failure_channel(MPI_Comm comm) { g_failure_channel = comm; }

std::string mpi_error_string(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error code " + std::to_string(rc);
  return std::string(buf, static_cast<size_t>(len)) + " (MPI error " + std::to_string(rc) + ")";
}

std::unique_ptr<Communicator> wrap_mpi_communicator(MPI_Comm comm, bool owned) {
  return std::make_unique<MpiCommunicator>(comm, owned);
}

size_t mpi_max_count() { return g_max_count; }
void set_mpi_max_count_for_testing(size_t max_count) {
  g_max_count = max_count == 0 ? static_cast<size_t>(INT_MAX) : std::min<size_t>(max_count, INT_MAX);
}

}  // namespace ulysses
