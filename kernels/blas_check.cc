#include "kernels/blas_check.h"

#include <cblas.h>
#include <cpuid.h>
#include <strings.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ps::kernels {
namespace {

// The widest vector ISA a core's kernels use.
enum class Tier { kUnknown, kGeneric, kAvx, kAvx2, kAvx512 };

struct CoreTier {
  const char* name;
  Tier tier;
};

// OpenBLAS's x86-64 core names (driver/others/dynamic.c, 0.3.21, plus
// SapphireRapids from later releases). Without DYNAMIC_OLDER several SSE-era
// names share kernels; all of them are SSE2/SSE3-only for sgemm.
constexpr CoreTier kCoreTiers[] = {
    {"Katmai", Tier::kGeneric},
    {"Coppermine", Tier::kGeneric},
    {"Northwood", Tier::kGeneric},
    {"Prescott", Tier::kGeneric},
    {"Banias", Tier::kGeneric},
    {"Atom", Tier::kGeneric},
    {"Core2", Tier::kGeneric},
    {"Penryn", Tier::kGeneric},
    {"Dunnington", Tier::kGeneric},
    {"Nehalem", Tier::kGeneric},
    {"Athlon", Tier::kGeneric},
    {"Opteron", Tier::kGeneric},
    {"Opteron_SSE3", Tier::kGeneric},
    {"Barcelona", Tier::kGeneric},
    {"Nano", Tier::kGeneric},
    {"Bobcat", Tier::kGeneric},
    {"Sandybridge", Tier::kAvx},
    {"Bulldozer", Tier::kAvx},
    {"Piledriver", Tier::kAvx},
    {"Steamroller", Tier::kAvx},
    {"Excavator", Tier::kAvx},
    {"Haswell", Tier::kAvx2},
    {"Zen", Tier::kAvx2},
    {"SkylakeX", Tier::kAvx512},
    {"Cooperlake", Tier::kAvx512},
    {"SapphireRapids", Tier::kAvx512},
};

Tier TierOf(const std::string& core) {
  for (const CoreTier& c : kCoreTiers) {
    if (strcasecmp(core.c_str(), c.name) == 0) return c.tier;
  }
  return Tier::kUnknown;
}

Tier CpuTier(const CpuFeatures& cpu) {
  if (cpu.avx512 && cpu.avx2 && cpu.fma) return Tier::kAvx512;
  if (cpu.avx2 && cpu.fma) return Tier::kAvx2;
  if (cpu.avx) return Tier::kAvx;
  return Tier::kGeneric;
}

const char* KernelsOf(Tier tier) {
  switch (tier) {
    case Tier::kGeneric:
      return "generic SSE kernels";
    case Tier::kAvx:
      return "AVX kernels";
    case Tier::kAvx2:
      return "AVX2 kernels";
    case Tier::kAvx512:
      return "AVX-512 kernels";
    case Tier::kUnknown:
      break;
  }
  return "kernels this check does not know";
}

bool SameCore(const std::string& a, const std::string& b) {
  return strcasecmp(a.c_str(), b.c_str()) == 0;
}

std::string Vendor() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return "";
  char v[13];
  std::memcpy(v, &ebx, 4);
  std::memcpy(v + 4, &edx, 4);
  std::memcpy(v + 8, &ecx, 4);
  v[12] = '\0';
  return v;
}

}  // namespace

CpuFeatures DetectCpuFeatures() {
  __builtin_cpu_init();
  CpuFeatures cpu;
  const std::string vendor = Vendor();
  // Hygon's Dhyana is a Zen: OpenBLAS treats it as AMD.
  if (vendor == "GenuineIntel") cpu.vendor = CpuVendor::kIntel;
  if (vendor == "AuthenticAMD" || vendor == "HygonGenuine") {
    cpu.vendor = CpuVendor::kAmd;
  }
  // The builtins also check that the OS saves the YMM/ZMM state.
  cpu.avx = __builtin_cpu_supports("avx");
  cpu.avx2 = __builtin_cpu_supports("avx2");
  cpu.fma = __builtin_cpu_supports("fma");
  cpu.avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  return cpu;
}

std::string DescribeCpu(const CpuFeatures& cpu) {
  const char* vendor = cpu.vendor == CpuVendor::kIntel ? "Intel"
                       : cpu.vendor == CpuVendor::kAmd ? "AMD"
                                                       : "other";
  const char* isa = "no AVX";
  switch (CpuTier(cpu)) {
    case Tier::kAvx512:
      isa = "AVX-512";
      break;
    case Tier::kAvx2:
      isa = "AVX2";
      break;
    case Tier::kAvx:
      isa = "AVX";
      break;
    default:
      break;
  }
  return absl::StrCat(vendor, ", ", isa);
}

