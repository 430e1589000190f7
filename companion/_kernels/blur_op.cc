// GaussianBlur: a separable blur of NHWC image batches as a compiled TensorFlow CPU op,
// equal to OpenCV's cv2.GaussianBlur with its default border
// (BORDER_REFLECT_101: ... 2 1 | 0 1 2 ...).
// GaussianBlurGrad is its adjoint, which is what the gradient needs.
//
// companion/_kernels/__init__.py (beside this file) compiles it against the installed
// TensorFlow; companion/kernels.py loads it with tf.load_op_library and registers the
// gradient in Python (chapter 13 of the book walks through it). The sections marked
// "// ==== name ====" are shown one by one in the chapter.

// ==== includes ====
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/platform/threadpool.h"

namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

// ==== shape function ====
// Runs when a graph is built: the images must be 4-D and the kernel 1-D; the output has
// the images' shape (including unknown dimensions, which stay unknown).
absl::Status BlurShape(InferenceContext* c) {
  ShapeHandle images, kernel;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &images));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &kernel));
  c->set_output(0, images);
  return absl::OkStatus();
}

}  // namespace

// ==== registration ====
// The op's interface, as graphs, SavedModels and the Python wrapper see it.
REGISTER_OP("GaussianBlur")
    .Input("images: T")  // (N, H, W, C)
    .Input("kernel: T")  // (K,), K odd: the 1-D weights, applied along H and along W
    .Output("blurred: T")
    .Attr("T: {float, double}")
    .SetShapeFn(BlurShape)
    .Doc("Separable blur of NHWC images with a 1-D kernel, border BORDER_REFLECT_101.");

REGISTER_OP("GaussianBlurGrad")
    // (N, H, W, C), the gradient arriving at GaussianBlur's output
    .Input("upstream: T")
    .Input("kernel: T")
    .Output("downstream: T")  // the gradient with respect to GaussianBlur's images
    .Attr("T: {float, double}")
    .SetShapeFn(BlurShape)
    .Doc(
        "Adjoint (transpose) of GaussianBlur: its gradient with respect to the "
        "images.");

