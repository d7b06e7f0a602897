// The TCP host channel (see tcp_communicator.h for the protocol and its guarantees).
#include "comm/tcp_communicator.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "comm/launch_env.h"
#include "core/error.h"

namespace ulysses {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kHelloMagic = 0x554c59535345535aull;  // "ULYSSESZ"
constexpr uint32_t kMsgMagic = 0x554c5953u;             // "ULYS"
constexpr int kTagBase = -1000;                          // internal tags are below 0

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string errno_text(int e) { return std::strerror(e); }

// A file descriptor closed on scope exit.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

void set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  ULY_CHECK(flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0, "fcntl(O_NONBLOCK): " << errno_text(errno));
}

// Data connections: no Nagle delay; keepalive probes so that a peer whose host vanished
// (no FIN ever comes) is noticed within about a minute.
void tune_data_socket(int fd) {
  const int one = 1, idle = 30, interval = 5, count = 6;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

std::string address_text(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
    port = ntohs(v4->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
    port = ntohs(v6->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "?";
}

void set_port(sockaddr_storage& a, int port) {
  if (a.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&a)->sin_port = htons(static_cast<uint16_t>(port));
  if (a.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&a)->sin6_port = htons(static_cast<uint16_t>(port));
}

socklen_t address_length(const sockaddr_storage& a) {
  return a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// A listening socket on `port` (0: an ephemeral one) of the address family `family`, all interfaces.
Fd listen_on(int family, int port, const std::string& what) {
  Fd fd(socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ULY_CHECK(fd.get() >= 0, what << ": socket(): " << errno_text(errno));
  const int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage a{};
  a.ss_family = static_cast<sa_family_t>(family);
  if (family == AF_INET6) {
    const int zero = 0;  // dual stack: IPv4 peers too
    setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    reinterpret_cast<sockaddr_in6*>(&a)->sin6_addr = in6addr_any;
  } else {
    reinterpret_cast<sockaddr_in*>(&a)->sin_addr.s_addr = htonl(INADDR_ANY);
  }
  set_port(a, port);
  ULY_CHECK(bind(fd.get(), reinterpret_cast<sockaddr*>(&a), address_length(a)) == 0,
            what << ": cannot listen on port " << port << ": " << errno_text(errno));
  ULY_CHECK(listen(fd.get(), SOMAXCONN) == 0, what << ": listen(): " << errno_text(errno));
  set_nonblocking(fd.get());
  return fd;
}

int local_port(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return a.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port)
                                 : ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
}

// Waits until fd is ready for `events` or the deadline; false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(std::min(left * 1000.0 + 1, 1000.0)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // let the caller's read/write report it
  }
}

// Reads or writes exactly `bytes` on a non-blocking socket before the deadline; the error text
// (empty on success) says what happened.
std::string io_exact(int fd, void* buf, size_t bytes, bool write, Clock::time_point deadline) {
  char* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = write ? ::send(fd, p + done, bytes - done, MSG_NOSIGNAL) : ::recv(fd, p + done, bytes - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0 && !write) return "the connection was closed";
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd, write ? POLLOUT : POLLIN, deadline)) return "timed out";
      continue;
    }
    return errno_text(errno);
  }
  return "";
}

// Connects to `address` before the deadline, retrying while nobody listens yet.
// Returns the connected (non-blocking) socket, or an invalid Fd with *why set.
Fd connect_retrying(const sockaddr_storage& address, Clock::time_point deadline, std::string* why) {
  why->clear();
  for (;;) {
    Fd fd(socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) {
      *why = "socket(): " + errno_text(errno);
      return Fd();
    }
    set_nonblocking(fd.get());
    int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), address_length(address));
    int err = rc == 0 ? 0 : errno;
    if (rc != 0 && err == EINPROGRESS) {
      if (!wait_fd(fd.get(), POLLOUT, deadline)) {
        if (why->empty()) *why = "no answer";  // else keep what the last attempt said
        return Fd();
      }
      socklen_t len = sizeof(err);
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) {
      tune_data_socket(fd.get());
      return fd;
    }
    *why = errno_text(err);
    if (Clock::now() >= deadline) return Fd();
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != EHOSTUNREACH && err != ENETUNREACH && err != ECONNRESET &&
        err != ECONNABORTED)
      return Fd();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Accepts one connection before the deadline (invalid Fd on timeout).
Fd accept_until(int listener, Clock::time_point deadline) {
  for (;;) {
    const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      tune_data_socket(fd);
      return Fd(fd);
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    ULY_CHECK(errno == EAGAIN || errno == EWOULDBLOCK, "accept(): " << errno_text(errno));
    if (!wait_fd(listener, POLLIN, deadline)) return Fd();
  }
}

