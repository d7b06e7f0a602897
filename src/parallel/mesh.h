// The process mesh: how the world's ranks are arranged into groups.
//
//   world = dp × sp,   sp = ulysses × ring
//
// Ranks that hold pieces of the same sequence form an SP group; they are
// consecutive world ranks (so an SP group sits inside a node when sp <= GPUs
// per node and ranks are placed by node):
//   sp_rank = world_rank % sp,   dp_rank = world_rank / sp.
// Ranks with the same sp_rank form a DP group (they see different sequences).
//
// Inside an SP group the ring degree (for ring attention / the USP hybrid) takes
// the slow dimension: ulysses_rank = sp_rank % ulysses, ring_rank = sp_rank / ulysses,
// so all-to-alls stay among neighbouring ranks and the ring crosses nodes. With
// ring = 1 (the default) the Ulysses group is the SP group itself and no extra
// communicator is made. With ring > 1 the attention is the hybrid: Ulysses inside
// each group of `ulysses` ranks, ring attention across the `ring` groups
// (parallel/ring_attention.h); zigzag picks the ring's token layout (token_layout.h).
//
// Every constructor argument check is made identically on every rank (the
// decision depends only on the world size and on values all ranks agree on),
// so a bad --sp throws on all ranks instead of leaving some waiting in a split.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "parallel/token_layout.h"

namespace ulysses {

class ProcessMesh {
 public:
  // sp <= 0: all ranks in one SP group. ring: ring degree inside the SP group
  // (must divide sp). Collective over `world`, which must outlive the mesh.
  // zigzag: dual-chunk token layout over the ring (only meaningful with ring > 1).
  ProcessMesh(Communicator& world, int sp, int ring = 1, bool zigzag = false);
  ProcessMesh(const ProcessMesh&) = delete;
  ProcessMesh& operator=(const ProcessMesh&) = delete;

  Communicator& world() const { return world_; }
  Communicator& sp() const { return *sp_; }  // the whole SP group (ulysses × ring ranks)
  Communicator& dp() const { return *dp_; }  // ranks with the same sp_rank
  // Ulysses all-to-all group: the SP group itself when ring == 1.
  Communicator& ulysses() const { return ulysses_ ? *ulysses_ : *sp_; }
  // Ring group (same dp_rank and ulysses_rank); size 1 when ring == 1.
  Communicator& ring() const { return *ring_; }

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int sp_rank() const { return sp_rank_; }
  int sp_size() const { return sp_size_; }
  int dp_rank() const { return dp_rank_; }
  int dp_size() const { return dp_size_; }
  int ulysses_rank() const { return sp_rank_ % ulysses_size_; }
  int ulysses_size() const { return ulysses_size_; }
  int ring_rank() const { return sp_rank_ / ulysses_size_; }
  int ring_size() const { return ring_size_; }
  bool zigzag() const { return zigzag_; }
  // Which tokens of a row each SP rank holds.
  TokenLayout layout() const { return TokenLayout(sp_size_, ring_size_, zigzag_); }

  // "8 ranks = dp 2 × sp 4 (ulysses 4 × ring 1)"
  std::string describe() const;

  // The sp values that divide a world of `world_size` ranks (for messages and --help).
  static std::vector<int> valid_sp_values(int world_size);

 private:
  Communicator& world_;
  int world_rank_, world_size_;
  int sp_rank_, sp_size_, dp_rank_, dp_size_;
  int ulysses_size_, ring_size_;
  bool zigzag_ = false;
  std::unique_ptr<Communicator> sp_, dp_, ulysses_, ring_;
};

}  // namespace ulysses
