// The CUDA backend: built in exactly when `loom --version` says so; without a device, make_backend says why
// in one line; the caching allocator's reuse and out-of-memory message (on a fake device here, on the GPU
// in GpuAllocator). On a GPU: every op on bf16 views against the bf16 emulation and the fp32 reference
// (the fp32 views run in ops_test's Gpu/BackendOps), and a small GPT trained on cuda against cpu, its
// checkpoints crossing between the two. The Gpu* tests skip, saying why, where no device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/json_io.h"
#include "core/presets.h"
#include "exec/cpu/bf16_emulation.h"
#include "exec/cpu/cpu_backend.h"
#include "exec/cuda/device_allocator.h"
#include "exec/process_groups.h"
#include "exec/trace.h"
#include "exec/trainer.h"
#include "kernels/numerics.h"
#include "run_util.h"
#include "staged.h"
#ifdef LOOM_WITH_CUDA
#include "exec/cuda/cuda_backend.h"
#endif

namespace loom::exec {
namespace {

using testing::ProcessResult;
using testing::run_shell;

#ifdef LOOM_WITH_CUDA
constexpr bool kBuiltWithCuda = true;
#else
constexpr bool kBuiltWithCuda = false;
#endif

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(CudaBackendBuild, VersionAndAvailableBackendsListCudaExactlyWhenBuiltIn) {
  const ProcessResult r = run_shell(testing::loom_binary() + " --version", 30);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string listed = r.out.substr(r.out.find("backends:"));
  EXPECT_EQ(listed.find("cuda") != std::string::npos, kBuiltWithCuda) << r.out;
  EXPECT_EQ(contains(available_backends(), "cuda"), kBuiltWithCuda);
  EXPECT_EQ(available_backends().front(), "cpu");
}

TEST(CudaBackendBuild, MakeBackendSaysInOneLineWhyThereIsNoCudaBackend) {
  std::string error;
  std::unique_ptr<Backend> backend = make_backend("cuda", &error);
  if (!kBuiltWithCuda) {
    EXPECT_EQ(backend, nullptr);
    EXPECT_EQ(error, "--backend cuda: this build of loom has no CUDA backend (use --backend cpu)");
    return;
  }
  if (backend != nullptr) GTEST_SKIP() << "a CUDA device is present: the no-device message cannot be reached here";
  const std::string prefix = "--backend cuda: no CUDA device (";
  ASSERT_EQ(error.substr(0, prefix.size()), prefix) << error;
  EXPECT_EQ(error.back(), ')') << error;
  EXPECT_GT(error.size(), prefix.size() + 1) << "CUDA's own reason is missing: " << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST(CudaBackendBuild, UnknownBackendNamesTheChoices) {
  std::string error;
  EXPECT_EQ(make_backend("tpu", &error), nullptr);
  EXPECT_EQ(error, "--backend: unknown backend 'tpu' (cpu, cuda)");
}

// --- the caching allocator on a fake device -------------------------------------------------------

// Host memory standing in for a device of `capacity` bytes; counts what it was asked for.
class FakeDevice final : public DeviceMemory {
 public:
  explicit FakeDevice(std::size_t capacity) : capacity_(capacity) {}
  void* allocate(std::size_t bytes) override {
    ++requests;
    if (used_ + bytes > capacity_) return nullptr;
    used_ += bytes;
    void* p = std::malloc(bytes);
    sizes_.push_back({p, bytes});
    return p;
  }
  void free(void* p) override {
    ++frees;
    for (auto it = sizes_.begin(); it != sizes_.end(); ++it)
      if (it->first == p) {
        used_ -= it->second;
        sizes_.erase(it);
        std::free(p);
        return;
      }
    ADD_FAILURE() << "freed a pointer the device never gave";
  }
  std::size_t free_bytes() override { return capacity_ - used_; }
  int requests = 0, frees = 0;

 private:
  std::size_t capacity_, used_ = 0;
  std::vector<std::pair<void*, std::size_t>> sizes_;
};

constexpr std::size_t kGiB = std::size_t{1} << 30;

TEST(DeviceAllocator, RoundsTo512BytesAndReusesAFreedBlockOfTheSameRoundedSize) {
  auto device = std::make_unique<FakeDevice>(kGiB);
  FakeDevice& d = *device;
  DeviceAllocator a(std::move(device));
  EXPECT_EQ(DeviceAllocator::rounded(1), 512u);
  EXPECT_EQ(DeviceAllocator::rounded(512), 512u);
  EXPECT_EQ(DeviceAllocator::rounded(513), 1024u);
  EXPECT_EQ(DeviceAllocator::rounded(0), 512u);
  void* p = a.allocate(1000);
  EXPECT_EQ(a.in_use_bytes(), 1024);
  a.free(p);
  EXPECT_EQ(a.in_use_bytes(), 0);
  EXPECT_EQ(a.cached_bytes(), 1024);
  EXPECT_EQ(a.allocate(600), p) << "600 bytes round to the cached 1024-byte block";
  EXPECT_EQ(d.requests, 1);
  void* q = a.allocate(2000);  // another size: a new block
  EXPECT_NE(q, p);
  EXPECT_EQ(d.requests, 2);
  EXPECT_EQ(a.reserved_bytes(), 1024 + 2048);
  EXPECT_EQ(a.peak_reserved_bytes(), 1024 + 2048);
  a.free(q);
  a.free(p);
  a.release_cache();
  EXPECT_EQ(d.frees, 2);
  EXPECT_EQ(a.reserved_bytes(), 0);
  EXPECT_EQ(a.peak_reserved_bytes(), 1024 + 2048);
}

TEST(DeviceAllocator, EmptiesTheCacheAndRetriesOnceBeforeRunningOut) {
  auto device = std::make_unique<FakeDevice>(4096);
  FakeDevice& d = *device;
  DeviceAllocator a(std::move(device));
  a.free(a.allocate(3000));    // 3072 cached, 1024 left on the device
  void* p = a.allocate(2048);  // fits only once the cached block is returned
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(d.requests, 3);  // first block, the failed try, the retry
  EXPECT_EQ(d.frees, 1);
  EXPECT_EQ(a.cached_bytes(), 0);
  EXPECT_EQ(a.in_use_bytes(), 2048);
  a.free(p);
}

TEST(DeviceAllocator, RunningOutIsOneLineNamingWantedHeldCachedAndFreeGiB) {
  auto device = std::make_unique<FakeDevice>(3 * kGiB);
  DeviceAllocator a(std::move(device));
  void* held = a.allocate(static_cast<std::int64_t>(kGiB / 2 * 3));  // 1.5 GiB in use, 1.5 free
  try {
    a.allocate(static_cast<std::int64_t>(2 * kGiB));
    FAIL() << "2 GiB should not fit in 1.5 GiB";
  } catch (const DeviceOutOfMemory& e) {
    EXPECT_EQ(std::string(e.what()),
              "device out of memory: wanted 2.00 GiB, 1.50 GiB held by Loom (0.00 cached), 1.50 GiB free on the "
              "device");
  }
  EXPECT_EQ(a.in_use_bytes(), static_cast<std::int64_t>(kGiB / 2 * 3)) << "a failed request changes nothing";
  a.free(held);
  EXPECT_THROW(a.free(held), std::logic_error) << "a block freed twice is an executor bug";
}

// --- on a GPU -------------------------------------------------------------------------------------

#ifdef LOOM_WITH_CUDA

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    backend_ = make_backend("cuda", &why);
    if (!backend_) GTEST_SKIP() << why;
  }
  CudaBackend& cuda() { return static_cast<CudaBackend&>(*backend_); }
  std::unique_ptr<Backend> backend_;
};

// The trace's compute-lane slices are timed where the stream reaches their ends (CUDA events), not when
// the host queued the work: a GEMM of 2·4096³ ≈ 137 GFLOP lasts at least 137 µs at 1 PFLOP/s (above the
// dense bf16 peak of any GPU lent here: 989 TFLOP/s on an H100 or H200), while queueing it takes a few
// microseconds. And the op slice lies inside its scope's slice.
TEST_F(GpuTest, TraceSlicesAreTimedWhereTheStreamRunsThem) {
  Tracer tracer;
  tracer.set_enabled(true);
  tracer.use_clock_of(backend_.get());
  const int n = 4096;
  Tensor a = cuda().alloc(n, n, MemoryCategory::kWorkspace, DType::kBF16),
         b = cuda().alloc(n, n, MemoryCategory::kWorkspace, DType::kBF16),
         c = cuda().alloc(n, n, MemoryCategory::kWorkspace, DType::kF32);
  for (int i = 0; i < 3; ++i) cuda().gemm(false, true, n, n, n, 1.0f, a.ref(), n, b.ref(), n, 0.0f, c.ref(), n);
  cuda().synchronize();  // the algorithm chosen and cached, the kernels loaded
  const double queued_from = tracer.now_us();
  {
    TraceScope pass(&tracer, "F0 mb0", "compute", kComputeLane);
    OpSlices op(&tracer, kComputeLane);
    op.next("qkv");
    for (int i = 0; i < 4; ++i) cuda().gemm(false, true, n, n, n, 1.0f, a.ref(), n, b.ref(), n, 0.0f, c.ref(), n);
  }
  const double queued_us = tracer.now_us() - queued_from;
  tracer.resolve();
  const Json trace = Json::parse(tracer.to_json());
  double op_begin = -1, op_us = -1, pass_begin = -1, pass_us = -1;
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    (e["name"] == "qkv" ? op_begin : pass_begin) = e["ts"].get<double>();
    (e["name"] == "qkv" ? op_us : pass_us) = e["dur"].get<double>();
  }
  const double floor_us = 4 * 2.0 * n * n * static_cast<double>(n) / 1e15 * 1e6;
  EXPECT_GE(op_us, floor_us) << "queued in " << queued_us << " us";
  EXPECT_LT(op_us, 1e6);
  EXPECT_LE(pass_begin, op_begin + 1);
  EXPECT_GE(pass_begin + pass_us, op_begin + op_us - 1);
  std::printf("4 GEMMs of %d³ bf16: %.1f us on the stream (%.0f TFLOP/s), %.1f us to queue\n", n, op_us,
              4 * 2.0 * n * n * static_cast<double>(n) / op_us / 1e6, queued_us);
}

