#include "kernels/blas_check.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace ps::kernels {
namespace {

using Action = BlasCheckDecision::Action;

CpuFeatures Cpu(CpuVendor vendor, bool avx, bool avx2, bool fma, bool avx512) {
  CpuFeatures c;
  c.vendor = vendor;
  c.avx = avx;
  c.avx2 = avx2;
  c.fma = fma;
  c.avx512 = avx512;
  return c;
}

const CpuFeatures kXeonAvx512 = Cpu(CpuVendor::kIntel, true, true, true, true);
const CpuFeatures kZen4 = Cpu(CpuVendor::kAmd, true, true, true, true);
const CpuFeatures kZen2 = Cpu(CpuVendor::kAmd, true, true, true, false);
const CpuFeatures kHaswell = Cpu(CpuVendor::kIntel, true, true, true, false);
const CpuFeatures kIvyBridge =
    Cpu(CpuVendor::kIntel, true, false, false, false);
const CpuFeatures kNoAvx = Cpu(CpuVendor::kOther, false, false, false, false);

TEST(BlasCheck, BestCoreFitsTheCpu) {
  EXPECT_EQ(BestBlasCoreFor(kXeonAvx512), "SkylakeX");
  EXPECT_EQ(BestBlasCoreFor(kZen4), "SkylakeX");
  EXPECT_EQ(BestBlasCoreFor(kZen2), "Zen");
  EXPECT_EQ(BestBlasCoreFor(kHaswell), "Haswell");
  EXPECT_EQ(BestBlasCoreFor(kIvyBridge), "Sandybridge");
  EXPECT_EQ(BestBlasCoreFor(kNoAvx), "");
  // AVX2 without FMA (no such CPU ships; a VM can mask FMA): the AVX2
  // kernels need FMA.
  EXPECT_EQ(BestBlasCoreFor(Cpu(CpuVendor::kIntel, true, true, false, false)),
            "Sandybridge");
  EXPECT_EQ(DescribeCpu(kZen4), "AMD, AVX-512");
  EXPECT_EQ(DescribeCpu(kHaswell), "Intel, AVX2");
  EXPECT_EQ(DescribeCpu(kNoAvx), "other, no AVX");
}

struct Case {
  std::string name;
  BlasCheckInput in;
  Action action;
  std::string target;
  std::vector<std::string> message_has;
};

BlasCheckInput In(const CpuFeatures& cpu, const std::string& core) {
  BlasCheckInput in;
  in.cpu = cpu;
  in.core = core;
  return in;
}

TEST(BlasCheck, DecidesFromFeaturesAndCore) {
  std::vector<Case> cases = {
      {"the VM of the issue: Prescott on an AVX-512 Xeon",
       In(kXeonAvx512, "Prescott"),
       Action::kRestart,
       "SkylakeX",
       {"OpenBLAS core Prescott (generic SSE kernels) on Intel, AVX-512",
        "a fallback; restarting with OPENBLAS_CORETYPE=SkylakeX"}},
      {"generic core on an AVX-512 AMD",
       In(kZen4, "Prescott"),
       Action::kRestart,
       "SkylakeX",
       {}},
      {"generic core on an AVX2 AMD",
       In(kZen2, "Prescott"),
       Action::kRestart,
       "Zen",
       {}},
      {"SSE4 core on an AVX2 Intel",
       In(kHaswell, "Nehalem"),
       Action::kRestart,
       "Haswell",
       {}},
      {"AVX core on an AVX2 CPU",
       In(kHaswell, "Sandybridge"),
       Action::kRestart,
       "Haswell",
       {"(AVX kernels)"}},
      {"generic core on an AVX CPU",
       In(kIvyBridge, "Core2"),
       Action::kRestart,
       "Sandybridge",
       {}},
      {"names compare without case",
       In(kXeonAvx512, "PRESCOTT"),
       Action::kRestart,
       "SkylakeX",
       {}},
      {"nothing better without AVX",
       In(kNoAvx, "Prescott"),
       Action::kKeep,
       "",
       {"nothing better than the generic kernels"}},
      {"AVX2 core on an AVX-512 CPU is OpenBLAS's choice",
       In(kXeonAvx512, "Haswell"),
       Action::kKeep,
       "",
       {"OpenBLAS core Haswell (AVX2 kernels)", "OpenBLAS's choice, kept"}},
      {"what OpenBLAS picks on Zen 4",
       In(kZen4, "Cooperlake"),
       Action::kKeep,
       "",
       {"(AVX-512 kernels) on AMD, AVX-512: OpenBLAS's choice, kept"}},
      {"a core a newer OpenBLAS may name",
       In(kZen4, "Zen5"),
       Action::kKeep,
       "",
       {"a core this check does not know"}},
  };
  {
    BlasCheckInput in = In(kXeonAvx512, "Prescott");
    in.env_coretype = "Prescott";
    cases.push_back({"the user's OPENBLAS_CORETYPE is kept",
                     in,
                     Action::kKeep,
                     "",
                     {"OPENBLAS_CORETYPE=Prescott from the environment, kept",
                      "OPENBLAS_CORETYPE=SkylakeX would run GEMM several "
                      "times faster"}});
  }
  {
    BlasCheckInput in = In(kXeonAvx512, "SkylakeX");
    in.env_coretype = "SkylakeX";
    cases.push_back(
        {"a good user choice gets no advice",
         in,
         Action::kKeep,
         "",
         {"OPENBLAS_CORETYPE=SkylakeX from the environment, kept"}});
  }
  {
    BlasCheckInput in = In(kXeonAvx512, "Prescott");
    in.enabled = false;
    cases.push_back({"check off",
                     in,
                     Action::kKeep,
                     "",
                     {"not checked (--blas_check=false)",
                      "SkylakeX would run GEMM several times faster"}});
  }
  {
    BlasCheckInput in = In(kXeonAvx512, "SkylakeX");
    in.env_coretype = "skylakex";
    in.restarted_from = "Prescott";
    cases.push_back(
        {"the restart took",
         in,
         Action::kKeep,
         "",
         {"OpenBLAS core SkylakeX (AVX-512 kernels) on Intel, AVX-512: "
          "OpenBLAS had chosen Prescott, a fallback; restarted with "
          "OPENBLAS_CORETYPE=skylakex"}});
  }
  {
    // The loop guard: still generic after the restart, and no second one.
    BlasCheckInput in = In(kXeonAvx512, "Prescott");
    in.env_coretype = "SkylakeX";
    in.restarted_from = "Prescott";
    cases.push_back({"the restart did not take",
                     in,
                     Action::kKeep,
                     "",
                     {"did not take OPENBLAS_CORETYPE=SkylakeX after a "
                      "restart"}});
  }
  {
    // A marker without the variable is no restart of ours.
    BlasCheckInput in = In(kXeonAvx512, "Prescott");
    in.restarted_from = "Prescott";
    cases.push_back(
        {"stray marker", in, Action::kRestart, "SkylakeX", {"a fallback"}});
  }
  for (const Case& c : cases) {
    const BlasCheckDecision d = DecideBlasCore(c.in);
    EXPECT_EQ(d.action, c.action) << c.name << ": " << d.message;
    EXPECT_EQ(d.target, c.target) << c.name;
    EXPECT_EQ(d.message.find('\n'), std::string::npos) << c.name;
    for (const std::string& s : c.message_has) {
      EXPECT_NE(d.message.find(s), std::string::npos)
          << c.name << ": no \"" << s << "\" in: " << d.message;
    }
  }
}

TEST(BlasCheck, ThisProcessHasACoreAndFeatures) {
  // OpenBLAS chose at load; the test's environment does not force a core.
  EXPECT_FALSE(CurrentBlasCore().empty());
  const CpuFeatures cpu = DetectCpuFeatures();
  // No x86-64 CPU has AVX-512 without AVX2, or AVX2 without AVX.
  EXPECT_TRUE(!cpu.avx512 || cpu.avx2);
  EXPECT_TRUE(!cpu.avx2 || cpu.avx);
}

// main() reads the two variables by these names and passes their values.
TEST(BlasCheck, TakesTheTwoVariablesMainRead) {
  EXPECT_STREQ(kBlasCoreTypeVariable, "OPENBLAS_CORETYPE");
  EXPECT_STREQ(kBlasRestartMarker, "PS_BLAS_CHECK_RESTARTED_FROM");
  BlasCheckEnv env = MakeBlasCheckEnv("Haswell", "Prescott");
  EXPECT_EQ(env.coretype, "Haswell");
  EXPECT_EQ(env.restarted_from, "Prescott");
  env = MakeBlasCheckEnv(nullptr, nullptr);  // unset
  EXPECT_EQ(env.coretype, "");
  EXPECT_EQ(env.restarted_from, "");
}

}  // namespace
}  // namespace ps::kernels
