#include "kernels/cpu_layer_ops.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/embedding_math.h"
#include "kernels/interaction_math.h"
#include "kernels/loss_math.h"

namespace ps::kernels::cpu {

void CopyMatrix(const float* src, int64_t ld_src, int64_t rows, int64_t cols,
                float* dst, int64_t ld_dst) {
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * ld_dst, src + r * ld_src,
                static_cast<size_t>(cols) * sizeof(float));
  }
}

// ---------------------------------------------------------------------------
// im2col / col2im. A patch row is kernel_h runs of kernel_w * in_c floats,
// each contiguous in the NHWC image too (consecutive kw read consecutive
// pixels of one image row): so each run is one copy, clipped at the image's
// left and right edges, or zeros where it reads a padding row.

// dst[0, n) = src[0, n); no aliasing, so no runtime overlap check (which
// costs more than the copy for the runs of one-channel images).
inline void CopyRun(const float* __restrict src, int64_t n,
                    float* __restrict dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

void Im2Col(const ConvGeometry& g, const float* images, float* patches) {
  const int64_t out_h = g.out_h();
  const int64_t out_w = g.out_w();
  const int64_t channels = g.in_c;
  const int64_t run = g.kernel_w * channels;
  float* row = patches;
  for (int64_t n = 0; n < g.batch; ++n) {
    const float* image = images + n * g.image_size();
    for (int64_t oh = 0; oh < out_h; ++oh) {
      const IndexRange kh =
          ConvValidOffsets(oh, g.kernel_h, g.stride_h, g.pad_h, g.in_h);
      const int64_t ih0 = ConvInputCoord(oh, 0, g.stride_h, g.pad_h);
      for (int64_t ow = 0; ow < out_w; ++ow, row += g.patch_size()) {
        const IndexRange kw =
            ConvValidOffsets(ow, g.kernel_w, g.stride_w, g.pad_w, g.in_w);
        const int64_t iw0 = ConvInputCoord(ow, 0, g.stride_w, g.pad_w);
        if (kh.begin > 0) std::fill(row, row + kh.begin * run, 0.0f);
        if (kh.end < g.kernel_h) {
          std::fill(row + kh.end * run, row + g.kernel_h * run, 0.0f);
        }
        if (kw.begin >= kw.end) {
          std::fill(row + kh.begin * run, row + kh.end * run, 0.0f);
          continue;
        }
        for (int64_t k = kh.begin; k < kh.end; ++k) {
          float* dst = row + k * run;
          const float* src =
              image + ((ih0 + k) * g.in_w + iw0 + kw.begin) * channels;
          // Interior pixels need neither fill (and no memset call).
          if (kw.begin > 0) std::fill(dst, dst + kw.begin * channels, 0.0f);
          CopyRun(src, (kw.end - kw.begin) * channels,
                  dst + kw.begin * channels);
          if (kw.end < g.kernel_w) {
            std::fill(dst + kw.end * channels, dst + run, 0.0f);
          }
        }
      }
    }
  }
}

// The adjoint pass: the same runs, added into the images, patch row by patch
// row (the order ForEachPatchEntryReading documents, so the CUDA gather adds
// in the same order).
void Col2Im(const ConvGeometry& g, const float* patches, float* images) {
  const int64_t out_h = g.out_h();
  const int64_t out_w = g.out_w();
  const int64_t channels = g.in_c;
  const int64_t run = g.kernel_w * channels;
  std::fill(images, images + g.batch * g.image_size(), 0.0f);
  const float* row = patches;
  for (int64_t n = 0; n < g.batch; ++n) {
    float* image = images + n * g.image_size();
    for (int64_t oh = 0; oh < out_h; ++oh) {
      for (int64_t ow = 0; ow < out_w; ++ow, row += g.patch_size()) {
        const IndexRange kw =
            ConvValidOffsets(ow, g.kernel_w, g.stride_w, g.pad_w, g.in_w);
        const int64_t iw0 = ConvInputCoord(ow, 0, g.stride_w, g.pad_w);
        for (int64_t kh = 0; kh < g.kernel_h; ++kh) {
          const int64_t ih = ConvInputCoord(oh, kh, g.stride_h, g.pad_h);
          if (ih < 0 || ih >= g.in_h) continue;
          const float* src = row + kh * run;
          float* dst = image + (ih * g.in_w + iw0) * channels;
          for (int64_t i = kw.begin * channels; i < kw.end * channels; ++i) {
            dst[i] += src[i];
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Pooling, channels innermost (contiguous in NHWC, so the loops vectorise).
// Each output visits its window's inputs in (h, w) order, as MaxPoolElement
// and AvgPoolElement do; the backward passes scatter outputs in order into
// zeroed inputs, which adds each input's terms in the order of the CUDA
// kernels' gathers (MaxPoolGradElement, AvgPoolGradElement): bit-equal.

void MaxPool2DForward(const PoolGeometry& g, const float* x, float* y,
                      int32_t* argmax) {
  const int64_t channels = g.channels;
  for (int64_t n = 0; n < g.batch; ++n) {
    const float* image = x + n * g.image_size();
    for (int64_t oh = 0; oh < g.out_h(); ++oh) {
      const IndexRange hr =
          PoolWindow(oh, g.window_h, g.stride_h, g.pad_h, g.in_h);
      for (int64_t ow = 0; ow < g.out_w(); ++ow) {
        const IndexRange wr =
            PoolWindow(ow, g.window_w, g.stride_w, g.pad_w, g.in_w);
        float* best = y + ((n * g.out_h() + oh) * g.out_w() + ow) * channels;
        int32_t* best_index = argmax + (best - y);
        const int32_t first = PoolImageIndex(g, hr.begin, wr.begin, 0);
        for (int64_t c = 0; c < channels; ++c) {
          best[c] = image[first + c];
          best_index[c] = first + static_cast<int32_t>(c);
        }
        for (int64_t h = hr.begin; h < hr.end; ++h) {
          for (int64_t w = wr.begin; w < wr.end; ++w) {
            const int32_t base = PoolImageIndex(g, h, w, 0);
            for (int64_t c = 0; c < channels; ++c) {
              const float v = image[base + c];
              const bool take = MaxPoolTakes(v, best[c]);
              best[c] = take ? v : best[c];
              best_index[c] =
                  take ? base + static_cast<int32_t>(c) : best_index[c];
            }
          }
        }
      }
    }
  }
}

// Windows that tile the image without overlap or padding: every input lies
// in at most one window.
bool PoolWindowsDisjoint(const PoolGeometry& g) {
  return g.stride_h >= g.window_h && g.stride_w >= g.window_w && g.pad_h == 0 &&
         g.pad_w == 0;
}

// One pixel's channels of a disjoint window: its window's gradient where the
// window took this input, else 0. Restrict pointers and a select, so that it
// vectorises.
void MaxPoolGradRun(const int32_t* __restrict argmax,
                    const float* __restrict dy, int32_t base, int64_t channels,
                    float* __restrict dst) {
  for (int64_t c = 0; c < channels; ++c) {
    const float grad = dy[c];  // loaded either way, so the select vectorises
    dst[c] = argmax[c] == base + static_cast<int32_t>(c) ? grad : 0.0f;
  }
}

// Disjoint windows: each input of a window gets its window's gradient or 0,
// written once (no zeroing pass); inputs outside every window are zeroed.
// Other windows: zero, then scatter each output's gradient to its argmax
// (indices outside the image are skipped, as the CUDA gather never matches
// them).
void MaxPool2DBackward(const PoolGeometry& g, const int32_t* argmax,
                       const float* dy, float* dx) {
  const int64_t channels = g.channels;
  const int64_t per_image = g.out_h() * g.out_w() * channels;
  if (!PoolWindowsDisjoint(g)) {
    std::fill(dx, dx + g.batch * g.image_size(), 0.0f);
    for (int64_t n = 0; n < g.batch; ++n) {
      float* image = dx + n * g.image_size();
      const int32_t* index = argmax + n * per_image;
      const float* grad = dy + n * per_image;
      for (int64_t i = 0; i < per_image; ++i) {
        if (index[i] >= 0 && index[i] < g.image_size()) {
          image[index[i]] += grad[i];
        }
      }
    }
    return;
  }
  const int64_t covered_h = g.out_h() * g.stride_h;
  const int64_t covered_w = g.out_w() * g.stride_w;
  for (int64_t n = 0; n < g.batch; ++n) {
    float* image = dx + n * g.image_size();
    for (int64_t oh = 0; oh < g.out_h(); ++oh) {
      const IndexRange hr =
          PoolWindow(oh, g.window_h, g.stride_h, g.pad_h, g.in_h);
      for (int64_t ow = 0; ow < g.out_w(); ++ow) {
        const IndexRange wr =
            PoolWindow(ow, g.window_w, g.stride_w, g.pad_w, g.in_w);
        const int64_t out = n * per_image + (oh * g.out_w() + ow) * channels;
        for (int64_t h = hr.begin; h < hr.end; ++h) {
          for (int64_t w = wr.begin; w < wr.end; ++w) {
            const int32_t base = PoolImageIndex(g, h, w, 0);
            MaxPoolGradRun(argmax + out, dy + out, base, channels,
                           image + base);
          }
        }
      }
    }
    // Rows and columns past the last window (strides wider than windows, or
    // sizes the windows do not divide).
    for (int64_t h = 0; h < g.in_h; ++h) {
      for (int64_t w = 0; w < g.in_w; ++w) {
        const bool in_row = h < covered_h && h % g.stride_h < g.window_h;
        const bool in_col = w < covered_w && w % g.stride_w < g.window_w;
        if (!(in_row && in_col)) {
          float* dst = image + PoolImageIndex(g, h, w, 0);
          std::fill(dst, dst + channels, 0.0f);
        }
      }
    }
  }
}

void AvgPool2DForward(const PoolGeometry& g, const float* x, float* y) {
  const int64_t channels = g.channels;
  for (int64_t n = 0; n < g.batch; ++n) {
    const float* image = x + n * g.image_size();
    for (int64_t oh = 0; oh < g.out_h(); ++oh) {
      const IndexRange hr =
          PoolWindow(oh, g.window_h, g.stride_h, g.pad_h, g.in_h);
      for (int64_t ow = 0; ow < g.out_w(); ++ow) {
        const IndexRange wr =
            PoolWindow(ow, g.window_w, g.stride_w, g.pad_w, g.in_w);
        float* out = y + ((n * g.out_h() + oh) * g.out_w() + ow) * channels;
        std::fill(out, out + channels, 0.0f);
        for (int64_t h = hr.begin; h < hr.end; ++h) {
          for (int64_t w = wr.begin; w < wr.end; ++w) {
            const float* src = image + PoolImageIndex(g, h, w, 0);
            for (int64_t c = 0; c < channels; ++c) out[c] += src[c];
          }
        }
        const float divisor = AvgPoolDivisor(g, oh, ow);
        for (int64_t c = 0; c < channels; ++c) out[c] /= divisor;
      }
    }
  }
}

void AvgPool2DBackward(const PoolGeometry& g, const float* dy, float* dx) {
  const int64_t channels = g.channels;
  std::fill(dx, dx + g.batch * g.image_size(), 0.0f);
  for (int64_t n = 0; n < g.batch; ++n) {
    float* image = dx + n * g.image_size();
    for (int64_t oh = 0; oh < g.out_h(); ++oh) {
      const IndexRange hr =
          PoolWindow(oh, g.window_h, g.stride_h, g.pad_h, g.in_h);
      for (int64_t ow = 0; ow < g.out_w(); ++ow) {
        const IndexRange wr =
            PoolWindow(ow, g.window_w, g.stride_w, g.pad_w, g.in_w);
        const float* grad =
            dy + ((n * g.out_h() + oh) * g.out_w() + ow) * channels;
        const float divisor = AvgPoolDivisor(g, oh, ow);
        for (int64_t h = hr.begin; h < hr.end; ++h) {
          for (int64_t w = wr.begin; w < wr.end; ++w) {
            float* dst = image + PoolImageIndex(g, h, w, 0);
            for (int64_t c = 0; c < channels; ++c) dst[c] += grad[c] / divisor;
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Embedding bags: rows are added in position order, the same order as each
// CUDA thread's loop, then scaled.

absl::Status CheckBagIndices(const char* op, const int32_t* indices,
                             int64_t nnz, const int32_t* offsets,
                             int64_t num_bags, int64_t num_rows) {
  if (offsets[0] != 0 || offsets[num_bags] != nnz) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": offsets must run from 0 to the number of ids (",
                     nnz, "), got ", offsets[0], " to ", offsets[num_bags]));
  }
  for (int64_t b = 0; b < num_bags; ++b) {
    if (offsets[b + 1] < offsets[b]) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": offsets decrease at bag ", b, " (", offsets[b],
                       " then ", offsets[b + 1], ")"));
    }
  }
  for (int64_t p = 0; p < nnz; ++p) {
    if (!BagIdValid(indices[p], num_rows)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": id ", indices[p], " at position ", p,
                       " is outside [0, ", num_rows, ")"));
    }
  }
  return absl::OkStatus();
}

// dst = w * src, and dst += w * src, over one row; no aliasing.
inline void ScaledRow(float w, const float* __restrict src, int64_t dim,
                      float* __restrict dst) {
  for (int64_t d = 0; d < dim; ++d) dst[d] = w * src[d];
}
inline void AddScaledRow(float w, const float* __restrict src, int64_t dim,
                         float* __restrict dst) {
  for (int64_t d = 0; d < dim; ++d) dst[d] += w * src[d];
}

void EmbeddingBagForward(EmbeddingBagMode mode, const float* rows, int64_t dim,
                         const int32_t* indices, const int32_t* offsets,
                         int64_t num_bags, const float* weights, float* out,
                         int64_t ld_out) {
  const int64_t nnz = offsets[num_bags];
  for (int64_t b = 0; b < num_bags; ++b) {
    const IndexRange bag = BagPositions(offsets, b, nnz);
    float* dst = out + b * ld_out;
    if (bag.begin == bag.end) {
      std::fill(dst, dst + dim, 0.0f);
      continue;
    }
    // The first row is written, not added to zeros: the same value.
    ScaledRow(BagWeight(weights, bag.begin),
              rows + int64_t{indices[bag.begin]} * dim, dim, dst);
    for (int64_t p = bag.begin + 1; p < bag.end; ++p) {
      AddScaledRow(BagWeight(weights, p), rows + int64_t{indices[p]} * dim, dim,
                   dst);
    }
    const float scale = BagScale(mode, bag.end - bag.begin);
    if (scale != 1.0f) {
      for (int64_t d = 0; d < dim; ++d) dst[d] *= scale;
    }
  }
}

void EmbeddingBagBackward(EmbeddingBagMode mode, const int32_t* indices,
                          const int32_t* offsets, int64_t num_bags,
                          const float* weights, const float* dout,
                          int64_t ld_dout, int64_t num_rows, int64_t dim,
                          float* drows) {
  std::fill(drows, drows + num_rows * dim, 0.0f);
  const int64_t nnz = offsets[num_bags];
  for (int64_t b = 0; b < num_bags; ++b) {
    const IndexRange bag = BagPositions(offsets, b, nnz);
    const float scale = BagScale(mode, bag.end - bag.begin);
    const float* src = dout + b * ld_dout;
    for (int64_t p = bag.begin; p < bag.end; ++p) {
      AddScaledRow(scale * BagWeight(weights, p), src, dim,
                   drows + int64_t{indices[p]} * dim);
    }
  }
}

// ---------------------------------------------------------------------------
// Losses: per-element math, summed in double like the CUDA mean kernel.

float SigmoidBinaryCrossEntropy(const float* logits, const float* labels,
                                int64_t n, float* grad) {
  const float scale = 1.0f / static_cast<float>(n);
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float x = logits[i];
    total += SigmoidBceLoss(x, labels[i]);
    if (grad != nullptr) grad[i] = SigmoidBceGrad(x, labels[i], scale);
  }
  return static_cast<float>(total / static_cast<double>(n));
}

float MeanSquaredError(const float* predictions, const float* targets,
                       int64_t n, float* grad) {
  const float scale = 1.0f / static_cast<float>(n);
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float p = predictions[i];
    total += SquaredError(p, targets[i]);
    if (grad != nullptr) grad[i] = SquaredErrorGrad(p, targets[i], scale);
  }
  return static_cast<float>(total / static_cast<double>(n));
}

// ---------------------------------------------------------------------------
// Interactions.

void GatherLowerTriangle(const float* gram, int64_t count, int64_t fields,
                         float* out, int64_t ld_out) {
  for (int64_t b = 0; b < count; ++b) {
    const float* g = gram + b * fields * fields;
    float* dst = out + b * ld_out;
    for (int64_t i = 1; i < fields; ++i) {
      for (int64_t j = 0; j < i; ++j) {
        dst[LowerTrianglePair(i, j)] = g[i * fields + j];
      }
    }
  }
}

void ScatterLowerTriangle(const float* dout, int64_t ld_dout, int64_t count,
                          int64_t fields, float* dgram) {
  for (int64_t b = 0; b < count; ++b) {
    const float* src = dout + b * ld_dout;
    float* g = dgram + b * fields * fields;
    for (int64_t i = 0; i < fields; ++i) {
      g[i * fields + i] = 0.0f;
      for (int64_t j = 0; j < i; ++j) {
        g[i * fields + j] = g[j * fields + i] = src[LowerTrianglePair(i, j)];
      }
    }
  }
}

void FmInteraction(const float* v, int64_t batch, int64_t fields, int64_t dim,
                   float* out) {
  std::vector<float> sum(static_cast<size_t>(dim));
  std::vector<float> sum_sq(static_cast<size_t>(dim));
  for (int64_t b = 0; b < batch; ++b) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    std::fill(sum_sq.begin(), sum_sq.end(), 0.0f);
    const float* row = v + b * fields * dim;
    for (int64_t f = 0; f < fields; ++f) {
      for (int64_t d = 0; d < dim; ++d) {
        const float x = row[f * dim + d];
        sum[d] += x;
        sum_sq[d] += x * x;
      }
    }
    float total = 0.0f;
    for (int64_t d = 0; d < dim; ++d) total += FmTerm(sum[d], sum_sq[d]);
    out[b] = total;
  }
}

void FmInteractionBackward(const float* v, int64_t batch, int64_t fields,
                           int64_t dim, const float* dout, float* dv) {
  std::vector<float> sum(static_cast<size_t>(dim));
  for (int64_t b = 0; b < batch; ++b) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    const float* row = v + b * fields * dim;
    for (int64_t f = 0; f < fields; ++f) {
      for (int64_t d = 0; d < dim; ++d) sum[d] += row[f * dim + d];
    }
    float* grad = dv + b * fields * dim;
    for (int64_t f = 0; f < fields; ++f) {
      for (int64_t d = 0; d < dim; ++d) {
        grad[f * dim + d] = FmGrad(dout[b], sum[d], row[f * dim + d]);
      }
    }
  }
}

void RowwiseDot(const float* a, const float* b, int64_t rows, int64_t dim,
                float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    float total = 0.0f;
    for (int64_t d = 0; d < dim; ++d) total += a[r * dim + d] * b[r * dim + d];
    out[r] = total;
  }
}

void RowwiseDotBackward(const float* a, const float* b, int64_t rows,
                        int64_t dim, const float* dout, float* da, float* db) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t d = 0; d < dim; ++d) {
      const int64_t i = r * dim + d;
      const float av = a[i];  // da or db may alias a or b: read both first
      const float bv = b[i];
      da[i] = dout[r] * bv;
      db[i] = dout[r] * av;
    }
  }
}

}  // namespace ps::kernels::cpu
