// The TCP communicator (comm/tcp_communicator.h): 2-4 ranks as threads of this process on
// 127.0.0.1, rendezvousing at an ephemeral port. Each collective against the values it must
// give (reductions in rank order, bit for bit, and the same bits on every rank), split groups,
// point-to-point, and the failures: a rank that never comes, a peer that goes away, ranks that
// disagree on a size.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "comm/launch_env.h"
#include "comm/tcp_communicator.h"
#include "core/error.h"

namespace ulysses {
namespace {

// A port nobody listens on right now (bound to 0 and released).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TcpWorldOptions options(int rank, int size, int port, double timeout_s = 30) {
  TcpWorldOptions o;
  o.rank = rank;
  o.size = size;
  o.master_addr = "127.0.0.1";
  o.port = port;
  o.port_source = "test";
  o.rendezvous_timeout_s = timeout_s;
  o.comm_timeout_s = 30;
  return o;
}

// Runs fn on `ranks` of a world of `size` (threads); returns each rank's error text ("" = none).
std::vector<std::string> run_world(int size, const std::function<void(Communicator&)>& fn, std::vector<int> ranks = {},
                                   double timeout_s = 30) {
  if (ranks.empty()) {
    ranks.resize(size);
    std::iota(ranks.begin(), ranks.end(), 0);
  }
  const int port = free_port();
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r : ranks)
    threads.emplace_back([&, r] {
      try {
        auto comm = connect_tcp_world(options(r, size, port, timeout_s));
        fn(*comm);
      } catch (const Error& e) {
        errors[r] = e.message();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// A value that makes float sums order-dependent: rank r, element i.
float value(int r, size_t i) { return 1.0f / static_cast<float>(3 + 7 * r + i) + (r % 2 ? 1e7f : 0.1f); }

class Tcp : public ::testing::TestWithParam<int> {};

TEST_P(Tcp, AllReduceSumsInRankOrderBitForBitOnEveryRank) {
  const int P = GetParam();
  for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{1000}, size_t{300001}}) {
    std::vector<std::vector<float>> got(P);
    expect_no_errors(run_world(P, [&](Communicator& c) {
      std::vector<float> x(count);
      for (size_t i = 0; i < count; ++i) x[i] = value(c.rank(), i);
      std::vector<float> y(count);
      c.all_reduce(x.data(), y.data(), count, DType::F32, ReduceOp::Sum);
      c.all_reduce(x.data(), x.data(), count, DType::F32, ReduceOp::Sum);  // in place
      EXPECT_TRUE(x == y);
      got[c.rank()] = y;
    }));
    for (size_t i = 0; i < count; ++i) {
      float want = value(0, i);
      for (int r = 1; r < P; ++r) want += value(r, i);
      for (int r = 0; r < P; ++r) ASSERT_EQ(got[r][i], want) << "count " << count << " element " << i << " rank " << r;
    }
  }
}

TEST_P(Tcp, AllReduceMaxAndIntegers) {
  const int P = GetParam();
  expect_no_errors(run_world(P, [&](Communicator& c) {
    std::vector<int64_t> a = {c.rank(), -c.rank(), int64_t{1} << 40};
    c.all_reduce(a.data(), a.data(), a.size(), DType::I64, ReduceOp::Sum);
    EXPECT_EQ(a[0], P * (P - 1) / 2);
    EXPECT_EQ(a[1], -P * (P - 1) / 2);
    EXPECT_EQ(a[2], P * (int64_t{1} << 40));
    std::vector<double> m = {static_cast<double>(c.rank()), -static_cast<double>(c.rank())};
    c.all_reduce(m.data(), m.data(), 2, DType::F64, ReduceOp::Max);
    EXPECT_EQ(m[0], P - 1);
    EXPECT_EQ(m[1], 0);
  }));
}

TEST_P(Tcp, ReduceScatterAllGatherAllToAll) {
  const int P = GetParam();
  const size_t n = 5;
  expect_no_errors(run_world(P, [&](Communicator& c) {
    const int me = c.rank();
    // reduce_scatter: block b of rank r holds value(r, b * n + i); this rank gets block `me` summed in rank order.
    std::vector<float> send(P * n), recv(n);
    for (size_t i = 0; i < send.size(); ++i) send[i] = value(me, i);
    c.reduce_scatter(send.data(), recv.data(), n, DType::F32, ReduceOp::Sum);
    for (size_t i = 0; i < n; ++i) {
      float want = value(0, me * n + i);
      for (int r = 1; r < P; ++r) want += value(r, me * n + i);
      EXPECT_EQ(recv[i], want);
    }
    c.reduce_scatter(send.data(), send.data(), n, DType::F32, ReduceOp::Sum);  // in place: result at the front
    EXPECT_EQ(std::memcmp(send.data(), recv.data(), n * sizeof(float)), 0);
    // all_gather, out of place and in place.
    std::vector<int32_t> mine(n), all(P * n), all2(P * n);
    for (size_t i = 0; i < n; ++i) mine[i] = 100 * me + static_cast<int32_t>(i);
    c.all_gather(mine.data(), all.data(), n, DType::I32);
    std::copy(mine.begin(), mine.end(), all2.begin() + me * n);
    c.all_gather(all2.data() + me * n, all2.data(), n, DType::I32);
    for (int r = 0; r < P; ++r)
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(all[r * n + i], 100 * r + static_cast<int32_t>(i));
        EXPECT_EQ(all2[r * n + i], 100 * r + static_cast<int32_t>(i));
      }
    // all_to_all: block b sent by rank r is 1000 r + 10 b + i; received block r must be 1000 r + 10 me + i.
    std::vector<int32_t> a(P * n), b(P * n);
    for (int blk = 0; blk < P; ++blk)
      for (size_t i = 0; i < n; ++i) a[blk * n + i] = 1000 * me + 10 * blk + static_cast<int32_t>(i);
    c.all_to_all(a.data(), b.data(), n, DType::I32);
    c.all_to_all(a.data(), a.data(), n, DType::I32);  // in place
    for (int r = 0; r < P; ++r)
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(b[r * n + i], 1000 * r + 10 * me + static_cast<int32_t>(i));
        EXPECT_EQ(a[r * n + i], b[r * n + i]);
      }
  }));
}

