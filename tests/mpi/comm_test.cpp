// Communicator collectives under mpirun (np 1, 2, 3, 4, 8), in the style of
// nccl-tests: every element's value is a known function of (source rank,
// destination rank, index), small enough to be exact in every dtype, so a
// result is checked by counting wrong elements, with no tolerance. Also the tensor
// collectives of parallel/collectives.h on CPU tensors (their asynchronous forms).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "core/error.h"
#include "mpi_test_main.h"
#include "parallel/collectives.h"

namespace ulysses {
namespace {

using test::sum_over_ranks;
using test::world;

// The value that rank `src` sends to rank `dst` at index i (raw bits for 16-bit types).
template <class T>
T val(int src, int dst, size_t i) {
  if constexpr (std::is_same_v<T, uint16_t>) return static_cast<uint16_t>((src * 8191 + dst * 131 + i * 7) & 0xffff);
  if constexpr (std::is_same_v<T, uint8_t>) return static_cast<uint8_t>((src * 37 + dst * 11 + i) & 0xff);
  return static_cast<T>((src * 64 + dst) * 4096 + static_cast<int64_t>(i % 4096));  // < 2^24: exact in float
}
template <class T>
T poison() {
  if constexpr (std::is_unsigned_v<T>) return static_cast<T>(~T{0} - 3);
  return static_cast<T>(-7);
}
// A reduction input: mixes signs (so that max is not always the top rank) and stays exact when summed.
template <class T>
T rin(int src, int dst, size_t i) {
  const int64_t x = (src * 3 + dst * 5 + static_cast<int64_t>(i)) % 97;
  if constexpr (std::is_unsigned_v<T>) return static_cast<T>(x);
  return static_cast<T>((src % 2 ? -x : x) + src);
}
template <class T>
T reduce_ref(int P, int dst, size_t i, ReduceOp op) {
  T acc = rin<T>(0, dst, i);
  for (int s = 1; s < P; ++s) acc = op == ReduceOp::Sum ? static_cast<T>(acc + rin<T>(s, dst, i))
                                                        : std::max(acc, rin<T>(s, dst, i));
  return acc;
}

template <class T>
int64_t all_to_all_wrong(Communicator& c, DType dt, size_t count, bool in_place) {
  const int P = c.size(), r = c.rank();
  std::vector<T> send(P * count), recv(P * count, poison<T>());
  for (int j = 0; j < P; ++j)
    for (size_t i = 0; i < count; ++i) send[j * count + i] = val<T>(r, j, i);
  if (in_place) {
    c.all_to_all(send.data(), send.data(), count, dt);
    recv = send;
  } else {
    c.all_to_all(send.data(), recv.data(), count, dt);
  }
  int64_t wrong = 0;
  for (int j = 0; j < P; ++j)
    for (size_t i = 0; i < count; ++i) wrong += recv[j * count + i] != val<T>(j, r, i);
  return wrong;
}

// Rank r sends n(r, j) elements to rank j. Send blocks are in rank order with a
// gap of `pad` after each (and an offset of `pad` before the first); receive
// blocks are in reverse rank order with gaps of 2·pad. Gaps must keep their poison.
template <class T>
int64_t all_to_all_v_wrong(Communicator& c, DType dt, size_t (*n)(int, int), bool in_place, size_t pad = 1) {
  const int P = c.size(), r = c.rank();
  std::vector<size_t> sc(P), sd(P), rc(P), rd(P);
  size_t s_end = pad, r_end = pad;
  for (int j = 0; j < P; ++j) {
    sc[j] = n(r, j);
    sd[j] = s_end;
    s_end += sc[j] + pad;
  }
  if (in_place) {
    rc = sc;
    rd = sd;
    r_end = s_end;
  } else {
    for (int j = P - 1; j >= 0; --j) {
      rc[j] = n(j, r);
      rd[j] = r_end;
      r_end += rc[j] + 2 * pad;
    }
  }
  std::vector<T> send(s_end, poison<T>()), recv(r_end, poison<T>());
  for (int j = 0; j < P; ++j)
    for (size_t i = 0; i < sc[j]; ++i) send[sd[j] + i] = val<T>(r, j, i);
  std::vector<uint8_t> in_block(r_end, 0);
  if (in_place) {
    for (int j = 0; j < P; ++j) rc[j] = n(j, r);  // equal to sc[j] for the symmetric n used in place
    c.all_to_all_v(send.data(), sc.data(), sd.data(), send.data(), sc.data(), sd.data(), dt);
    recv = send;
  } else {
    c.all_to_all_v(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(), dt);
  }
  int64_t wrong = 0;
  for (int j = 0; j < P; ++j)
    for (size_t i = 0; i < rc[j]; ++i) {
      wrong += recv[rd[j] + i] != val<T>(j, r, i);
      in_block[rd[j] + i] = 1;
    }
  for (size_t k = 0; k < r_end; ++k) wrong += !in_block[k] && recv[k] != poison<T>();
  return wrong;
}

template <class T>
int64_t all_gather_wrong(Communicator& c, DType dt, size_t count, bool in_place) {
  const int P = c.size(), r = c.rank();
  std::vector<T> send(count), recv(P * count, poison<T>());
  for (size_t i = 0; i < count; ++i) send[i] = val<T>(r, 0, i);
  if (in_place) {
    std::copy(send.begin(), send.end(), recv.begin() + r * count);
    c.all_gather(recv.data() + r * count, recv.data(), count, dt);
  } else {
    c.all_gather(send.data(), recv.data(), count, dt);
  }
  int64_t wrong = 0;
  for (int j = 0; j < P; ++j)
    for (size_t i = 0; i < count; ++i) wrong += recv[j * count + i] != val<T>(j, 0, i);
  return wrong;
}

template <class T>
int64_t reduce_scatter_wrong(Communicator& c, DType dt, size_t count, ReduceOp op, bool in_place) {
  const int P = c.size(), r = c.rank();
  std::vector<T> send(P * count), recv(count, poison<T>());
  for (int j = 0; j < P; ++j)
    for (size_t i = 0; i < count; ++i) send[j * count + i] = rin<T>(r, j, i);
  if (in_place) {
    c.reduce_scatter(send.data(), send.data(), count, dt, op);
    std::copy(send.begin(), send.begin() + count, recv.begin());
  } else {
    c.reduce_scatter(send.data(), recv.data(), count, dt, op);
  }
  int64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += recv[i] != reduce_ref<T>(P, r, i, op);
  return wrong;
}

template <class T>
int64_t all_reduce_wrong(Communicator& c, DType dt, size_t count, ReduceOp op, bool in_place) {
  const int P = c.size(), r = c.rank();
  std::vector<T> send(count), recv(count, poison<T>());
  for (size_t i = 0; i < count; ++i) send[i] = rin<T>(r, 0, i);
  if (in_place) {
    c.all_reduce(send.data(), send.data(), count, dt, op);
    recv = send;
  } else {
    c.all_reduce(send.data(), recv.data(), count, dt, op);
  }
  int64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += recv[i] != reduce_ref<T>(P, 0, i, op);
  return wrong;
}

template <class T>
int64_t broadcast_wrong(Communicator& c, DType dt, size_t count, int root) {
  std::vector<T> buf(count, poison<T>());
  if (c.rank() == root)
    for (size_t i = 0; i < count; ++i) buf[i] = val<T>(root, 0, i);
  c.broadcast(buf.data(), count, dt, root);
  int64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += buf[i] != val<T>(root, 0, i);
  return wrong;
}

// Each rank sends to rank+1 and receives from rank-1. Even ranks send first and
// odd ranks receive first, so blocking calls cannot all wait on each other.
template <class T>
int64_t ring_wrong(Communicator& c, DType dt, size_t count, int tag) {
  const int P = c.size(), r = c.rank(), next = (r + 1) % P, prev = (r + P - 1) % P;
  std::vector<T> out(count), in(count, poison<T>());
  for (size_t i = 0; i < count; ++i) out[i] = val<T>(r, next, i);
  if (r % 2 == 0) {
    c.send(out.data(), count, dt, next, tag);
    c.recv(in.data(), count, dt, prev, tag);
  } else {
    c.recv(in.data(), count, dt, prev, tag);
    c.send(out.data(), count, dt, next, tag);
  }
  int64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += in[i] != val<T>(prev, r, i);
  return wrong;
}

// Runs every collective on `c` (whatever group it is) and returns the total of wrong elements.
int64_t all_collectives_wrong(Communicator& c, size_t count) {
  int64_t w = 0;
  for (bool ip : {false, true}) {
    w += all_to_all_wrong<float>(c, DType::F32, count, ip);
    w += all_to_all_wrong<uint16_t>(c, DType::BF16, count, ip);
    w += all_gather_wrong<int64_t>(c, DType::I64, count, ip);
    w += reduce_scatter_wrong<double>(c, DType::F64, count, ReduceOp::Sum, ip);
    w += all_reduce_wrong<int32_t>(c, DType::I32, count, ReduceOp::Max, ip);
    w += all_reduce_wrong<float>(c, DType::F32, count, ReduceOp::Sum, ip);
  }
  w += all_to_all_v_wrong<float>(c, DType::F32, [](int s, int d) -> size_t { return s + 1 + d; }, false);
  w += broadcast_wrong<float>(c, DType::F32, count, c.size() - 1);
  return w;
}

size_t uneven(int s, int d) { return static_cast<size_t>(s + 1 + d); }            // rank r sends r+1+j to j
size_t some_empty(int s, int d) { return static_cast<size_t>((s + 2 * d) % 3); }  // zeros, incl. to self
size_t symmetric(int s, int d) { return static_cast<size_t>(s + d + 1); }         // n(s,d) == n(d,s)

TEST(Comm, WorldIdentity) {
  Communicator& c = world();
  EXPECT_TRUE(mpi_compiled_in());
  const char* launcher_size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char* forced = std::getenv("ULYSSES_FORCE_MPI");
  if (launcher_size == nullptr && forced != nullptr && std::string(forced) == "1") {
    EXPECT_EQ(c.name(), "mpi");  // a singleton MPI world
    EXPECT_EQ(c.size(), 1);
  } else if (launcher_size != nullptr) {
    EXPECT_EQ(c.name(), "mpi");
    EXPECT_EQ(c.size(), std::atoi(launcher_size));
    EXPECT_EQ(c.rank(), std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  } else {
    EXPECT_EQ(c.name(), "self");
  }
  EXPECT_EQ(process_rank(), c.rank());
  EXPECT_EQ(process_world_size(), c.size());
  EXPECT_EQ(sum_over_ranks(1), c.size());
}

TEST(Comm, AllToAll) {
  Communicator& c = world();
  for (size_t count : {size_t{1}, size_t{7}, size_t{1000}}) {
    for (bool ip : {false, true}) {
      SCOPED_TRACE("count " + std::to_string(count) + (ip ? " in place" : ""));
      EXPECT_EQ(sum_over_ranks(all_to_all_wrong<float>(c, DType::F32, count, ip)), 0) << "f32";
      EXPECT_EQ(sum_over_ranks(all_to_all_wrong<int32_t>(c, DType::I32, count, ip)), 0) << "i32";
      EXPECT_EQ(sum_over_ranks(all_to_all_wrong<uint16_t>(c, DType::BF16, count, ip)), 0) << "bf16 raw";
      EXPECT_EQ(sum_over_ranks(all_to_all_wrong<uint16_t>(c, DType::F16, count, ip)), 0) << "f16 raw";
      EXPECT_EQ(sum_over_ranks(all_to_all_wrong<double>(c, DType::F64, count, ip)), 0) << "f64";
      EXPECT_EQ(sum_over_ranks(all_to_all_wrong<int64_t>(c, DType::I64, count, ip)), 0) << "i64";
      EXPECT_EQ(sum_over_ranks(all_to_all_wrong<uint8_t>(c, DType::U8, count, ip)), 0) << "u8";
    }
  }
}

TEST(Comm, AllToAllV) {
  Communicator& c = world();
  EXPECT_EQ(sum_over_ranks(all_to_all_v_wrong<float>(c, DType::F32, uneven, false)), 0) << "f32 uneven";
  EXPECT_EQ(sum_over_ranks(all_to_all_v_wrong<int32_t>(c, DType::I32, uneven, false)), 0) << "i32 uneven";
  EXPECT_EQ(sum_over_ranks(all_to_all_v_wrong<uint16_t>(c, DType::BF16, uneven, false)), 0) << "bf16 uneven";
  EXPECT_EQ(sum_over_ranks(all_to_all_v_wrong<float>(c, DType::F32, some_empty, false)), 0) << "f32 with zeros";
  EXPECT_EQ(sum_over_ranks(all_to_all_v_wrong<double>(c, DType::F64, symmetric, true)), 0) << "f64 in place";
}

TEST(Comm, AllGather) {
  Communicator& c = world();
  for (size_t count : {size_t{1}, size_t{5}, size_t{3000}})
    for (bool ip : {false, true}) {
      SCOPED_TRACE("count " + std::to_string(count) + (ip ? " in place" : ""));
      EXPECT_EQ(sum_over_ranks(all_gather_wrong<float>(c, DType::F32, count, ip)), 0) << "f32";
      EXPECT_EQ(sum_over_ranks(all_gather_wrong<int64_t>(c, DType::I64, count, ip)), 0) << "i64";
      EXPECT_EQ(sum_over_ranks(all_gather_wrong<uint16_t>(c, DType::BF16, count, ip)), 0) << "bf16 raw";
    }
}

TEST(Comm, ReduceScatter) {
  Communicator& c = world();
  for (size_t count : {size_t{1}, size_t{13}, size_t{2000}})
    for (bool ip : {false, true})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
        SCOPED_TRACE("count " + std::to_string(count) + (ip ? " in place" : "") +
                     (op == ReduceOp::Sum ? " sum" : " max"));
        EXPECT_EQ(sum_over_ranks(reduce_scatter_wrong<float>(c, DType::F32, count, op, ip)), 0) << "f32";
        EXPECT_EQ(sum_over_ranks(reduce_scatter_wrong<double>(c, DType::F64, count, op, ip)), 0) << "f64";
        EXPECT_EQ(sum_over_ranks(reduce_scatter_wrong<int64_t>(c, DType::I64, count, op, ip)), 0) << "i64";
        EXPECT_EQ(sum_over_ranks(reduce_scatter_wrong<int32_t>(c, DType::I32, count, op, ip)), 0) << "i32";
      }
}

TEST(Comm, AllReduce) {
  Communicator& c = world();
  for (size_t count : {size_t{1}, size_t{100}, size_t{10000}})
    for (bool ip : {false, true})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
        SCOPED_TRACE("count " + std::to_string(count) + (ip ? " in place" : "") +
                     (op == ReduceOp::Sum ? " sum" : " max"));
        EXPECT_EQ(sum_over_ranks(all_reduce_wrong<float>(c, DType::F32, count, op, ip)), 0) << "f32";
        EXPECT_EQ(sum_over_ranks(all_reduce_wrong<double>(c, DType::F64, count, op, ip)), 0) << "f64";
        EXPECT_EQ(sum_over_ranks(all_reduce_wrong<int64_t>(c, DType::I64, count, op, ip)), 0) << "i64";
        EXPECT_EQ(sum_over_ranks(all_reduce_wrong<int32_t>(c, DType::I32, count, op, ip)), 0) << "i32";
      }
  EXPECT_EQ(sum_over_ranks(all_reduce_wrong<uint8_t>(c, DType::U8, 50, ReduceOp::Max, false)), 0) << "u8 max";
}

TEST(Comm, Broadcast) {
  Communicator& c = world();
  const int P = c.size();
  for (int root : {P - 1, 1 % P, 0})
    for (size_t count : {size_t{1}, size_t{4096}, size_t{1} << 17}) {
      SCOPED_TRACE("root " + std::to_string(root) + " count " + std::to_string(count));
      EXPECT_EQ(sum_over_ranks(broadcast_wrong<float>(c, DType::F32, count, root)), 0) << "f32";
      EXPECT_EQ(sum_over_ranks(broadcast_wrong<uint16_t>(c, DType::BF16, count, root)), 0) << "bf16";
      EXPECT_EQ(sum_over_ranks(broadcast_wrong<int64_t>(c, DType::I64, count, root)), 0) << "i64";
    }
}

TEST(Comm, SendRecvRing) {
  Communicator& c = world();
  if (c.size() == 1) GTEST_SKIP() << "a ring needs 2 ranks; with one, send would target this rank itself";
  // 1<<17 floats (512 KiB) is beyond the eager limit, so the rendezvous protocol runs too.
  for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{1} << 17}) {
    SCOPED_TRACE("count " + std::to_string(count));
    EXPECT_EQ(sum_over_ranks(ring_wrong<float>(c, DType::F32, count, 7)), 0) << "f32";
    EXPECT_EQ(sum_over_ranks(ring_wrong<uint16_t>(c, DType::BF16, count, 12345)), 0) << "bf16";
    EXPECT_EQ(sum_over_ranks(ring_wrong<int64_t>(c, DType::I64, count, 0)), 0) << "i64";
  }
}

