// Where the model gets its weights. The model asks for a group of parameters (a layer, the
// embedding, the final norm with lm_head) before using their values and hands the group back
// after. With whole weights on every rank this costs nothing. With weight sharding (ZeRO stage
// 3, LlamaWeights' sharding) each rank holds one block of every parameter (Parameter::shard):
// acquire() all-gathers the group's blocks into whole values (Weights pool) and release() drops
// them, so a rank holds its shards plus the groups in use. prefetch() starts the gathers of the
// group that comes next, asynchronously, so that they run during the current group's compute.
//
// Every rank of the sharding group must make the same calls in the same order (the gathers are
// collectives over it); the model's calls depend only on the step options and the layer count.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "model/llama_weights.h"

namespace ulysses {

class ParameterStore {
 public:
  // Group ids besides the layers 0 .. L-1.
  static constexpr int64_t kEmbedding = -1;  // the embedding table
  static constexpr int64_t kHead = -2;       // the final norm and lm_head (the embedding when tied)
  static constexpr int64_t kNone = -3;       // nothing (prefetch(kNone) does nothing)

  // prefetching: prefetch() starts gathers (else it does nothing and acquire() gathers).
  ParameterStore(LlamaWeights& weights, Backend& backend, bool prefetching = true);
  ~ParameterStore();
  ParameterStore(const ParameterStore&) = delete;
  ParameterStore& operator=(const ParameterStore&) = delete;

  // Starts gathering the group's values unless they are gathered or on their way.
  void prefetch(int64_t group);
  // The group's values are whole (Parameter::value) until the matching release(); acquires nest.
  void acquire(int64_t group);
  void release(int64_t group);
  // Waits for every gather in flight and drops every value not acquired (after a failure in
  // the middle of a step, and at its end).
  void drop_unused();

  // While a group is held (acquire .. release, also on an exception).
  class Held {
   public:
    Held(ParameterStore& store, int64_t group) : store_(store), group_(group) { store_.acquire(group_); }
    ~Held() { store_.release(group_); }
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;

   private:
    ParameterStore& store_;
    int64_t group_;
  };

 private:
  struct Slot {
    int users = 0;
    Tensor padded;      // ranks × block elements, the gathered blocks
    CommHandle gather;  // in flight (prefetched) until waited
  };
  std::vector<Parameter*> members(int64_t group);
  Slot& slot(const Parameter& p);
  void start(Parameter& p);   // the gather of p's value, unless gathered or in flight
  void finish(Parameter& p);  // waits for it; p.value is the whole value afterwards
  LlamaWeights& w_;
  Backend& be_;
  bool sharded_;
  bool prefetching_;
  std::vector<Slot> slots_;  // one per parameter (weight sharding only)
};

}  // namespace ulysses