struct Hello {  // a rank's first words to rank 0, and on every mesh connection
  uint64_t magic;
  int32_t rank, size;
  int32_t port;  // where this rank listens for higher ranks (rendezvous only)
  int32_t pad;
};

struct TableHeader {  // rank 0's answer: status 0 and the table, or status 1 and an error text
  uint64_t magic;
  uint32_t status, length;
};

struct MsgHeader {
  uint32_t magic, group;
  int32_t tag;
  uint32_t pad;
  uint64_t bytes;
};

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8 && ranks.size() > 10) return s + ", ... (" + std::to_string(ranks.size()) + " in all)";
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return s;
}

// ------------------------------------------------------------------------------------------
// The world's connections (shared by every communicator split from it).
class TcpWorld {
 public:
  TcpWorld(int rank, int size, double comm_timeout_s, std::vector<Fd> peers, std::vector<std::string> where)
      : rank_(rank), size_(size), comm_timeout_s_(comm_timeout_s), peers_(std::move(peers)), where_(std::move(where)) {}

  int rank() const { return rank_; }
  int size() const { return size_; }

  // One message of a call: to or from world rank `peer`.
  struct Op {
    int peer;
    bool send;
    char* buf;
    size_t bytes;
    MsgHeader header{};  // sent, or expected
    MsgHeader got{};     // received
    size_t header_done = 0, done = 0;
    bool finished = false;
  };

  // Moves every op at once; returns when all are done, throws on a failure, a
  // disagreement or a call without progress for the communication timeout.
  void exchange(std::vector<Op>& ops, uint32_t group, int tag, const char* what) {
    for (Op& op : ops) {
      op.header = MsgHeader{kMsgMagic, group, tag, 0, op.bytes};
      ULY_CHECK(op.peer != rank_ && op.peer >= 0 && op.peer < size_ && peers_[op.peer].get() >= 0,
                what << ": no connection to rank " << op.peer);
    }
    size_t left = ops.size();
    auto last_progress = Clock::now();
    std::vector<pollfd> polls;
    std::vector<int> poll_peer;
    while (left > 0) {
      polls.clear();
      poll_peer.clear();
      // The first unfinished send and receive of each peer are active (a peer's messages go in order).
      std::vector<Op*> active_send(size_, nullptr), active_recv(size_, nullptr);
      for (Op& op : ops) {
        if (op.finished) continue;
        Op*& slot = op.send ? active_send[op.peer] : active_recv[op.peer];
        if (slot == nullptr) slot = &op;
      }
      for (int p = 0; p < size_; ++p) {
        short ev = 0;
        if (active_send[p]) ev |= POLLOUT;
        if (active_recv[p]) ev |= POLLIN;
        if (ev == 0) continue;
        polls.push_back(pollfd{peers_[p].get(), ev, 0});
        poll_peer.push_back(p);
      }
      const int n = poll(polls.data(), polls.size(), 1000);
      if (n < 0 && errno != EINTR) ULY_FAIL(what << ": poll(): " << errno_text(errno));
      bool progressed = false;
      for (size_t i = 0; n > 0 && i < polls.size(); ++i) {
        const int p = poll_peer[i];
        if (polls[i].revents == 0) continue;
        if (active_recv[p] && (polls[i].revents & (POLLIN | POLLHUP | POLLERR)))
          progressed |= pump(*active_recv[p], what, &left);
        if (active_send[p] && (polls[i].revents & (POLLOUT | POLLHUP | POLLERR)))
          progressed |= pump(*active_send[p], what, &left);
      }
      if (progressed) {
        last_progress = Clock::now();
      } else if (comm_timeout_s_ > 0 && seconds_since(last_progress) > comm_timeout_s_) {
        std::vector<int> waiting;
        for (const Op& op : ops)
          if (!op.finished && std::find(waiting.begin(), waiting.end(), op.peer) == waiting.end())
            waiting.push_back(op.peer);
        std::sort(waiting.begin(), waiting.end());
        ULY_FAIL(what << ": no data moved for " << comm_timeout_s_ << " s waiting on rank(s) " << rank_list(waiting)
                      << " (ULYSSES_COMM_TIMEOUT): a rank is stuck or the ranks issue different calls");
      }
    }
  }