TEST(Comm, Barrier) {
  Communicator& c = world();
  c.barrier();
  // Rank 0 arrives late; nobody may leave the barrier before it arrives.
  const auto t0 = std::chrono::steady_clock::now();
  if (c.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(400));
  c.barrier();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(sum_over_ranks(waited < 0.2 ? 1 : 0), 0) << "a rank left the barrier after " << waited << " s";
}

TEST(Comm, SplitEvenOdd) {
  Communicator& c = world();
  const int P = c.size(), r = c.rank();
  // key = -rank: the new group is ordered by descending world rank.
  auto sub = c.split(r % 2, -r);
  int expect_size = 0, expect_rank = 0;
  for (int q = r % 2; q < P; q += 2) {
    ++expect_size;
    expect_rank += q > r;
  }
  EXPECT_EQ(sub->size(), expect_size);
  EXPECT_EQ(sub->rank(), expect_rank);
  EXPECT_EQ(sub->name(), c.name());
  int32_t me = r;
  std::vector<int32_t> members(sub->size(), -1);
  sub->all_gather(&me, members.data(), 1, DType::I32);
  std::vector<int32_t> expect_members;
  for (int q = P - 1; q >= 0; --q)
    if (q % 2 == r % 2) expect_members.push_back(q);
  int64_t wrong = members != expect_members;
  int64_t sum = r + 1;
  sub->all_reduce(&sum, &sum, 1, DType::I64, ReduceOp::Sum);
  int64_t expect_sum = 0;
  for (int q = r % 2; q < P; q += 2) expect_sum += q + 1;
  wrong += sum != expect_sum;
  EXPECT_EQ(sum_over_ranks(wrong), 0) << "membership of the even/odd groups";
  // Every collective on the sub-group, where group ranks differ from world ranks.
  EXPECT_EQ(sum_over_ranks(all_collectives_wrong(*sub, 33)), 0) << "collectives on the even/odd groups";
  // A split of a split, then collectives on it, while the parent stays usable.
  auto subsub = sub->split(sub->rank() / 2, sub->rank());
  EXPECT_EQ(subsub->size(), std::min(2, sub->size() - (sub->rank() / 2) * 2));
  EXPECT_EQ(sum_over_ranks(all_collectives_wrong(*subsub, 9)), 0) << "collectives on a split of a split";
  EXPECT_EQ(sum_over_ranks(all_collectives_wrong(*sub, 5)), 0) << "parent after the nested split";
}

