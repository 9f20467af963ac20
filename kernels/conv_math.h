#ifndef PS_KERNELS_CONV_MATH_H_
#define PS_KERNELS_CONV_MATH_H_

// Convolution and pooling geometry and their per-element index math, written
// once for both backends (im2col/col2im, max and average pooling). Images are
// NHWC: element (n, h, w, c) of [batch, height, width, channels] sits at
// ((n * height + h) * width + w) * channels + c.

#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"
#include "kernels/types.h"

namespace ps::kernels {

// A 2-D convolution of NHWC images [batch, in_h, in_w, in_c] with a filter
// [kernel_h, kernel_w, in_c, out_c] (HWIO: a [patch_size(), out_c] row-major
// matrix) into NHWC [batch, out_h(), out_w(), out_c] (a [batch * out_pixels(),
// out_c] matrix). Zero padding of pad_h rows above and below, pad_w columns
// left and right. im2col turns the images into a [batch * out_pixels(),
// patch_size()] matrix whose row is one output pixel and whose column
// (kh * kernel_w + kw) * in_c + c is the input it reads at that offset.
struct ConvGeometry {
  int64_t batch = 0;
  int64_t in_h = 0;
  int64_t in_w = 0;
  int64_t in_c = 0;
  int64_t out_c = 0;
  int64_t kernel_h = 1;
  int64_t kernel_w = 1;
  int64_t stride_h = 1;
  int64_t stride_w = 1;
  int64_t pad_h = 0;
  int64_t pad_w = 0;

  PS_HOST_DEVICE int64_t out_h() const {
    return (in_h + 2 * pad_h - kernel_h) / stride_h + 1;
  }
  PS_HOST_DEVICE int64_t out_w() const {
    return (in_w + 2 * pad_w - kernel_w) / stride_w + 1;
  }
  PS_HOST_DEVICE int64_t out_pixels() const { return out_h() * out_w(); }
  PS_HOST_DEVICE int64_t patch_size() const {
    return kernel_h * kernel_w * in_c;
  }
  PS_HOST_DEVICE int64_t image_size() const { return in_h * in_w * in_c; }
  // im2col is the identity (1x1 kernel, stride 1, no padding): the images
  // are already the [batch * out_pixels(), in_c] patch matrix.
  PS_HOST_DEVICE bool im2col_is_identity() const {
    return kernel_h == 1 && kernel_w == 1 && stride_h == 1 && stride_w == 1 &&
           pad_h == 0 && pad_w == 0;
  }
};

// Pooling of NHWC [batch, in_h, in_w, channels] over windows of window_h x
// window_w moved by the strides, padding at most half a window on each side
// (so every window holds at least one input), into [batch, out_h(), out_w(),
// channels]. Padding is never a candidate for the maximum and is not counted
// in the average.
struct PoolGeometry {
  int64_t batch = 0;
  int64_t in_h = 0;
  int64_t in_w = 0;
  int64_t channels = 0;
  int64_t window_h = 2;
  int64_t window_w = 2;
  int64_t stride_h = 2;
  int64_t stride_w = 2;
  int64_t pad_h = 0;
  int64_t pad_w = 0;

