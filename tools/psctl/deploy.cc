#include "tools/psctl/deploy.h"

#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/platform/status.h"
#include "common/spec/config.h"
#include "tools/psctl/local_cluster.h"

extern char** environ;

namespace ps::psctl {
namespace {

namespace fs = std::filesystem;

// configs/slurm/ps_train.sbatch and configs/k8s/*.yaml, embedded by the
// genrule :deploy_templates as {basename, text} pairs.
struct EmbeddedFile {
  const char* name;
  const char* text;
};
constexpr EmbeddedFile kEmbedded[] = {
#include "tools/psctl/deploy_templates.inc"
};

absl::StatusOr<std::string> Embedded(absl::string_view name) {
  for (const EmbeddedFile& f : kEmbedded) {
    if (name == f.name) {
      // The genrule starts each raw string with a newline.
      return std::string(absl::StripPrefix(f.text, "\n"));
    }
  }
  return absl::InternalError(absl::StrCat("no embedded file ", name));
}

// configs/k8s/*.yaml but the kustomization, in the order `kubectl apply`
// needs them: the namespace first, what pods mount before the pods.
constexpr const char* kK8sApplyOrder[] = {
    "namespace.yaml", "secret.yaml", "job-configmap.yaml", "coordinator.yaml",
    "server.yaml",    "worker.yaml", "submit-job.yaml"};

constexpr char kParamsBegin[] =
    "# ---- parameters: `psctl slurm submit` writes this section ----\n";
constexpr char kParamsEnd[] = "# ---- end of parameters ----\n";

// A word the shell reads back verbatim.
std::string ShellQuote(absl::string_view s) {
  if (!s.empty() &&
      s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"
                          "KLMNOPQRSTUVWXYZ0123456789@%+=:,./-_") ==
          absl::string_view::npos) {
    return std::string(s);
  }
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

// Replaces the one occurrence of `from` in `text`; INTERNAL if there is not
// exactly one (the template changed under us).
absl::Status ReplaceOnce(std::string& text, absl::string_view file,
                         const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  if (at == std::string::npos || text.find(from, at + 1) != std::string::npos) {
    return absl::InternalError(absl::StrCat(file, ": expected exactly one '",
                                            from, "' in the template"));
  }
  text.replace(at, from.size(), to);
  return absl::OkStatus();
}

absl::Status CheckCounts(int servers, int workers, int gpus) {
  if (servers < 1 || workers < 1) {
    return absl::InvalidArgumentError(
        "--servers and --workers must be at least 1");
  }
  if (gpus < 0) {
    return absl::InvalidArgumentError("--gpus-per-worker must be >= 0");
  }
  return absl::OkStatus();
}

// Runs argv, returns its stdout; its stderr goes to ours.
absl::StatusOr<std::string> RunCapture(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int err =
      posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (err != 0) {
    close(fds[0]);
    return absl::UnavailableError(absl::StrCat(
        "cannot run ", argv[0], ": ", std::strerror(err),
        " (is this a Slurm submit host? write the script only with "
        "--no-submit)"));
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(
        absl::StrCat(argv[0], " failed (exit ", WEXITSTATUS(status), ")"));
  }
  return out;
}

std::string RandomToken() {
  std::random_device rd;
  std::string token;
  for (int i = 0; i < 32; ++i) token += "0123456789abcdef"[rd() % 16];
  return token;
}

absl::Status WriteFile(const std::string& path, const std::string& text,
                       mode_t mode) {
  {
    std::ofstream out(path, std::ios::trunc);
    out << text;
    if (!out.good()) {
      return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
    }
  }
  chmod(path.c_str(), mode);
  return absl::OkStatus();
}

[[noreturn]] void Exit(int code) { throw CLI::RuntimeError(code); }

[[noreturn]] void ExitWith(const absl::Status& s) {
  std::cerr << "psctl: " << s.message() << "\n";
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kNotFound:
      Exit(5);
    default:
      Exit(1);
  }
}

std::string Absolute(const std::string& p) {
  if (p.empty()) return p;
  std::error_code ec;
  const fs::path abs = fs::absolute(p, ec);
  return ec ? p : abs.lexically_normal().string();
}

}  // namespace

