// The Backend ops of the layers beyond the MLP: argument checks, and the
// convolutions composed of im2col/col2im and GEMM (backend.h).

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/backend_checks.h"
#include "kernels/interaction_math.h"
#include "kernels/status_macros.h"

namespace ps::kernels {
namespace {

using internal::CheckDenseMatrix;
using internal::CheckRowsFitInt32;
using internal::CheckSameSize;
using internal::CheckShape;
using internal::CheckSpan;
using internal::CheckStridedMatrix;
using internal::kInt32Max;

// Workspace the default ConvWorkspaceSize allows: the whole batch's patches
// up to this size.
constexpr int64_t kDefaultConvWorkspaceBytes = int64_t{256} << 20;

// The product of `factors`, or -1 if it overflows int64 (factors >= 0).
int64_t CheckedProduct(std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product)) return -1;
  }
  return product;
}

absl::Status CheckConvGeometry(const char* op, const ConvGeometry& g) {
  const auto describe = [&g] {
    return absl::StrCat("batch ", g.batch, ", input ", g.in_h, "x", g.in_w, "x",
                        g.in_c, ", ", g.out_c, " outputs, kernel ", g.kernel_h,
                        "x", g.kernel_w, ", stride ", g.stride_h, "x",
                        g.stride_w, ", padding ", g.pad_h, "x", g.pad_w);
  };
  for (int64_t v : {g.batch, g.in_h, g.in_w, g.in_c, g.out_c, g.kernel_h,
                    g.kernel_w, g.stride_h, g.stride_w, g.pad_h, g.pad_w}) {
    if (v < 0 || v > kInt32Max) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": a geometry field is negative or beyond int32: ", describe()));
    }
  }
  if (g.in_h < 1 || g.in_w < 1 || g.in_c < 1 || g.out_c < 1 || g.kernel_h < 1 ||
      g.kernel_w < 1 || g.stride_h < 1 || g.stride_w < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": sizes, kernel and strides must be positive: ", describe()));
  }
  if (g.in_h + 2 * g.pad_h < g.kernel_h || g.in_w + 2 * g.pad_w < g.kernel_w) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the kernel is larger than the padded input: ", describe()));
  }
  // Each field fits int32, so out_h() and out_w() cannot overflow; their
  // products with each other and the rest can, so they are checked before
  // any size below is computed.
  const int64_t image = CheckedProduct({g.in_h, g.in_w, g.in_c});
  const int64_t patch = CheckedProduct({g.kernel_h, g.kernel_w, g.in_c});
  const int64_t pixels = CheckedProduct({g.out_h(), g.out_w()});
  if (image < 0 || patch < 0 || pixels < 0 || patch > kInt32Max ||
      pixels > kInt32Max || CheckedProduct({pixels, patch}) < 0 ||
      CheckedProduct({g.batch, image}) < 0 ||
      CheckedProduct({g.batch, pixels, g.out_c}) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": sizes exceed the int32 range of BLAS: ", describe()));
  }
  return absl::OkStatus();
}

// Images per im2col block that `workspace` floats hold: at least one, at
// most the batch, and few enough that a block's GEMM rows fit in int32.
absl::StatusOr<int64_t> ImagesPerBlock(const char* op, const ConvGeometry& g,
                                       DeviceSpan<float> workspace) {
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(op, "workspace", workspace));
  const int64_t per_image = Backend::ConvWorkspacePerImage(g);
  const int64_t by_rows = std::max<int64_t>(1, kInt32Max / g.out_pixels());
  if (per_image == 0) return std::clamp<int64_t>(g.batch, 1, by_rows);
  if (workspace.size < per_image) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": the workspace holds ", workspace.size,
                     " floats but one image's patches need ", per_image));
  }
  return std::clamp<int64_t>(std::min(workspace.size / per_image, g.batch), 1,
                             by_rows);
}

