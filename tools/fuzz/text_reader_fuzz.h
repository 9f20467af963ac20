// The shared body of the text-reader fuzzers (criteo_reader, libsvm_reader,
// movielens_reader): the first input byte picks the reader's options (shard
// count and shard, shuffle buffer, block and line limits, batch size), the
// rest is the file, plain or gzip. Every batch must validate against the
// schema and the counts must add up; anything else is a bug and aborts.
#ifndef PS_TOOLS_FUZZ_TEXT_READER_FUZZ_H_
#define PS_TOOLS_FUZZ_TEXT_READER_FUZZ_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "worker/data/batch.h"
#include "worker/data/batch_reader.h"
#include "worker/data/line_parser.h"
#include "worker/data/text_reader.h"

namespace ps::fuzz {

inline int FuzzTextReader(const uint8_t* data, size_t size,
                          std::unique_ptr<worker::data::LineParser> parser) {
  if (size < 1 || parser == nullptr) return 0;
  const uint8_t options_byte = data[0];
  // An anonymous in-memory file, read through its /proc path.
  const int fd = memfd_create("text_reader_fuzz", 0);
  if (fd < 0) return 0;
  size_t done = 1;
  while (done < size) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  worker::data::TextReaderOptions options;
  options.files = {"/proc/self/fd/" + std::to_string(fd)};
  options.shuffle_buffer = (options_byte & 0x01) ? 5 : 0;
  options.seed = options_byte;
  options.bad_lines.max_fraction = (options_byte & 0x02) ? 0.5 : 1.0;
  options.bad_lines.min_lines = 4;
  options.line_reader.block_bytes = (options_byte & 0x04) ? 3 : 4096;
  options.line_reader.max_line_bytes = (options_byte & 0x08) ? 64 : 1 << 20;
  worker::data::ShardSpec spec;
  spec.num_shards = 1 + ((options_byte >> 4) & 0x3);
  spec.shard = (options_byte >> 6) % spec.num_shards;
  spec.start_example = (options_byte & 0x01) ? 2 : 0;
  const int batch_size = 1 + (options_byte % 7);

  auto reader = worker::data::OpenTextReader(options, std::move(parser), spec);
  if (reader.ok()) {
    int64_t examples = 0;
    for (int round = 0; round < 100000; ++round) {
      auto batch = (*reader)->Next(batch_size);
      if (!batch.ok()) break;
      if (!worker::data::ValidateBatch(*batch, (*reader)->schema()).ok() ||
          batch->size > batch_size ||
          batch->first_example != (*reader)->position() - batch->size) {
        abort();
      }
      if (batch->size == 0) break;
      examples += batch->size;
    }
    const worker::data::ReaderStats stats = (*reader)->stats();
    if (stats.examples + stats.bad_lines != stats.lines ||
        examples > stats.examples) {
      abort();
    }
  }
  close(fd);
  return 0;
}

}  // namespace ps::fuzz

#endif  // PS_TOOLS_FUZZ_TEXT_READER_FUZZ_H_
