// The documents packed in one row of S tokens, as causal attention needs them:
// query i sees keys j with doc_start[i] <= j <= i, so documents never attend
// to each other. Two forms of the same spans: per token (the reference and our
// own kernels read doc_start) and per document (cuDNN's variable-length
// attention reads the boundaries as ragged offsets and sequence lengths).
// Both live on the backend's device; the count and the longest span are known
// on the host, so a backend can pick its kernels without reading the device.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace ulysses {

class Backend;

struct Documents {
  // [S] int32: the first key each token sees: its document's first token, or with a sliding
  // window of W tokens the later of that and i - W + 1. Never decreasing along the row, which
  // is all the attention kernels assume of it.
  Tensor doc_start;
  Tensor bounds;         // [count + 1] int32: 0 = b_0 < b_1 < ... < b_count = S
  int64_t count = 0;     // documents in the row
  int64_t longest = 0;   // tokens of the longest document
  int64_t window = 0;    // the sliding window folded into doc_start (0: none); kernels that read
                         // only the bounds (cuDNN's ragged form) must not run a windowed row
  int64_t tokens() const { return doc_start.defined() ? doc_start.numel() : 0; }
};

// Checks doc_start (host, [S]: doc_start[0] == 0 and every doc_start[i] is i or
// doc_start[i - 1]) and makes both forms on the backend's device. window > 0: causal attention
// also limited to the last `window` tokens (query i sees keys j > i - window), folded into the
// per-token form.
Documents make_documents(Backend& backend, const std::vector<int32_t>& doc_start, int64_t window = 0);
// The same from an int32 tensor (host or the backend's device).
Documents make_documents(Backend& backend, const Tensor& doc_start);
// One document of S tokens (plain causal attention).
Documents single_document(Backend& backend, int64_t S);

}  // namespace ulysses