  // Ends this rank's side of every connection after what is already queued (the peers read it,
  // then end of stream), then waits up to `linger_s` for each peer to end its side too, reading and
  // dropping what comes: ranks failing together each get to print their own error first, as
  // the MPI communicator's abort lets them; a healthy peer fails its next call naming this rank.
  void close_all(double linger_s) {
    for (Fd& fd : peers_)
      if (fd.get() >= 0) shutdown(fd.get(), SHUT_WR);
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(linger_s));
    std::vector<char> sink(1 << 16);
    for (;;) {
      std::vector<pollfd> polls;
      for (Fd& fd : peers_)
        if (fd.get() >= 0) polls.push_back(pollfd{fd.get(), POLLIN, 0});
      const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      if (polls.empty() || left <= 0) break;
      if (poll(polls.data(), polls.size(), static_cast<int>(left * 1000) + 1) <= 0) continue;
      for (const pollfd& p : polls) {
        if (p.revents == 0) continue;
        const ssize_t n = ::recv(p.fd, sink.data(), sink.size(), 0);
        if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) continue;
        for (Fd& fd : peers_)
          if (fd.get() == p.fd) fd.reset();  // the peer ended its side (or the connection broke)
      }
    }
    for (Fd& fd : peers_) fd.reset();
  }

 private:
  // Moves as much of op as the socket takes or gives now; true when bytes moved.
  bool pump(Op& op, const char* what, size_t* left) {
    const int fd = peers_[op.peer].get();
    bool moved = false;
    while (!op.finished) {
      char* dst;
      size_t want;
      if (op.header_done < sizeof(MsgHeader)) {
        dst = reinterpret_cast<char*>(op.send ? &op.header : &op.got) + op.header_done;
        want = sizeof(MsgHeader) - op.header_done;
      } else {
        dst = op.buf + op.done;
        want = op.bytes - op.done;
      }
      ssize_t n = 0;
      if (want > 0) {
        n = op.send ? ::send(fd, dst, want, MSG_NOSIGNAL) : ::recv(fd, dst, want, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return moved;
        if (n < 0) lost(op.peer, what, errno_text(errno));
        if (n == 0) lost(op.peer, what, "the connection was closed");
        moved = true;
      }
      if (op.header_done < sizeof(MsgHeader)) {
        op.header_done += static_cast<size_t>(n);
        if (op.header_done == sizeof(MsgHeader) && !op.send) check_header(op, what);
      } else {
        op.done += static_cast<size_t>(n);
      }
      if (op.header_done == sizeof(MsgHeader) && op.done == op.bytes) {
        op.finished = true;
        --*left;
      }
    }
    return moved;
  }

  void check_header(const Op& op, const char* what) {
    const MsgHeader& h = op.got;
    ULY_CHECK(h.magic == kMsgMagic, what << ": garbled message from rank " << op.peer << " (bad magic)");
    ULY_CHECK(h.group == op.header.group && h.tag == op.header.tag,
              what << ": rank " << op.peer << " sent a message of another call (group " << h.group << ", tag "
                   << h.tag << ") where this rank expected group " << op.header.group << ", tag " << op.header.tag
                   << ": the ranks issue different collectives or in another order");
    ULY_CHECK(h.bytes == op.bytes, what << ": rank " << op.peer << " sent " << h.bytes << " bytes but this rank expected "
                                        << op.bytes << ": the ranks disagree on the size");
  }

  [[noreturn]] void lost(int peer, const char* what, const std::string& why) {
    ULY_FAIL(what << ": lost the connection to rank " << peer << " (" << where_[peer] << "): " << why
                  << "; that rank exited or failed (its own message says why)");
  }

  int rank_, size_;
  double comm_timeout_s_;
  std::vector<Fd> peers_;
  std::vector<std::string> where_;
};

// Reduction of `slots` (each `count` elements, in rank order) into out.
template <class T>
void reduce_slots(const char* slots, size_t nslots, size_t count, ReduceOp op, void* out_v) {
  T* out = static_cast<T*>(out_v);
  const T* s = reinterpret_cast<const T*>(slots);
  for (size_t i = 0; i < count; ++i) {
    T acc = s[i];
    for (size_t r = 1; r < nslots; ++r) {
      const T x = s[r * count + i];
      acc = op == ReduceOp::Sum ? static_cast<T>(acc + x) : (x > acc ? x : acc);
    }
    out[i] = acc;
  }
}

