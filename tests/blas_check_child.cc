// The process blas_startup_test.sh starts: it runs the BLAS start-up check
// as every main does, and records what happened in --record (one line per
// start of the program, then the outcome).
//
// --force_generic makes OpenBLAS really load with its generic core, as it
// does on a CPU it does not recognise: the first start sets
// OPENBLAS_CORETYPE=Prescott and re-executes itself, and the next start
// hands the check an environment without the variable (it is the harness's,
// not a user's). The check then sees the generic core in OpenBLAS itself.
#include <cblas.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "kernels/blas_check.h"

ABSL_FLAG(bool, blas_check, true, "Run the BLAS start-up check.");
ABSL_FLAG(bool, force_generic, false,
          "Start OpenBLAS on its generic core (Prescott) first.");
ABSL_FLAG(std::string, record, "", "File the starts and outcome go to.");

namespace {

constexpr char kForced[] = "PS_TEST_FORCED_GENERIC";

void Record(const std::string& line) {
  FILE* f = std::fopen(absl::GetFlag(FLAGS_record).c_str(), "a");
  if (f == nullptr) {
    std::perror("blas_check_child: --record");
    std::exit(3);
  }
  std::fprintf(f, "%s\n", line.c_str());
  std::fclose(f);
}

double ThreadCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

// CPU time of one 512^3 sgemm on one thread, the least of 5: how fast the
// core's kernels are, barely moved by other processes on the machine.
double SgemmCpuMs() {
  constexpr int n = 512;
  openblas_set_num_threads(1);
  std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n);
  double best = 1e9;
  for (int i = 0; i < 6; ++i) {
    const double t0 = ThreadCpuSeconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f,
                a.data(), n, b.data(), n, 0.0f, c.data(), n);
    if (i > 0) best = std::min(best, ThreadCpuSeconds() - t0);
  }
  return 1e3 * best;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using ps::kernels::CurrentBlasCore;
  Record("start pid=" + std::to_string(getpid()) +
         " core=" + CurrentBlasCore());
  if (absl::GetFlag(FLAGS_force_generic) &&
      std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    setenv("OPENBLAS_CORETYPE", "Prescott", 1);
    setenv(kForced, "1", 1);
    execv("/proc/self/exe", argv);
    std::perror("blas_check_child: exec");
    return 3;
  }
  ps::kernels::BlasCheckEnv env = ps::kernels::MakeBlasCheckEnv(
      std::getenv(ps::kernels::kBlasCoreTypeVariable),
      std::getenv(ps::kernels::kBlasRestartMarker));
  if (std::getenv(kForced) != nullptr) {
    env.coretype.clear();  // the harness's, not the user's
    unsetenv(kForced);
  }
  const ps::kernels::BlasStartupResult r = ps::kernels::RunBlasStartupCheck(
      absl::GetFlag(FLAGS_blas_check), env, argv);
  std::fprintf(stderr, "blas: %s\n", r.message.c_str());
  const ps::kernels::CpuFeatures cpu = ps::kernels::DetectCpuFeatures();
  char speed[64];
  std::snprintf(speed, sizeof(speed), "%.2f", SgemmCpuMs());
  Record("final pid=" + std::to_string(getpid()) + " core=" + r.core +
         " openblas=" + CurrentBlasCore() + " best=" +
         ps::kernels::BestBlasCoreFor(cpu) + " sgemm512_cpu_ms=" + speed);
  return 0;
}