absl::StatusOr<std::string> RenderSbatchScript(const SlurmOptions& o) {
  if (absl::Status s = CheckCounts(o.servers, o.workers, o.gpus_per_worker);
      !s.ok()) {
    return s;
  }
  if (o.cpus_per_task < 1) {
    return absl::InvalidArgumentError("--cpus-per-task must be at least 1");
  }
  if (o.job_specs.empty()) {
    return absl::InvalidArgumentError("no job spec given");
  }
  if (o.output_dir.empty() || o.output_dir[0] != '/') {
    return absl::InvalidArgumentError("the output directory must be absolute");
  }
  for (const std::string& a : o.sbatch_args) {
    if (!absl::StartsWith(a, "-") || absl::StrContains(a, "\n")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--sbatch_arg: expected one sbatch option, got '", a, "'"));
    }
  }
  std::string tmpl;
  if (absl::StatusOr<std::string> t = Embedded("ps_train.sbatch"); t.ok()) {
    tmpl = *t;
  } else {
    return t.status();
  }
  const size_t sbatch_at = tmpl.find("\n#SBATCH ");
  const size_t end_at = tmpl.find(kParamsEnd);
  if (!absl::StartsWith(tmpl, "#!/bin/bash\n") ||
      sbatch_at == std::string::npos || end_at == std::string::npos) {
    return absl::InternalError(
        "ps_train.sbatch: shebang, #SBATCH lines or the end of the parameter "
        "section not found");
  }
  std::string out(tmpl.substr(0, sbatch_at + 1));  // shebang + description
  auto sbatch = [&out](absl::string_view line) {
    absl::StrAppend(&out, "#SBATCH ", line, "\n");
  };
  sbatch(absl::StrCat("--job-name=", o.job_name));
  sbatch(absl::StrCat("--ntasks=", o.servers + o.workers));
  sbatch(absl::StrCat("--cpus-per-task=", o.cpus_per_task));
  if (o.gpus_per_worker > 0) {
    sbatch(absl::StrCat("--gpus=", o.workers * o.gpus_per_worker));
  }
  if (!o.partition.empty()) sbatch(absl::StrCat("--partition=", o.partition));
  if (!o.time.empty()) sbatch(absl::StrCat("--time=", o.time));
  sbatch(absl::StrCat("--output=", o.output_dir, "/slurm-%j.out"));
  for (const std::string& a : o.sbatch_args) sbatch(a);
  absl::StrAppend(&out, kParamsBegin);
  auto param = [&out](absl::string_view name, absl::string_view value) {
    absl::StrAppend(&out, name, "=", ShellQuote(value), "\n");
  };
  param("PS_SERVERS", absl::StrCat(o.servers));
  param("PS_WORKERS", absl::StrCat(o.workers));
  param("PS_GPUS_PER_WORKER", absl::StrCat(o.gpus_per_worker));
  param("PS_CPUS_PER_TASK", absl::StrCat(o.cpus_per_task));
  param("PS_HOST", o.host);
  param("PS_BIN_DIR", o.bin_dir);
  param("PS_OUTPUT_DIR", o.output_dir);
  std::vector<std::string> quoted;
  for (const std::string& s : o.job_specs) {
    if (absl::StrContains(s, " ")) {
      return absl::InvalidArgumentError(
          absl::StrCat("job spec paths may not contain spaces: '", s, "'"));
    }
    quoted.push_back(s);
  }
  param("PS_JOB_SPECS", absl::StrJoin(quoted, " "));
  param("PS_START_TIMEOUT_S", absl::StrCat(o.start_timeout_s));
  absl::StrAppend(&out, tmpl.substr(end_at));
  return out;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>>
RenderK8sManifests(const K8sOptions& o) {
  if (absl::Status s = CheckCounts(o.servers, o.workers, o.gpus_per_worker);
      !s.ok()) {
    return s;
  }
  if (o.job_num_workers > o.workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("the job spec asks for num_workers: ", o.job_num_workers,
                     " but only ", o.workers, " workers are deployed"));
  }
  static const std::regex kDnsLabel("[a-z0-9]([-a-z0-9]*[a-z0-9])?");
  if (o.name_space.size() > 63 || !std::regex_match(o.name_space, kDnsLabel)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--namespace: '", o.name_space, "' is not a DNS label"));
  }
  if (o.image.empty() || absl::StrContains(o.image, " ")) {
    return absl::InvalidArgumentError("--image: expected an image reference");
  }
  std::vector<std::pair<std::string, std::string>> files;
  for (const std::string name : kK8sApplyOrder) {
    PS_ASSIGN_OR_RETURN(std::string text, Embedded(name));
    auto replace = [&text, &name](const std::string& from,
                                  const std::string& to) {
      return ReplaceOnce(text, name, from, to);
    };
    if (name == "namespace.yaml") {
      PS_RETURN_IF_ERROR(replace(
          "\n  name: ps\n", absl::StrCat("\n  name: ", o.name_space, "\n")));
    } else {
      // Every object but the Namespace lives in it.
      text = absl::StrReplaceAll(
          text,
          {{"\nmetadata:\n",
            absl::StrCat("\nmetadata:\n  namespace: ", o.name_space, "\n")}});
    }
    if (name == "server.yaml") {
      PS_RETURN_IF_ERROR(
          replace("\n  replicas: 2\n",
                  absl::StrCat("\n  replicas: ", o.servers, "\n")));
    }
    if (name == "worker.yaml") {
      PS_RETURN_IF_ERROR(
          replace("\n  replicas: 2\n",
                  absl::StrCat("\n  replicas: ", o.workers, "\n")));
      if (o.gpus_per_worker == 0) {
        PS_RETURN_IF_ERROR(replace("- --device=cuda\n", "- --device=cpu\n"));
        std::vector<std::string> lines = absl::StrSplit(text, '\n');
        std::erase_if(lines, [](const std::string& l) {
          return absl::StrContains(l, "nvidia.com/gpu:");
        });
        text = absl::StrJoin(lines, "\n");
      } else {
        text = absl::StrReplaceAll(
            text,
            {{"nvidia.com/gpu: \"1\"",
              absl::StrCat("nvidia.com/gpu: \"", o.gpus_per_worker, "\"")}});
      }
    }
    if (name == "submit-job.yaml") {
      PS_RETURN_IF_ERROR(
          replace("name: PS_SERVERS\n              value: \"2\"",
                  absl::StrCat("name: PS_SERVERS\n              value: \"",
                               o.servers, "\"")));
      PS_RETURN_IF_ERROR(
          replace("name: PS_WORKERS\n              value: \"2\"",
                  absl::StrCat("name: PS_WORKERS\n              value: \"",
                               o.workers, "\"")));
    }
    if (name == "secret.yaml") {
      PS_RETURN_IF_ERROR(replace("token: \"change-me-to-a-random-token\"",
                                 absl::StrCat("token: \"", o.token, "\"")));
    }
    if (name == "job-configmap.yaml") {
      const size_t at = text.find("  job.pbtxt: |\n");
      if (at == std::string::npos) {
        return absl::InternalError("job-configmap.yaml: no job.pbtxt key");
      }
      if (!o.job_spec_text.empty()) {
        std::string body;
        for (absl::string_view line :
             absl::StrSplit(absl::StripSuffix(o.job_spec_text, "\n"), '\n')) {
          absl::StrAppend(&body, line.empty() ? "" : "    ", line, "\n");
        }
        text = absl::StrCat(text.substr(0, at), "  job.pbtxt: |\n", body);
      } else {
        PS_RETURN_IF_ERROR(
            replace("\n    num_workers: 2\n",
                    absl::StrCat("\n    num_workers: ", o.workers, "\n")));
      }
    }
    if (o.image != "ps-train:latest") {
      text = absl::StrReplaceAll(
          text, {{"image: ps-train:latest", absl::StrCat("image: ", o.image)}});
    }
    files.emplace_back(name, std::move(text));
  }
  return files;
}