// Argument errors are detected from values every rank shares, before any
// message is sent: all ranks throw, none is left waiting, and the group stays usable.
TEST(Comm, ErrorsOnEveryRank) {
  Communicator& c = world();
  const int P = c.size();
  std::vector<uint16_t> h(8 * P, 0x3f80);
  int64_t threw = 0;
  // MPI has no 16-bit float arithmetic; the self communicator only copies, so it accepts them.
  const bool mpi = c.name() == "mpi";
  if (mpi) {
    std::string msg;
    try {
      c.all_reduce(h.data(), h.data(), 8, DType::BF16, ReduceOp::Sum);
    } catch (const Error& e) {
      ++threw;
      msg = e.message();
    }
    EXPECT_NE(msg.find("bfloat16"), std::string::npos) << msg;
    try {
      c.reduce_scatter(h.data(), h.data() + 4 * P, 4, DType::F16, ReduceOp::Max);
    } catch (const Error&) {
      ++threw;
    }
  }
  try {
    c.broadcast(h.data(), 8, DType::BF16, P);  // root out of range
  } catch (const Error&) {
    ++threw;
  }
  try {
    c.send(h.data(), 8, DType::BF16, P, 0);  // peer out of range
  } catch (const Error&) {
    ++threw;
  }
  try {
    c.split(-1, 0);
  } catch (const Error&) {
    ++threw;
  }
  const int errors = mpi ? 5 : 3;
  EXPECT_EQ(sum_over_ranks(threw), errors * P) << "every rank must throw each of the " << errors << " errors";
  EXPECT_EQ(sum_over_ranks(all_reduce_wrong<float>(c, DType::F32, 64, ReduceOp::Sum, false)), 0)
      << "the communicator after the errors";
}