using GpuAllocator = GpuTest;

TEST_F(GpuAllocator, ReusesFreedDeviceBlocksAndReportsOutOfMemoryInOneLine) {
  DeviceAllocator& a = cuda().allocator();
  const std::int64_t blocks = a.device_allocations();
  { Tensor t = cuda().alloc(1000, 1000, MemoryCategory::kActivations); }
  { Tensor t = cuda().alloc(999, 1001, MemoryCategory::kWorkspace); }  // the same 512-byte-rounded size
  EXPECT_EQ(a.device_allocations(), blocks + 1);
  EXPECT_GE(a.cached_bytes(), 4000000);
  EXPECT_EQ(cuda().memory().peak_bytes(MemoryCategory::kActivations), 4000000);
  try {
    Tensor huge = cuda().empty(std::int64_t{1} << 40, 256, MemoryCategory::kActivations);  // 1 PiB
    FAIL() << "a 1 PiB tensor was allocated";
  } catch (const DeviceOutOfMemory& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("device out of memory: wanted 1048576.00 GiB, ", 0), 0u) << m;
    EXPECT_NE(m.find("GiB free on the device"), std::string::npos) << m;
  }
  // Nothing is left broken: the next allocation and op work.
  {
    Staged s(cuda());
    float* x = s.in({1.0f, 2.0f, 3.0f});
    cuda().scale(x, 2.0f, 3);
    EXPECT_EQ(s.get(x, 3), (Vec{2.0f, 4.0f, 6.0f}));
  }
}

