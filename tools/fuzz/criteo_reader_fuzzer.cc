// libFuzzer target: the streaming text reader with
// worker/data/criteo_format.h's parser (Criteo display-ads TSV)
// on arbitrary file contents (see text_reader_fuzz.h). Any return is fine; a
// crash, a sanitizer report, a batch that breaks its invariants or an
// allocation over libFuzzer's limit is a bug.
#include <cstddef>
#include <cstdint>

#include "tools/fuzz/text_reader_fuzz.h"
#include "worker/data/criteo_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ps::fuzz::FuzzTextReader(data, size,
                                  ps::worker::data::NewCriteoParser({}));
}
