// libFuzzer target: worker/data/idx_reader on arbitrary file contents (plain or
// gzip; zlib reads both). The first input byte picks the expected magic
// (images or labels); the rest is the file. Any return is fine; a crash, a
// sanitizer report or an allocation over libFuzzer's limit is a bug.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "worker/data/idx_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint32_t magic =
      (data[0] & 1) ? ps::worker::kIdxImagesMagic : ps::worker::kIdxLabelsMagic;
  // An anonymous in-memory file, read through its /proc path: no disk, no
  // names to clean up.
  const int fd = memfd_create("idx_fuzz", 0);
  if (fd < 0) return 0;
  size_t done = 1;
  while (done < size) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  (void)ps::worker::ReadIdxFile("/proc/self/fd/" + std::to_string(fd), magic);
  close(fd);
  return 0;
}