// Host values staged as bf16 views (rounded to nearest even on the way in, widened on the way out).
class Bf16Staged {
 public:
  explicit Bf16Staged(Backend& be) : be_(be) {}
  TensorRef in(const Vec& host, DType dtype = DType::kBF16) {
    TensorRef r = out(host.size(), dtype);
    be_.from_host(r, host.data(), static_cast<std::int64_t>(host.size()));
    return r;
  }
  TensorRef out(std::size_t n, DType dtype = DType::kBF16) {
    held_.push_back(
        be_.alloc(1, static_cast<std::int64_t>(std::max<std::size_t>(n, 1)), MemoryCategory::kBuffers, dtype));
    return held_.back().ref();
  }
  float* f32(const Vec& host) { return in(host, DType::kF32).as<float>(); }
  float* f32_out(std::size_t n) { return out(n, DType::kF32).as<float>(); }
  Vec get(ConstTensorRef r, std::size_t n) {
    be_.synchronize();
    Vec host(n);
    be_.to_host(host.data(), r, static_cast<std::int64_t>(n));
    return host;
  }

 private:
  Backend& be_;
  std::vector<Tensor> held_;
};

using Outputs = std::vector<Vec>;

Vec random_vec(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  Vec v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// |got − want| ≤ tol·(|want| + rms(want)) per value (the RMS floors values near zero), as the kernels' tests.
void expect_close(const Vec& got, const Vec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double sq = 0;
  for (float w : want) sq += static_cast<double>(w) * w;
  const double rms = want.empty() ? 0 : std::sqrt(sq / static_cast<double>(want.size()));
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol * (std::fabs(want[i]) + rms)) && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
  EXPECT_EQ(bad, 0) << what;
}

// bf16 keeps 8 significant bits (a rounding is up to 2^-9 relative); an op rounds its inputs and its output,
// and sums in fp32 in another order than the CPU: 1e-2 of the value (or of the RMS) covers a few roundings.
constexpr double kBf16Tolerance = 1e-2;

class GpuBackendOps : public GpuTest {
 protected:
  // The op on cuda (bf16 views), on the bf16 emulation and on the fp32 reference (fp32 views of the same
  // values): every output within bf16 tolerance of both.
  void expect_matches(const std::function<Outputs(Backend&, DType)>& op, const char* what) {
    const Outputs got = op(*backend_, DType::kBF16), emulated = op(emulation_, DType::kBF16),
                  ref = op(reference_, DType::kF32);
    ASSERT_EQ(got.size(), ref.size()) << what;
    for (std::size_t i = 0; i < got.size(); ++i) {
      expect_close(got[i], emulated[i], kBf16Tolerance, fmt::format("{} output {} vs cpu-bf16", what, i));
      expect_close(got[i], ref[i], 2 * kBf16Tolerance, fmt::format("{} output {} vs cpu fp32", what, i));
    }
  }
  CpuBackend reference_;
  CpuBf16Backend emulation_;
};

TEST_F(GpuBackendOps, Bf16GemmsWithFp32AndBf16OutputsForEveryTransposition) {
  const int m = 33, n = 17, k = 40;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (DType c_type : {DType::kF32, DType::kBF16}) {
        const Vec a = random_vec(m * k, 1), b = random_vec(k * n, 2), c0 = random_vec(m * n, 3);
        expect_matches(
            [&](Backend& be, DType dt) {
              Bf16Staged s(be);
              TensorRef c = s.in(c0, dt == DType::kF32 ? DType::kF32 : c_type);
              be.gemm(ta, tb, m, n, k, 0.5f, s.in(a, dt), ta ? m : k, s.in(b, dt), tb ? k : n, 1.0f, c, n);
              return Outputs{s.get(c, m * n)};
            },
            "gemm");
      }
}

TEST_F(GpuBackendOps, Bf16ElementwiseOpsAndMixedAxpy) {
  const int rows = 8, cols = 48, n = rows * cols;
  const Vec x = random_vec(n, 4), y = random_vec(n, 5), bias = random_vec(cols, 6), g = random_vec(n, 7);
  expect_matches(
      [&](Backend& be, DType dt) {
        Bf16Staged s(be);
        TensorRef sum = s.out(n, dt), axpy = s.in(y, dt), biased = s.in(x, dt), scaled = s.in(x, dt);
        float* main_grad = s.f32(g);
        float* dbias = s.f32(bias);
        be.add(sum, s.in(x, dt), s.in(y, dt), n);
        be.axpy(axpy, 0.5f, s.in(x, dt), n);
        be.axpy(main_grad, 2.0f, s.in(x, dt), n);  // an fp32 main gradient takes a bf16 gradient
        be.add_bias(biased, s.in(bias, dt), rows, cols);
        be.bias_grad(dbias, s.in(y, dt), rows, cols);
        be.scale(scaled, -2.0f, n);
        const double squares = be.sum_squares(s.in(x, dt), n);
        return Outputs{s.get(sum, n),
                       s.get(axpy, n),
                       s.get(main_grad, n),
                       s.get(biased, n),
                       s.get(dbias, cols),
                       s.get(scaled, n),
                       Vec{static_cast<float>(squares)}};
      },
      "element-wise");
}

