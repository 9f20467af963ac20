// Test helper: a real ps_server child process on 127.0.0.1 with port 0.
#ifndef PS_TESTS_PS_SERVER_PROCESS_H_
#define PS_TESTS_PS_SERVER_PROCESS_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ps::testing {

// Owns the child: the destructor SIGKILLs it if it still runs and reaps it.
// The child also dies with the test process (PR_SET_PDEATHSIG).
class ServerProcess {
 public:
  // Starts //server:ps_server with `flags` (plus --port=0 and a port file)
  // and waits up to 20 s for it to listen.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::vector<std::string>& flags,
      const std::map<std::string, std::string>& env = {});
  ~ServerProcess();

  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }

  // Sends `sig` and waits up to `timeout_s` for the exit; returns the wait
  // status (as waitpid reports it).
  absl::StatusOr<int> Signal(int sig, int timeout_s = 20);

 private:
  pid_t pid_ = -1;
  std::string address_;
};

// A fresh directory under TEST_TMPDIR.
std::string TempDir(const std::string& name);

}  // namespace ps::testing

#endif  // PS_TESTS_PS_SERVER_PROCESS_H_
