// GaussianBlur: a separable blur of NHWC image batches as a compiled TensorFlow CPU op, equal to
// OpenCV's cv2.GaussianBlur with its default border (BORDER_REFLECT_101: ... 2 1 | 0 1 2 ...).
// GaussianBlurGrad is its adjoint, which is what the gradient needs.
//
// companion/kernels.py compiles this file against the installed TensorFlow, loads it with
// tf.load_op_library and registers the gradient in Python (chapter 11 of the book walks through
// it). The sections marked "// ==== name ====" are shown one by one in the chapter.

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
// Runs when a graph is built: the images must be 4-D and the kernel 1-D; the output has the
// images' shape (including unknown dimensions, which stay unknown).
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
    .Input("upstream: T")  // (N, H, W, C), the gradient arriving at GaussianBlur's output
    .Input("kernel: T")
    .Output("downstream: T")  // the gradient with respect to GaussianBlur's images
    .Attr("T: {float, double}")
    .SetShapeFn(BlurShape)
    .Doc("Adjoint (transpose) of GaussianBlur: its gradient with respect to the images.");

namespace {

// ==== one pass along an axis ====
// Reflect-101 index: -2 -> 2, -1 -> 1, n -> n - 2, n + 1 -> n - 3 (valid while n > K / 2).
inline int64_t Reflect101(int64_t i, int64_t n) {
  return i < 0 ? -i : (i >= n ? 2 * n - 2 - i : i);
}

// A 1-D blur along an axis of length n, as a sparse matrix: output index i reads taps[i], a list
// of (source index, weight). The blur is out[i] = sum_j k[j] * in[reflect(i + j - K/2)]. Its
// adjoint is the transposed matrix: each weight moves from (i, source) to (source, i). Away from
// the borders both are a plain stencil over in[i - K/2 .. i + K/2] (the adjoint's is the kernel
// reversed), and that is how the interior [lo, hi) is computed; the lists serve the borders,
// where the adjoint is NOT the blur again: reflected pixels send their weight back.
template <typename T>
struct Pass {
  int64_t lo = 0, hi = 0;
  std::vector<T> stencil;
  std::vector<std::vector<std::pair<int64_t, T>>> taps;
};

template <typename T>
Pass<T> MakePass(const T* k, int64_t ksize, int64_t n, bool adjoint) {
  const int64_t half = ksize / 2;
  Pass<T> pass;
  pass.taps.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < ksize; ++j) {
      const int64_t source = Reflect101(i + j - half, n);
      if (adjoint) {
        pass.taps[source].emplace_back(i, k[j]);
      } else {
        pass.taps[i].emplace_back(source, k[j]);
      }
    }
  }
  pass.stencil.assign(k, k + ksize);
  if (adjoint) std::reverse(pass.stencil.begin(), pass.stencil.end());
  // Outputs whose taps are exactly the stencil: no reflection reaches them, in either direction.
  const int64_t margin = adjoint ? 2 * half : half;
  pass.lo = std::min(margin, n);
  pass.hi = std::max(pass.lo, n - margin);
  return pass;
}

// ==== one output row ====
// out[e] = sum_t weight_t * source_t[e] for e in [begin, end), where term(t) gives
// (weight_t, source_t). Sums are kept in a block of registers and each output is written once;
// the fixed-size inner loop is what the compiler turns into SIMD instructions.
template <typename T, typename Terms>
inline __attribute__((always_inline)) void WeightedSum(int64_t begin, int64_t end, int64_t count, const Terms& term, T* __restrict out) {
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

// One output row: the vertical pass (a weighted sum of input rows) into `line`, then the
// horizontal pass over `line` into the output row. A row of W pixels x C channels is one
// contiguous vector, so a one-pixel shift is a shift by C elements and both passes are
// weighted sums of contiguous vectors. Both read only a few input rows and `line` (in cache).
template <typename T>
inline __attribute__((always_inline)) void BlurRow(const T* image, int64_t row_length, int64_t channels,
             const std::vector<std::pair<int64_t, T>>& down_taps, const Pass<T>& across,
             T* __restrict line, T* __restrict out) {
  using Term = std::pair<T, const T*>;
  WeightedSum<T>(0, row_length, down_taps.size(), [&](int64_t t) {
    return Term(down_taps[t].second, image + down_taps[t].first * row_length);
  }, line);
  // Interior pixels: out[e] = sum_j stencil[j] * line[e + (j - K/2) * C].
  const int64_t half = across.stencil.size() / 2;
  WeightedSum<T>(across.lo * channels, across.hi * channels, across.stencil.size(), [&](int64_t j) {
    return Term(across.stencil[j], line + (j - half) * channels);
  }, out);
  // Border pixels: their own tap lists.
  const int64_t width = row_length / channels;
  for (int64_t x = 0; x < width; x = (x + 1 == across.lo) ? std::max(across.hi, x + 1) : x + 1) {
    for (int64_t c = 0; c < channels; ++c) {
      T sum = 0;
      for (const auto& [source, weight] : across.taps[x]) sum += weight * line[source * channels + c];
      out[x * channels + c] = sum;
    }
  }
}

// ==== rows, compiled twice ====
// The rows [begin, end) of all N * H output rows. The same loops are compiled twice: for any
// x86-64 CPU (SSE2, 4 floats per instruction) and for CPUs with AVX2 and FMA (8 floats per
// instruction); the kernel picks one when it runs. Unlike -march=native, the library still runs
// on an older CPU (a Colab runtime may not be the machine it was compiled on).
template <typename T>
struct Rows {
  const T* in;
  T* out;
  int64_t height, row_length, channels;
  const Pass<T>* down;
  const Pass<T>* across;
};

template <typename T>
inline __attribute__((always_inline)) void BlurRows(const Rows<T>& job, int64_t begin, int64_t end) {
  std::vector<T> line(job.row_length);
  for (int64_t row = begin; row < end; ++row) {
    const T* image = job.in + (row / job.height) * job.height * job.row_length;
    BlurRow(image, job.row_length, job.channels, job.down->taps[row % job.height], *job.across,
            line.data(), job.out + row * job.row_length);
  }
}

template <typename T>
void BlurRowsPortable(const Rows<T>& job, int64_t begin, int64_t end) { BlurRows(job, begin, end); }

#if defined(__x86_64__) && defined(__GNUC__)
template <typename T>
__attribute__((target("avx2,fma"))) void BlurRowsAvx2(const Rows<T>& job, int64_t begin, int64_t end) {
  BlurRows(job, begin, end);
}
#endif

template <typename T>
void (*ChooseBlurRows())(const Rows<T>&, int64_t, int64_t) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return BlurRowsAvx2<T>;
#endif
  return BlurRowsPortable<T>;
}

