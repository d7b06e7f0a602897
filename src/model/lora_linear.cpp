#include "model/lora_linear.h"

#include "backend/profile_scope.h"

namespace ulysses {

namespace {

Tensor rows_of(const Tensor& t, OutputRows rows) { return t.slice(rows.r0, rows.r1 < 0 ? t.dim(0) : rows.r1); }

// t = x A^T: [N, r].
Tensor down_projection(Backend& be, const Tensor& x, const LoraAdapter& ad) {
  Tensor t = be.empty({x.dim(0), ad.a->shape[0]}, be.act_dtype());
  be.matmul(t, x, ad.a->value, false, true);
  return t;
}

}  // namespace

void lora_forward(Backend& be, Tensor& y, const Tensor& x, const LoraAdapter& ad, double s, OutputRows rows) {
  ProfileScope prof(be, "lora");
  const Tensor t = down_projection(be, x, ad);
  be.matmul(y, t, rows_of(ad.b->value, rows), false, true, s, 1.0);
}

void lora_backward(Backend& be, Tensor& dx, const LoraAdapter& ad, const Tensor& dy, const Tensor& x, double s,
                   OutputRows rows) {
  ProfileScope prof(be, "lora");
  settle_grad(*ad.a, be);  // the step's first contribution: the buffers were only marked unset
  settle_grad(*ad.b, be);
  const Tensor t = down_projection(be, x, ad);
  Tensor db = rows_of(ad.b->grad, rows);
  be.matmul(db, dy, t, true, false, s, 1.0);
  Tensor dt = be.empty(t.shape(), be.act_dtype());
  be.matmul(dt, dy, rows_of(ad.b->value, rows), false, false, s, 0.0);
  be.matmul(ad.a->grad, dt, x, true, false, 1.0, 1.0);
  be.matmul(dx, dt, ad.a->value, false, false, 1.0, 1.0);
}

}  // namespace ulysses