TEST_F(GpuBackendOps, Bf16CastsRoundToNearestEvenBitForBitAsTheCpu) {
  Vec x = random_vec(1000, 8);
  x.push_back(1.0f + 1.0f / 256);  // exactly halfway between two bf16 values: rounds to even (1.0)
  x.push_back(-0.0f);
  auto round_trip = [&](Backend& be) {
    Bf16Staged s(be);
    float* src = s.f32(x);
    TensorRef half = s.out(x.size());
    float* back = s.f32_out(x.size());
    be.cast(half, src, static_cast<std::int64_t>(x.size()));
    be.cast(back, half, static_cast<std::int64_t>(x.size()));
    return s.get(back, x.size());
  };
  const Vec got = round_trip(*backend_), want = round_trip(reference_);
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(kernels::float_bits(got[i]), kernels::float_bits(want[i])) << i;
  EXPECT_EQ(got[x.size() - 2], 1.0f);
}

TEST_F(GpuBackendOps, Bf16NormsForwardAndBackward) {
  const int rows = 16, cols = 96;
  const Vec x = random_vec(rows * cols, 9), w = random_vec(cols, 10), b = random_vec(cols, 11),
            dout = random_vec(rows * cols, 12);
  expect_matches(
      [&](Backend& be, DType dt) {
        Bf16Staged s(be);
        TensorRef out = s.out(rows * cols, dt), dx = s.out(rows * cols, dt), rms_out = s.out(rows * cols, dt),
                  rms_dx = s.out(rows * cols, dt);
        float *mean = s.f32_out(rows), *rstd = s.f32_out(rows), *dw = s.f32_out(cols), *db = s.f32_out(cols),
              *rms_rstd = s.f32_out(rows), *rms_dw = s.f32_out(cols);
        const TensorRef xi = s.in(x, dt), wi = s.in(w, dt), bi = s.in(b, dt), di = s.in(dout, dt);
        be.layernorm_forward(out, mean, rstd, xi, wi, bi, rows, cols);
        be.layernorm_backward(dx, dw, db, di, xi, wi, mean, rstd, rows, cols);
        be.rmsnorm_forward(rms_out, rms_rstd, xi, wi, rows, cols);
        be.rmsnorm_backward(rms_dx, rms_dw, di, xi, wi, rms_rstd, rows, cols);
        return Outputs{s.get(out, rows * cols),     s.get(dx, rows * cols),     s.get(dw, cols),    s.get(db, cols),
                       s.get(rms_out, rows * cols), s.get(rms_dx, rows * cols), s.get(rms_dw, cols)};
      },
      "norms");
}

TEST_F(GpuBackendOps, Bf16ActivationsForwardAndBackward) {
  const int rows = 8, f = 64, n = rows * 2 * f;
  const Vec x = random_vec(n, 13), dout = random_vec(n, 14), dsw = random_vec(rows * f, 15);
  expect_matches(
      [&](Backend& be, DType dt) {
        Bf16Staged s(be);
        TensorRef gelu = s.out(n, dt), dgelu = s.out(n, dt), sw = s.out(rows * f, dt), dswiglu = s.out(n, dt);
        const TensorRef in = s.in(x, dt);
        be.gelu_forward(gelu, in, n);
        be.gelu_backward(dgelu, in, s.in(dout, dt), n);
        be.swiglu_forward(sw, in, rows, f);
        be.swiglu_backward(dswiglu, in, s.in(dsw, dt), rows, f);
        return Outputs{s.get(gelu, n), s.get(dgelu, n), s.get(sw, rows * f), s.get(dswiglu, n)};
      },
      "activations");
}

TEST_F(GpuBackendOps, Bf16AttentionWithDropoutAndRotaryEmbedding) {
  const AttentionShape sh{2, 16, 4, 2, 8};  // GQA: 4 query heads on 2 key/value heads
  const std::size_t tokens = sh.batch * sh.seq, ctx_n = tokens * sh.heads * sh.head_dim, probs_n = sh.probs_numel();
  const Vec qkv = random_vec(tokens * sh.qkv_cols(), 16), dctx = random_vec(ctx_n, 17);
  const float keep = 1.0f / 0.9f;
  expect_matches(
      [&](Backend& be, DType dt) {
        Bf16Staged s(be);
        TensorRef in = s.in(qkv, dt), ctx = s.out(ctx_n, dt), probs = s.out(probs_n, dt), dropped = s.out(probs_n, dt),
                  dqkv = s.out(qkv.size(), dt);
        auto* mask = reinterpret_cast<std::uint8_t*>(s.f32_out((probs_n + 3) / 4));
        be.rope(in, sh, false);
        be.attention_probs(probs, in, sh);
        be.dropout_mask(mask, static_cast<std::int64_t>(probs_n), 7, 100, 0.1f);
        be.apply_mask(dropped, probs, mask, static_cast<std::int64_t>(probs_n), keep);
        be.attention_context(ctx, dropped, in, sh);
        be.attention_backward(dqkv, s.in(dctx, dt), probs, dropped, mask, keep, in, sh);
        be.rope(dqkv, sh, true);
        // Every intermediate too, so that a difference names the op it starts in.
        std::vector<std::uint8_t> mask_bytes((probs_n + 3) / 4 * 4);
        be.download(mask_bytes.data(), ConstTensorRef(reinterpret_cast<const float*>(mask)),
                    static_cast<std::int64_t>(mask_bytes.size() / 4));
        mask_bytes.resize(probs_n);
        return Outputs{s.get(ctx, ctx_n),       s.get(probs, probs_n), s.get(dqkv, qkv.size()),
                       s.get(dropped, probs_n), s.get(in, qkv.size()), Vec(mask_bytes.begin(), mask_bytes.end())};
      },
      "attention");
}

