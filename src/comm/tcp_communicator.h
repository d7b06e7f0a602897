// A host channel over TCP sockets, for worlds started without MPI (torchrun and
// launchers with its RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT contract).
//
// Rendezvous: rank 0 listens on the rendezvous port; every other rank opens a listening
// socket of its own (an ephemeral port), connects to rank 0 and says who it is and where
// it listens; rank 0 waits for all of them (or the timeout: one error naming the ranks
// that never came, on rank 0 and on every rank that did) and sends everyone the table of
// addresses. Each rank then connects to every lower rank, accepts every higher one: a
// full mesh, one connection per pair, which carries every communicator of the world
// (split groups included) in call order.
//
// Collectives: every rank moves all of a call's messages at once (non-blocking sockets,
// one poll loop), so rings and all-to-alls cannot deadlock. Each message carries a header
// (group, tag, bytes) that the receiver checks: ranks that disagree on a call's size or
// order stop with an error instead of reading garbage. Reductions (all_reduce,
// reduce_scatter) add the ranks' contributions in rank order, ((x0 + x1) + x2) + ..., so
// the result is deterministic and bit-identical on every rank; with two ranks that is
// what MPI computes too, with more the rounding may differ from MPI's tree (float32
// sums agree to rounding, not bit for bit). The *_async calls run blocking.
//
// Failures: a peer that exits or dies closes its sockets, and the next call that
// needs it fails with one error naming the rank; a peer that is alive but sends
// nothing for ULYSSES_COMM_TIMEOUT seconds (default 1800) fails the call too.
// abort() closes every connection and exits, which ends the peers the same way.
#pragma once
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace ulysses {

struct TcpWorldOptions {
  int rank = 0, size = 1;
  std::string master_addr = "127.0.0.1";  // a host name or address that every rank can reach
  int port = 0;                           // rank 0 listens here
  std::string port_source;                // what chose the port, for messages ("MASTER_PORT=29500")
  double rendezvous_timeout_s = 300;
  double comm_timeout_s = 1800;           // a call with no progress for this long fails
};

// Blocks until every rank has joined (or throws a clear Error). The process identity
// used in error messages is not changed (make_world_communicator sets it).
std::unique_ptr<Communicator> connect_tcp_world(const TcpWorldOptions& options);

// The world of a torchrun-style launch (comm/launch_env.h's TorchrunEnv), with
// ULYSSES_COMM_TIMEOUT read from the environment; sets the process identity.
std::unique_ptr<Communicator> make_tcp_world_from_env();

}  // namespace ulysses