namespace {

// What `slurm submit` and `k8s render` were given. Held by their callbacks,
// which run during app.parse(), after AddDeployCommands has returned.
struct SlurmSubmitArgs {
  SlurmOptions options;
  std::vector<std::string> specs;
  bool no_submit = false;
};
struct K8sRenderArgs {
  K8sOptions options;
  std::string job, out_dir;
};

// `psctl slurm submit`: copies the specs and writes the script into the
// output directory, then submits it with sbatch (or prints its path with
// --no-submit).
[[noreturn]] void SlurmSubmit(const SlurmSubmitArgs& c) {
  SlurmOptions o = c.options;
  if (o.output_dir.empty()) {
    o.output_dir = absl::StrCat(
        "ps-slurm-",
        absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::LocalTimeZone()));
  }
  o.output_dir = Absolute(o.output_dir);
  o.bin_dir = Absolute(o.bin_dir.empty() ? DefaultBinDir() : o.bin_dir);
  ValidationOptions vo;
  vo.check_dataset_files = false;  // the nodes read it, not this host
  std::error_code ec;
  fs::create_directories(fs::path(o.output_dir) / "specs", ec);
  if (ec) {
    ExitWith(absl::PermissionDeniedError(absl::StrCat(
        "cannot create ", o.output_dir, "/specs: ", ec.message())));
  }
  for (size_t i = 0; i < c.specs.size(); ++i) {
    const std::string& path = c.specs[i];
    absl::StatusOr<JobSpec> spec = LoadJobSpec(path, vo);
    if (!spec.ok()) ExitWith(spec.status());
    if (spec->num_workers() > o.workers) {
      ExitWith(absl::InvalidArgumentError(absl::StrCat(
          path, ": num_workers: ", spec->num_workers(), " but --workers ",
          o.workers, ": the job would wait forever")));
    }
    absl::StatusOr<std::string> text = ReadFile(path);
    if (!text.ok()) ExitWith(text.status());
    const std::string copy = absl::StrCat(o.output_dir, "/specs/", i + 1, "-",
                                          fs::path(path).filename().string());
    if (absl::Status s = WriteFile(copy, *text, 0644); !s.ok()) ExitWith(s);
    o.job_specs.push_back(copy);
  }
  absl::StatusOr<std::string> script = RenderSbatchScript(o);
  if (!script.ok()) ExitWith(script.status());
  const std::string script_path = o.output_dir + "/ps_train.sbatch";
  if (absl::Status s = WriteFile(script_path, *script, 0755); !s.ok()) {
    ExitWith(s);
  }
  if (c.no_submit) {
    std::printf("%s\n", script_path.c_str());
    Exit(0);
  }
  absl::StatusOr<std::string> id =
      RunCapture({"sbatch", "--parsable", script_path});
  if (!id.ok()) ExitWith(id.status());
  const std::string job_id(absl::StripAsciiWhitespace(*id));
  std::printf("submitted Slurm job %s; script %s; results in %s\n",
              job_id.c_str(), script_path.c_str(), o.output_dir.c_str());
  Exit(0);
}