  PS_HOST_DEVICE int64_t out_h() const {
    return (in_h + 2 * pad_h - window_h) / stride_h + 1;
  }
  PS_HOST_DEVICE int64_t out_w() const {
    return (in_w + 2 * pad_w - window_w) / stride_w + 1;
  }
  PS_HOST_DEVICE int64_t image_size() const { return in_h * in_w * channels; }
  PS_HOST_DEVICE int64_t out_size() const {
    return batch * out_h() * out_w() * channels;
  }
};

// The input coordinate that output coordinate `o` reads at kernel offset `k`.
PS_HOST_DEVICE inline int64_t ConvInputCoord(int64_t o, int64_t k,
                                             int64_t stride, int64_t pad) {
  return o * stride - pad + k;
}

// The kernel offsets k for which output `o` reads inside [0, in_size).
PS_HOST_DEVICE inline IndexRange ConvValidOffsets(int64_t o, int64_t kernel,
                                                  int64_t stride, int64_t pad,
                                                  int64_t in_size) {
  const int64_t first = pad - o * stride;  // k with input coordinate 0
  return IndexRange{first > 0 ? first : 0,
                    in_size + first < kernel ? in_size + first : kernel};
}

// The output coordinate that reads input `i` at kernel offset `k`, or -1 if
// none does.
PS_HOST_DEVICE inline int64_t ConvOutputCoord(int64_t i, int64_t k,
                                              int64_t stride, int64_t pad,
                                              int64_t out_size) {
  const int64_t shifted = i + pad - k;
  if (shifted < 0 || shifted % stride != 0) return -1;
  const int64_t o = shifted / stride;
  return o < out_size ? o : -1;
}

// im2col: the index into the images that element (row, column) of the patch
// matrix reads, or -1 where it reads padding (zero).
PS_HOST_DEVICE inline int64_t Im2ColSourceIndex(const ConvGeometry& g,
                                                int64_t row, int64_t column) {
  const int64_t out_w = g.out_w();
  const int64_t out_h = g.out_h();
  const int64_t ow = row % out_w;
  const int64_t oh = (row / out_w) % out_h;
  const int64_t n = row / (out_w * out_h);
  const int64_t c = column % g.in_c;
  const int64_t kw = (column / g.in_c) % g.kernel_w;
  const int64_t kh = column / (g.in_c * g.kernel_w);
  const int64_t ih = ConvInputCoord(oh, kh, g.stride_h, g.pad_h);
  const int64_t iw = ConvInputCoord(ow, kw, g.stride_w, g.pad_w);
  if (ih < 0 || ih >= g.in_h || iw < 0 || iw >= g.in_w) return -1;
  return ((n * g.in_h + ih) * g.in_w + iw) * g.in_c + c;
}

// col2im of one image pixel: calls add(patch_row, patch_column_of_channel_0)
// for every patch-matrix entry that read input pixel (n, ih, iw), in
// increasing patch-row order (kernel offsets descending), the order in which
// a pass over the patch rows meets them: so a gather per pixel (CUDA) and a
// scatter over the patch rows (CPU) add in the same order.
template <typename Add>
PS_HOST_DEVICE inline void ForEachPatchEntryReading(const ConvGeometry& g,
                                                    int64_t n, int64_t ih,
                                                    int64_t iw, Add add) {
  const int64_t out_h = g.out_h();
  const int64_t out_w = g.out_w();
  for (int64_t kh = g.kernel_h - 1; kh >= 0; --kh) {
    const int64_t oh = ConvOutputCoord(ih, kh, g.stride_h, g.pad_h, out_h);
    if (oh < 0) continue;
    for (int64_t kw = g.kernel_w - 1; kw >= 0; --kw) {
      const int64_t ow = ConvOutputCoord(iw, kw, g.stride_w, g.pad_w, out_w);
      if (ow < 0) continue;
      add((n * out_h + oh) * out_w + ow, (kh * g.kernel_w + kw) * g.in_c);
    }
  }
}

// ---------------------------------------------------------------------------
// Pooling.

// The inputs [begin, end) that window `o` covers along one axis (clipped to
// the image; never empty under PoolGeometry's padding rule).
PS_HOST_DEVICE inline IndexRange PoolWindow(int64_t o, int64_t window,
                                            int64_t stride, int64_t pad,
                                            int64_t in_size) {
  const int64_t start = o * stride - pad;
  const int64_t end = start + window;
  return IndexRange{start > 0 ? start : 0, end < in_size ? end : in_size};
}

// The windows [begin, end) along one axis that cover input `i`.
PS_HOST_DEVICE inline IndexRange PoolWindowsCovering(int64_t i, int64_t window,
                                                     int64_t stride,
                                                     int64_t pad,
                                                     int64_t out_size) {
  // Window o covers i iff o * stride - pad <= i < o * stride - pad + window.
  const int64_t low = i + pad - window + 1;  // o * stride >= low
  const int64_t first = low <= 0 ? 0 : (low + stride - 1) / stride;
  const int64_t last = (i + pad) / stride;  // o * stride <= i + pad
  return IndexRange{first, last + 1 < out_size ? last + 1 : out_size};
}

// Max pooling's combine rule: a value replaces the current maximum if it is
// larger, or NaN where the maximum is not (NaN propagates); ties keep the
// earlier input in (h, w) order.
PS_HOST_DEVICE inline bool MaxPoolTakes(float value, float best) {
  return value > best || (value != value && best == best);
}

// The element index inside one image (h * in_w + w) * channels + c, which
// max pooling records for its backward pass.
PS_HOST_DEVICE inline int32_t PoolImageIndex(const PoolGeometry& g, int64_t h,
                                             int64_t w, int64_t c) {
  return static_cast<int32_t>((h * g.in_w + w) * g.channels + c);
}

// Output element (n, oh, ow, c) of max pooling and the image index of the
// input it took.
struct MaxPoolResult {
  float value;
  int32_t index;
};
PS_HOST_DEVICE inline MaxPoolResult MaxPoolElement(const PoolGeometry& g,
                                                   const float* x, int64_t n,
                                                   int64_t oh, int64_t ow,
                                                   int64_t c) {
  const IndexRange hr = PoolWindow(oh, g.window_h, g.stride_h, g.pad_h, g.in_h);
  const IndexRange wr = PoolWindow(ow, g.window_w, g.stride_w, g.pad_w, g.in_w);
  const float* image = x + n * g.image_size();
  MaxPoolResult best{image[PoolImageIndex(g, hr.begin, wr.begin, c)],
                     PoolImageIndex(g, hr.begin, wr.begin, c)};
  for (int64_t h = hr.begin; h < hr.end; ++h) {
    for (int64_t w = wr.begin; w < wr.end; ++w) {
      const int32_t index = PoolImageIndex(g, h, w, c);
      if (MaxPoolTakes(image[index], best.value)) best = {image[index], index};
    }
  }
  return best;
}

// Input gradient (n, h, w, c) of max pooling: the sum of the output
// gradients of the windows whose maximum was this input.
PS_HOST_DEVICE inline float MaxPoolGradElement(const PoolGeometry& g,
                                               const int32_t* argmax,
                                               const float* dy, int64_t n,
                                               int64_t h, int64_t w,
                                               int64_t c) {
  const int64_t out_h = g.out_h();
  const int64_t out_w = g.out_w();
  const IndexRange hr =
      PoolWindowsCovering(h, g.window_h, g.stride_h, g.pad_h, out_h);
  const IndexRange wr =
      PoolWindowsCovering(w, g.window_w, g.stride_w, g.pad_w, out_w);
  const int32_t index = PoolImageIndex(g, h, w, c);
  float sum = 0.0f;
  for (int64_t oh = hr.begin; oh < hr.end; ++oh) {
    for (int64_t ow = wr.begin; ow < wr.end; ++ow) {
      const int64_t out = ((n * out_h + oh) * out_w + ow) * g.channels + c;
      if (argmax[out] == index) sum += dy[out];
    }
  }
  return sum;
}

// The number of inputs in window (oh, ow): average pooling's divisor.
PS_HOST_DEVICE inline float AvgPoolDivisor(const PoolGeometry& g, int64_t oh,
                                           int64_t ow) {
  const IndexRange hr = PoolWindow(oh, g.window_h, g.stride_h, g.pad_h, g.in_h);
  const IndexRange wr = PoolWindow(ow, g.window_w, g.stride_w, g.pad_w, g.in_w);
  return static_cast<float>((hr.end - hr.begin) * (wr.end - wr.begin));
}

PS_HOST_DEVICE inline float AvgPoolElement(const PoolGeometry& g,
                                           const float* x, int64_t n,
                                           int64_t oh, int64_t ow, int64_t c) {
  const IndexRange hr = PoolWindow(oh, g.window_h, g.stride_h, g.pad_h, g.in_h);
  const IndexRange wr = PoolWindow(ow, g.window_w, g.stride_w, g.pad_w, g.in_w);
  const float* image = x + n * g.image_size();
  float sum = 0.0f;
  for (int64_t h = hr.begin; h < hr.end; ++h) {
    for (int64_t w = wr.begin; w < wr.end; ++w) {
      sum += image[PoolImageIndex(g, h, w, c)];
    }
  }
  return sum / AvgPoolDivisor(g, oh, ow);
}

PS_HOST_DEVICE inline float AvgPoolGradElement(const PoolGeometry& g,
                                               const float* dy, int64_t n,
                                               int64_t h, int64_t w,
                                               int64_t c) {
  const int64_t out_h = g.out_h();
  const int64_t out_w = g.out_w();
  const IndexRange hr =
      PoolWindowsCovering(h, g.window_h, g.stride_h, g.pad_h, out_h);
  const IndexRange wr =
      PoolWindowsCovering(w, g.window_w, g.stride_w, g.pad_w, out_w);
  float sum = 0.0f;
  for (int64_t oh = hr.begin; oh < hr.end; ++oh) {
    for (int64_t ow = wr.begin; ow < wr.end; ++ow) {
      sum += dy[((n * out_h + oh) * out_w + ow) * g.channels + c] /
             AvgPoolDivisor(g, oh, ow);
    }
  }
  return sum;
}

}  // namespace ps::kernels

#endif  // PS_KERNELS_CONV_MATH_H_
