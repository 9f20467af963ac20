// Test helper: the real coordinator binary as a child process on 127.0.0.1
// with port 0, and a stub to call it.
#ifndef PS_TESTS_COORDINATOR_PROCESS_H_
#define PS_TESTS_COORDINATOR_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/coordinator_service.grpc.pb.h"

namespace ps::testing {

// Owns the child: the destructor stops it (SIGTERM, then reaps it); it also
// dies with the test process (PR_SET_PDEATHSIG). Restartable on the same
// data directory (a new port each time).
class CoordinatorProcess {
 public:
  // `token` goes to the child as PS_TOKEN; `flags` are appended to
  // --data_dir, --port=0, --port_file.
  CoordinatorProcess(std::string data_dir, std::string token,
                     std::vector<std::string> flags = {});
  ~CoordinatorProcess();

  // Starts it and waits up to 20 s for its port file.
  absl::Status Start();
  // Sends `signal` and reaps the child.
  void Stop(int signal);

  const std::string& address() const { return address_; }
  CoordinatorService::Stub* stub() { return stub_.get(); }

 private:
  const std::string data_dir_;
  const std::string token_;
  const std::vector<std::string> flags_;
  pid_t pid_ = -1;
  std::string address_;
  std::unique_ptr<CoordinatorService::Stub> stub_;
};

}  // namespace ps::testing

#endif  // PS_TESTS_COORDINATOR_PROCESS_H_
