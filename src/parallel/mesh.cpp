#include "parallel/mesh.h"

#include <cstdint>
#include <sstream>

#include "core/error.h"

namespace ulysses {
namespace {

std::string join(const std::vector<int>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os.str();
}

}  // namespace

std::vector<int> ProcessMesh::valid_sp_values(int world_size) {
  std::vector<int> out;
  for (int d = 1; d <= world_size; ++d)
    if (world_size % d == 0) out.push_back(d);
  return out;
}

ProcessMesh::ProcessMesh(Communicator& world, int sp, int ring, bool zigzag)
    : world_(world), world_rank_(world.rank()), world_size_(world.size()) {
  // Ranks started with different arguments would split into groups that do not
  // match and wait on each other forever; one small all-reduce turns that into
  // the same error on every rank.
  int32_t v[6] = {sp, -sp, ring, -ring, zigzag ? 1 : 0, zigzag ? -1 : 0};
  world.all_reduce(v, v, 6, DType::I32, ReduceOp::Max);
  ULY_CHECK(v[0] == -v[1], "ranks disagree on the sequence-parallel degree (--sp from " << -v[1] << " to " << v[0]
                                                                                         << "): start every rank "
                                                                                            "with the same arguments");
  ULY_CHECK(v[2] == -v[3], "ranks disagree on the ring degree (from " << -v[3] << " to " << v[2]
                                                                       << "): start every rank with the same arguments");
  ULY_CHECK(v[4] == -v[5], "ranks disagree on zigzag sharding: start every rank with the same arguments");

  // From here on every decision depends only on (world_size, sp, ring), which all ranks share.
  const int P = world_size_;
  if (sp <= 0) sp = P;
  ULY_CHECK(sp <= P && P % sp == 0,
            "--sp " << sp << " does not divide the " << P << " ranks of this job (ranks = dp × sp); valid --sp for "
                    << P << " ranks: " << join(valid_sp_values(P)) << " (or 0 for all ranks in one group)");
  ULY_CHECK(ring >= 1 && sp % ring == 0, "ring degree " << ring << " does not divide --sp " << sp
                                                        << " (sp = ulysses × ring); valid ring degrees for sp " << sp
                                                        << ": " << join(valid_sp_values(sp)));

  sp_size_ = sp;
  dp_size_ = P / sp;
  sp_rank_ = world_rank_ % sp;
  dp_rank_ = world_rank_ / sp;
  ring_size_ = ring;
  ulysses_size_ = sp / ring;
  zigzag_ = zigzag && ring > 1;

  // Keys order each new group by the coordinate it indexes, so group rank == that coordinate.
  sp_ = world.split(/*color=*/dp_rank_, /*key=*/sp_rank_);
  dp_ = world.split(/*color=*/sp_rank_, /*key=*/dp_rank_);
  if (ring_size_ > 1) {
    const int u = ulysses_rank(), r = ring_rank();
    ulysses_ = world.split(/*color=*/dp_rank_ * ring_size_ + r, /*key=*/u);
    ring_ = world.split(/*color=*/dp_rank_ * ulysses_size_ + u, /*key=*/r);
  } else {
    ring_ = make_self_communicator();
  }

  ULY_CHECK(sp_->size() == sp_size_ && sp_->rank() == sp_rank_ && dp_->size() == dp_size_ &&
                dp_->rank() == dp_rank_ && ulysses().size() == ulysses_size_ &&
                ulysses().rank() == ulysses_rank() && ring_->size() == ring_size_ && ring_->rank() == ring_rank(),
            "internal error: the " << world.name() << " communicator split into groups that do not match the mesh "
                                   << describe());
}

std::string ProcessMesh::describe() const {
  std::ostringstream os;
  os << world_size_ << (world_size_ == 1 ? " rank" : " ranks") << " = dp " << dp_size_ << " × sp " << sp_size_
     << " (ulysses " << ulysses_size_ << " × ring " << ring_size_ << (zigzag_ ? ", zigzag" : "") << ")";
  return os.str();
}

}  // namespace ulysses