// The flash block ops on one backend, in one dtype: one rank's causal attention as one block with K and V
// read in place, or (sh.cp > 1) a context-parallel rank's two blocks, the second from a buffer of its own.
// Outputs: ctx, lse, dQ (fp32), dqkv, and dK|dV of the second block.
Outputs flash_block_outputs(Backend& be, DType dt, const AttentionShape& sh) {
  const std::size_t T = sh.batch * sh.seq, q_cols = sh.heads * sh.head_dim, kv_cols = 2 * sh.kv_heads * sh.head_dim,
                    rows = static_cast<std::size_t>(sh.batch) * sh.heads * sh.seq;
  const Vec qkv = random_vec(T * sh.qkv_cols(), 21), other = random_vec(T * kv_cols, 22),
            dctx = random_vec(T * q_cols, 23);
  const AttentionDropout drop{0.1f, 7, 1000, sh.heads};
  Bf16Staged s(be);
  const int ld = static_cast<int>(sh.qkv_cols());
  TensorRef in = s.in(qkv, dt), kv = s.in(other, dt), ctx = s.out(T * q_cols, dt), dqkv = s.out(qkv.size(), dt),
            dkv = s.out(other.size(), dt), dout = s.in(dctx, dt);
  float *acc = s.f32_out(T * q_cols), *stats = s.f32_out(2 * rows), *lse = s.f32_out(rows), *dq = s.f32_out(T * q_cols);
  be.attention_block_forward(acc, stats, stats + rows, in, in + q_cols, ld, sh.cp_rank, sh, drop);
  if (sh.cp > 1) be.attention_block_forward(acc, stats, stats + rows, in, kv, static_cast<int>(kv_cols), 0, sh, drop);
  be.attention_block_finish(ctx, lse, acc, stats, stats + rows, sh);
  be.attention_block_backward(dq, dqkv + q_cols, dout, ctx, lse, in, in + q_cols, ld, sh.cp_rank, sh, drop);
  if (sh.cp > 1) be.attention_block_backward(dq, dkv, dout, ctx, lse, in, kv, static_cast<int>(kv_cols), 0, sh, drop);
  Outputs o{s.get(ctx, T * q_cols), s.get(ConstTensorRef(lse), rows), s.get(ConstTensorRef(dq), T * q_cols),
            s.get(dqkv, qkv.size())};
  if (sh.cp > 1) o.push_back(s.get(dkv, other.size()));
  return o;
}

// The flash tests' shapes: GQA, dropout, a sequence of 3 query and 4 key tiles and a head_dim padded from 40
// to 48; a context-parallel rank (its own chunks 1 and 2 of 4, then rank 0's chunks 0 and 3); and a head_dim
// of 128, the most registers a thread of the register kernels holds.
const AttentionShape kFlashShapes[] = {AttentionShape{2, 200, 4, 2, 40}, AttentionShape{1, 96, 2, 1, 64, 2, 1},
                                       AttentionShape{1, 130, 2, 1, 128}};

// How far got is from want over all values: ‖got − want‖ / ‖want‖; the component of got − want along want,
// Σ(got − want)·want / Σ want², a systematic scale error (the rounding errors, unbiased, average out); and
// the largest |got − want|.
struct Deviation {
  double relative_rms, scale_bias, max_abs;
};
Deviation deviation(const Vec& got, const Vec& want) {
  double diff = 0, along = 0, norm = 0, worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    along += d * want[i];
    norm += static_cast<double>(want[i]) * want[i];
    worst = std::max(worst, std::fabs(d));
  }
  return {std::sqrt(diff / std::max(norm, 1e-30)), along / std::max(norm, 1e-30), worst};
}

// A bf16 attention stays within a few roundings of fp32 over all its values (relative RMS 0.1-0.4 % here) and
// without a systematic scale error (|bias| under 1.4e-4 here; rounding 1/(1 − p) to bf16 made 5.9–8.2e-4).
constexpr double kBf16RelativeRms = 1e-2, kScaleBias = 5e-4;

// The emulation's flash blocks (the GPU's roundings: Q, K, V, the P and dS tiles, the outputs) against fp32.
// Element by element a bf16 attention has outliers where sums cancel (a row's dQ near zero, 2e-2 of fp32 is
// missed by 19 of 64 000 dQ values here), so the check is over all values, as FlashAttention's own tests are.
TEST(Bf16EmulationFlashBlocks, StayWithinBf16OfFp32WithoutAScaleBias) {
  CpuBackend reference;
  CpuBf16Backend emulation;
  for (const AttentionShape& sh : kFlashShapes) {
    const Outputs got = flash_block_outputs(emulation, DType::kBF16, sh),
                  ref = flash_block_outputs(reference, DType::kF32, sh);
    ASSERT_EQ(got.size(), ref.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      const Deviation d = deviation(got[i], ref[i]);
      EXPECT_LE(d.relative_rms, kBf16RelativeRms) << "cp " << sh.cp << " output " << i;
      EXPECT_LE(std::fabs(d.scale_bias), kScaleBias) << "cp " << sh.cp << " output " << i;
    }
  }
}

