#include "server/shard/dense_gradient.h"

#include <cstdint>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/platform/status.h"
#include "common/wire/payload_codec.h"
#include "server/shard/float_runs.h"
#include "server/shard/vector_clones.h"

namespace ps::server {
namespace {

// NaN and +-Inf are exactly the floats whose exponent bits are all ones; an
// integer OR-reduction vectorises where a float one would not.
// `p` holds n little-endian floats, at any alignment.
PS_VECTOR_CLONES bool AllFiniteLoop(size_t n, const char* __restrict p) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + 4 * i, sizeof(bits));
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

// The same over fp32 payload bytes split into segments (a float may
// straddle two of them).
bool AllFinite(const std::vector<absl::string_view>& segments) {
  return ForEachFloatRun(
      segments, [](const char* p, size_t n) { return AllFiniteLoop(n, p); });
}

// CheckChunk's size checks of a sparse update of a chunk of n elements.
absl::Status CheckSparseChunk(const PushChunk& c, int64_t n) {
  const int size = DTypeSize(c.dtype);
  if (c.num_elements < 1 || c.num_elements > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", c.chunk_id, ": a sparse update of ",
                     c.num_elements, " elements, the chunk has ", n));
  }
  if (c.indices.size() != static_cast<size_t>(c.num_elements) * 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", c.chunk_id, ": ", c.indices.size(),
        " bytes of indices, expected ", c.num_elements, " x 4 (uint32)"));
  }
  if (size == 0) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", c.chunk_id,
                                                   ": unsupported dtype ",
                                                   static_cast<int>(c.dtype)));
  }
  const size_t bytes = PayloadBytes(c);
  if (bytes != static_cast<size_t>(c.num_elements) * size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", c.chunk_id, ": payload of ", bytes, " bytes, expected ",
        c.num_elements, " x ", DType_Name(c.dtype), " = ",
        c.num_elements * size, " bytes"));
  }
  return absl::OkStatus();
}

// A sparse update of a chunk of n elements as the dense gradient it stands
// for (zeros but at its indices) into `out`. INVALID_ARGUMENT for indices
// out of range or not strictly ascending, and NaN/Inf unless allowed.
absl::Status ScatterSparseChunk(const PushChunk& c, int64_t n,
                                bool allow_nonfinite, std::vector<float>* out) {
  std::vector<float> values(static_cast<size_t>(c.num_elements));
  absl::string_view data = c.segments.size() == 1 ? c.segments[0] : c.data;
  std::string joined;
  if (c.segments.size() > 1) {
    joined.resize(PayloadBytes(c));
    GatherSegments(c.segments, joined.data());
    data = joined;
  }
  PS_RETURN_IF_ERROR(WidenToFloat(c.dtype, data, absl::MakeSpan(values)));
  if (!allow_nonfinite &&
      !AllFiniteLoop(values.size(),
                     reinterpret_cast<const char*>(values.data()))) {
    return absl::InvalidArgumentError(NonFiniteMessage(c.chunk_id));
  }
  out->assign(static_cast<size_t>(n), 0.0f);
  int64_t last = -1;
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t at;
    std::memcpy(&at, c.indices.data() + 4 * i, sizeof(at));
    if (static_cast<int64_t>(at) <= last || static_cast<int64_t>(at) >= n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk ", c.chunk_id, ": sparse index ", at, " at position ", i,
          static_cast<int64_t>(at) >= n
              ? absl::StrCat(" is outside the chunk's ", n, " elements")
              : absl::StrCat(" does not follow ", last,
                             " (indices must be strictly ascending)")));
    }
    (*out)[at] = values[i];
    last = at;
  }
  return absl::OkStatus();
}