// `psctl k8s render`: the manifests to stdout, or one file each in --out_dir.
[[noreturn]] void K8sRender(const K8sRenderArgs& c) {
  K8sOptions o = c.options;
  o.token = RandomToken();
  if (!c.job.empty()) {
    ValidationOptions vo;
    vo.check_dataset_files = false;  // the image carries the dataset
    absl::StatusOr<JobSpec> spec = LoadJobSpec(c.job, vo);
    if (!spec.ok()) ExitWith(spec.status());
    absl::StatusOr<std::string> text = ReadFile(c.job);
    if (!text.ok()) ExitWith(text.status());
    o.job_spec_text = *text;
    o.job_num_workers = spec->num_workers();
  }
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> files =
      RenderK8sManifests(o);
  if (!files.ok()) ExitWith(files.status());
  if (c.out_dir.empty()) {
    bool first = true;
    for (const auto& [name, text] : *files) {
      std::printf("%s# %s\n%s", first ? "" : "---\n", name.c_str(),
                  text.c_str());
      first = false;
    }
    Exit(0);
  }
  std::error_code ec;
  fs::create_directories(c.out_dir, ec);
  // Numbered, so that `kubectl apply -f DIR` (file name order) creates the
  // namespace first.
  int n = 0;
  for (const auto& [name, text] : *files) {
    const std::string path =
        absl::StrFormat("%s/%02d-%s", c.out_dir, n++, name);
    if (absl::Status s =
            WriteFile(path, text, name == "secret.yaml" ? 0600 : 0644);
        !s.ok()) {
      ExitWith(s);
    }
    std::printf("%s\n", path.c_str());
  }
  Exit(0);
}