// The flash block ops (kernels/flash_attention.cu) against the CPU's, on kFlashShapes: forward, finish and
// backward; the lse and dQ in fp32. bf16 views, each way of kernels/flash_attention.cu (the register
// kernels, the default; the shared-memory tiles; those tiles' fragments loaded element by element instead
// of by ldmatrix): within bf16 of the emulation over all
// values; against fp32 no systematic scale error and no value further off than twice the emulation's worst
// (FlashAttention's test: the kernel's error at most twice a same-precision reference's). fp32 views on the
// GPU (CUDA-core path) against fp32 at 1e-4, value by value.
TEST_F(GpuBackendOps, FlashBlocksOnOneRankAndAContextParallelRank) {
  for (const AttentionShape& sh : kFlashShapes) {
    const Outputs emulated = flash_block_outputs(emulation_, DType::kBF16, sh),
                  ref = flash_block_outputs(reference_, DType::kF32, sh);
    for (const std::string way : {"", "LOOM_FLASH_SMEM_TILES", "LOOM_FLASH_ELEMENT_LOADS"}) {
      if (!way.empty()) setenv(way.c_str(), "1", 1);
      const Outputs got = flash_block_outputs(*backend_, DType::kBF16, sh);
      if (!way.empty()) unsetenv(way.c_str());
      ASSERT_EQ(got.size(), ref.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        const std::string what = fmt::format("cp {}, {}, output {}", sh.cp, way.empty() ? "default" : way + "=1", i);
        EXPECT_LE(deviation(got[i], emulated[i]).relative_rms, kBf16RelativeRms) << what << " vs cpu-bf16";
        const Deviation d = deviation(got[i], ref[i]);
        EXPECT_LE(std::fabs(d.scale_bias), kScaleBias) << what << " vs cpu fp32";
        EXPECT_LE(d.max_abs, 2 * deviation(emulated[i], ref[i]).max_abs + 1e-6) << what << " vs cpu fp32";
      }
    }
    const Outputs fp32 = flash_block_outputs(*backend_, DType::kF32, sh);
    for (std::size_t i = 0; i < ref.size(); ++i)
      expect_close(fp32[i], ref[i], 1e-4, fmt::format("flash blocks fp32 output {}", i));
  }
}

// Strided rows copied in one call, in one dtype and across fp32 and bf16, as the CPU copies them.
TEST_F(GpuBackendOps, CopyRowsBetweenStridesAndDtypes) {
  const Vec src = random_vec(7 * 12, 61), dst0 = random_vec(7 * 10, 62);
  for (const auto& [from, to] : {std::pair{DType::kBF16, DType::kBF16}, std::pair{DType::kF32, DType::kBF16},
                                 std::pair{DType::kBF16, DType::kF32}, std::pair{DType::kF32, DType::kF32}}) {
    const auto op = [&](Backend& be, DType) {
      Bf16Staged s(be);
      TensorRef in = s.in(src, from), out = s.in(dst0, to);
      be.copy_rows(out + 2, 10, in + 3, 12, 7, 5);  // 5 of each row's columns, at offsets 3 → 2
      return Outputs{s.get(out, dst0.size())};
    };
    const Outputs got = op(*backend_, to), want = op(emulation_, to);
    expect_close(got[0], want[0], 0.0, fmt::format("copy_rows {} -> {}", to_string(from), to_string(to)));
  }
}

// RoPE on a context-parallel rank's tokens: chunks 1 and 2 of 4 at their positions in the sequence.
TEST_F(GpuBackendOps, RopeAtAContextParallelRanksPositions) {
  const AttentionShape sh{2, 16, 4, 2, 16, 2, 1};
  const Vec qkv = random_vec(static_cast<std::size_t>(sh.batch * sh.seq * sh.qkv_cols()), 51);
  expect_matches(
      [&](Backend& be, DType dt) {
        Bf16Staged s(be);
        TensorRef x = s.in(qkv, dt);
        be.rope(x, sh, false);
        Outputs o{s.get(x, qkv.size())};
        be.rope(x, sh, true);
        o.push_back(s.get(x, qkv.size()));
        return o;
      },
      "rope under cp");
}

// The gradient norm's one read: Σ x² added over fp32 and bf16 views on the stream, then read once, is
// the sum of the views' own sums; a reset starts over.
TEST_F(GpuBackendOps, SumSquaresAddedOverViewsIsOneReadOfTheirTotal) {
  Bf16Staged s(*backend_);
  const Vec a = random_vec(1000, 31), b = random_vec(77, 32);
  float* fa = s.f32(a);
  const TensorRef bb = s.in(b);
  Backend& be = *backend_;
  be.sum_squares_reset();
  be.sum_squares_add(fa, 1000);
  be.sum_squares_add(bb, 77);
  be.sum_squares_add(fa, 0);
  const double total = be.sum_squares_result();
  EXPECT_NEAR(total, be.sum_squares(fa, 1000) + be.sum_squares(bb, 77), 1e-12 * total);
  be.sum_squares_reset();
  be.sum_squares_add(bb, 77);
  EXPECT_DOUBLE_EQ(be.sum_squares_result(), be.sum_squares(bb, 77));
}

// A step's token losses kept on the device: two micro-batches' statistics added, read once, against the
// CPU's host sum of the same statistics.
TEST_F(GpuBackendOps, TokenLossesAddedOnTheDeviceAndReadOnce) {
  const std::size_t rows = 300;
  Vec mx = random_vec(rows, 41), target = random_vec(rows, 42), sum = random_vec(rows, 43);
  for (float& s : sum) s = 1.0f + std::fabs(s) * 100.0f;  // a sum of exponentials: at least 1
  const auto total = [&](Backend& be) {
    Bf16Staged s(be);
    float *m = s.f32(mx), *e = s.f32(sum), *t = s.f32(target);
    be.loss_reset();
    be.loss_add(m, e, t, static_cast<std::int64_t>(rows));
    be.loss_add(m + 100, e + 100, t + 100, 200);
    return be.loss_result();
  };
  const double gpu = total(*backend_), cpu = total(reference_);
  EXPECT_NEAR(gpu, cpu, 1e-9 * std::fabs(cpu) + 1e-9);
  backend_->loss_reset();
  EXPECT_EQ(backend_->loss_result(), 0.0);
}