// Several asynchronous all-reduces in flight at once, waited for in reverse order: each
// result is exact, and an in-place one too.
template <class T>
int64_t all_reduce_async_wrong(Communicator& c, DType dt, size_t count) {
  const int P = c.size(), r = c.rank();
  constexpr int kCalls = 4;
  std::vector<std::vector<T>> send(kCalls, std::vector<T>(count)), recv(kCalls, std::vector<T>(count, poison<T>()));
  std::vector<CommHandle> pending;
  for (int k = 0; k < kCalls; ++k) {
    for (size_t i = 0; i < count; ++i) send[k][i] = rin<T>(r, k, i);
    const bool in_place = k % 2 == 1;
    pending.push_back(c.all_reduce_async(send[k].data(), in_place ? send[k].data() : recv[k].data(), count, dt,
                                         ReduceOp::Sum));
  }
  for (int k = kCalls - 1; k >= 0; --k) pending[k]->wait();
  pending[0]->wait();  // a second wait returns at once
  int64_t wrong = 0;
  for (int k = 0; k < kCalls; ++k) {
    const std::vector<T>& out = k % 2 == 1 ? send[k] : recv[k];
    for (size_t i = 0; i < count; ++i) wrong += out[i] != reduce_ref<T>(P, k, i, ReduceOp::Sum);
  }
  return wrong;
}