void reduce_in_rank_order(DType dtype, const char* slots, size_t nslots, size_t count, ReduceOp op, void* out) {
  switch (dtype) {
    case DType::F32: return reduce_slots<float>(slots, nslots, count, op, out);
    case DType::F64: return reduce_slots<double>(slots, nslots, count, op, out);
    case DType::I32: return reduce_slots<int32_t>(slots, nslots, count, op, out);
    case DType::I64: return reduce_slots<int64_t>(slots, nslots, count, op, out);
    case DType::U8: return reduce_slots<uint8_t>(slots, nslots, count, op, out);
    case DType::BF16:
    case DType::F16: break;
  }
  ULY_FAIL("reduce on " << dtype_name(dtype) << " over TCP: no " << dtype_name(dtype) << " arithmetic on the host "
                        << "channel; convert to float32 (or reduce on the GPU with --comm nccl)");
}

void check_reducible(DType dtype, const char* call) {
  ULY_CHECK(dtype != DType::BF16 && dtype != DType::F16,
            call << " on " << dtype_name(dtype) << ": the TCP communicator has no " << dtype_name(dtype)
                 << " arithmetic; convert to float32 (or reduce on the GPU with --comm nccl)");
}

class TcpCommunicator final : public Communicator {
 public:
  TcpCommunicator(std::shared_ptr<TcpWorld> world, std::vector<int> members, uint32_t group)
      : world_(std::move(world)), members_(std::move(members)), group_(group) {
    rank_ = static_cast<int>(std::find(members_.begin(), members_.end(), world_->rank()) - members_.begin());
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string name() const override { return "tcp"; }

  void all_to_all(const void* send, void* recv, size_t count, DType dtype) override {
    const size_t P = size(), block = count * dtype_size(dtype);
    std::vector<char> copy;
    if (send == recv && block > 0) {  // in place: the blocks going out are saved first
      copy.assign(static_cast<const char*>(send), static_cast<const char*>(send) + P * block);
      send = copy.data();
    }
    std::vector<TcpWorld::Op> ops;
    for (size_t r = 0; r < P; ++r) {
      if (static_cast<int>(r) == rank_) {
        if (block) std::memmove(at(recv, r * block), cat(send, r * block), block);
        continue;
      }
      ops.push_back(op_send(r, cat(send, r * block), block));
      ops.push_back(op_recv(r, at(recv, r * block), block));
    }
    run(ops, kTagBase - 1, "all_to_all");
  }

  void all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                    const size_t* recv_counts, const size_t* recv_displs, DType dtype) override {
    const size_t P = size(), es = dtype_size(dtype);
    std::vector<char> copy;
    if (send == recv) {
      size_t extent = 0;
      for (size_t r = 0; r < P; ++r) {
        ULY_CHECK(send_counts[r] == recv_counts[r] && send_displs[r] == recv_displs[r],
                  "in-place all_to_all_v needs equal send and receive layouts; rank " << r << " differs");
        extent = std::max(extent, (send_displs[r] + send_counts[r]) * es);
      }
      copy.assign(static_cast<const char*>(send), static_cast<const char*>(send) + extent);
      send = copy.data();
    }
    std::vector<TcpWorld::Op> ops;
    for (size_t r = 0; r < P; ++r) {
      if (static_cast<int>(r) == rank_) {
        ULY_CHECK(send_counts[r] == recv_counts[r], "all_to_all_v: this rank sends " << send_counts[r]
                                                        << " elements to itself but expects " << recv_counts[r]);
        if (send_counts[r])
          std::memmove(at(recv, recv_displs[r] * es), cat(send, send_displs[r] * es), send_counts[r] * es);
        continue;
      }
      ops.push_back(op_send(r, cat(send, send_displs[r] * es), send_counts[r] * es));
      ops.push_back(op_recv(r, at(recv, recv_displs[r] * es), recv_counts[r] * es));
    }
    run(ops, kTagBase - 2, "all_to_all_v");
  }

