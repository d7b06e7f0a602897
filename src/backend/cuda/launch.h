// Host-side launch guards shared by the kernel files: sizes that a grid can
// cover, so that a huge tensor fails with a message instead of a bad launch.
#pragma once
#include <cstdint>

#include "core/error.h"

namespace ulysses::cuda::detail {

// One block per row: the row count must fit in gridDim.x.
inline void check_rows(int64_t rows, const char* op) {
  ULY_CHECK(rows >= 0 && rows <= 2147483647LL,
            op << ": " << rows << " rows exceed the CUDA grid limit of 2^31-1 blocks; split the call into tiles");
}

inline void check_nonneg(int64_t v, const char* what, const char* op) {
  ULY_CHECK(v >= 0, op << ": negative size " << what << " = " << v);
}

}  // namespace ulysses::cuda::detail
