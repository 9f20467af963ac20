// ps_server: one parameter-server shard. Holds its shard of every job it is
// set up for, serves ParameterService, writes checkpoints, and (with
// --coordinator) registers and heartbeats with the coordinator.
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/platform/coordinator_address.h"
#include "common/platform/daemon_flags.h"
#include "common/platform/file_system.h"
#include "common/platform/metrics.h"
#include "common/platform/process.h"
#include "common/platform/rpc.h"
#include "common/platform/status.h"
#include "proto/coordinator_service.grpc.pb.h"
#include "server/shard/member_id_file.h"
#include "server/shard/parameter_service.h"
#include "server/shard/replica_link.h"
#include "server/shard/shard_router.h"
#include "server/shard/shard_store.h"

ABSL_FLAG(int64_t, member_id, 0,
          "This shard's member id (its identity in the coordinator's jobs). "
          "0: the one kept in --data_dir from an earlier registration, else "
          "a new one (then kept there).");
ABSL_FLAG(std::string, data_dir, "",
          "Directory for checkpoints (<data_dir>/<job_id>/). Empty: "
          "checkpoints are refused and SetupJob(restore) starts fresh.");
ABSL_FLAG(int, threads, 8,
          "Threads serving pulls and end-of-step pushes that must wait (BSP "
          "barrier, SSP bound) at start; more are started when all of them "
          "wait, up to 32x this. The other calls run on gRPC's threads.");
ABSL_FLAG(int, apply_threads, 0,
          "Threads that apply a BSP step's update when the step closes (the "
          "chunks are spread over them); 0: one per CPU core, at most 8.");
ABSL_FLAG(int, metrics_port, -1,
          "Port for Prometheus GET /metrics; 0 picks a free port (printed); "
          "-1 disables the endpoint.");
ABSL_FLAG(int, max_message_bytes, ps::kDefaultMaxMessageBytes,
          "Largest gRPC message accepted or sent. Clients split larger "
          "transfers into chunks below it.");
ABSL_FLAG(bool, checkpoint_on_exit, false,
          "On SIGTERM/SIGINT, write a final checkpoint of every job after "
          "in-flight calls finished.");
ABSL_FLAG(int, shutdown_grace_ms, 5000,
          "On SIGTERM, how long in-flight calls may take to finish.");
ABSL_FLAG(int, checkpoint_poll_ms, 500,
          "How often the server checks whether a periodic checkpoint "
          "(CheckpointSpec every_seconds, or every_versions under ASP/SSP) "
          "is due. Under BSP the state at each multiple of every_versions "
          "is taken as that step is applied and written at once, so that "
          "every shard holds the same versions.");