std::string CurrentBlasCore() {
  const char* name = openblas_get_corename();
  return name == nullptr ? "" : name;
}

std::string BestBlasCoreFor(const CpuFeatures& cpu) {
  switch (CpuTier(cpu)) {
    case Tier::kAvx512:
      return "SkylakeX";
    case Tier::kAvx2:
      return cpu.vendor == CpuVendor::kAmd ? "Zen" : "Haswell";
    case Tier::kAvx:
      return "Sandybridge";
    default:
      return "";
  }
}

BlasCheckDecision DecideBlasCore(const BlasCheckInput& in) {
  BlasCheckDecision d;
  const std::string best = BestBlasCoreFor(in.cpu);
  const Tier tier = TierOf(in.core);
  const std::string cpu = DescribeCpu(in.cpu);
  // A fallback: kernels older than AVX2 where the CPU has better ones.
  const bool fallback = tier != Tier::kUnknown && tier < Tier::kAvx2 &&
                        !best.empty() && tier < TierOf(best);
  const std::string head = absl::StrCat("OpenBLAS core ", in.core, " (",
                                        KernelsOf(tier), ") on ", cpu, ": ");
  if (!in.restarted_from.empty() && !in.env_coretype.empty()) {
    if (SameCore(in.core, in.env_coretype)) {
      d.message = absl::StrCat(head, "OpenBLAS had chosen ", in.restarted_from,
                               ", a fallback; restarted with ",
                               kBlasCoreTypeVariable, "=", in.env_coretype,
                               " (--blas_check=false keeps OpenBLAS's choice)");
    } else {
      d.message = absl::StrCat(head, "OpenBLAS had chosen ", in.restarted_from,
                               ", a fallback, and did not take ",
                               kBlasCoreTypeVariable, "=", in.env_coretype,
                               " after a restart; GEMM may run several times "
                               "slower than this CPU allows");
    }
    return d;
  }
  if (!in.env_coretype.empty()) {
    d.message = absl::StrCat(head, kBlasCoreTypeVariable, "=", in.env_coretype,
                             " from the environment, kept");
    if (fallback) {
      absl::StrAppend(&d.message, "; ", kBlasCoreTypeVariable, "=", best,
                      " would run GEMM several times faster here");
    }
    return d;
  }
  if (!in.enabled) {
    d.message = absl::StrCat(head,
                             "OpenBLAS's choice, not checked "
                             "(--blas_check=false)");
    if (fallback) {
      absl::StrAppend(&d.message, "; ", best,
                      " would run GEMM several times "
                      "faster here");
    }
    return d;
  }
  if (fallback) {
    d.action = BlasCheckDecision::Action::kRestart;
    d.target = best;
    d.message = absl::StrCat(head, "a fallback; restarting with ",
                             kBlasCoreTypeVariable, "=", best);
    return d;
  }
  if (tier == Tier::kUnknown) {
    d.message = absl::StrCat(head,
                             "OpenBLAS's choice, kept (a core this "
                             "check does not know)");
  } else if (best.empty()) {
    d.message = absl::StrCat(head,
                             "OpenBLAS's choice (this CPU has nothing "
                             "better than the generic kernels)");
  } else {
    d.message = absl::StrCat(head, "OpenBLAS's choice, kept");
  }
  return d;
}

BlasCheckEnv MakeBlasCheckEnv(const char* coretype,
                              const char* restarted_from) {
  BlasCheckEnv env;
  if (coretype != nullptr) env.coretype = coretype;
  if (restarted_from != nullptr) env.restarted_from = restarted_from;
  return env;
}

BlasStartupResult RunBlasStartupCheck(bool enabled, const BlasCheckEnv& env,
                                      char** argv) {
  BlasCheckInput in;
  in.cpu = DetectCpuFeatures();
  in.core = CurrentBlasCore();
  in.enabled = enabled;
  in.env_coretype = env.coretype;
  in.restarted_from = env.restarted_from;
  if (!env.restarted_from.empty()) unsetenv(kBlasRestartMarker);
  const BlasCheckDecision d = DecideBlasCore(in);
  if (d.action == BlasCheckDecision::Action::kKeep) {
    return {in.core, d.message};
  }
  setenv(kBlasCoreTypeVariable, d.target.c_str(), 1);
  setenv(kBlasRestartMarker, in.core.c_str(), 1);
  execv("/proc/self/exe", argv);
  // Only on failure: this process keeps the fallback core.
  const int error = errno;
  unsetenv(kBlasCoreTypeVariable);
  unsetenv(kBlasRestartMarker);
  return {in.core, absl::StrCat(d.message, " failed: exec /proc/self/exe: ",
                                std::strerror(error), "; set ",
                                kBlasCoreTypeVariable, "=", d.target,
                                " before starting for GEMM several times "
                                "faster")};
}

}  // namespace ps::kernels