TEST_F(GpuBackendOps, CrossEntropyOnFp32LogitsAndEmbeddingWithHostTokenIds) {
  const int rows = 12, cols = 40, valid = 37, h = 16, held = 30, start = 10;
  const Vec logits = random_vec(rows * cols, 18, 3.0f), table = random_vec(held * h, 19),
            dout = random_vec(rows * h, 20);
  std::vector<int> targets(rows), tokens(rows);
  for (int r = 0; r < rows; ++r) {
    targets[r] = (r * 7) % valid;
    tokens[r] = (r * 11) % 45;  // some outside [start, start + held): other ranks' rows
  }
  expect_matches(
      [&](Backend& be, DType dt) {
        Bf16Staged s(be);
        float *mx = s.f32_out(rows), *sum = s.f32_out(rows), *target = s.f32_out(rows), *grad = s.f32(logits),
              *dtable = s.f32_out(held * h);
        const float* in = s.f32(logits);
        TensorRef emb = s.out(rows * h, dt);
        // Token ids straight from host vectors, as the trainer passes the data loader's.
        be.row_max(mx, in, rows, cols, valid);
        be.row_sum_exp(sum, in, mx, rows, cols, valid);
        be.target_logit(target, in, targets.data(), rows, cols, 0);
        be.cross_entropy_grad(grad, mx, sum, targets.data(), rows, cols, valid, 0, 0.5f);
        be.embedding_forward(emb, s.in(table, dt), tokens.data(), rows, h, start, held);
        be.embedding_backward(dtable, s.in(dout, dt), tokens.data(), rows, h, start, held);
        return Outputs{s.get(mx, rows),          s.get(sum, rows),     s.get(target, rows),
                       s.get(grad, rows * cols), s.get(emb, rows * h), s.get(dtable, held * h)};
      },
      "cross-entropy and embedding");
}

TEST_F(GpuBackendOps, MoeRowOpsWithHostIndices) {
  const int rows = 40, cols = 24, k = 2, tokens = 20;
  const Vec in = random_vec(rows * cols, 41), other = random_vec(rows * cols, 42), scales = random_vec(rows, 43);
  std::vector<int> gather(rows), pairs(tokens * k);
  for (int r = 0; r < rows; ++r) gather[r] = (r * 7) % rows;
  for (int i = 0; i < tokens * k; ++i) pairs[i] = (i * 13 + 5) % rows;
  expect_matches(
      [&](Backend& be, DType dt) {
        Bf16Staged s(be);
        TensorRef gathered = s.out(rows * cols, dt), summed = s.out(tokens * cols, dt), scaled = s.out(rows * cols, dt);
        float* dots = s.f32_out(rows);
        be.index_rows(gathered, s.in(in, dt), gather.data(), rows, cols);
        be.sum_indexed_rows(summed, s.in(in, dt), pairs.data(), tokens, k, cols);
        be.scale_rows(scaled, s.in(in, dt), s.f32(scales), rows, cols);
        be.row_dots(dots, s.in(in, dt), s.in(other, dt), rows, cols);
        return Outputs{s.get(gathered, rows * cols), s.get(summed, tokens * cols), s.get(scaled, rows * cols),
                       s.get(dots, rows)};
      },
      "moe row ops");
}

TEST_F(GpuBackendOps, AdamWStepsTheFp32MasterAndWritesItsBf16Copy) {
  const std::size_t n = 1000;
  const Vec p0 = random_vec(n, 21), g = random_vec(n, 22, 0.1f), m0 = random_vec(n, 23, 0.01f);
  Vec v0 = random_vec(n, 24, 0.01f);
  for (float& v : v0) v = v * v;
  auto step = [&](Backend& be) {
    Bf16Staged s(be);
    float *p = s.f32(p0), *m = s.f32(m0), *v = s.f32(v0);
    TensorRef copy = s.out(n);
    be.adamw(p, s.f32(g), m, v, static_cast<std::int64_t>(n), 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, copy);
    return Outputs{s.get(p, n), s.get(m, n), s.get(v, n), s.get(copy, n)};
  };
  const Outputs got = step(*backend_), want = step(reference_);
  for (std::size_t i = 0; i < got.size(); ++i) expect_close(got[i], want[i], 1e-5, fmt::format("adamw output {}", i));
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(got[3][i], kernels::float_from_bf16_bits(kernels::bf16_bits_from_float(got[0][i]))) << i;
}

TEST_F(GpuBackendOps, HostStatisticsAreRefusedByName) {
  Bf16Staged s(*backend_);
  std::vector<float> host_mean(4), host_rstd(4);
  const Vec x = random_vec(4 * 8, 25), w = random_vec(8, 26);
  try {
    backend_->layernorm_forward(s.out(32), host_mean.data(), host_rstd.data(), s.in(x), s.in(w), s.in(w), 4, 8);
    FAIL() << "host statistics were accepted";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("layernorm_forward: mean is host memory"), std::string::npos) << e.what();
  }
  EXPECT_THROW(backend_->add(s.out(2), s.in(Vec{1.0f, 2.0f}), s.in(Vec{1.0f, 2.0f}, DType::kF32), 2), std::logic_error)
      << "views of different dtypes";
}

// --- training a small GPT ---------------------------------------------------------------------------

constexpr int kSteps = 6;

struct TrainSetup {
  TrainerOptions options;
  std::unique_ptr<TokenFile> data;
};

TrainerOptions tiny_gpt_options() {
  TrainerOptions o;
  o.model = *model_preset("gpt-tiny");  // compiled in: the test reads no file of the source tree
  o.training.global_batch = 4;
  o.training.seq_len = 64;
  o.config.micro_batch = 2;
  o.optimizer.learning_rate = 3e-3f;
  o.optimizer.warmup_steps = 2;
  o.optimizer.decay_steps = kSteps;
  o.seed = 7;
  return o;
}