// The checks of one chunk that need no payload pass: id, owner, repeat,
// element count, dtype and length.
absl::Status CheckChunk(const DenseLayout& layout, const PushChunk& c,
                        absl::flat_hash_set<int64_t>& seen) {
  const Placement& p = *layout.placement;
  if (c.chunk_id < 0 || c.chunk_id >= static_cast<int64_t>(p.chunks.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", c.chunk_id, " does not exist in job '",
                     layout.job_id, "' (", p.chunks.size(), " chunks)"));
  }
  if (layout.local_index[c.chunk_id] < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", c.chunk_id, " of job '", layout.job_id, "' lives on shard ",
        p.chunks[c.chunk_id].shard, ", not on shard ", layout.shard_index));
  }
  if (!seen.insert(c.chunk_id).second) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", c.chunk_id, " appears twice in one push"));
  }
  const int64_t n = p.chunks[c.chunk_id].num_elements;
  if (!c.indices.empty()) return CheckSparseChunk(c, n);
  if (c.num_elements != n) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", c.chunk_id,
                                                   " has ", n,
                                                   " elements, the push "
                                                   "says ",
                                                   c.num_elements));
  }
  const int size = DTypeSize(c.dtype);
  if (size == 0) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", c.chunk_id,
                                                   ": unsupported dtype ",
                                                   static_cast<int>(c.dtype)));
  }
  const size_t bytes = PayloadBytes(c);
  if (bytes != static_cast<size_t>(n) * size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", c.chunk_id, ": payload of ", bytes, " bytes, expected ", n,
        " x ", DType_Name(c.dtype), " = ", n * size, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

size_t PayloadBytes(const PushChunk& c) {
  if (c.segments.empty()) return c.data.size();
  size_t n = 0;
  for (absl::string_view s : c.segments) n += s.size();
  return n;
}

void GatherSegments(const std::vector<absl::string_view>& segments, char* out) {
  for (absl::string_view s : segments) {
    std::memcpy(out, s.data(), s.size());
    out += s.size();
  }
}

bool AllFinite(absl::Span<const float> g) {
  return AllFiniteLoop(g.size(), reinterpret_cast<const char*>(g.data()));
}

std::string NonFiniteMessage(int64_t chunk_id) {
  return absl::StrCat(
      "chunk ", chunk_id,
      " of the gradient holds NaN or Inf (the job "
      "rejects non-finite gradients; set allow_nonfinite_gradients to let "
      "them through)");
}

absl::StatusOr<std::unique_ptr<DenseGradient>> PrepareDenseGradient(
    const DenseLayout& layout, absl::Span<const PushChunk> chunks,
    bool checked_apply, bool allow_nonfinite) {
  auto out = std::make_unique<DenseGradient>();
  absl::flat_hash_set<int64_t> seen;
  out->checked_apply = checked_apply;
  out->check_deferred = checked_apply;
  out->widened.resize(chunks.size());
  out->grads.resize(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    const PushChunk& c = chunks[i];
    PS_RETURN_IF_ERROR(CheckChunk(layout, c, seen));
    if (!c.indices.empty()) {
      // Applied as the dense gradient it stands for: the optimizer's update
      // of every element (zeros counted), widened and checked here.
      out->bytes += PayloadBytes(c) + c.indices.size();
      PS_RETURN_IF_ERROR(ScatterSparseChunk(
          c, layout.placement->chunks[c.chunk_id].num_elements, allow_nonfinite,
          &out->widened[i]));
      out->grads[i] = out->widened[i];
      continue;
    }
    const int64_t n = c.num_elements;
    const int size = DTypeSize(c.dtype);
    const size_t bytes = PayloadBytes(c);
    out->bytes += bytes;
    const bool split = c.segments.size() > 1;
    absl::string_view data = c.segments.size() == 1 ? c.segments[0] : c.data;
    const bool aligned = reinterpret_cast<uintptr_t>(data.data()) % 4 == 0;
    bool finite = true;
    if (size == 4 && checked_apply) {
      // Checked while it is applied.
      out->grads[i] = absl::Span<const float>();
    } else if (size == 4 && split) {
      // Applied straight from the receive buffers (gathered per chunk into
      // a cache-hot scratch buffer at apply time), never copied whole.
      out->grads[i] = absl::Span<const float>();
      finite = allow_nonfinite || AllFinite(c.segments);
    } else {
      std::string joined;
      if (split) {
        joined.resize(bytes);
        GatherSegments(c.segments, joined.data());
        data = joined;
      }
      if (size == 4 && aligned) {
        out->grads[i] =
            absl::MakeConstSpan(reinterpret_cast<const float*>(data.data()), n);
      } else {
        out->widened[i].resize(n);
        PS_RETURN_IF_ERROR(
            WidenToFloat(c.dtype, data, absl::MakeSpan(out->widened[i])));
        out->grads[i] = out->widened[i];
      }
      finite = allow_nonfinite || AllFinite(out->grads[i]);
    }
    if (!finite) {
      return absl::InvalidArgumentError(NonFiniteMessage(c.chunk_id));
    }
  }
  return out;
}

}  // namespace ps::server