absl::Status CheckPoolGeometry(const char* op, const PoolGeometry& g) {
  const auto describe = [&g] {
    return absl::StrCat("batch ", g.batch, ", input ", g.in_h, "x", g.in_w, "x",
                        g.channels, ", window ", g.window_h, "x", g.window_w,
                        ", stride ", g.stride_h, "x", g.stride_w, ", padding ",
                        g.pad_h, "x", g.pad_w);
  };
  for (int64_t v : {g.batch, g.in_h, g.in_w, g.channels, g.window_h, g.window_w,
                    g.stride_h, g.stride_w, g.pad_h, g.pad_w}) {
    if (v < 0 || v > kInt32Max) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": a geometry field is negative or beyond int32: ", describe()));
    }
  }
  if (g.in_h < 1 || g.in_w < 1 || g.channels < 1 || g.window_h < 1 ||
      g.window_w < 1 || g.stride_h < 1 || g.stride_w < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": sizes, window and strides must be positive: ", describe()));
  }
  if (2 * g.pad_h > g.window_h || 2 * g.pad_w > g.window_w) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": padding must be at most half the window: ", describe()));
  }
  if (g.in_h + 2 * g.pad_h < g.window_h || g.in_w + 2 * g.pad_w < g.window_w) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the window is larger than the padded input: ", describe()));
  }
  // Max pooling records indices inside an image as int32. Products are
  // checked before any size is computed from them.
  const int64_t image = CheckedProduct({g.in_h, g.in_w, g.channels});
  if (image < 0 || image > kInt32Max || CheckedProduct({g.batch, image}) < 0 ||
      CheckedProduct({g.batch, g.out_h(), g.out_w(), g.channels}) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": an image exceeds the int32 range: ", describe()));
  }
  return absl::OkStatus();
}

absl::Status CheckPoolSpans(const char* op, const PoolGeometry& g,
                            int64_t x_size, const char* out_name,
                            int64_t out_size) {
  PS_KERNELS_RETURN_IF_ERROR(CheckPoolGeometry(op, g));
  PS_KERNELS_RETURN_IF_ERROR(CheckSameSize(op, "the input", x_size,
                                           "the geometry's input",
                                           g.batch * g.image_size()));
  return CheckSameSize(op, out_name, out_size, "the geometry's output",
                       g.out_size());
}

// Shared by both embedding bag ops: offsets has num_bags + 1 >= 1 entries,
// weights (if any) one per index, and the index count fits int32.
absl::Status CheckBags(const char* op, DeviceSpan<const int32_t> indices,
                       DeviceSpan<const int32_t> offsets,
                       const std::optional<DeviceSpan<const float>>& weights) {
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(op, "indices", indices));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(op, "offsets", offsets));
  if (offsets.size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": offsets needs num_bags + 1 entries (at least one)"));
  }
  if (indices.size > kInt32Max || offsets.size > kInt32Max) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": more ids or bags than int32 offsets address"));
  }
  if (weights.has_value()) {
    PS_KERNELS_RETURN_IF_ERROR(CheckSpan(op, "weights", *weights));
    PS_KERNELS_RETURN_IF_ERROR(
        CheckSameSize(op, "weights", weights->size, "indices", indices.size));
  }
  return absl::OkStatus();
}

absl::Status CheckBagMode(const char* op, EmbeddingBagMode mode) {
  if (mode != EmbeddingBagMode::kSum && mode != EmbeddingBagMode::kMean) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": unknown mode"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status CheckBatch(const char* op, const char* name,
                        DeviceMatrixBatch<T> b) {
  if (b.count < 0 || b.rows < 0 || b.cols < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " has a negative shape"));
  }
  const int64_t size = CheckedProduct({b.count, b.rows, b.cols});
  if (size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name, " size overflows int64"));
  }
  if (size > 0 && b.data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", name,
                     " is a null buffer (or a view larger than its buffer)"));
  }
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------
// Convolution.

int64_t Backend::ConvWorkspacePerImage(const ConvGeometry& g) {
  if (!CheckConvGeometry("ConvWorkspacePerImage", g).ok()) return 0;
  return g.im2col_is_identity() ? 0 : g.out_pixels() * g.patch_size();
}