TEST_P(Tcp, AllToAllVUnevenAndEmptyBlocks) {
  const int P = GetParam();
  expect_no_errors(run_world(P, [&](Communicator& c) {
    const int me = c.rank();
    // Rank s sends (s + d) % 3 elements to rank d (some zero), values 100 s + d.
    std::vector<size_t> sc(P), sd(P), rc(P), rd(P);
    size_t st = 0, rt = 0;
    for (int d = 0; d < P; ++d) {
      sc[d] = (me + d) % 3;
      sd[d] = st;
      st += sc[d];
      rc[d] = (d + me) % 3;
      rd[d] = rt;
      rt += rc[d];
    }
    std::vector<double> send(st + 1), recv(rt + 1, -1);
    for (int d = 0; d < P; ++d)
      for (size_t i = 0; i < sc[d]; ++i) send[sd[d] + i] = 100 * me + d;
    c.all_to_all_v(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(), DType::F64);
    for (int s = 0; s < P; ++s)
      for (size_t i = 0; i < rc[s]; ++i) EXPECT_EQ(recv[rd[s] + i], 100 * s + me);
  }));
}

TEST_P(Tcp, BroadcastSendRecvRingAndBarrier) {
  const int P = GetParam();
  expect_no_errors(run_world(P, [&](Communicator& c) {
    const int me = c.rank();
    for (int root = 0; root < P; ++root) {
      std::vector<uint8_t> buf(100000, static_cast<uint8_t>(me == root ? 7 + root : 0));
      c.broadcast(buf.data(), buf.size(), DType::U8, root);
      EXPECT_EQ(buf.front(), 7 + root);
      EXPECT_EQ(buf.back(), 7 + root);
    }
    // A ring: everyone sends 1 MiB to its successor at once (no deadlock), tagged.
    const int next = (me + 1) % P, prev = (me + P - 1) % P;
    std::vector<float> out(1 << 18, static_cast<float>(me)), in(1 << 18, -1);
    c.sendrecv(out.data(), out.size(), next, in.data(), in.size(), prev, DType::F32, 5);
    EXPECT_EQ(in.front(), prev);
    EXPECT_EQ(in.back(), prev);
    if (me == 0) {
      const int64_t v = 42;
      c.send(&v, 1, DType::I64, P - 1, 3);
    } else if (me == P - 1) {
      int64_t v = 0;
      c.recv(&v, 1, DType::I64, 0, 3);
      EXPECT_EQ(v, 42);
    }
    c.barrier();
  }));
}

