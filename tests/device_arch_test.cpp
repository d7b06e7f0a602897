// The GPU check that runs before any kernel: Hopper passes, anything else is
// refused with a message naming the device, its capability and the way out.
#include "backend/device_arch.h"

#include <gtest/gtest.h>

namespace ulysses {
namespace {

TEST(DeviceArch, HopperRuns) { EXPECT_EQ(unsupported_gpu_reason(0, "NVIDIA H200", 9, 0), ""); }

TEST(DeviceArch, OtherArchitecturesAreRefusedClearly) {
  struct Gpu { const char* name; int major, minor; };
  for (const Gpu& g : {Gpu{"NVIDIA A100-SXM4-80GB", 8, 0}, Gpu{"NVIDIA L40S", 8, 9}, Gpu{"NVIDIA B200", 10, 0},
                       Gpu{"Tesla V100", 7, 0}}) {
    const std::string why = unsupported_gpu_reason(3, g.name, g.major, g.minor);
    ASSERT_FALSE(why.empty()) << g.name;
    EXPECT_NE(why.find("device 3"), std::string::npos) << why;
    EXPECT_NE(why.find(g.name), std::string::npos) << why;
    EXPECT_NE(why.find(std::to_string(g.major) + "." + std::to_string(g.minor)), std::string::npos) << why;
    EXPECT_NE(why.find("sm_90a"), std::string::npos) << why;
    EXPECT_NE(why.find("--backend cpu"), std::string::npos) << why;
  }
}

}  // namespace
}  // namespace ulysses
