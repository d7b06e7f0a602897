// The MLP's gated activations, h = act(gate) * up, declared once: each is a functor with its value
// and derivative, written for both the CPU reference (double) and the CUDA kernels (float), and
// run by one generic kernel per device (backend/cpu/gated_activation.cpp,
// backend/cuda/gated_activation.cu). Adding one: a functor, an enum value, its config names in
// kActivations; every op, test loop and config reader follows from this file.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/host_device.h"

namespace ulysses {

namespace activation_math {
ULY_HOST_DEVICE float exp_(float x) { return expf(x); }
ULY_HOST_DEVICE double exp_(double x) { return exp(x); }
ULY_HOST_DEVICE float tanh_(float x) { return tanhf(x); }
ULY_HOST_DEVICE double tanh_(double x) { return tanh(x); }
}  // namespace activation_math

// silu(g) = g sigmoid(g); d/dg = s (1 + g (1 - s)), s = sigmoid(g).
struct SiLU {
  template <class S>
  ULY_HOST_DEVICE static S value(S g) {
    return g * (S(1) / (S(1) + activation_math::exp_(-g)));
  }
  template <class S>
  ULY_HOST_DEVICE static S derivative(S g) {
    const S s = S(1) / (S(1) + activation_math::exp_(-g));
    return s * (S(1) + g * (S(1) - s));
  }
};

// GELU with the tanh approximation (transformers' gelu_pytorch_tanh, Gemma's MLP):
// 0.5 g (1 + tanh(u)), u = sqrt(2/pi) (g + 0.044715 g^3);
// d/dg = 0.5 (1 + t) + 0.5 g (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 g^2), t = tanh(u).
struct GeluTanh {
  template <class S>
  ULY_HOST_DEVICE static S value(S g) {
    const S t = activation_math::tanh_(S(0.7978845608028654) * (g + S(0.044715) * g * g * g));
    return S(0.5) * g * (S(1) + t);
  }
  template <class S>
  ULY_HOST_DEVICE static S derivative(S g) {
    const S t = activation_math::tanh_(S(0.7978845608028654) * (g + S(0.044715) * g * g * g));
    return S(0.5) * (S(1) + t) +
           S(0.5) * g * (S(1) - t * t) * S(0.7978845608028654) * (S(1) + S(3 * 0.044715) * g * g);
  }
};

enum class Activation : uint8_t { SiLU, GeluTanh };

// Calls f.template operator()<Functor>() for the functor of `act` (one switch for every device).
template <class F>
decltype(auto) dispatch_activation(Activation act, F&& f) {
  switch (act) {
    case Activation::GeluTanh:
      return f.template operator()<GeluTanh>();
    case Activation::SiLU:
    default:
      return f.template operator()<SiLU>();
  }
}

// The config.json names (hidden_act / hidden_activation) of each activation; the first is the
// one written back.
struct ActivationNames {
  Activation act;
  std::string_view names[3];
};
inline constexpr ActivationNames kActivations[] = {
    {Activation::SiLU, {"silu", "swish", ""}},
    {Activation::GeluTanh, {"gelu_pytorch_tanh", "gelu_new", ""}},
};

inline std::string activation_name(Activation act) {
  for (const ActivationNames& a : kActivations)
    if (a.act == act) return std::string(a.names[0]);
  return "unknown";
}
// The activation a config name means; false when none does.
inline bool parse_activation(std::string_view name, Activation& out) {
  for (const ActivationNames& a : kActivations)
    for (std::string_view n : a.names)
      if (!n.empty() && n == name) {
        out = a.act;
        return true;
      }
  return false;
}
// "silu, ...", for messages.
inline std::string supported_activations() {
  std::string s;
  for (const ActivationNames& a : kActivations) s += (s.empty() ? "" : ", ") + std::string(a.names[0]);
  return s;
}

}  // namespace ulysses