TEST_P(Tcp, SplitGroupsAreOrderedByKeyAndIndependent) {
  const int P = GetParam();
  expect_no_errors(run_world(P, [&](Communicator& c) {
    const int me = c.rank();
    // Two colors (even / odd ranks), ordered by descending world rank.
    auto sub = c.split(me % 2, -me);
    const int n = (P - me % 2 + 1) / 2;
    EXPECT_EQ(sub->size(), n);
    std::vector<int32_t> ranks(n);
    const int32_t mine = me;
    sub->all_gather(&mine, ranks.data(), 1, DType::I32);
    for (int i = 0; i + 1 < n; ++i) EXPECT_GT(ranks[i], ranks[i + 1]);
    EXPECT_EQ(ranks[sub->rank()], me);
    float s = static_cast<float>(me);
    sub->all_reduce(&s, &s, 1, DType::F32, ReduceOp::Sum);
    float want = 0;
    for (int r = me % 2; r < P; r += 2) want += static_cast<float>(r);
    EXPECT_EQ(s, want);
    // The world still works after (and interleaved with) the split group.
    int64_t one = 1;
    c.all_reduce(&one, &one, 1, DType::I64, ReduceOp::Sum);
    EXPECT_EQ(one, P);
    auto sub2 = sub->split(0, 0);
    EXPECT_EQ(sub2->size(), n);
    sub2->barrier();
  }));
}

INSTANTIATE_TEST_SUITE_P(Ranks, Tcp, ::testing::Values(2, 3, 4));

TEST(TcpFailures, AMissingRankTimesOutNamingItOnEveryRankThatCame) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = run_world(4, [](Communicator&) {}, {0, 1, 3}, /*timeout_s=*/1.5);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 15);
  for (int r : {0, 1, 3}) {
    EXPECT_NE(errors[r].find("rendezvous at 127.0.0.1:"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("1 of 4 ranks that never came: rank 2 "), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find(" s for 1 of 4"), std::string::npos) << errors[r];
  }
}