int64_t Backend::ConvWorkspaceSize(const ConvGeometry& g) const {
  const int64_t per_image = ConvWorkspacePerImage(g);
  if (per_image == 0) return 0;
  const int64_t images = std::clamp<int64_t>(
      kDefaultConvWorkspaceBytes / int64_t{sizeof(float)} / per_image, 1,
      std::max<int64_t>(g.batch, 1));
  return images * per_image;
}

absl::Status Backend::Im2Col(const ConvGeometry& g,
                             DeviceSpan<const float> images,
                             DeviceMatrix<float> patches) {
  constexpr char kOp[] = "Im2Col";
  PS_KERNELS_RETURN_IF_ERROR(CheckConvGeometry(kOp, g));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "images", images));
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "patches", patches));
  PS_KERNELS_RETURN_IF_ERROR(CheckSameSize(kOp, "images", images.size,
                                           "the geometry's input",
                                           g.batch * g.image_size()));
  PS_KERNELS_RETURN_IF_ERROR(CheckShape(
      kOp, "patches", patches, g.batch * g.out_pixels(), g.patch_size()));
  if (g.batch == 0) return absl::OkStatus();
  return DoIm2Col(g, images.data, patches.data);
}

absl::Status Backend::Col2Im(const ConvGeometry& g,
                             DeviceMatrix<const float> patches,
                             DeviceSpan<float> images) {
  constexpr char kOp[] = "Col2Im";
  PS_KERNELS_RETURN_IF_ERROR(CheckConvGeometry(kOp, g));
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "patches", patches));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "images", images));
  PS_KERNELS_RETURN_IF_ERROR(CheckShape(
      kOp, "patches", patches, g.batch * g.out_pixels(), g.patch_size()));
  PS_KERNELS_RETURN_IF_ERROR(CheckSameSize(kOp, "images", images.size,
                                           "the geometry's input",
                                           g.batch * g.image_size()));
  if (g.batch == 0) return absl::OkStatus();
  return DoCol2Im(g, patches.data, images.data);
}

absl::Status Backend::Conv2DForward(const ConvGeometry& g,
                                    DeviceSpan<const float> x,
                                    DeviceMatrix<const float> filter,
                                    DeviceMatrix<float> y,
                                    DeviceSpan<float> workspace) {
  constexpr char kOp[] = "Conv2DForward";
  PS_KERNELS_RETURN_IF_ERROR(CheckConvGeometry(kOp, g));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "x", x));
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "filter", filter));
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "y", y));
  PS_KERNELS_RETURN_IF_ERROR(CheckSameSize(
      kOp, "x", x.size, "the geometry's input", g.batch * g.image_size()));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckShape(kOp, "filter", filter, g.patch_size(), g.out_c));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckShape(kOp, "y", y, g.batch * g.out_pixels(), g.out_c));
  absl::StatusOr<int64_t> images = ImagesPerBlock(kOp, g, workspace);
  if (!images.ok()) return images.status();
  if (g.batch == 0) return absl::OkStatus();
  return DoConv2DForward(g, x.data, filter.data, y.data, workspace.data,
                         *images);
}

absl::Status Backend::Conv2DBackwardFilter(const ConvGeometry& g,
                                           DeviceSpan<const float> x,
                                           DeviceMatrix<const float> dy,
                                           DeviceMatrix<float> dfilter,
                                           DeviceSpan<float> workspace) {
  constexpr char kOp[] = "Conv2DBackwardFilter";
  PS_KERNELS_RETURN_IF_ERROR(CheckConvGeometry(kOp, g));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "x", x));
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "dy", dy));
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "dfilter", dfilter));
  PS_KERNELS_RETURN_IF_ERROR(CheckSameSize(
      kOp, "x", x.size, "the geometry's input", g.batch * g.image_size()));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckShape(kOp, "dy", dy, g.batch * g.out_pixels(), g.out_c));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckShape(kOp, "dfilter", dfilter, g.patch_size(), g.out_c));
  absl::StatusOr<int64_t> images = ImagesPerBlock(kOp, g, workspace);
  if (!images.ok()) return images.status();
  if (g.batch == 0) return DoFill(0.0f, dfilter.size(), dfilter.data);
  return DoConv2DBackwardFilter(g, x.data, dy.data, dfilter.data,
                                workspace.data, *images);
}

