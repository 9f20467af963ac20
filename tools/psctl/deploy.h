// Deployment beyond one machine: `psctl slurm submit` writes (and submits) a
// batch script that runs a whole cluster inside one Slurm allocation, and
// `psctl k8s render` writes the Kubernetes manifests for a cluster of a given
// size. Both start from the files in configs/slurm/ and configs/k8s/, which
// are compiled into psctl, so what is committed is what is deployed.
//
// The Render* functions are pure (no I/O) and thread-compatible; they return
// INVALID_ARGUMENT for bad options and INTERNAL if a template no longer has
// the spot an option is written into (a bug caught by deploy_test).
#ifndef PS_TOOLS_PSCTL_DEPLOY_H_
#define PS_TOOLS_PSCTL_DEPLOY_H_

#include <CLI/CLI.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace ps::psctl {

struct SlurmOptions {
  // Job specs to run one after another, as the batch script will see them
  // (absolute paths on the shared file system).
  std::vector<std::string> job_specs;
  int servers = 1;
  int workers = 1;
  int gpus_per_worker = 0;  // 0: CPU workers
  int cpus_per_task = 1;    // per server and per worker step
  std::string job_name = "ps-train";
  std::string partition;  // empty: the cluster's default
  std::string time = "01:00:00";
  std::string output_dir;        // absolute; shared by every node
  std::string bin_dir;           // absolute; empty: $PATH on the nodes
  std::string host = "0.0.0.0";  // where the daemons listen
  int start_timeout_s = 300;
  std::vector<std::string>
      sbatch_args;  // extra #SBATCH lines, e.g. --account=x
};

// The batch script: configs/slurm/ps_train.sbatch with its #SBATCH lines and
// parameter section written from `options`.
absl::StatusOr<std::string> RenderSbatchScript(const SlurmOptions& options);

struct K8sOptions {
  int servers = 2;
  int workers = 2;
  int gpus_per_worker = 1;  // 0: CPU workers (--device=cpu, no GPU request)
  std::string image = "ps-train:latest";
  std::string name_space = "ps";
  std::string job_spec_text;  // empty: the example job of configs/k8s
  int job_num_workers = 0;    // num_workers of job_spec_text (0: all)
  std::string token;          // the cluster token written into the Secret
};

// (file name, contents) of every manifest (configs/k8s/*.yaml without the
// kustomization) for `options`, in the order to apply them.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
RenderK8sManifests(const K8sOptions& options);

// Registers `slurm submit` and `k8s render` on `app`. Their callbacks do the
// work and end by throwing CLI::RuntimeError(exit code), 0 on success; exit
// codes as psctl's (1 sbatch failed, 5 invalid input).
void AddDeployCommands(CLI::App& app);

}  // namespace ps::psctl

#endif  // PS_TOOLS_PSCTL_DEPLOY_H_