TEST(TcpFailures, NoRankZeroTimesOut) {
  const auto errors = run_world(2, [](Communicator&) {}, {1}, /*timeout_s=*/1.0);
  EXPECT_NE(errors[1].find("could not reach rank 0"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("Connection refused"), std::string::npos) << errors[1];
}

TEST(TcpFailures, APeerThatLeavesFailsTheOthersCallNamingIt) {
  const auto errors = run_world(3, [](Communicator& c) {
    if (c.rank() == 2) return;  // leaves: its connections close
    std::vector<float> x(1000, 1.0f);
    c.all_reduce(x.data(), x.data(), x.size(), DType::F32, ReduceOp::Sum);
  });
  EXPECT_EQ(errors[2], "");
  // Each of the others fails naming rank 2, or the other one if that failed first and left too.
  for (int r : {0, 1}) EXPECT_NE(errors[r].find("lost the connection to rank"), std::string::npos) << errors[r];
  EXPECT_TRUE(errors[0].find("rank 2") != std::string::npos || errors[1].find("rank 2") != std::string::npos);
}

TEST(TcpFailures, ACallWithoutProgressFailsAfterTheCommTimeout) {
  const int port = free_port();
  std::string error0;
  std::thread late([&] {
    try {
      auto c = connect_tcp_world(options(1, 2, port));
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // stuck, but alive
    } catch (const Error&) {
    }
  });
  try {
    TcpWorldOptions o = options(0, 2, port);
    o.comm_timeout_s = 1;
    auto c = connect_tcp_world(o);
    float x = 1;
    c->all_reduce(&x, &x, 1, DType::F32, ReduceOp::Sum);
  } catch (const Error& e) {
    error0 = e.message();
  }
  late.join();
  EXPECT_NE(error0.find("all_reduce: no data moved for 1 s waiting on rank(s) 1 (ULYSSES_COMM_TIMEOUT)"),
            std::string::npos)
      << error0;
}

TEST(TcpFailures, RanksThatDisagreeOnASizeStopWithAnError) {
  const auto errors = run_world(2, [](Communicator& c) {
    std::vector<float> x(10 + c.rank());
    c.broadcast(x.data(), x.size(), DType::F32, 0);
  });
  EXPECT_NE(errors[1].find("rank 0 sent 40 bytes but this rank expected 44"), std::string::npos) << errors[1];
}

TEST(TcpFailures, HalfPrecisionReductionsAreRefused) {
  const auto errors = run_world(2, [](Communicator& c) {
    uint16_t h = 0;
    c.all_reduce(&h, &h, 1, DType::BF16, ReduceOp::Sum);
  });
  for (int r : {0, 1}) EXPECT_NE(errors[r].find("no bfloat16 arithmetic"), std::string::npos) << errors[r];
}

TEST(TcpFailures, ThePortIsTaken) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  try {
    connect_tcp_world(options(0, 2, ntohs(a.sin_port), 1.0));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.message()).find("cannot listen on port " + std::to_string(ntohs(a.sin_port))),
              std::string::npos)
        << e.message();
  }
  close(fd);
}

// torchrun's variables: read, completed, refused when incomplete.
TEST(TorchrunEnv, ReadsTheContractAndRefusesWhatIsMissing) {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "PMIX_RANK", "SLURM_PROCID",
                        "TORCHELASTIC_USE_AGENT_STORE", "ULYSSES_MASTER_PORT", "ULYSSES_RENDEZVOUS_TIMEOUT"})
    unsetenv(v);
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("RANK", "1", 1);
  setenv("MASTER_ADDR", "node01", 1);
  setenv("MASTER_PORT", "29500", 1);
  TorchrunEnv t = detect_torchrun_env();
  EXPECT_TRUE(t.present);
  EXPECT_EQ(t.rank, 1);
  EXPECT_EQ(t.world_size, 4);
  EXPECT_EQ(t.master_addr, "node01");
  EXPECT_EQ(t.rendezvous_port, 29500);
  EXPECT_EQ(t.timeout_s, 300);
  setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  EXPECT_EQ(detect_torchrun_env().rendezvous_port, 29501);
  setenv("ULYSSES_MASTER_PORT", "31000", 1);
  EXPECT_EQ(detect_torchrun_env().rendezvous_port, 31000);
  setenv("ULYSSES_RENDEZVOUS_TIMEOUT", "12.5", 1);
  EXPECT_EQ(detect_torchrun_env().timeout_s, 12.5);
  setenv("RANK", "4", 1);
  EXPECT_THROW(detect_torchrun_env(), Error);
  unsetenv("RANK");
  unsetenv("MASTER_ADDR");
  try {
    detect_torchrun_env();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.message()).find("RANK, MASTER_ADDR are not set"), std::string::npos) << e.message();
  }
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);  // an MPI launcher's variables win
  EXPECT_FALSE(detect_torchrun_env().present);
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
                        "ULYSSES_MASTER_PORT", "ULYSSES_RENDEZVOUS_TIMEOUT"})
    unsetenv(v);
  EXPECT_FALSE(detect_torchrun_env().present);
}

}  // namespace
}  // namespace ulysses