absl::Status Backend::Conv2DBackwardData(const ConvGeometry& g,
                                         DeviceMatrix<const float> dy,
                                         DeviceMatrix<const float> filter,
                                         DeviceSpan<float> dx,
                                         DeviceSpan<float> workspace) {
  constexpr char kOp[] = "Conv2DBackwardData";
  PS_KERNELS_RETURN_IF_ERROR(CheckConvGeometry(kOp, g));
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "dy", dy));
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "filter", filter));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "dx", dx));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckShape(kOp, "dy", dy, g.batch * g.out_pixels(), g.out_c));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckShape(kOp, "filter", filter, g.patch_size(), g.out_c));
  PS_KERNELS_RETURN_IF_ERROR(CheckSameSize(
      kOp, "dx", dx.size, "the geometry's input", g.batch * g.image_size()));
  absl::StatusOr<int64_t> images = ImagesPerBlock(kOp, g, workspace);
  if (!images.ok()) return images.status();
  if (g.batch == 0) return absl::OkStatus();
  return DoConv2DBackwardData(g, dy.data, filter.data, dx.data, workspace.data,
                              *images);
}

// Blocks of images: the patch matrix of block [n0, n0 + nb) is rows
// [n0 * out_pixels, (n0 + nb) * out_pixels) of the whole batch's, so each
// block is a row block of the same GEMMs.
absl::Status Backend::DoConv2DForward(const ConvGeometry& g, const float* x,
                                      const float* filter, float* y,
                                      float* workspace,
                                      int64_t images_per_block) {
  const int64_t pixels = g.out_pixels();
  const int p = static_cast<int>(g.patch_size());
  const int oc = static_cast<int>(g.out_c);
  for (int64_t n0 = 0; n0 < g.batch; n0 += images_per_block) {
    ConvGeometry block = g;
    block.batch = std::min(images_per_block, g.batch - n0);
    const float* patches = x + n0 * g.image_size();
    if (!g.im2col_is_identity()) {
      PS_KERNELS_RETURN_IF_ERROR(DoIm2Col(block, patches, workspace));
      patches = workspace;
    }
    PS_KERNELS_RETURN_IF_ERROR(DoGemm(
        Transpose::kNo, Transpose::kNo, static_cast<int>(block.batch * pixels),
        oc, p, 1.0f, patches, p, filter, oc, 0.0f, y + n0 * pixels * oc, oc));
  }
  return absl::OkStatus();
}

absl::Status Backend::DoConv2DBackwardFilter(const ConvGeometry& g,
                                             const float* x, const float* dy,
                                             float* dfilter, float* workspace,
                                             int64_t images_per_block) {
  const int64_t pixels = g.out_pixels();
  const int p = static_cast<int>(g.patch_size());
  const int oc = static_cast<int>(g.out_c);
  for (int64_t n0 = 0; n0 < g.batch; n0 += images_per_block) {
    ConvGeometry block = g;
    block.batch = std::min(images_per_block, g.batch - n0);
    const float* patches = x + n0 * g.image_size();
    if (!g.im2col_is_identity()) {
      PS_KERNELS_RETURN_IF_ERROR(DoIm2Col(block, patches, workspace));
      patches = workspace;
    }
    PS_KERNELS_RETURN_IF_ERROR(DoGemm(Transpose::kYes, Transpose::kNo, p, oc,
                                      static_cast<int>(block.batch * pixels),
                                      1.0f, patches, p, dy + n0 * pixels * oc,
                                      oc, n0 == 0 ? 0.0f : 1.0f, dfilter, oc));
  }
  return absl::OkStatus();
}

