#include "core/token_batch.h"

#include <algorithm>

namespace ulysses {

int64_t TokenBatch::valid_targets() const {
  return std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t != kIgnoreIndex; });
}

}  // namespace ulysses
