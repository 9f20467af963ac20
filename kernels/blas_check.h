// The start-up check of OpenBLAS's kernel set ("core").
//
// A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels from CPUID when the
// library loads. On a CPU it does not know (0.3.21 on a newer Intel Xeon, as
// a cloud VM names it: "Intel(R) Xeon(R) Processor") it can fall back to a
// generic SSE3 core, Prescott, and run sgemm 3-5x slower than the CPU
// allows, silently. OpenBLAS reads OPENBLAS_CORETYPE only when it loads, so
// the fix is a restart: every main that uses BLAS calls RunBlasStartupCheck
// first thing; when the core is a fallback and the CPU has better, it sets
// OPENBLAS_CORETYPE and re-executes the same program (/proc/self/exe, same
// argv, same pid). The restarted process confirms the core took and says so
// in one log line.
//
// DecideBlasCore is the whole policy, a pure function (unit-tested); the
// rest reads the CPU and OpenBLAS. The environment is main()'s to read
// (libraries read none): it passes the two variables to MakeBlasCheckEnv.
#ifndef PS_KERNELS_BLAS_CHECK_H_
#define PS_KERNELS_BLAS_CHECK_H_

#include <string>

namespace ps::kernels {

enum class CpuVendor { kIntel, kAmd, kOther };

// What the CPU and the OS (which must save the wider registers) support, as
// far as choosing OpenBLAS kernels goes.
struct CpuFeatures {
  CpuVendor vendor = CpuVendor::kOther;
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  // AVX-512 F, VL, BW and DQ (what OpenBLAS's SkylakeX kernels assume;
  // Knights Landing, without VL, is not counted).
  bool avx512 = false;
};

// This machine's CPU (CPUID through the compiler's builtins).
CpuFeatures DetectCpuFeatures();

// "AMD, AVX-512", "Intel, AVX2", "other, no AVX".
std::string DescribeCpu(const CpuFeatures& cpu);

// The core OpenBLAS uses in this process (openblas_get_corename()).
std::string CurrentBlasCore();

// The core best fitting `cpu` among those OpenBLAS 0.3.21 accepts by name in
// OPENBLAS_CORETYPE: SkylakeX for AVX-512 (both vendors; Cooperlake has the
// same sgemm kernels, and 0.3.21 does not accept it by name), Zen (AMD) or
// Haswell for AVX2 + FMA, Sandybridge for AVX. Empty without AVX: nothing
// beats the generic core there.
std::string BestBlasCoreFor(const CpuFeatures& cpu);

// What the process knows at start-up; filled by RunBlasStartupCheck.
struct BlasCheckInput {
  CpuFeatures cpu;
  std::string core;     // OpenBLAS's core in this process
  bool enabled = true;  // the --blas_check flag
  // OPENBLAS_CORETYPE as this process found it (empty: unset). When it did
  // not come from this check, it is the user's choice and is kept.
  std::string env_coretype;
  // Set when this process is the check's own restart: the core OpenBLAS had
  // chosen before it.
  std::string restarted_from;
};

struct BlasCheckDecision {
  enum class Action { kKeep, kRestart };
  Action action = Action::kKeep;
  std::string target;   // kRestart: the OPENBLAS_CORETYPE to restart with
  std::string message;  // one line: the core, and why
};

// The policy. A core whose kernels are older than AVX2 (Prescott and the
// other SSE-era cores, or the first-AVX ones) on a CPU that has a better one
// is corrected: kRestart with the BestBlasCoreFor core. Everything else is
// kept: an AVX2 or AVX-512 core (OpenBLAS's own choice, e.g. Haswell kernels
// on some AVX-512 parts), a core this table does not know (a newer
// OpenBLAS), a user's OPENBLAS_CORETYPE (the message says when it is a slow
// one), the check turned off, and a restarted process (the message says
// whether the core took: never a second restart).
BlasCheckDecision DecideBlasCore(const BlasCheckInput& in);

// The environment the check needs: OPENBLAS_CORETYPE and the marker that a
// process is the check's restart (it holds the core chosen before it).
inline constexpr char kBlasCoreTypeVariable[] = "OPENBLAS_CORETYPE";
inline constexpr char kBlasRestartMarker[] = "PS_BLAS_CHECK_RESTARTED_FROM";
struct BlasCheckEnv {
  std::string coretype;
  std::string restarted_from;
};
// From the values of the two variables as main() read them (null: unset):
//   MakeBlasCheckEnv(std::getenv(kBlasCoreTypeVariable),
//                    std::getenv(kBlasRestartMarker))
BlasCheckEnv MakeBlasCheckEnv(const char* coretype, const char* restarted_from);

struct BlasStartupResult {
  std::string core;     // the core in use after the check
  std::string message;  // one line for the log (the caller prints it)
};

// Runs the check on this process. On kRestart it sets OPENBLAS_CORETYPE and
// the restart marker and execs /proc/self/exe with `argv` (the argv main
// received, unchanged): it returns only if that fails, with a message
// saying so. Clears the marker from the environment of a restarted process,
// so its own children check afresh. Call before other threads start and
// before anything is written or bound (the restart repeats it).
BlasStartupResult RunBlasStartupCheck(bool enabled, const BlasCheckEnv& env,
                                      char** argv);

}  // namespace ps::kernels

#endif  // PS_KERNELS_BLAS_CHECK_H_