// Two exchanges around the ring in flight at once with different tags (ring attention's K/V
// block and dK/dV accumulator), waited for in the opposite order of their start.
template <class T>
int64_t ring_async_wrong(Communicator& c, DType dt, size_t count) {
  const int P = c.size(), r = c.rank(), next = (r + 1) % P, prev = (r + P - 1) % P;
  std::vector<T> a(count), b(count), got_a(count, poison<T>()), got_b(count, poison<T>());
  for (size_t i = 0; i < count; ++i) {
    a[i] = val<T>(r, next, i);
    b[i] = val<T>(r, next, i + 1);
  }
  CommHandle ha = c.sendrecv_async(a.data(), count, next, got_a.data(), count, prev, dt, 7);
  CommHandle hb = c.sendrecv_async(b.data(), count, next, got_b.data(), count, prev, dt, 8);
  hb->wait();
  ha->wait();
  int64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    wrong += got_a[i] != val<T>(prev, r, i);
    wrong += got_b[i] != val<T>(prev, r, i + 1);
  }
  return wrong;
}

TEST(Comm, AsyncAllReduce) {
  Communicator& c = world();
  for (size_t count : {size_t{0}, size_t{1}, size_t{10000}, size_t{1} << 17}) {
    SCOPED_TRACE("count " + std::to_string(count));
    EXPECT_EQ(sum_over_ranks(all_reduce_async_wrong<float>(c, DType::F32, count)), 0) << "f32";
    EXPECT_EQ(sum_over_ranks(all_reduce_async_wrong<int64_t>(c, DType::I64, count)), 0) << "i64";
  }
}

TEST(Comm, AsyncSendRecvRing) {
  Communicator& c = world();
  if (c.size() == 1) GTEST_SKIP() << "a ring needs 2 ranks";
  for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{1} << 17}) {
    SCOPED_TRACE("count " + std::to_string(count));
    EXPECT_EQ(sum_over_ranks(ring_async_wrong<float>(c, DType::F32, count)), 0) << "f32";
    EXPECT_EQ(sum_over_ranks(ring_async_wrong<uint16_t>(c, DType::BF16, count)), 0) << "bf16";
  }
}

// A receive that gets a different count than it expects fails in wait() on that rank, naming
// the sizes, instead of leaving part of the buffer unwritten.
TEST(Comm, AsyncSendRecvSizeMismatch) {
  Communicator& c = world();
  if (c.size() == 1 || c.name() != "mpi") GTEST_SKIP() << "needs 2 MPI ranks";
  const int P = c.size(), r = c.rank();
  // Rank 0 sends one element fewer than its successor expects; every rank receives 8.
  const size_t send_count = r == 0 ? 7 : 8;
  std::vector<float> send(8, 1.0f), recv(8, 0.0f);
  int64_t threw = 0;
  try {
    c.sendrecv_async(send.data(), send_count, (r + 1) % P, recv.data(), 8, (r + P - 1) % P, DType::F32, 9)->wait();
  } catch (const Error& e) {
    ++threw;
    EXPECT_NE(e.message().find("expected 8 elements but got 7"), std::string::npos) << e.message();
  }
  EXPECT_EQ(sum_over_ranks(threw), 1);
}

// Several asynchronous all-gathers in flight at once (every other one in place: send is this
// rank's block of recv), waited for in reverse order; each result must equal the blocking
// all_gather's on the same input, and the expected values.
template <class T>
int64_t all_gather_async_wrong(Communicator& c, DType dt, size_t count) {
  const int P = c.size(), r = c.rank();
  constexpr int kCalls = 4;
  std::vector<std::vector<T>> send(kCalls, std::vector<T>(count));
  std::vector<std::vector<T>> recv(kCalls, std::vector<T>(P * count, poison<T>())), blocking = recv;
  std::vector<CommHandle> pending;
  for (int k = 0; k < kCalls; ++k) {
    for (size_t i = 0; i < count; ++i) send[k][i] = val<T>(r, k, i);
    c.all_gather(send[k].data(), blocking[k].data(), count, dt);
    const bool in_place = k % 2 == 1;
    if (in_place) std::copy(send[k].begin(), send[k].end(), recv[k].begin() + r * count);
    pending.push_back(c.all_gather_async(in_place ? recv[k].data() + r * count : send[k].data(), recv[k].data(),
                                         count, dt));
  }
  for (int k = kCalls - 1; k >= 0; --k) pending[k]->wait();
  pending[0]->wait();  // a second wait returns at once
  int64_t wrong = 0;
  for (int k = 0; k < kCalls; ++k) {
    wrong += recv[k] != blocking[k];
    for (int j = 0; j < P; ++j)
      for (size_t i = 0; i < count; ++i) wrong += recv[k][j * count + i] != val<T>(j, k, i);
  }
  return wrong;
}