namespace ps::server {
namespace {

void Log(const std::string& line) {
  std::fprintf(stderr, "[ps_server] %s\n", line.c_str());
  std::fflush(stderr);
}

// Registers with the coordinator and heartbeats until `stop`. The member
// id comes from --member_id, else from --data_dir (a restart on any port
// takes this shard's place in its jobs), and is kept there once given.
void CoordinatorLoop(CoordinatorConnection* coordinator,
                     const std::string& address, const std::string& token,
                     int64_t member_id, absl::Notification* stop) {
  const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
  absl::Duration interval = absl::Seconds(1);
  bool registered = false;
  absl::Duration backoff = absl::Milliseconds(200);
  while (!stop->HasBeenNotified()) {
    absl::StatusOr<std::shared_ptr<CoordinatorService::Stub>> stub =
        coordinator->Stub();
    if (!registered) {
      RegisterRequest request;
      request.set_role(SERVER);
      request.set_address(address);
      request.set_member_id(member_id);
      char host[256] = {0};
      gethostname(host, sizeof(host) - 1);
      request.set_hostname(host);
      request.set_pid(getpid());
      RegisterResponse response;
      grpc::ClientContext context;
      PrepareContext(&context, absl::Seconds(5), token);
      absl::Status s = stub.status();
      if (s.ok())
        s = FromGrpcStatus((*stub)->Register(&context, request, &response));
      if (s.ok()) {
        registered = true;
        member_id = response.member_id();
        if (response.heartbeat_interval_ms() > 0) {
          interval = absl::Milliseconds(response.heartbeat_interval_ms());
        }
        backoff = absl::Milliseconds(200);
        Log(absl::StrCat("registered with coordinator ",
                         coordinator->Describe(), " as member ", member_id));
        if (absl::Status kept =
                SaveMemberId(FileSystem::Posix(), data_dir, member_id);
            !kept.ok()) {
          Log(absl::StrCat("member id not kept: ", kept.ToString()));
        }
      } else {
        Log(absl::StrCat("register with coordinator ", coordinator->Describe(),
                         " failed: ", s.message(), "; retrying"));
        coordinator->Refresh();
        stop->WaitForNotificationWithTimeout(backoff);
        backoff = std::min(backoff * 2, absl::Seconds(5));
        continue;
      }
    }
    if (stop->WaitForNotificationWithTimeout(interval)) break;
    HeartbeatRequest request;
    request.set_member_id(member_id);
    HeartbeatResponse response;
    grpc::ClientContext context;
    PrepareContext(&context, absl::Seconds(5), token);
    absl::Status s = stub.status();
    if (s.ok())
      s = FromGrpcStatus((*stub)->Heartbeat(&context, request, &response));
    if (s.ok() && response.reregister()) {
      Log("coordinator asked to register again");
      registered = false;
    } else if (!s.ok()) {
      Log(absl::StrCat("heartbeat failed: ", s.message()));
      // A coordinator that moved is registered with afresh at its new
      // address (it may be a restarted one that does not know us).
      if (coordinator->Refresh()) registered = false;
    }
  }
}

// --member_id, else the id kept in --data_dir (0: none yet).
absl::StatusOr<int64_t> InitialMemberId() {
  if (const int64_t id = absl::GetFlag(FLAGS_member_id); id != 0) return id;
  return LoadMemberId(FileSystem::Posix(), absl::GetFlag(FLAGS_data_dir));
}

// The coordinator named by --coordinator or --coordinator_file; nullptr
// when neither is given (no registration: the server is driven directly by
// its SetupJob RPC).
absl::StatusOr<std::unique_ptr<CoordinatorConnection>> ConnectCoordinator(
    const TlsOptions& tls) {
  const CoordinatorFlags flags = CoordinatorFromFlags();
  if (flags.address.empty() && flags.file.empty()) return nullptr;
  ChannelOptions options;
  options.tls = tls;
  return CoordinatorConnection::Create(flags.address, flags.file, options);
}

// With --metrics_port, serves the metrics and prints the bound port.
absl::Status ServeMetrics(MetricsRegistry& metrics) {
  const int mport = absl::GetFlag(FLAGS_metrics_port);
  if (mport < 0) return absl::OkStatus();
  PS_ASSIGN_OR_RETURN(
      const int bound,
      metrics.Serve(absl::StrCat(ListenFromFlags().host, ":", mport)));
  std::printf("metrics_port=%d\n", bound);
  std::fflush(stdout);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShardStore>> CreateOneStore(
    MetricsRegistry& metrics, bool restarted) {
  ShardStoreOptions store_options;
  store_options.restarted = restarted;
  store_options.data_dir = absl::GetFlag(FLAGS_data_dir);
  store_options.metrics = &metrics;
  store_options.apply_threads = absl::GetFlag(FLAGS_apply_threads);
  // With the tuned thresholds (main()), a finished job's freed tables
  // would stay resident until the next job reuses them.
  store_options.after_teardown = [] { ReleaseFreedMemory(); };
  if (store_options.apply_threads == 0) {
    store_options.apply_threads = DefaultApplyThreads();
  }
  return ShardStore::Create(store_options);
}

// The server's shards: a ShardRouter over stores made with the flags'
// options, reaching backups with the cluster's TLS settings and token.
absl::StatusOr<std::unique_ptr<ShardStore>> CreateStore(
    MetricsRegistry& metrics, const TlsOptions& tls, const std::string& token,
    bool restarted) {
  ChannelOptions channel;
  channel.tls = tls;
  channel.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  PS_ASSIGN_OR_RETURN(
      std::unique_ptr<ShardRouter> router,
      ShardRouter::Create(
          [&metrics, restarted] { return CreateOneStore(metrics, restarted); },
          GrpcReplicaLinks(channel, token), &metrics));
  return std::unique_ptr<ShardStore>(std::move(router));
}

absl::StatusOr<std::unique_ptr<ParameterServiceAdapter>> CreateService(
    ShardStore* store, const std::string& token) {
  ParameterServiceOptions service_options;
  service_options.token = token;
  service_options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  service_options.wait_threads = absl::GetFlag(FLAGS_threads);
  service_options.max_wait_threads = 32 * service_options.wait_threads;
  return ParameterServiceAdapter::Create(store, service_options);
}

// Serves `service` (and the standard health service) on --host:--port,
// prints the port and writes --port_file. Logs why and returns null when it
// cannot.
std::unique_ptr<grpc::Server> StartGrpcServer(ParameterServiceAdapter& service,
                                              const TlsOptions& tls,
                                              int& port) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds =
      MakeServerCredentials(tls);
  if (!creds.ok()) {
    Log(creds.status().ToString());
    return nullptr;
  }
  // The standard grpc.health.v1 service, for Kubernetes probes and
  // `psctl cluster status`.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  port = 0;
  const ListenFlags listen = ListenFromFlags();
  const std::string& host = listen.host;
  builder.AddListeningPort(absl::StrCat(host, ":", listen.port), *creds, &port);
  builder.SetMaxReceiveMessageSize(absl::GetFlag(FLAGS_max_message_bytes));
  builder.SetMaxSendMessageSize(absl::GetFlag(FLAGS_max_message_bytes));
  builder.RegisterService(service.service());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    Log(absl::StrCat("cannot listen on ", host, ":", listen.port));
    return nullptr;
  }
  std::printf("ps_server listening on %s:%d\n", host.c_str(), port);
  std::fflush(stdout);
  if (const std::string& pf = listen.port_file; !pf.empty()) {
    if (absl::Status s = WriteFileAtomically(FileSystem::Posix(), pf,
                                             absl::StrCat(port, "\n"));
        !s.ok()) {
      Log(s.ToString());
      return nullptr;
    }
  }
  return server;
}

// Writes the checkpoints that are due until `stop`.
void CheckpointLoop(ShardStore* store, absl::Notification* stop) {
  const absl::Duration poll =
      absl::Milliseconds(absl::GetFlag(FLAGS_checkpoint_poll_ms));
  while (!stop->HasBeenNotified()) {
    // Woken early when a BSP step reached a multiple of every_versions,
    // so that each of those states is written (every shard then holds
    // the same versions for a job-wide rollback).
    store->WaitForCheckpointWork(poll);
    if (stop->HasBeenNotified()) break;
    if (absl::Status s = store->CheckpointDue(); !s.ok()) {
      Log(absl::StrCat("periodic checkpoint failed: ", s.ToString()));
    }
  }
}

// After `stop`: releases waiting pulls and barriers (their clients retry),
// lets in-flight calls finish within the grace period, joins the threads,
// then writes the final checkpoint from a quiet shard. Returns the exit
// status.
int ShutDown(ShardStore& store, grpc::Server& server,
             ParameterServiceAdapter& service, std::thread& checkpointer,
             std::thread& coordinator_thread) {
  store.Shutdown();
  server.Shutdown(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(absl::GetFlag(FLAGS_shutdown_grace_ms)));
  service.Stop();
  checkpointer.join();
  if (coordinator_thread.joinable()) coordinator_thread.join();
  int rc = 0;
  if (absl::GetFlag(FLAGS_checkpoint_on_exit)) {
    if (absl::Status s = store.CheckpointAll(); !s.ok()) {
      Log(absl::StrCat("final checkpoint failed: ", s.ToString()));
      rc = 1;
    } else {
      Log("final checkpoint written");
    }
  }
  return rc;
}

int Run() {
  absl::StatusOr<std::string> token = TokenFromFlags(std::getenv("PS_TOKEN"));
  if (!token.ok()) {
    Log(token.status().ToString());
    return 2;
  }
  absl::StatusOr<int64_t> member_id = InitialMemberId();
  if (!member_id.ok()) {
    Log(member_id.status().ToString());
    return 2;
  }
  const TlsOptions tls = TlsFromFlags();

  // SIGTERM / SIGINT are taken by a dedicated thread via sigwait; block them
  // before any other thread starts so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  MetricsRegistry metrics;
  if (absl::Status s = ServeMetrics(metrics); !s.ok()) {
    Log(s.ToString());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<ShardStore>> store =
      CreateStore(metrics, tls, *token, /*restarted=*/*member_id != 0);
  if (!store.ok()) {
    Log(store.status().ToString());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<ParameterServiceAdapter>> service =
      CreateService(store->get(), *token);
  if (!service.ok()) {
    Log(service.status().ToString());
    return 2;
  }
  int port = 0;
  std::unique_ptr<grpc::Server> server = StartGrpcServer(**service, tls, port);
  if (server == nullptr) return 2;
  // Before any thread starts: returning with a joinable std::thread would
  // terminate the process instead of exiting 2.
  absl::StatusOr<std::unique_ptr<CoordinatorConnection>> coordinator =
      ConnectCoordinator(tls);
  if (!coordinator.ok()) {
    Log(coordinator.status().ToString());
    return 2;
  }

  absl::Notification stop;
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    Log(absl::StrCat("signal ", sig, ": shutting down"));
    stop.Notify();
  });
  std::thread checkpointer(CheckpointLoop, store->get(), &stop);
  std::thread coordinator_thread;
  if (*coordinator != nullptr) {
    const ListenFlags listen = ListenFromFlags();
    coordinator_thread = std::thread(
        CoordinatorLoop, coordinator->get(),
        AdvertisedAddress(listen.advertise_address, listen.host, port), *token,
        *member_id, &stop);
  }

  stop.WaitForNotification();
  const int rc =
      ShutDown(**store, *server, **service, checkpointer, coordinator_thread);
  server->Wait();
  signal_thread.join();
  Log("stopped");
  return rc;
}

}  // namespace
}  // namespace ps::server

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "a parameter-server shard.\n\n"
      "Holds one shard of the weights and optimizer state of every job it is "
      "set up for, applies pushed gradients under the job's consistency "
      "model (BSP / ASP / SSP), serves pulls, and writes checkpoints.\n\n"
      "  ps_server --port=0 --port_file=/run/ps/server0.port "
      "--data_dir=/var/lib/ps --token_file=/etc/ps/token\n\n"
      "Environment: PS_TOKEN (the cluster token without --token_file); "
      "PS_MALLOC_TUNING=0 keeps glibc's allocator defaults instead of "
      "keeping freed message buffers (up to 256 MB) in the process.\n");
  absl::ParseCommandLine(argc, argv);
  ps::PrepareDaemonProcess(std::getenv("PS_MALLOC_TUNING"));
  return ps::server::Run();
}