namespace {

// ==== one pass along an axis ====
// Reflect-101 index: -2 -> 2, -1 -> 1, n -> n - 2, n + 1 -> n - 3
// (valid while n > K / 2).
inline int64_t Reflect101(int64_t i, int64_t n) {
  return i < 0 ? -i : (i >= n ? 2 * n - 2 - i : i);
}

// A 1-D blur along an axis of length n is one stencil over the padded line P[q] =
// in[reflect(q)], q in [-K/2, n + K/2): out[i] = sum_j k[j] * P[i + j - K/2], the same
// weights for every output, borders included. Its adjoint runs the two steps backwards:
// the stencil transposed (the kernel reversed) gives the gradient of every padded
// position q, and undoing the padding adds it to the pixel reflect(q) that q copied.
// Near the edges that is NOT the blur again: a pixel read twice (directly and as a
// reflection) gets its weight twice.
//
// Vertically, output row i is a weighted sum of input rows; RowTerms lists them as
// (weight, row). The blur's are (k[j], reflect(i + j - K/2)). The adjoint's are every
// (k[j], o) such that the blur's output row o reads a copy of row i with weight k[j]:
// row i's copies are q = i and its mirror images before the first row (-i) and after
// the last (2n - 2 - i), when they are padded positions. At most 3 K terms whatever n:
// memory grows with the kernel, not with the image.
template <typename T>
void RowTerms(const T* k, int64_t ksize, int64_t n, int64_t i, bool adjoint,
              std::vector<std::pair<T, int64_t>>* terms) {
  const int64_t half = ksize / 2;
  terms->clear();
  if (!adjoint) {
    for (int64_t j = 0; j < ksize; ++j) {
      terms->emplace_back(k[j], Reflect101(i + j - half, n));
    }
    return;
  }
  const int64_t copies[] = {i, -i, 2 * n - 2 - i};
  for (int64_t c = 0; c < 3; ++c) {
    const int64_t q = copies[c];
    // a mirror image counts only where it is a padded position
    if (c > 0 && ((q >= 0 && q < n) || q < -half || q >= n + half)) continue;
    for (int64_t j = 0; j < ksize; ++j) {
      const int64_t o = q + half - j;  // the output row whose tap j reads q
      if (o >= 0 && o < n) terms->emplace_back(k[j], o);
    }
  }
}

// ==== one output row ====
// out[e] = sum_t weight_t * source_t[e] for e in [begin, end), where term(t) gives
// (weight_t, source_t). Sums are kept in a block of registers and each output is
// written once; the fixed-size inner loop is what the compiler turns into SIMD
// instructions.
template <typename T, typename Terms>
inline __attribute__((always_inline)) void WeightedSum(int64_t begin, int64_t end,
                                                       int64_t count, const Terms& term,
                                                       T* __restrict out) {
  constexpr int64_t kBlock = 128 / sizeof(T);  // 8 SSE registers of sums
  int64_t e = begin;
  for (; e + kBlock <= end; e += kBlock) {
    T sum[kBlock] = {};
    for (int64_t t = 0; t < count; ++t) {
      const auto [weight, source] = term(t);
#pragma GCC unroll 32
      for (int64_t b = 0; b < kBlock; ++b) sum[b] += weight * source[e + b];
    }
#pragma GCC unroll 32
    for (int64_t b = 0; b < kBlock; ++b) out[e + b] = sum[b];
  }
  for (; e < end; ++e) {
    T sum = 0;
    for (int64_t t = 0; t < count; ++t) {
      const auto [weight, source] = term(t);
      sum += weight * source[e];
    }
    out[e] = sum;
  }
}

// What computing output rows needs: the images and output (N * H rows of W x C values),
// the kernel, and for the adjoint's horizontal pass the kernel reversed.
template <typename T>
struct Rows {
  const T* in;
  T* out;
  int64_t height, width, channels, ksize;
  const T* kernel;
  const T* reversed;
  bool adjoint;
};

// One output row: the vertical pass (a weighted sum of input rows) into the middle of a
// padded buffer, then the horizontal pass over the buffer into the output row. A row of
// W pixels x C channels is one contiguous vector, so a one-pixel shift is a shift by C
// elements and both passes are weighted sums of contiguous vectors; they read a few
// input rows and the buffer (in cache). The blur pads with K/2 reflected pixels on each
// side and applies the stencil. The adjoint pads with K - 1 zeros, applies the reversed
// stencil (the gradient of each of the W + K - 1 padded pixels) and folds each
// reflected pixel's gradient back onto its source.
template <typename T>
inline __attribute__((always_inline)) void BlurRow(
    const Rows<T>& job, const T* image, const std::vector<std::pair<T, int64_t>>& terms,
    T* __restrict padded, T* __restrict gradient, T* __restrict out) {
  using Term = std::pair<T, const T*>;
  const int64_t channels = job.channels, width = job.width, half = job.ksize / 2;
  const int64_t row_length = width * channels;
  T* line = padded + (job.adjoint ? 2 * half : half) * channels;
  WeightedSum<T>(
      0, row_length, terms.size(),
      [&](int64_t t) {
        return Term(terms[t].first, image + terms[t].second * row_length);
      },
      line);
  if (!job.adjoint) {
    // padded pixel -x copies x; width - 1 + x copies width - 1 - x
    for (int64_t x = 1; x <= half; ++x) {
      std::copy_n(line + x * channels, channels, line - x * channels);
      std::copy_n(line + (width - 1 - x) * channels, channels,
                  line + (width - 1 + x) * channels);
    }
    WeightedSum<T>(
        0, row_length, job.ksize,
        [&](int64_t j) { return Term(job.kernel[j], padded + j * channels); }, out);
    return;
  }
  WeightedSum<T>(
      0, (width + 2 * half) * channels, job.ksize,
      [&](int64_t j) { return Term(job.reversed[j], padded + j * channels); },
      gradient);
  // the gradient of padded pixel q is direct[q]
  const T* direct = gradient + half * channels;
  std::copy_n(direct, row_length, out);
  for (int64_t x = 1; x <= half; ++x) {
    for (int64_t c = 0; c < channels; ++c) {
      out[x * channels + c] += direct[-x * channels + c];
      out[(width - 1 - x) * channels + c] += direct[(width - 1 + x) * channels + c];
    }
  }
}

// ==== rows, compiled twice ====
// The rows [begin, end) of all N * H output rows. The same loops are compiled twice:
// for any x86-64 CPU (SSE2, 4 floats per instruction) and for CPUs with AVX2 and FMA (8
// floats per instruction); the kernel picks one when it runs. Unlike -march=native, the
// library still runs on an older CPU (a Colab runtime may not be the machine it was
// compiled on).
template <typename T>
inline __attribute__((always_inline)) void BlurRows(const Rows<T>& job, int64_t begin,
                                                    int64_t end) {
  const int64_t half = job.ksize / 2, pad = job.adjoint ? 2 * half : half;
  // zeros stay zeros
  std::vector<T> padded((job.width + 2 * pad) * job.channels, T(0));
  std::vector<T> gradient(job.adjoint ? (job.width + 2 * half) * job.channels : 0);
  std::vector<std::pair<T, int64_t>> terms;
  terms.reserve(3 * job.ksize);
  const int64_t row_length = job.width * job.channels;
  for (int64_t row = begin; row < end; ++row) {
    const T* image = job.in + (row / job.height) * job.height * row_length;
    RowTerms(job.kernel, job.ksize, job.height, row % job.height, job.adjoint, &terms);
    BlurRow(job, image, terms, padded.data(), gradient.data(),
            job.out + row * row_length);
  }
}

template <typename T>
void BlurRowsPortable(const Rows<T>& job, int64_t begin, int64_t end) {
  BlurRows(job, begin, end);
}

#if defined(__x86_64__) && defined(__GNUC__)
template <typename T>
__attribute__((target("avx2,fma"))) void BlurRowsAvx2(const Rows<T>& job, int64_t begin,
                                                      int64_t end) {
  BlurRows(job, begin, end);
}
#endif

template <typename T>
void (*ChooseBlurRows())(const Rows<T>&, int64_t, int64_t) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return BlurRowsAvx2<T>;
  }