// The same for reduce-scatters (every other one in place: send == recv, the result in its
// first block), alternating sum and max.
template <class T>
int64_t reduce_scatter_async_wrong(Communicator& c, DType dt, size_t count) {
  const int P = c.size(), r = c.rank();
  constexpr int kCalls = 4;
  std::vector<std::vector<T>> send(kCalls, std::vector<T>(P * count));
  std::vector<std::vector<T>> recv(kCalls, std::vector<T>(count, poison<T>())), blocking = recv;
  const auto op_of = [](int k) { return k / 2 == 0 ? ReduceOp::Sum : ReduceOp::Max; };
  std::vector<CommHandle> pending;
  for (int k = 0; k < kCalls; ++k) {
    // Rank r's block j holds rin(r, j + k, ·): each call reduces different values.
    for (int j = 0; j < P; ++j)
      for (size_t i = 0; i < count; ++i) send[k][j * count + i] = rin<T>(r, j + k, i);
    c.reduce_scatter(send[k].data(), blocking[k].data(), count, dt, op_of(k));
    const bool in_place = k % 2 == 1;
    pending.push_back(
        c.reduce_scatter_async(send[k].data(), in_place ? send[k].data() : recv[k].data(), count, dt, op_of(k)));
  }
  for (int k = kCalls - 1; k >= 0; --k) pending[k]->wait();
  int64_t wrong = 0;
  for (int k = 0; k < kCalls; ++k) {
    if (k % 2 == 1) std::copy(send[k].begin(), send[k].begin() + count, recv[k].begin());
    wrong += recv[k] != blocking[k];
    for (size_t i = 0; i < count; ++i) wrong += recv[k][i] != reduce_ref<T>(P, r + k, i, op_of(k));
  }
  return wrong;
}

TEST(Comm, AsyncAllGather) {
  Communicator& c = world();
  for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{3000}, size_t{1} << 16}) {
    SCOPED_TRACE("count " + std::to_string(count));
    EXPECT_EQ(sum_over_ranks(all_gather_async_wrong<float>(c, DType::F32, count)), 0) << "f32";
    EXPECT_EQ(sum_over_ranks(all_gather_async_wrong<int64_t>(c, DType::I64, count)), 0) << "i64";
    EXPECT_EQ(sum_over_ranks(all_gather_async_wrong<uint16_t>(c, DType::BF16, count)), 0) << "bf16 raw";
  }
}

TEST(Comm, AsyncReduceScatter) {
  Communicator& c = world();
  for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{2000}, size_t{1} << 15}) {
    SCOPED_TRACE("count " + std::to_string(count));
    EXPECT_EQ(sum_over_ranks(reduce_scatter_async_wrong<float>(c, DType::F32, count)), 0) << "f32";
    EXPECT_EQ(sum_over_ranks(reduce_scatter_async_wrong<double>(c, DType::F64, count)), 0) << "f64";
    EXPECT_EQ(sum_over_ranks(reduce_scatter_async_wrong<int32_t>(c, DType::I32, count)), 0) << "i32";
  }
  // The asynchronous form refuses what the blocking one does, on every rank, before sending.
  if (c.name() == "mpi") {
    std::vector<uint16_t> h(8 * c.size(), 0x3f80);
    int64_t threw = 0;
    try {
      c.reduce_scatter_async(h.data(), h.data(), 8, DType::BF16, ReduceOp::Sum)->wait();
    } catch (const Error& e) {
      ++threw;
      EXPECT_NE(e.message().find("reduce_scatter on bfloat16"), std::string::npos) << e.message();
    }
    std::vector<float> f(4 * c.size() + 1);
    try {  // recv overlaps send without being the in-place form
      c.reduce_scatter_async(f.data(), f.data() + 1, 4, DType::F32, ReduceOp::Sum)->wait();
    } catch (const Error& e) {
      ++threw;
      EXPECT_NE(e.message().find("overlap"), std::string::npos) << e.message();
    }
    try {  // send inside recv but not at this rank's block
      c.all_gather_async(f.data() + 1, f.data(), 4, DType::F32)->wait();
    } catch (const Error& e) {
      ++threw;
      EXPECT_NE(e.message().find("all_gather"), std::string::npos) << e.message();
    }
    EXPECT_EQ(sum_over_ranks(threw), 3 * c.size()) << "every rank must throw each of the 3 errors";
  }
  EXPECT_EQ(sum_over_ranks(reduce_scatter_async_wrong<float>(c, DType::F32, 7)), 0) << "after the errors";
}