absl::Status Backend::DoConv2DBackwardData(const ConvGeometry& g,
                                           const float* dy, const float* filter,
                                           float* dx, float* workspace,
                                           int64_t images_per_block) {
  const int64_t pixels = g.out_pixels();
  const int p = static_cast<int>(g.patch_size());
  const int oc = static_cast<int>(g.out_c);
  for (int64_t n0 = 0; n0 < g.batch; n0 += images_per_block) {
    ConvGeometry block = g;
    block.batch = std::min(images_per_block, g.batch - n0);
    float* dimages = dx + n0 * g.image_size();
    float* dpatches = g.im2col_is_identity() ? dimages : workspace;
    PS_KERNELS_RETURN_IF_ERROR(DoGemm(
        Transpose::kNo, Transpose::kYes, static_cast<int>(block.batch * pixels),
        p, oc, 1.0f, dy + n0 * pixels * oc, oc, filter, oc, 0.0f, dpatches, p));
    if (!g.im2col_is_identity()) {
      PS_KERNELS_RETURN_IF_ERROR(DoCol2Im(block, dpatches, dimages));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Pooling.

absl::Status Backend::MaxPool2DForward(const PoolGeometry& g,
                                       DeviceSpan<const float> x,
                                       DeviceSpan<float> y,
                                       DeviceSpan<int32_t> argmax) {
  constexpr char kOp[] = "MaxPool2DForward";
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "x", x));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "y", y));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "argmax", argmax));
  PS_KERNELS_RETURN_IF_ERROR(CheckPoolSpans(kOp, g, x.size, "y", y.size));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize(kOp, "argmax", argmax.size, "y", y.size));
  if (g.batch == 0) return absl::OkStatus();
  return DoMaxPool2DForward(g, x.data, y.data, argmax.data);
}

absl::Status Backend::MaxPool2DBackward(const PoolGeometry& g,
                                        DeviceSpan<const int32_t> argmax,
                                        DeviceSpan<const float> dy,
                                        DeviceSpan<float> dx) {
  constexpr char kOp[] = "MaxPool2DBackward";
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "argmax", argmax));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "dy", dy));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "dx", dx));
  PS_KERNELS_RETURN_IF_ERROR(CheckPoolSpans(kOp, g, dx.size, "dy", dy.size));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize(kOp, "argmax", argmax.size, "dy", dy.size));
  if (g.batch == 0) return absl::OkStatus();
  return DoMaxPool2DBackward(g, argmax.data, dy.data, dx.data);
}

absl::Status Backend::AvgPool2DForward(const PoolGeometry& g,
                                       DeviceSpan<const float> x,
                                       DeviceSpan<float> y) {
  constexpr char kOp[] = "AvgPool2DForward";
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "x", x));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "y", y));
  PS_KERNELS_RETURN_IF_ERROR(CheckPoolSpans(kOp, g, x.size, "y", y.size));
  if (g.batch == 0) return absl::OkStatus();
  return DoAvgPool2DForward(g, x.data, y.data);
}

absl::Status Backend::AvgPool2DBackward(const PoolGeometry& g,
                                        DeviceSpan<const float> dy,
                                        DeviceSpan<float> dx) {
  constexpr char kOp[] = "AvgPool2DBackward";
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "dy", dy));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "dx", dx));
  PS_KERNELS_RETURN_IF_ERROR(CheckPoolSpans(kOp, g, dx.size, "dy", dy.size));
  if (g.batch == 0) return absl::OkStatus();
  return DoAvgPool2DBackward(g, dy.data, dx.data);
}

// ---------------------------------------------------------------------------
// Embedding bags.