  void all_gather(const void* send, void* recv, size_t count, DType dtype) override {
    const size_t P = size(), block = count * dtype_size(dtype);
    char* mine = at(recv, rank_ * block);
    if (send != mine && block) std::memmove(mine, send, block);
    std::vector<TcpWorld::Op> ops;
    for (size_t r = 0; r < P; ++r) {
      if (static_cast<int>(r) == rank_) continue;
      ops.push_back(op_send(r, mine, block));
      ops.push_back(op_recv(r, at(recv, r * block), block));
    }
    run(ops, kTagBase - 3, "all_gather");
  }

  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    check_reducible(dtype, "reduce_scatter");
    const size_t P = size(), block = count * dtype_size(dtype);
    // slots[r]: rank r's contribution to this rank's block, reduced in rank order afterwards.
    std::vector<char> slots(P * block);
    if (block) std::memcpy(slots.data() + rank_ * block, cat(send, rank_ * block), block);
    std::vector<TcpWorld::Op> ops;
    for (size_t r = 0; r < P; ++r) {
      if (static_cast<int>(r) == rank_) continue;
      ops.push_back(op_send(r, cat(send, r * block), block));
      ops.push_back(op_recv(r, slots.data() + r * block, block));
    }
    run(ops, kTagBase - 4, "reduce_scatter");
    reduce_in_rank_order(dtype, slots.data(), P, count, op, recv);
  }

  // Reduce-scatter over P near-equal chunks, then all-gather of the chunks: each element is
  // reduced by one rank in rank order and copied to the others, so every rank has the same bits.
  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op) override {
    check_reducible(dtype, "all_reduce");
    const size_t P = size(), es = dtype_size(dtype);
    if (P == 1) {
      if (send != recv && count) std::memmove(recv, send, count * es);
      return;
    }
    auto chunk_begin = [&](size_t r) { return count * r / P; };
    const size_t my_begin = chunk_begin(rank_), my_count = chunk_begin(rank_ + 1) - my_begin;
    std::vector<char> slots(P * my_count * es);
    if (my_count) std::memcpy(slots.data() + rank_ * my_count * es, cat(send, my_begin * es), my_count * es);
    std::vector<TcpWorld::Op> ops;
    for (size_t r = 0; r < P; ++r) {
      if (static_cast<int>(r) == rank_) continue;
      const size_t b = chunk_begin(r), n = chunk_begin(r + 1) - b;
      ops.push_back(op_send(r, cat(send, b * es), n * es));
      ops.push_back(op_recv(r, slots.data() + r * my_count * es, my_count * es));
    }
    run(ops, kTagBase - 5, "all_reduce");
    reduce_in_rank_order(dtype, slots.data(), P, my_count, op, at(recv, my_begin * es));
    ops.clear();
    for (size_t r = 0; r < P; ++r) {
      if (static_cast<int>(r) == rank_) continue;
      const size_t b = chunk_begin(r), n = chunk_begin(r + 1) - b;
      ops.push_back(op_send(r, at(recv, my_begin * es), my_count * es));
      ops.push_back(op_recv(r, at(recv, b * es), n * es));
    }
    run(ops, kTagBase - 6, "all_reduce");
  }

  void broadcast(void* buf, size_t count, DType dtype, int root) override {
    ULY_CHECK(root >= 0 && root < size(), "broadcast from root " << root << " in a group of " << size() << " ranks");
    const size_t bytes = count * dtype_size(dtype);
    std::vector<TcpWorld::Op> ops;
    if (rank_ == root) {
      for (int r = 0; r < size(); ++r)
        if (r != root) ops.push_back(op_send(r, static_cast<char*>(buf), bytes));
    } else {
      ops.push_back(op_recv(root, static_cast<char*>(buf), bytes));
    }
    run(ops, kTagBase - 7, "broadcast");
  }

  void send(const void* buf, size_t count, DType dtype, int peer, int tag) override {
    check_peer("send to", peer, tag);
    std::vector<TcpWorld::Op> ops{op_send(peer, static_cast<const char*>(buf), count * dtype_size(dtype))};
    run(ops, tag, "send");
  }
  void recv(void* buf, size_t count, DType dtype, int peer, int tag) override {
    check_peer("recv from", peer, tag);
    std::vector<TcpWorld::Op> ops{op_recv(peer, static_cast<char*>(buf), count * dtype_size(dtype))};
    run(ops, tag, "recv");
  }

  void sendrecv(const void* send, size_t send_count, int dest, void* recv, size_t recv_count, int source,
                DType dtype, int tag) override {
    check_peer("sendrecv to", dest, tag);
    check_peer("sendrecv from", source, tag);
    const size_t es = dtype_size(dtype);
    ULY_CHECK((dest == rank_) == (source == rank_),
              "sendrecv to rank " << dest << " and from rank " << source << ": either both or neither is this rank ("
                                  << rank_ << ")");
    if (dest == rank_) {
      ULY_CHECK(send_count == recv_count, "sendrecv to itself: " << send_count << " elements sent, " << recv_count
                                                                 << " expected");
      if (send_count) std::memmove(recv, send, send_count * es);
      return;
    }
    std::vector<TcpWorld::Op> ops{op_send(dest, static_cast<const char*>(send), send_count * es),
                                  op_recv(source, static_cast<char*>(recv), recv_count * es)};
    run(ops, tag, "sendrecv");
  }

  void barrier() override {
    std::vector<uint8_t> all(size());
    const uint8_t mine = 1;
    all_gather(&mine, all.data(), 1, DType::U8);
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    ULY_CHECK(color >= 0, "split with negative color " << color << " (every rank must join a group)");
    const int64_t mine[2] = {color, key};
    std::vector<int64_t> all(2 * members_.size());
    all_gather(mine, all.data(), 2, DType::I64);
    std::vector<int> group;  // group ranks of my color, ordered by (key, group rank)
    for (int r = 0; r < size(); ++r)
      if (all[2 * r] == color) group.push_back(r);
    std::stable_sort(group.begin(), group.end(), [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
    std::vector<int> members;
    for (int r : group) members.push_back(members_[r]);
    ++splits_;
    // A new group id, the same on every member: from this group's id, its split count and the color.
    uint64_t h = (static_cast<uint64_t>(group_) * 1000003u) ^ (static_cast<uint64_t>(splits_) * 7919u) ^
                 (static_cast<uint64_t>(color) * 2654435761u);
    h ^= h >> 29;
    return std::make_unique<TcpCommunicator>(world_, std::move(members), static_cast<uint32_t>(h | 1u));
  }

  [[noreturn]] void abort(int exit_code) override {
    std::fflush(nullptr);
    world_->close_all(3.0);  // the peers' next call fails at once, naming this rank
    std::_Exit(exit_code);
  }

 private:
  static const char* cat(const void* p, size_t off) { return static_cast<const char*>(p) + off; }
  static char* at(void* p, size_t off) { return static_cast<char*>(p) + off; }

  TcpWorld::Op op_send(size_t group_rank, const char* buf, size_t bytes) const {
    TcpWorld::Op op{};
    op.peer = members_[group_rank];
    op.send = true;
    op.buf = const_cast<char*>(buf);  // only read
    op.bytes = bytes;
    return op;
  }
  TcpWorld::Op op_recv(size_t group_rank, char* buf, size_t bytes) const {
    TcpWorld::Op op{};
    op.peer = members_[group_rank];
    op.send = false;
    op.buf = buf;
    op.bytes = bytes;
    return op;
  }
  void run(std::vector<TcpWorld::Op>& ops, int tag, const char* what) {
    if (!ops.empty()) world_->exchange(ops, group_, tag, what);
  }
  void check_peer(const char* what, int peer, int tag) const {
    ULY_CHECK(peer >= 0 && peer < size(), what << " rank " << peer << " in a group of " << size() << " ranks");
    ULY_CHECK(tag >= 0, "tag " << tag << " is negative (tags below 0 are the communicator's own)");
  }

  std::shared_ptr<TcpWorld> world_;
  std::vector<int> members_;  // world ranks, by group rank
  uint32_t group_;
  int rank_ = 0;
  int splits_ = 0;
};

// ------------------------------------------------------------------------------------------
// Rendezvous.

sockaddr_storage resolve(const std::string& host, int port, const std::string& where) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  ULY_CHECK(rc == 0 && res != nullptr, "rendezvous at " << where << ": cannot resolve MASTER_ADDR '" << host
                                                        << "': " << gai_strerror(rc));
  sockaddr_storage a{};
  for (addrinfo* p = res; p != nullptr; p = p->ai_next)
    if (p->ai_family == AF_INET || (p->ai_family == AF_INET6 && a.ss_family != AF_INET)) {
      std::memcpy(&a, p->ai_addr, p->ai_addrlen);
      if (p->ai_family == AF_INET) break;  // IPv4 first: what clusters use
    }
  freeaddrinfo(res);
  ULY_CHECK(a.ss_family == AF_INET || a.ss_family == AF_INET6,
            "rendezvous at " << where << ": MASTER_ADDR '" << host << "' has no IPv4 or IPv6 address");
  return a;
}

}  // namespace