// Requests in flight on the world and on a split group at once, with blocking calls on both in
// between: an all-gather on the world, a blocking all-reduce on the even/odd group, an async
// reduce-scatter on the world and an all-gather on the group, a blocking all-reduce on the
// world, then the waits in an order unrelated to the starts.
TEST(Comm, AsyncInterleavedWithSplitGroup) {
  Communicator& c = world();
  const int P = c.size(), r = c.rank();
  auto sub = c.split(r % 2, r);
  const int Q = sub->size(), q = sub->rank();
  const size_t n = 777;
  std::vector<float> gather_send(n), gathered(P * n, poison<float>());
  std::vector<double> rs_send(P * n), scattered(n, poison<double>());
  std::vector<int32_t> sub_send(n), sub_gathered(Q * n, poison<int32_t>());
  for (size_t i = 0; i < n; ++i) {
    gather_send[i] = val<float>(r, 0, i);
    sub_send[i] = val<int32_t>(q, 1, i);
  }
  for (int j = 0; j < P; ++j)
    for (size_t i = 0; i < n; ++i) rs_send[j * n + i] = rin<double>(r, j, i);

  CommHandle gather = c.all_gather_async(gather_send.data(), gathered.data(), n, DType::F32);
  int64_t sub_sum = r + 1;
  sub->all_reduce(&sub_sum, &sub_sum, 1, DType::I64, ReduceOp::Sum);
  CommHandle scatter = c.reduce_scatter_async(rs_send.data(), scattered.data(), n, DType::F64, ReduceOp::Sum);
  CommHandle sub_gather = sub->all_gather_async(sub_send.data(), sub_gathered.data(), n, DType::I32);
  const int64_t world_ranks = sum_over_ranks(1);  // a blocking all-reduce on the world
  scatter->wait();
  sub_gather->wait();
  gather->wait();

  int64_t wrong = world_ranks != P;
  int64_t expect_sub_sum = 0;
  for (int w = r % 2; w < P; w += 2) expect_sub_sum += w + 1;
  wrong += sub_sum != expect_sub_sum;
  for (int j = 0; j < P; ++j)
    for (size_t i = 0; i < n; ++i) wrong += gathered[j * n + i] != val<float>(j, 0, i);
  for (size_t i = 0; i < n; ++i) wrong += scattered[i] != reduce_ref<double>(P, r, i, ReduceOp::Sum);
  for (int j = 0; j < Q; ++j)
    for (size_t i = 0; i < n; ++i) wrong += sub_gathered[j * n + i] != val<int32_t>(j, 1, i);
  EXPECT_EQ(sum_over_ranks(wrong), 0);
}

// A bfloat16 value m · 2^e (m < 2^7, |e| <= 6) that rank `src` contributes to rank `dst`'s
// block at index i: sums of up to 8 of them are exact in float32 whatever the order, so the
// float32 sum rounded once to bfloat16 is one value, and a sum rounded after every step differs.
float bf16_term(int src, int dst, size_t i) {
  const int64_t m = 1 + (src * 37 + dst * 11 + static_cast<int64_t>(i) * 5) % 127;
  const int e = static_cast<int>((src * 5 + static_cast<int64_t>(i)) % 13) - 6;
  return std::ldexp(static_cast<float>(src % 2 ? -m : m), e);
}

// Tensor collectives on CPU tensors: the asynchronous forms in flight together, an all-gather in
// place (send a block of recv, as the optimizer gathers its shards), a bfloat16 reduce-scatter
// summed in float32 and rounded once.
TEST(Comm, TensorAsyncAllGatherReduceScatter) {
  Communicator& c = world();
  auto be = make_cpu_backend();
  const int P = c.size(), r = c.rank();
  const int64_t n = 301;
  Tensor g_send = Tensor::empty({n}, DType::F32), g_recv = Tensor::empty({P * n}, DType::F32);
  Tensor ip_recv = Tensor::empty({P * n}, DType::F32);
  Tensor f_send = Tensor::empty({P * n}, DType::F32), f_recv = Tensor::empty({n}, DType::F32);
  Tensor b_send = Tensor::empty({P * n}, DType::BF16), b_recv = Tensor::empty({n}, DType::BF16);
  for (int64_t i = 0; i < n; ++i) {
    g_send.data<float>()[i] = val<float>(r, 0, i);
    ip_recv.data<float>()[r * n + i] = val<float>(r, 0, i);
  }
  for (int j = 0; j < P; ++j)
    for (int64_t i = 0; i < n; ++i) {
      f_send.data<float>()[j * n + i] = rin<float>(r, j, i);
      b_send.data<uint16_t>()[j * n + i] = float_to_bf16(bf16_term(r, j, i));
    }
  Tensor mine = ip_recv.slice(r * n, (r + 1) * n);
  std::vector<CommHandle> pending;
  pending.push_back(all_gather_async(c, *be, g_send, g_recv));
  pending.push_back(reduce_scatter_sum_async(c, *be, b_send, b_recv));
  pending.push_back(all_gather_async(c, *be, mine, ip_recv));
  pending.push_back(reduce_scatter_sum_async(c, *be, f_send, f_recv));
  for (auto it = pending.rbegin(); it != pending.rend(); ++it) (*it)->wait();

  int64_t wrong = 0, rounded_per_step_differs = 0;
  for (int j = 0; j < P; ++j)
    for (int64_t i = 0; i < n; ++i) {
      wrong += g_recv.data<float>()[j * n + i] != val<float>(j, 0, i);
      wrong += ip_recv.data<float>()[j * n + i] != val<float>(j, 0, i);
    }
  for (int64_t i = 0; i < n; ++i) {
    wrong += f_recv.data<float>()[i] != reduce_ref<float>(P, r, i, ReduceOp::Sum);
    float sum = 0, stepwise = 0;
    for (int s = 0; s < P; ++s) {
      sum += bf16_term(s, r, i);
      stepwise = bf16_to_float(float_to_bf16(stepwise + bf16_term(s, r, i)));
    }
    wrong += b_recv.data<uint16_t>()[i] != float_to_bf16(sum);
    rounded_per_step_differs += float_to_bf16(sum) != float_to_bf16(stepwise);
  }
  EXPECT_EQ(sum_over_ranks(wrong), 0);
  // The data tells the two summations apart once a sum has three terms.
  if (P >= 3) EXPECT_GT(sum_over_ranks(rounded_per_step_differs), 0);

  // The blocking forms go through the same path; a mismatched pair is refused naming both.
  Tensor short_recv = Tensor::empty({P * n - 1}, DType::F32);
  std::string msg;
  try {
    all_gather_async(c, *be, g_send, short_recv);
  } catch (const Error& e) {
    msg = e.message();
  }
  EXPECT_NE(msg.find("all_gather: recv"), std::string::npos) << msg;
  reduce_scatter_sum(c, *be, f_send, f_recv);
  int64_t blocking_wrong = 0;
  for (int64_t i = 0; i < n; ++i)
    blocking_wrong += f_recv.data<float>()[i] != reduce_ref<float>(P, r, i, ReduceOp::Sum);
  EXPECT_EQ(sum_over_ranks(blocking_wrong), 0);
}

