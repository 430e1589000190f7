// Chapter 13's separable Gaussian blur with no framework around it: OpenCV's
// BORDER_REFLECT_101 at the borders, float32 images, the sums in double. Chapter 14's
// extensions include this file: the PyTorch one (companion/backends/_torch_blur.py) and
// the XLA FFI handler for JAX (xla_ffi_blur.cc). Chapter 13's TensorFlow op, blur_op.cc,
// is the same arithmetic, written for TensorFlow's thread pool.
#ifndef WHITE_BOX_SEPARABLE_BLUR_CC_
#define WHITE_BOX_SEPARABLE_BLUR_CC_

#include <cstdint>
#include <vector>

namespace white_box {

// -2 -> 2, -1 -> 1, n -> n - 2, n + 1 -> n - 3, as often as it takes (n = 1: always 0).
inline int64_t Reflect101(int64_t i, int64_t n) {
  if (n == 1) return 0;
  while (i < 0 || i >= n) i = i < 0 ? -i : 2 * n - 2 - i;
  return i;
}

// Blur the (n, h, w, c) images `in` with the `k`-tap kernel `weights`, along each row and
// then along each column, into `out` (the same shape).
template <typename Weight>
void SeparableBlur(const float* in, const Weight* weights, int64_t k, int64_t n, int64_t h,
                   int64_t w, int64_t c, float* out) {
  const int64_t r = k / 2, row = w * c;
  std::vector<double> rows(n * h * row);
  for (int64_t b = 0; b < n * h; ++b)  // along each row
    for (int64_t e = 0; e < row; ++e) {
      double s = 0;
      for (int64_t j = 0; j < k; ++j)
        s += double(weights[j]) * in[b * row + Reflect101(e / c + j - r, w) * c + e % c];
      rows[b * row + e] = s;
    }
  for (int64_t b = 0; b < n * h; ++b)  // then along each column
    for (int64_t e = 0; e < row; ++e) {
      double s = 0;
      for (int64_t j = 0; j < k; ++j)
        s += double(weights[j]) *
             rows[((b / h) * h + Reflect101(b % h + j - r, h)) * row + e];
      out[b * row + e] = static_cast<float>(s);
    }
}

}  // namespace white_box

#endif  // WHITE_BOX_SEPARABLE_BLUR_CC_