std::unique_ptr<Communicator> connect_tcp_world(const TcpWorldOptions& o) {
  const int P = o.size, me = o.rank;
  ULY_CHECK(P >= 1 && me >= 0 && me < P, "TCP world: rank " << me << " of " << P);
  const std::string where = o.master_addr + ":" + std::to_string(o.port) +
                            (o.port_source.empty() ? "" : " (" + o.port_source + ")");
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(o.rendezvous_timeout_s));
  const sockaddr_storage master = resolve(o.master_addr, o.port, where);
  std::vector<Fd> peers(P);
  std::vector<sockaddr_storage> table(P);
  std::vector<std::string> seen_at(P, "?");
  Fd listener;

  if (me == 0) {
    listener = listen_on(master.ss_family, o.port, "rendezvous at " + where + ", rank 0");
    std::vector<int> ports(P, 0);
    int joined = 1;
    while (joined < P) {
      Fd c = accept_until(listener.get(), deadline);
      if (c.get() < 0) {
        std::vector<int> missing;
        for (int r = 1; r < P; ++r)
          if (peers[r].get() < 0) missing.push_back(r);
        std::string text = "rendezvous at " + where + ": waited " +
                           std::to_string(static_cast<int>(seconds_since(start) + 0.5)) + " s for " +
                           std::to_string(missing.size()) + " of " + std::to_string(P) + " ranks that never came: " +
                           "rank" + (missing.size() > 1 ? "s " : " ") + rank_list(missing) +
                           " (ULYSSES_RENDEZVOUS_TIMEOUT=" + std::to_string(static_cast<int>(o.rendezvous_timeout_s)) +
                           "); check that every rank was started with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE";
        // Tell the ranks that came, so that each stops with the same line instead of waiting.
        const TableHeader h{kHelloMagic, 1, static_cast<uint32_t>(text.size())};
        const auto soon = Clock::now() + std::chrono::seconds(2);
        for (int r = 1; r < P; ++r)
          if (peers[r].get() >= 0 && io_exact(peers[r].get(), const_cast<TableHeader*>(&h), sizeof(h), true, soon).empty())
            io_exact(peers[r].get(), text.data(), text.size(), true, soon);
        ULY_FAIL(text);
      }
      Hello h{};
      const std::string err = io_exact(c.get(), &h, sizeof(h), false, Clock::now() + std::chrono::seconds(10));
      if (!err.empty() || h.magic != kHelloMagic) continue;  // not one of ours (a port scan, a stale client)
      ULY_CHECK(h.size == P, "rendezvous at " << where << ": rank " << h.rank << " was started with WORLD_SIZE="
                                              << h.size << " but rank 0 with WORLD_SIZE=" << P);
      ULY_CHECK(h.rank >= 1 && h.rank < P && peers[h.rank].get() < 0,
                "rendezvous at " << where << ": two processes say they are rank " << h.rank
                                 << " (RANK must differ between the processes of one job)");
      sockaddr_storage a{};
      socklen_t len = sizeof(a);
      getpeername(c.get(), reinterpret_cast<sockaddr*>(&a), &len);
      seen_at[h.rank] = address_text(a);
      ports[h.rank] = h.port;
      peers[h.rank] = std::move(c);
      ++joined;
    }
    // Each rank's address as rank 0 saw it, with its listening port; then the table to everyone.
    for (int r = 1; r < P; ++r) {
      sockaddr_storage a{};
      socklen_t len = sizeof(a);
      getpeername(peers[r].get(), reinterpret_cast<sockaddr*>(&a), &len);
      set_port(a, ports[r]);
      table[r] = a;
    }
    const TableHeader h{kHelloMagic, 0, static_cast<uint32_t>(P * sizeof(sockaddr_storage))};
    for (int r = 1; r < P; ++r) {
      std::string err = io_exact(peers[r].get(), const_cast<TableHeader*>(&h), sizeof(h), true, deadline);
      if (err.empty()) err = io_exact(peers[r].get(), table.data(), P * sizeof(sockaddr_storage), true, deadline);
      ULY_CHECK(err.empty(), "rendezvous at " << where << ": sending the address table to rank " << r << ": " << err);
    }
    listener.reset();
  } else {
    listener = listen_on(master.ss_family, 0, "TCP world, rank " + std::to_string(me));
    std::string why;
    peers[0] = connect_retrying(master, deadline, &why);
    ULY_CHECK(peers[0].get() >= 0,
              "rendezvous at " << where << ": rank " << me << " could not reach rank 0 in "
                               << static_cast<int>(seconds_since(start) + 0.5) << " s (" << why
                               << "; ULYSSES_RENDEZVOUS_TIMEOUT=" << static_cast<int>(o.rendezvous_timeout_s)
                               << "): rank 0 never listened there; check that it was started and that MASTER_ADDR is "
                                  "reachable from this host");
    seen_at[0] = address_text(master);
    Hello h{kHelloMagic, me, P, local_port(listener.get()), 0};
    std::string err = io_exact(peers[0].get(), &h, sizeof(h), true, deadline);
    TableHeader th{};
    // Rank 0 answers when every rank has come, or when it gives up (it then says why).
    const auto table_deadline = deadline + std::chrono::seconds(10);
    if (err.empty()) err = io_exact(peers[0].get(), &th, sizeof(th), false, table_deadline);
    ULY_CHECK(err.empty() && th.magic == kHelloMagic,
              "rendezvous at " << where << ": rank " << me << " reached rank 0 but got no address table within "
                               << static_cast<int>(seconds_since(start) + 0.5) << " s ("
                               << (err.empty() ? "garbled answer" : err) << "); rank 0 failed or another program "
                               << "listens on that port");
    if (th.status != 0) {
      std::string text(std::min<uint32_t>(th.length, 4096), '\0');
      io_exact(peers[0].get(), text.data(), text.size(), false, Clock::now() + std::chrono::seconds(5));
      ULY_FAIL(text);
    }
    ULY_CHECK(th.length == P * sizeof(sockaddr_storage), "rendezvous at " << where << ": the address table has "
                                                                          << th.length << " bytes");
    err = io_exact(peers[0].get(), table.data(), th.length, false, table_deadline);
    ULY_CHECK(err.empty(), "rendezvous at " << where << ": reading the address table from rank 0: " << err);
    // The mesh: connect to every lower rank but 0, accept every higher one. Every rank has joined by
    // now, so this takes moments; it gets at least a minute even when the rendezvous used most of its time.
    const auto mesh_deadline = std::max(deadline, Clock::now() + std::chrono::seconds(60));
    for (int r = 1; r < me; ++r) {
      peers[r] = connect_retrying(table[r], mesh_deadline, &why);
      ULY_CHECK(peers[r].get() >= 0, "TCP world: rank " << me << " could not connect to rank " << r << " at "
                                                        << address_text(table[r]) << ": " << why);
      seen_at[r] = address_text(table[r]);
      Hello hr{kHelloMagic, me, P, 0, 0};
      err = io_exact(peers[r].get(), &hr, sizeof(hr), true, mesh_deadline);
      ULY_CHECK(err.empty(), "TCP world: rank " << me << " greeting rank " << r << ": " << err);
    }
    for (int accepted = 0; accepted < P - 1 - me; ++accepted) {
      Fd c = accept_until(listener.get(), mesh_deadline);
      ULY_CHECK(c.get() >= 0, "TCP world: rank " << me << " waited " << static_cast<int>(seconds_since(start) + 0.5)
                                                 << " s for the higher ranks to connect");
      Hello hr{};
      err = io_exact(c.get(), &hr, sizeof(hr), false, mesh_deadline);
      ULY_CHECK(err.empty() && hr.magic == kHelloMagic && hr.rank > me && hr.rank < P && peers[hr.rank].get() < 0,
                "TCP world: rank " << me << ": a bad greeting on the mesh (" << (err.empty() ? "wrong rank" : err)
                                   << ")");
      sockaddr_storage a{};
      socklen_t len = sizeof(a);
      getpeername(c.get(), reinterpret_cast<sockaddr*>(&a), &len);
      seen_at[hr.rank] = address_text(a);
      peers[hr.rank] = std::move(c);
    }
    listener.reset();
  }
  for (int r = 0; r < P; ++r)
    if (r != me && peers[r].get() >= 0) set_nonblocking(peers[r].get());
  auto world = std::make_shared<TcpWorld>(me, P, o.comm_timeout_s, std::move(peers), std::move(seen_at));
  std::vector<int> members(P);
  std::iota(members.begin(), members.end(), 0);
  auto comm = std::make_unique<TcpCommunicator>(world, std::move(members), 0u);
  comm->barrier();  // every connection works before the first real call
  return comm;
}

std::unique_ptr<Communicator> make_tcp_world_from_env() {
  const TorchrunEnv env = detect_torchrun_env();
  ULY_CHECK(env.present, "make_tcp_world_from_env: torchrun's variables (WORLD_SIZE, RANK, ...) are not set");
  TcpWorldOptions o;
  o.rank = env.rank;
  o.size = env.world_size;
  o.master_addr = env.master_addr;
  o.port = env.rendezvous_port;
  o.port_source = env.port_source;
  o.rendezvous_timeout_s = env.timeout_s;
  if (const char* v = std::getenv("ULYSSES_COMM_TIMEOUT"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    o.comm_timeout_s = std::strtod(v, &end);
    ULY_CHECK(*end == '\0' && o.comm_timeout_s >= 0,
              "ULYSSES_COMM_TIMEOUT=" << v << " is not a number of seconds (0: wait for ever)");
  }
  std::unique_ptr<Communicator> world;
  if (env.world_size == 1) {
    world = make_self_communicator();
  } else {
    world = connect_tcp_world(o);
  }
  set_process_identity(world->rank(), world->size());
  return world;
}

}  // namespace ulysses
