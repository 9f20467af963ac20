#include "tools/psctl/deploy.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ps::psctl {
namespace {

namespace fs = std::filesystem;

SlurmOptions BaseSlurm() {
  SlurmOptions o;
  o.job_specs = {"/shared/out/specs/1-job.pbtxt"};
  o.output_dir = "/shared/out";
  o.bin_dir = "/opt/ps/bin";
  return o;
}

// RenderK8sManifests as a map by file name.
absl::StatusOr<std::map<std::string, std::string>> Render(const K8sOptions& o) {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> files =
      RenderK8sManifests(o);
  if (!files.ok()) return files.status();
  return std::map<std::string, std::string>(files->begin(), files->end());
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

TEST(RenderSbatchScript, CpuClusterHeaderAndParameters) {
  SlurmOptions o = BaseSlurm();
  o.servers = 2;
  o.workers = 3;
  o.cpus_per_task = 2;
  o.time = "00:30:00";
  absl::StatusOr<std::string> s = RenderSbatchScript(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(absl::StartsWith(*s, "#!/bin/bash\n"));
  for (const char* line :
       {"#SBATCH --job-name=ps-train\n", "#SBATCH --ntasks=5\n",
        "#SBATCH --cpus-per-task=2\n", "#SBATCH --time=00:30:00\n",
        "#SBATCH --output=/shared/out/slurm-%j.out\n", "\nPS_SERVERS=2\n",
        "\nPS_WORKERS=3\n", "\nPS_GPUS_PER_WORKER=0\n",
        "\nPS_CPUS_PER_TASK=2\n", "\nPS_HOST=0.0.0.0\n",
        "\nPS_BIN_DIR=/opt/ps/bin\n", "\nPS_OUTPUT_DIR=/shared/out\n",
        "\nPS_JOB_SPECS=/shared/out/specs/1-job.pbtxt\n"}) {
    EXPECT_TRUE(absl::StrContains(*s, line)) << line;
  }
  // Only psctl's #SBATCH lines: the template's defaults are replaced.
  EXPECT_EQ(Count(*s, "#SBATCH --ntasks="), 1);
  EXPECT_FALSE(absl::StrContains(*s, "--gpus="));
  EXPECT_FALSE(absl::StrContains(*s, "--partition="));
  EXPECT_FALSE(absl::StrContains(*s, ":=")) << "template defaults left in";
  // The body is the template's: daemons as srun steps, teardown on signals.
  EXPECT_TRUE(absl::StrContains(*s, "trap cleanup EXIT"));
  EXPECT_TRUE(absl::StrContains(*s, "srun --job-name="));
  EXPECT_TRUE(absl::StrContains(*s, "scontrol show hostnames"));
  EXPECT_TRUE(absl::StrContains(*s, "\"$coordinator_bin\" --host="));
  EXPECT_TRUE(absl::EndsWith(*s, "exit \"$failed\"\n"));
}

TEST(RenderSbatchScript, GpuWorkersGetGresAndAJobWideGpuCount) {
  SlurmOptions o = BaseSlurm();
  o.workers = 4;
  o.gpus_per_worker = 1;
  o.partition = "gpu";
  o.sbatch_args = {"--account=ml", "--exclusive"};
  absl::StatusOr<std::string> s = RenderSbatchScript(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(absl::StrContains(*s, "#SBATCH --gpus=4\n"));
  EXPECT_TRUE(absl::StrContains(*s, "#SBATCH --partition=gpu\n"));
  EXPECT_TRUE(absl::StrContains(*s, "#SBATCH --account=ml\n"));
  EXPECT_TRUE(absl::StrContains(*s, "#SBATCH --exclusive\n"));
  EXPECT_TRUE(absl::StrContains(*s, "\nPS_GPUS_PER_WORKER=1\n"));
  EXPECT_TRUE(absl::StrContains(*s, "--gres=\"gpu:$PS_GPUS_PER_WORKER\""));
  EXPECT_TRUE(absl::StrContains(*s, "--device=cuda"));
  // #SBATCH lines all come before the first command.
  const size_t last_sbatch = s->rfind("\n#SBATCH ");
  const size_t first_param = s->find("\nPS_SERVERS=");
  EXPECT_LT(last_sbatch, first_param);
}

TEST(RenderSbatchScript, QuotesValuesForTheShell) {
  SlurmOptions o = BaseSlurm();
  o.bin_dir = "/opt/it's here";
  absl::StatusOr<std::string> s = RenderSbatchScript(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(absl::StrContains(*s, "\nPS_BIN_DIR='/opt/it'\\''s here'\n"));
}

TEST(RenderSbatchScript, RejectsBadOptions) {
  struct Case {
    const char* what;
    void (*edit)(SlurmOptions&);
  };
  const Case cases[] = {
      {"no servers", [](SlurmOptions& o) { o.servers = 0; }},
      {"no workers", [](SlurmOptions& o) { o.workers = 0; }},
      {"negative gpus", [](SlurmOptions& o) { o.gpus_per_worker = -1; }},
      {"no cpus", [](SlurmOptions& o) { o.cpus_per_task = 0; }},
      {"no spec", [](SlurmOptions& o) { o.job_specs.clear(); }},
      {"relative output", [](SlurmOptions& o) { o.output_dir = "out"; }},
      {"spec with space",
       [](SlurmOptions& o) { o.job_specs = {"/a b.pbtxt"}; }},
      {"sbatch arg", [](SlurmOptions& o) { o.sbatch_args = {"account=x"}; }},
  };
  for (const Case& c : cases) {
    SlurmOptions o = BaseSlurm();
    c.edit(o);
    EXPECT_EQ(RenderSbatchScript(o).status().code(),
              absl::StatusCode::kInvalidArgument)
        << c.what;
  }
}

TEST(RenderK8sManifests, SetsCountsNamespaceImageAndToken) {
  K8sOptions o;
  o.servers = 3;
  o.workers = 5;
  o.image = "registry.example/ps:1.2";
  o.name_space = "train";
  o.token = "0123abcd";
  absl::StatusOr<std::map<std::string, std::string>> m = Render(o);
  ASSERT_TRUE(m.ok()) << m.status();
  for (const char* f :
       {"namespace.yaml", "secret.yaml", "job-configmap.yaml",
        "coordinator.yaml", "server.yaml", "worker.yaml", "submit-job.yaml"}) {
    ASSERT_TRUE(m->count(f)) << f;
  }
  EXPECT_FALSE(m->count("kustomization.yaml"));
  const std::string& server = m->at("server.yaml");
  const std::string& worker = m->at("worker.yaml");
  EXPECT_TRUE(absl::StrContains(server, "\n  replicas: 3\n"));
  EXPECT_TRUE(absl::StrContains(worker, "\n  replicas: 5\n"));
  EXPECT_EQ(Count(worker, "nvidia.com/gpu: \"1\""), 2);
  EXPECT_TRUE(absl::StrContains(worker, "--device=cuda"));
  EXPECT_TRUE(
      absl::StrContains(m->at("submit-job.yaml"),
                        "name: PS_SERVERS\n              value: \"3\""));
  EXPECT_TRUE(
      absl::StrContains(m->at("submit-job.yaml"),
                        "name: PS_WORKERS\n              value: \"5\""));
  EXPECT_TRUE(
      absl::StrContains(m->at("job-configmap.yaml"), "\n    num_workers: 5\n"));
  EXPECT_TRUE(absl::StrContains(m->at("secret.yaml"), "token: \"0123abcd\""));
  EXPECT_TRUE(absl::StrContains(m->at("namespace.yaml"), "\n  name: train\n"));
  for (const auto& [name, text] : *m) {
    EXPECT_FALSE(absl::StrContains(text, "ps-train:latest")) << name;
    if (name == "namespace.yaml") continue;
    // Every object (each "metadata:" at column 0) gets the namespace.
    EXPECT_EQ(Count(text, "\nmetadata:\n  namespace: train\n"),
              Count(text, "\nmetadata:\n"))
        << name;
    EXPECT_GT(Count(text, "\nmetadata:\n"), 0) << name;
  }
  EXPECT_EQ(Count(server, "image: registry.example/ps:1.2"), 1);
}

TEST(RenderK8sManifests, CpuWorkersRequestNoGpu) {
  K8sOptions o;
  o.gpus_per_worker = 0;
  o.token = "t";
  absl::StatusOr<std::map<std::string, std::string>> m = Render(o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(absl::StrContains(m->at("worker.yaml"), "nvidia.com/gpu:"));
  EXPECT_TRUE(absl::StrContains(m->at("worker.yaml"), "--device=cpu"));
}

TEST(RenderK8sManifests, EmbedsTheGivenJobSpec) {
  K8sOptions o;
  o.token = "t";
  o.job_spec_text = "name: \"mine\"\n\nnum_workers: 1\n";
  o.job_num_workers = 1;
  absl::StatusOr<std::map<std::string, std::string>> m = Render(o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(absl::EndsWith(m->at("job-configmap.yaml"),
                             "  job.pbtxt: |\n    name: \"mine\"\n\n"
                             "    num_workers: 1\n"));
  o.job_num_workers = 3;  // more than the 2 workers deployed
  EXPECT_EQ(RenderK8sManifests(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RenderK8sManifests, RejectsBadOptions) {
  K8sOptions o;
  o.servers = 0;
  EXPECT_EQ(RenderK8sManifests(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = K8sOptions();
  o.name_space = "Not_A_Label";
  EXPECT_EQ(RenderK8sManifests(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Runs argv through AddDeployCommands; returns the exit code thrown.
int RunCli(std::vector<std::string> argv) {
  CLI::App app{"test"};
  app.require_subcommand(1);
  AddDeployCommands(app);
  argv.insert(argv.begin(), "psctl");
  std::vector<const char*> args;
  for (const std::string& a : argv) args.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(args.size()), const_cast<char**>(args.data()));
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    return 2;
  }
  return -1;  // the callback did not end with its exit code
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TestSpec() {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/",
                      std::getenv("TEST_WORKSPACE"),
                      "/configs/fashion_mnist_bsp.pbtxt");
}

TEST(SlurmSubmitCommand, NoSubmitWritesTheScriptAndCopiesTheSpecs) {
  const std::string dir =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/slurm-out");
  ASSERT_EQ(
      RunCli({"slurm", "submit", TestSpec(), "--servers", "2", "--workers", "4",
              "--output_dir", dir, "--bin_dir", "/opt/ps/bin", "--no-submit"}),
      0);
  const std::string script = ReadAll(dir + "/ps_train.sbatch");
  EXPECT_TRUE(absl::StrContains(script, "#SBATCH --ntasks=6\n"));
  EXPECT_TRUE(absl::StrContains(
      script, absl::StrCat("\nPS_JOB_SPECS=", dir,
                           "/specs/1-fashion_mnist_bsp.pbtxt\n")));
  EXPECT_EQ(ReadAll(dir + "/specs/1-fashion_mnist_bsp.pbtxt"),
            ReadAll(TestSpec()));
  EXPECT_NE(fs::status(dir + "/ps_train.sbatch").permissions() &
                fs::perms::owner_exec,
            fs::perms::none);
}

TEST(SlurmSubmitCommand, RejectsASpecThatNeedsMoreWorkers) {
  // fashion_mnist_bsp.pbtxt asks for 4 workers.
  EXPECT_EQ(
      RunCli({"slurm", "submit", TestSpec(), "--workers", "2", "--output_dir",
              absl::StrCat(std::getenv("TEST_TMPDIR"), "/few"), "--no-submit"}),
      5);
  EXPECT_EQ(RunCli({"slurm", "submit", "/nonexistent.pbtxt", "--no-submit",
                    "--output_dir",
                    absl::StrCat(std::getenv("TEST_TMPDIR"), "/none")}),
            5);
}

TEST(SlurmSubmitCommand, SaysSoWhenSbatchIsMissing) {
  const std::string path = std::getenv("PATH");
  setenv("PATH", "/nonexistent", 1);
  const int rc =
      RunCli({"slurm", "submit", TestSpec(), "--workers", "4", "--output_dir",
              absl::StrCat(std::getenv("TEST_TMPDIR"), "/nosbatch")});
  setenv("PATH", path.c_str(), 1);
  EXPECT_EQ(rc, 1);
}

TEST(K8sRenderCommand, WritesFilesWithAFreshToken) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/k8s");
  ASSERT_EQ(RunCli({"k8s", "render", "--servers", "3", "--workers", "4",
                    "--out_dir", dir}),
            0);
  const std::string secret = ReadAll(dir + "/01-secret.yaml");
  EXPECT_FALSE(absl::StrContains(secret, "change-me"));
  EXPECT_TRUE(
      absl::StrContains(ReadAll(dir + "/04-server.yaml"), "\n  replicas: 3\n"));
  EXPECT_TRUE(fs::exists(dir + "/00-namespace.yaml"));
  EXPECT_EQ(RunCli({"k8s", "render", "--servers", "0"}), 5);
}

}  // namespace
}  // namespace ps::psctl