// ==== parallel rows ====
// Runs work(begin, end) over [0, total) in chunks of `chunk` rows, taken in order from a shared
// counter by the calling thread and by helpers scheduled on TensorFlow's CPU pool. The caller
// never waits for a helper that has not started: it takes the remaining chunks itself and waits
// only for chunks in progress. (A fixed split, as tensorflow::Shard makes, waits for every part:
// on a machine whose cores are busy with other processes a helper may start milliseconds late.)
// A helper that starts after the work is done finds no chunk and touches nothing but `state`.
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

inline void ParallelRows(int64_t helpers, ::tensorflow::thread::ThreadPool* pool, int64_t total,
                         int64_t chunk, std::function<void(int64_t, int64_t)> work) {
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
// Checks the inputs (OP_REQUIRES turns a failed check into an InvalidArgument error for the
// caller), allocates the output and blurs its N * H rows in parallel on TensorFlow's CPU pool.
template <typename T, bool kAdjoint>
class BlurOp : public OpKernel {
 public:
  explicit BlurOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& images = context->input(0);
    const Tensor& kernel = context->input(1);
    OP_REQUIRES(context, images.dims() == 4,
                absl::InvalidArgumentError("images: expected rank 4 (N, H, W, C), got shape " +
                                           images.shape().DebugString()));
    OP_REQUIRES(context, kernel.dims() == 1 && kernel.dim_size(0) % 2 == 1,
                absl::InvalidArgumentError("kernel: expected rank 1 with an odd length, got shape " +
                                           kernel.shape().DebugString()));
    const int64_t batch = images.dim_size(0), height = images.dim_size(1);
    const int64_t width = images.dim_size(2), channels = images.dim_size(3);
    const int64_t ksize = kernel.dim_size(0), half = ksize / 2;
    OP_REQUIRES(context, images.NumElements() == 0 || (height > half && width > half),
                absl::InvalidArgumentError(
                    "images: expected height and width > ksize // 2 = " + std::to_string(half) +
                    " for reflect padding, got shape " + images.shape().DebugString()));

    Tensor* output = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, images.shape(), &output));
    if (images.NumElements() == 0) return;

    const T* k = kernel.flat<T>().data();
    const Pass<T> down = MakePass(k, ksize, height, kAdjoint);
    const Pass<T> across = MakePass(k, ksize, width, kAdjoint);
    const T* in = images.flat<T>().data();
    T* out = output->flat<T>().data();
    const int64_t row_length = width * channels;

    const Rows<T> job{in, out, height, row_length, channels, &down, &across};
    const auto blur_rows_on_this_cpu = ChooseBlurRows<T>();
    auto blur_rows = [&](int64_t begin, int64_t end) { blur_rows_on_this_cpu(job, begin, end); };
    // Chunks of about 64K multiply-adds (tens of microseconds); the calling thread and one
    // helper per further thread of the pool (the pool has as many threads as intra-op
    // parallelism allows) share them.
    const int64_t work_per_row = row_length * static_cast<int64_t>(down.taps[0].size() + ksize);
    const auto* pool = context->device()->tensorflow_cpu_worker_threads();
    ParallelRows(pool->num_threads - 1, pool->workers, batch * height, (1 << 16) / work_per_row,
                 blur_rows);
  }
};

template <typename T>
using Blur = BlurOp<T, false>;
template <typename T>
using BlurGrad = BlurOp<T, true>;

}  // namespace

// ==== kernel registration ====
// One CPU kernel per op and dtype. A GPU kernel would be registered the same way with
// Device(DEVICE_GPU) (chapter 11 describes what it takes).
#define REGISTER_CPU(T)                                                                     \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("GaussianBlur").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),         \
      Blur<T>);                                                                             \
  REGISTER_KERNEL_BUILDER(                                                                  \
      Name("GaussianBlurGrad").Device(::tensorflow::DEVICE_CPU).TypeConstraint<T>("T"),     \
      BlurGrad<T>)

REGISTER_CPU(float);
REGISTER_CPU(double);
