#include "backend/documents.h"

#include <algorithm>

#include "backend/backend.h"

namespace ulysses {
namespace {

Tensor upload(Backend& backend, const std::vector<int32_t>& v) {
  Tensor t = backend.empty({static_cast<int64_t>(v.size())}, DType::I32);
  if (!v.empty())
    backend.copy(t, Tensor::borrow(const_cast<int32_t*>(v.data()), {static_cast<int64_t>(v.size())}, DType::I32));
  return t;
}

}  // namespace

Documents make_documents(Backend& backend, const std::vector<int32_t>& doc_start, int64_t window) {
  ULY_CHECK(window >= 0, "documents: the sliding window must be positive (or 0 for none), got " << window);
  const int64_t S = static_cast<int64_t>(doc_start.size());
  ULY_CHECK(S < (int64_t{1} << 31), "documents: a row of " << S << " tokens is over the int32 index range");
  std::vector<int32_t> bounds;
  for (int64_t i = 0; i < S; ++i) {
    const int32_t s = doc_start[i];
    if (s == i) {
      bounds.push_back(static_cast<int32_t>(i));
      continue;
    }
    ULY_CHECK(i > 0 && s == doc_start[i - 1],
              "documents: doc_start[" << i << "] = " << s << " is neither " << i << " (a document starts) nor doc_start["
                                      << i - 1 << "] (the same document goes on); documents must be contiguous");
  }
  Documents d;
  d.count = static_cast<int64_t>(bounds.size());
  bounds.push_back(static_cast<int32_t>(S));
  for (int64_t j = 0; j < d.count; ++j) d.longest = std::max<int64_t>(d.longest, bounds[j + 1] - bounds[j]);
  if (window > 0 && window < d.longest) {
    d.window = window;
    std::vector<int32_t> first_key(doc_start);
    for (int64_t i = window; i < S; ++i)
      first_key[i] = std::max<int32_t>(first_key[i], static_cast<int32_t>(i - window + 1));
    d.doc_start = upload(backend, first_key);
  } else {
    d.doc_start = upload(backend, doc_start);
  }
  d.bounds = upload(backend, bounds);
  return d;
}

Documents make_documents(Backend& backend, const Tensor& doc_start) {
  ULY_CHECK(doc_start.defined() && doc_start.dtype() == DType::I32 && doc_start.ndim() == 1,
            "documents: doc_start must be a 1-D int32 tensor, got "
                << (doc_start.defined() ? doc_start.describe() : std::string("an undefined tensor")));
  std::vector<int32_t> host(static_cast<size_t>(doc_start.numel()));
  if (!host.empty()) {
    Tensor h = Tensor::borrow(host.data(), doc_start.shape(), DType::I32);
    if (doc_start.device() == Device::CPU)
      std::copy_n(static_cast<const int32_t*>(doc_start.raw()), host.size(), host.data());
    else
      backend.copy(h, doc_start);
  }
  return make_documents(backend, host);
}

Documents single_document(Backend& backend, int64_t S) {
  std::vector<int32_t> starts(static_cast<size_t>(S), 0);
  return make_documents(backend, starts);
}

}  // namespace ulysses