#endif
  return BlurRowsPortable<T>;
}

// ==== parallel rows ====
// Runs work(begin, end) over [0, total) in chunks of `chunk` rows, taken in order from
// a shared counter by the calling thread and by helpers scheduled on TensorFlow's CPU
// pool. The caller never waits for a helper that has not started: it takes the
// remaining chunks itself and waits only for chunks in progress. (A fixed split, as
// tensorflow::Shard makes, waits for every part: on a machine whose cores are busy with
// other processes a helper may start milliseconds late.) A helper that starts after the
// work is done finds no chunk and touches nothing but `state`.
struct Chunks {
  std::function<void(int64_t, int64_t)> work;
  int64_t total = 0, chunk = 1;
  std::atomic<int64_t> next{0};
  int64_t done = 0;  // rows finished, guarded by `mutex`
  std::mutex mutex;
  std::condition_variable finished;

  void Drain() {
    for (int64_t begin; (begin = next.fetch_add(chunk)) < total;) {
      const int64_t end = std::min(begin + chunk, total);
      work(begin, end);
      std::lock_guard<std::mutex> lock(mutex);
      done += end - begin;
      if (done == total) finished.notify_all();
    }
  }
};

inline void ParallelRows(int64_t helpers, ::tensorflow::thread::ThreadPool* pool,
                         int64_t total, int64_t chunk,
                         std::function<void(int64_t, int64_t)> work) {
  auto state = std::make_shared<Chunks>();
  state->work = std::move(work);
  state->total = total;
  state->chunk = std::max<int64_t>(chunk, 1);
  const int64_t chunks = (total + state->chunk - 1) / state->chunk;
  helpers = std::min(helpers, chunks - 1);  // one chunk: no helper, the caller does it
  for (int64_t h = 0; h < helpers; ++h) pool->Schedule([state] { state->Drain(); });
  state->Drain();
  std::unique_lock<std::mutex> lock(state->mutex);
  state->finished.wait(lock, [&] { return state->done == total; });
}