const TokenFile& tokens() {
  static const TokenFile file = [] {
    const std::string path = testing::make_token_file(testing::scratch_dir("gpu_train_data"), 20000);
    auto file = TokenFile::open(path, 256, 64);
    if (!file) throw std::runtime_error(file.error().message);
    return std::move(*file);
  }();
  return file;
}

struct TrainedRun {
  std::vector<double> losses;
  std::array<std::int64_t, kMemoryCategories> peaks{};
};

// Trains from `from_checkpoint` (or from the seed) up to `until` steps, saving the last step to `save_to`.
TrainedRun train(Backend& backend, int until, const std::string& from_checkpoint = "", const std::string& save_to = "",
                 int zero = 0, AttentionKernel attention = AttentionKernel::kUnfused) {
  TrainerOptions o = tiny_gpt_options();
  o.config.zero = zero;
  o.attention = attention;
  ProcessGroups groups = single_rank_groups(o.config);
  Trainer trainer(o, groups, backend, tokens(), nullptr);
  if (!from_checkpoint.empty()) {
    EXPECT_TRUE(trainer.load_checkpoint(from_checkpoint).ok());
  }
  TrainedRun run;
  while (trainer.completed_steps() < until) {
    const StepMetrics m = trainer.step();
    run.losses.push_back(m.loss);
    run.peaks = m.peak_bytes;
  }
  if (!save_to.empty()) {
    EXPECT_TRUE(trainer.save_checkpoint(save_to).ok());
  }
  return run;
}

// Two bf16 runs that round in the same places (the GPU and the bf16 emulation, or the GPU under two ZeRO
// stages), as for the emulation's layouts (exec_bf16_run_test): the loss is a mean over every token, so
// per-value roundings in other orders average out; 2e-3 relative is one bf16 rounding of the loss.
constexpr double kLossTolerance = 2e-3;
// A bf16 run against the fp32 one: the 1e-2. Seen on an H200 (2026-11-26): at step 4, a loss
// spike of this model (4.55 → 6.0), the GPU and the emulation both stand 0.5 % above fp32 and within
// 0.05 % of each other.
constexpr double kBf16LossTolerance = 1e-2;

void expect_same_curve(const std::vector<double>& got, const std::vector<double>& want, const std::string& what,
                       double tolerance = kLossTolerance) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tolerance * want[i]) << what << " step " << i + 1;
}

using GpuTrain = GpuTest;

TEST_F(GpuTrain, TrainsTheEmulationsCurveAndTheFp32OneWithinBf16ToleranceAndChargesMemoryAsTheEmulation) {
  CpuBackend fp32;
  CpuBf16Backend emulation;
  const TrainedRun gpu = train(*backend_, kSteps), cpu = train(fp32, kSteps), emulated = train(emulation, kSteps);
  for (std::size_t i = 0; i < gpu.losses.size(); ++i)
    std::printf("step %zu: cuda %.6f, cpu-bf16 %.6f, cpu %.6f\n", i + 1, gpu.losses[i], emulated.losses[i],
                cpu.losses[i]);
  expect_same_curve(gpu.losses, emulated.losses, "cuda vs cpu-bf16");
  expect_same_curve(gpu.losses, cpu.losses, "cuda vs cpu", kBf16LossTolerance);
  EXPECT_LT(gpu.losses.back(), gpu.losses.front() - 0.05) << "the loss falls";
  for (int c = 0; c < kMemoryCategories; ++c)
    EXPECT_EQ(gpu.peaks[c], emulated.peaks[c]) << to_string(static_cast<MemoryCategory>(c));
  EXPECT_GE(cuda().allocator().peak_reserved_bytes(), cuda().memory().peak_total_bytes());
}

// Flash attention (the block kernels) trains the emulation's flash curve, and the unfused GPU curve.
TEST_F(GpuTrain, FlashAttentionTrainsTheSameCurve) {
  CpuBf16Backend emulation;
  const TrainedRun flash = train(*backend_, kSteps, "", "", 0, AttentionKernel::kFlash);
  expect_same_curve(flash.losses, train(emulation, kSteps, "", "", 0, AttentionKernel::kFlash).losses,
                    "flash: cuda vs cpu-bf16");
  expect_same_curve(flash.losses, train(*backend_, kSteps).losses, "cuda: flash vs unfused");
}

TEST_F(GpuTrain, ZeroStagesOnOneRankTrainTheSameCurve) {
  const TrainedRun plain = train(*backend_, 3);
  for (int zero : {1, 2, 3}) expect_same_curve(train(*backend_, 3, "", "", zero).losses, plain.losses, "ZeRO");
}

TEST_F(GpuTrain, ACheckpointWrittenOnTheGpuResumesOnTheCpuAndBack) {
  const std::string dir = testing::scratch_dir("gpu_checkpoint");
  CpuBackend fp32;
  const TrainedRun whole = train(fp32, kSteps);
  train(*backend_, 2, "", dir + "/gpu");
  const TrainedRun on_cpu = train(fp32, 4, dir + "/gpu", dir + "/cpu");  // steps 3-4 on the CPU from the GPU's step 2
  expect_same_curve(on_cpu.losses, {whole.losses[2], whole.losses[3]}, "resumed on cpu", kBf16LossTolerance);
  const TrainedRun back = train(*backend_, kSteps, dir + "/cpu");  // steps 5-6 on the GPU from the CPU's step 4
  expect_same_curve(back.losses, {whole.losses[4], whole.losses[5]}, "resumed on cuda", kBf16LossTolerance);
}

#endif  // LOOM_WITH_CUDA

}  // namespace
}  // namespace loom::exec