absl::Status Backend::EmbeddingBagForward(
    EmbeddingBagMode mode, DeviceMatrix<const float> rows,
    DeviceSpan<const int32_t> indices, DeviceSpan<const int32_t> offsets,
    std::optional<DeviceSpan<const float>> weights, DeviceMatrix<float> out) {
  constexpr char kOp[] = "EmbeddingBagForward";
  PS_KERNELS_RETURN_IF_ERROR(CheckBagMode(kOp, mode));
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "rows", rows));
  PS_KERNELS_RETURN_IF_ERROR(CheckBags(kOp, indices, offsets, weights));
  PS_KERNELS_RETURN_IF_ERROR(CheckStridedMatrix(kOp, "out", out));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckShape(kOp, "out", out, offsets.size - 1, rows.cols));
  if (out.size() == 0) return absl::OkStatus();
  return DoEmbeddingBagForward(
      mode, rows.data, rows.rows, rows.cols, indices.data, indices.size,
      offsets.data, out.rows, weights.has_value() ? weights->data : nullptr,
      out.data, out.stride());
}

absl::Status Backend::EmbeddingBagBackward(
    EmbeddingBagMode mode, DeviceSpan<const int32_t> indices,
    DeviceSpan<const int32_t> offsets,
    std::optional<DeviceSpan<const float>> weights,
    DeviceMatrix<const float> dout, DeviceMatrix<float> drows) {
  constexpr char kOp[] = "EmbeddingBagBackward";
  PS_KERNELS_RETURN_IF_ERROR(CheckBagMode(kOp, mode));
  PS_KERNELS_RETURN_IF_ERROR(CheckBags(kOp, indices, offsets, weights));
  PS_KERNELS_RETURN_IF_ERROR(CheckStridedMatrix(kOp, "dout", dout));
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "drows", drows));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckShape(kOp, "dout", dout, offsets.size - 1, drows.cols));
  if (drows.size() == 0) return absl::OkStatus();
  return DoEmbeddingBagBackward(
      mode, indices.data, indices.size, offsets.data, dout.rows,
      weights.has_value() ? weights->data : nullptr, dout.data, dout.stride(),
      drows.rows, drows.cols, drows.data);
}

// ---------------------------------------------------------------------------
// Interactions.

absl::Status Backend::GatherLowerTriangle(DeviceMatrixBatch<const float> gram,
                                          DeviceMatrix<float> out) {
  constexpr char kOp[] = "GatherLowerTriangle";
  PS_KERNELS_RETURN_IF_ERROR(CheckBatch(kOp, "gram", gram));
  PS_KERNELS_RETURN_IF_ERROR(CheckStridedMatrix(kOp, "out", out));
  if (gram.rows != gram.cols || gram.rows < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp,
                     ": gram matrices must be square with at least 2 "
                     "fields, got [",
                     gram.rows, ", ", gram.cols, "]"));
  }
  PS_KERNELS_RETURN_IF_ERROR(
      CheckShape(kOp, "out", out, gram.count, LowerTriangleSize(gram.rows)));
  if (gram.count == 0) return absl::OkStatus();
  return DoGatherLowerTriangle(gram.data, gram.count, gram.rows, out.data,
                               out.stride());
}

absl::Status Backend::ScatterLowerTriangle(DeviceMatrix<const float> dout,
                                           DeviceMatrixBatch<float> dgram) {
  constexpr char kOp[] = "ScatterLowerTriangle";
  PS_KERNELS_RETURN_IF_ERROR(CheckStridedMatrix(kOp, "dout", dout));
  PS_KERNELS_RETURN_IF_ERROR(CheckBatch(kOp, "dgram", dgram));
  if (dgram.rows != dgram.cols || dgram.rows < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp,
                     ": gram matrices must be square with at least 2 "
                     "fields, got [",
                     dgram.rows, ", ", dgram.cols, "]"));
  }
  PS_KERNELS_RETURN_IF_ERROR(CheckShape(kOp, "dout", dout, dgram.count,
                                        LowerTriangleSize(dgram.rows)));
  if (dgram.count == 0) return absl::OkStatus();
  return DoScatterLowerTriangle(dout.data, dout.stride(), dgram.count,
                                dgram.rows, dgram.data);
}