void AddSlurmCommands(CLI::App& app) {
  auto st = std::make_shared<SlurmSubmitArgs>();
  CLI::App* slurm = app.add_subcommand(
      "slurm", "Run a cluster and its training jobs inside a Slurm allocation");
  slurm->require_subcommand(1);
  CLI::App* submit = slurm->add_subcommand(
      "submit",
      "Write a batch script that starts a coordinator on the first node, the "
      "servers and workers as srun steps, trains the job specs one after "
      "another, collects metrics, events and the comparison in the output "
      "directory and tears everything down; then sbatch it");
  submit->add_option("jobs", st->specs, "Job spec(s) .pbtxt")->required();
  submit
      ->add_option("--servers", st->options.servers, "Parameter-server shards")
      ->capture_default_str();
  submit->add_option("--workers", st->options.workers, "Workers")
      ->capture_default_str();
  submit
      ->add_option("--gpus-per-worker", st->options.gpus_per_worker,
                   "GPUs per worker (--gres=gpu:G); 0: CPU workers")
      ->capture_default_str();
  submit
      ->add_option("--cpus-per-task", st->options.cpus_per_task,
                   "CPUs of each server and worker step")
      ->capture_default_str();
  submit->add_option("--partition", st->options.partition, "Slurm partition");
  submit->add_option("--time", st->options.time, "Slurm time limit")
      ->capture_default_str();
  submit->add_option("--job-name", st->options.job_name, "Slurm job name")
      ->capture_default_str();
  submit->add_option("--output_dir", st->options.output_dir,
                     "Directory on a file system every node shares: the "
                     "script, logs, metrics, events and comparison (default: "
                     "./ps-slurm-<date>-<time>)");
  submit->add_option("--bin_dir", st->options.bin_dir,
                     "Directory with coordinator, ps_server, ps_worker and "
                     "psctl on the nodes (default: next to this psctl)");
  submit
      ->add_option("--host", st->options.host,
                   "Address the daemons listen on (127.0.0.1 for a one-node "
                   "cluster)")
      ->capture_default_str();
  submit
      ->add_option("--start_timeout", st->options.start_timeout_s,
                   "Seconds for every daemon to register")
      ->capture_default_str();
  submit->add_option("--sbatch_arg", st->options.sbatch_args,
                     "Extra sbatch option, e.g. --account=proj (repeatable)");
  submit->add_flag("--no-submit", st->no_submit,
                   "Only write the script and print its path");
  submit->callback([st] { SlurmSubmit(*st); });
}

void AddK8sCommands(CLI::App& app) {
  auto st = std::make_shared<K8sRenderArgs>();
  CLI::App* k8s =
      app.add_subcommand("k8s", "Kubernetes manifests for a cluster");
  k8s->require_subcommand(1);
  CLI::App* render = k8s->add_subcommand(
      "render",
      "Write the manifests of configs/k8s for N shards and M workers: to "
      "stdout (one YAML stream) or as files into --out_dir");
  render
      ->add_option("--servers", st->options.servers, "Parameter-server shards")
      ->capture_default_str();
  render->add_option("--workers", st->options.workers, "Workers")
      ->capture_default_str();
  render
      ->add_option("--gpus-per-worker", st->options.gpus_per_worker,
                   "nvidia.com/gpu per worker; 0: CPU workers")
      ->capture_default_str();
  render->add_option("--image", st->options.image, "Container image")
      ->capture_default_str();
  render->add_option("--namespace", st->options.name_space, "Namespace")
      ->capture_default_str();
  render->add_option("--job", st->job,
                     "Job spec .pbtxt for ConfigMap ps-job (default: the "
                     "example job)");
  render->add_option("--out_dir", st->out_dir,
                     "Write one file per manifest here instead of stdout");
  render->callback([st] { K8sRender(*st); });
}

}  // namespace

void AddDeployCommands(CLI::App& app) {
  AddSlurmCommands(app);
  AddK8sCommands(app);
}

}  // namespace ps::psctl