// Lowers the per-call count limit so the split paths for counts above INT_MAX run on small buffers.
struct MaxCountGuard {
  explicit MaxCountGuard(size_t n) { set_mpi_max_count_for_testing(n); }
  ~MaxCountGuard() { set_mpi_max_count_for_testing(0); }
};

TEST(Comm, SplitLargeCounts) {
  Communicator& c = world();
  if (c.name() != "mpi") GTEST_SKIP() << "the count limit belongs to the MPI communicator (run under mpirun)";
  {
    MaxCountGuard guard(5);
    EXPECT_EQ(mpi_max_count(), 5u);
    for (size_t count : {size_t{5}, size_t{13}, size_t{40}}) {
      SCOPED_TRACE("limit 5, count " + std::to_string(count));
      for (bool ip : {false, true}) {
        EXPECT_EQ(sum_over_ranks(all_to_all_wrong<float>(c, DType::F32, count, ip)), 0) << "all_to_all " << ip;
        EXPECT_EQ(sum_over_ranks(all_gather_wrong<int32_t>(c, DType::I32, count, ip)), 0) << "all_gather " << ip;
        EXPECT_EQ(sum_over_ranks(reduce_scatter_wrong<double>(c, DType::F64, count, ReduceOp::Sum, ip)), 0)
            << "reduce_scatter " << ip;
        EXPECT_EQ(sum_over_ranks(all_reduce_wrong<int64_t>(c, DType::I64, count, ReduceOp::Max, ip)), 0)
            << "all_reduce " << ip;
      }
      EXPECT_EQ(sum_over_ranks(broadcast_wrong<uint16_t>(c, DType::BF16, count, c.size() - 1)), 0) << "broadcast";
      if (c.size() > 1) EXPECT_EQ(sum_over_ranks(ring_wrong<float>(c, DType::F32, count, 3)), 0) << "send/recv";
      if (c.size() > 1) EXPECT_EQ(sum_over_ranks(ring_async_wrong<float>(c, DType::F32, count)), 0) << "async ring";
      EXPECT_EQ(sum_over_ranks(all_reduce_async_wrong<double>(c, DType::F64, count)), 0) << "async all_reduce";
      // One call up to the limit (all_gather; reduce_scatter when P × count fits), split rounds beyond.
      EXPECT_EQ(sum_over_ranks(all_gather_async_wrong<int32_t>(c, DType::I32, count)), 0) << "async all_gather";
      EXPECT_EQ(sum_over_ranks(reduce_scatter_async_wrong<double>(c, DType::F64, count)), 0)
          << "async reduce_scatter";
    }
  }
  {
    // all_to_all_v counts and displacements multiples of 64 (as token × head counts are): too big for
    // the limit, brought into it by a unit of at least 64 elements.
    MaxCountGuard guard(200);
    auto big = [](int s, int d) -> size_t { return 64 * static_cast<size_t>(s + 1 + d); };
    EXPECT_EQ(sum_over_ranks(all_to_all_v_wrong<float>(c, DType::F32, big, false, 64)), 0) << "all_to_all_v unit";
    EXPECT_EQ(sum_over_ranks(all_to_all_v_wrong<uint16_t>(c, DType::BF16, big, false, 64)), 0) << "bf16 unit";
  }
  {
    // Odd counts behind an odd offset: no common unit exists, so every rank throws before sending.
    MaxCountGuard guard(2);
    auto odd = [](int s, int d) -> size_t { return 2 * static_cast<size_t>(s + 1 + d) + 1; };
    int64_t threw = 0;
    try {
      all_to_all_v_wrong<float>(c, DType::F32, odd, false);
    } catch (const Error& e) {
      ++threw;
      EXPECT_NE(e.message().find("common factor"), std::string::npos) << e.message();
    }
    EXPECT_EQ(sum_over_ranks(threw), c.size());
  }
  EXPECT_EQ(sum_over_ranks(all_to_all_wrong<float>(c, DType::F32, 10, false)), 0) << "limit restored";
}

}  // namespace
}  // namespace ulysses

int main(int argc, char** argv) { return ulysses::test::run_mpi_tests(argc, argv); }