namespace {

// FM's v: dense [batch, fields * dim] with fields >= 1 dividing the columns.
absl::Status CheckFmInput(const char* op, int64_t fields,
                          DeviceMatrix<const float> v) {
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(op, "v", v));
  PS_KERNELS_RETURN_IF_ERROR(CheckRowsFitInt32(op, v.rows, v.cols));
  if (fields < 1 || v.cols % fields != 0 || v.cols == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": v's ", v.cols, " columns are not ", fields,
                     " fields of a positive dimension"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Backend::FmInteraction(int64_t fields, DeviceMatrix<const float> v,
                                    DeviceSpan<float> out) {
  constexpr char kOp[] = "FmInteraction";
  PS_KERNELS_RETURN_IF_ERROR(CheckFmInput(kOp, fields, v));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "out", out));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize(kOp, "out", out.size, "v's rows", v.rows));
  if (v.rows == 0) return absl::OkStatus();
  return DoFmInteraction(v.data, v.rows, fields, v.cols / fields, out.data);
}

absl::Status Backend::FmInteractionBackward(int64_t fields,
                                            DeviceMatrix<const float> v,
                                            DeviceSpan<const float> dout,
                                            DeviceMatrix<float> dv) {
  constexpr char kOp[] = "FmInteractionBackward";
  PS_KERNELS_RETURN_IF_ERROR(CheckFmInput(kOp, fields, v));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "dout", dout));
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "dv", dv));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize(kOp, "dout", dout.size, "v's rows", v.rows));
  PS_KERNELS_RETURN_IF_ERROR(CheckShape(kOp, "dv", dv, v.rows, v.cols));
  if (v.rows == 0) return absl::OkStatus();
  return DoFmInteractionBackward(v.data, v.rows, fields, v.cols / fields,
                                 dout.data, dv.data);
}

absl::Status Backend::RowwiseDot(DeviceMatrix<const float> a,
                                 DeviceMatrix<const float> b,
                                 DeviceSpan<float> out) {
  constexpr char kOp[] = "RowwiseDot";
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "a", a));
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "b", b));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "out", out));
  PS_KERNELS_RETURN_IF_ERROR(CheckShape(kOp, "b", b, a.rows, a.cols));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize(kOp, "out", out.size, "a's rows", a.rows));
  PS_KERNELS_RETURN_IF_ERROR(CheckRowsFitInt32(kOp, a.rows, a.cols));
  if (a.rows == 0) return absl::OkStatus();
  if (a.cols == 0) return DoFill(0.0f, out.size, out.data);
  return DoRowwiseDot(a.data, b.data, a.rows, a.cols, out.data);
}

absl::Status Backend::RowwiseDotBackward(DeviceMatrix<const float> a,
                                         DeviceMatrix<const float> b,
                                         DeviceSpan<const float> dout,
                                         DeviceMatrix<float> da,
                                         DeviceMatrix<float> db) {
  constexpr char kOp[] = "RowwiseDotBackward";
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "a", a));
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "b", b));
  PS_KERNELS_RETURN_IF_ERROR(CheckSpan(kOp, "dout", dout));
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "da", da));
  PS_KERNELS_RETURN_IF_ERROR(CheckDenseMatrix(kOp, "db", db));
  PS_KERNELS_RETURN_IF_ERROR(CheckShape(kOp, "b", b, a.rows, a.cols));
  PS_KERNELS_RETURN_IF_ERROR(CheckShape(kOp, "da", da, a.rows, a.cols));
  PS_KERNELS_RETURN_IF_ERROR(CheckShape(kOp, "db", db, a.rows, a.cols));
  PS_KERNELS_RETURN_IF_ERROR(
      CheckSameSize(kOp, "dout", dout.size, "a's rows", a.rows));
  if (a.size() == 0) return absl::OkStatus();
  return DoRowwiseDotBackward(a.data, b.data, a.rows, a.cols, dout.data,
                              da.data, db.data);
}

}  // namespace ps::kernels
