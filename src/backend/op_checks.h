// The argument checks of Backend's op entries (op_checks.cpp), in one place for
// every backend: each op checks its tensors once, against the rules of the
// backend it runs on (Backend::holds, takes_data_dtype, accumulator_dtype), and
// only then calls the backend's implementation. Every failure names the op, the
// argument, what it is and what was expected.
#pragma once
#include <string>

#include "core/tensor.h"

namespace ulysses {

class Backend;

class OpCheck {
 public:
  OpCheck(const Backend& backend, const char* op) : be_(backend), op_(op) {}
  const char* op() const { return op_; }

  // Defined and held by the backend (on its device).
  void held(const Tensor& t, const char* arg) const;
  // Defined and held, or a host tensor a device backend copies in (index tensors; zero/copy/sum).
  void reached(const Tensor& t, const char* arg) const;
  // Held, in one of the backend's data dtypes (activations, weights); returns that dtype.
  DType data(const Tensor& t, const char* arg) const;
  // Held, of dtype want; why says where the dtype comes from ("" when it is fixed).
  void dtype(const Tensor& t, DType want, const char* arg, const std::string& why = "") const;
  // Held, in the dtype of ref (named ref_arg).
  void same_dtype(const Tensor& t, const Tensor& ref, const char* arg, const char* ref_arg) const;
  // Held, in the accumulator dtype of data dtype dt (statistics, losses, weight gradients).
  void accumulator(const Tensor& t, DType dt, const char* arg) const;
  // Held, a gradient buffer: the accumulator dtype of data dtype dt, or bfloat16 (reduced
  // gradient buffers: LlamaWeights' grad_dtype; summed into in float32, stored rounded).
  void gradient(const Tensor& t, DType dt, const char* arg) const;
  // Reached (host or held), of dtype want: ids, pos, targets (int32), inv_freq (float32).
  void index(const Tensor& t, DType want, const char* arg) const;
  // Held, of the shape and dtype of ref.
  void like(const Tensor& t, const Tensor& ref, const char* arg, const char* ref_arg) const;
  void shape(const Tensor& t, const Shape& want, const char* arg) const;
  // layout: what the dimensions are, e.g. "[N, H, d]".
  void ndim(const Tensor& t, int n, const char* arg, const char* layout) const;

 private:
  void defined(const Tensor& t, const char* arg) const;
  const Backend& be_;
  const char* op_;
};

}  // namespace ulysses