// ==== kernel ====
// Checks the inputs (OP_REQUIRES turns a failed check into an InvalidArgument error for
// the caller), allocates the output and blurs its N * H rows in parallel on
// TensorFlow's CPU pool.
template <typename T, bool kAdjoint>
class BlurOp : public OpKernel {
 public:
  explicit BlurOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& images = context->input(0);
    const Tensor& kernel = context->input(1);
    OP_REQUIRES(
        context, images.dims() == 4,
        absl::InvalidArgumentError("images: expected rank 4 (N, H, W, C), got shape " +
                                   images.shape().DebugString()));
    OP_REQUIRES(context, kernel.dims() == 1 && kernel.dim_size(0) % 2 == 1,
                absl::InvalidArgumentError(
                    "kernel: expected rank 1 with an odd length, got shape " +
                    kernel.shape().DebugString()));
    const int64_t batch = images.dim_size(0), height = images.dim_size(1);
    const int64_t width = images.dim_size(2), channels = images.dim_size(3);
    const int64_t ksize = kernel.dim_size(0), half = ksize / 2;
    OP_REQUIRES(
        context, images.NumElements() == 0 || (height > half && width > half),
        absl::InvalidArgumentError(
            "images: expected height and width > ksize // 2 = " + std::to_string(half) +
            " for reflect padding, got shape " + images.shape().DebugString()));

    Tensor* output = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, images.shape(), &output));
    if (images.NumElements() == 0) return;

    const T* k = kernel.flat<T>().data();
    std::vector<T> reversed(k, k + ksize);
    std::reverse(reversed.begin(), reversed.end());
    const Rows<T> job{images.flat<T>().data(),
                      output->flat<T>().data(),
                      height,
                      width,
                      channels,
                      ksize,
                      k,
                      reversed.data(),
                      kAdjoint};
    const auto blur_rows_on_this_cpu = ChooseBlurRows<T>();
    auto blur_rows = [&](int64_t begin, int64_t end) {
      blur_rows_on_this_cpu(job, begin, end);
    };
    // Chunks of about 64K multiply-adds (tens of microseconds); the calling thread and
    // one helper per further thread of the pool (the pool has as many threads as
    // intra-op parallelism allows) share them.
    const int64_t work_per_row = 2 * width * channels * ksize;
    const auto* pool = context->device()->tensorflow_cpu_worker_threads();
    ParallelRows(pool->num_threads - 1, pool->workers, batch * height,
                 (1 << 16) / work_per_row, blur_rows);
  }
};

template <typename T>
using Blur = BlurOp<T, false>;
template <typename T>
using BlurGrad = BlurOp<T, true>;

}  // namespace

// ==== kernel registration ====
// One CPU kernel per op and dtype. A GPU kernel would be registered the same way with
// Device(DEVICE_GPU); chapter 13, "On a GPU runtime", sketches one.
#define REGISTER_CPU(T)                                                             \
  REGISTER_KERNEL_BUILDER(                                                          \
      Name("GaussianBlur").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"), \
      Blur<T>);                                                                     \
  REGISTER_KERNEL_BUILDER(Name("GaussianBlurGrad")                                  \
                              .Device(::tensorflow::DEVICE_CPU)                     \
                              .TypeConstraint<T>("T"),                              \
                          BlurGrad<T>)

REGISTER_CPU(float);
REGISTER_CPU(double);
