// decode_attention on the GPU as the engine launches it (part of kernels_decode_gpu_test; see
// decode_gpu_test.cpp): stream mode in waves, the dynamic split, CUDA-graph capture and
// replay (new queries, new lengths, a window), and programmatic dependent launch after a
// writer of the queries.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kvattn/kernels/decode_attention.h"
#include "kvattn/kernels/device_faults.h"
#include "kernels/cuda/decode/decode_host.h"
#include "kernels/decode_gpu_case.h"
#include "kernels/gpu_test_support.h"
#include "support/case_util.h"
#include "support/paged_case.h"
#include "support/reference.h"
#include "support/test_util.h"

namespace kvattn {
namespace {

using namespace test::decode_gpu;  // NOLINT: the shared case helpers
using test::Mirror;
using test::pick;
using test::uniform_int;

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Stream mode in waves of shorter ranges (decode_stream_waves): more ranges than resident CTAs,
// so more pieces a sequence for the merge kernel; on both tiles, two CTAs an SM, and with the
// engine's plan for the table's width (the sweep's plan modes).
TEST(DecodeGpu, StreamWaves) {
  const Variant forms[] = {
      {.name = "waves 3 nosmall", .heads = 8, .stages = 0, .small = 0, .stream_waves = 3},
      {.name = "waves 2 swap h4 s3 nosmall", .heads = 4, .stages = 3, .small = 0, .swap = 1,
       .stream_waves = 2},
      {.name = "waves 8 noswap nosmall h4 s2", .heads = 4, .stages = 2, .small = 0, .swap = 0,
       .stream_waves = 8}};
  sweep_each(forms, 4);
}

// The dynamic split (decode_dynamic_split, decode_stream_ranges.cuh): batches of enough tiles
// for its ranges (five a resident CTA of a slice, so a few thousand tiles), ragged, with empty,
// one-key and one-tile sequences, q_len > 1, plans for the table's width, the longest length
// and a workspace too small for the dynamic ranges (the static split then); each variant runs
// its cases over fresh workspaces of 0xFF bytes (the claim counters' garbage) and, as the
// cases follow each other, over the words the previous launch left.
void dynamic_cases(int cases, bool fp8) {
  const bool quick = test::quick_mode();
  for (int c = 0; c < cases; ++c) {
    if (!test::case_selected(c)) continue;
    const uint64_t seed = test::case_seed();
    std::mt19937_64 rng(seed);
    DecodeCase dc;
    dc.dt = c % 2 ? DType::kBF16 : DType::kF16;
    dc.d = std::vector<int64_t>{128, 64, 256, 96}[(c / 2) % 4];
    dc.bs = pick(rng, std::vector<int64_t>{16, 64, 12, 256});
    dc.hkv = pick(rng, std::vector<int64_t>{1, 2, 3, 8});
    dc.group = pick(rng, std::vector<int64_t>{1, 4, 8});
    const int64_t B = uniform_int(rng, quick ? 40 : 24, quick ? 90 : 260);
    dc.lens = random_lens(rng, B, quick ? 2600 : 6000, true);
    if (c % 4 == 1) {
      dc.q_len = pick(rng, std::vector<int64_t>{2, 3});
      dc.causal = uniform_int(rng, 0, 3) != 0;
    }
    dc.plan_mode = std::vector<int>{1, 3, 0, 2}[c % 4];
    dc.forced_splits = 3;  // plan_mode 2: fewer ranges than the dynamic split's
    dc.with_lse = c % 3 != 2;
    dc.fp8 = fp8;
    dc.fp8_scale = pick(rng, std::vector<float>{0.0f, 0.2f});
    SCOPED_TRACE(test::case_note(c, seed, dc.describe()));
    check(dc, run_case(dc, rng));
  }
}

// Launches that asked for the dynamic split since `before`: some where it is compiled in
// (KVATTN_DECODE_DYNAMIC_SPLIT_BUILD), none where it is not (the knob is then ignored, and the
// same cases must come out right on the static split).
void expect_dynamic_launches_since(int64_t before) {
  const int64_t launches = cuda::decode_host::dynamic_launches() - before;
  if (cuda::kDecodeDynamicSplitBuilt) {
    EXPECT_GT(launches, 0) << "no case took the dynamic split";
  } else {
    EXPECT_EQ(launches, 0) << "the dynamic split ran in a build without it";
  }
}

TEST(DecodeGpu, DynamicSplit) {
  const Variant forms[] = {
      {.name = "dynamic nosmall", .heads = 8, .stages = 0, .small = 0, .dynamic_split = 1},
      {.name = "dynamic swap h4 s3 nosmall", .heads = 4, .stages = 3, .small = 0, .swap = 1,
       .dynamic_split = 1},
      {.name = "dynamic noswap h4 s2 nosmall", .heads = 4, .stages = 2, .small = 0, .swap = 0,
       .dynamic_split = 1},
      {.name = "dynamic tma nosmall", .heads = 8, .stages = 0, .small = 0, .tma = 1,
       .dynamic_split = 1},
      {.name = "dynamic cta sweep nosmall", .heads = 8, .stages = 0, .small = 0, .cta_sweep = 1,
       .dynamic_split = 1}};
  const int64_t before = cuda::decode_host::dynamic_launches();
  for (const Variant& v : forms) {
    SCOPED_TRACE(v.name);
    UseVariant use(v);
    dynamic_cases(test::quick_mode() ? 4 : 8, false);
    dynamic_cases(test::quick_mode() ? 2 : 4, true);
  }
  expect_dynamic_launches_since(before);
}

// A decode captured in a CUDA graph with its plan and workspace replays to the same result,
// a replay after new queries are written reads the new queries, and replays after the lengths
// change (each at most its first value; the stream kernel's ranges move) read the new
// lengths. `plan_bound` 0: the plan is made for the table's capacity.
void graph_capture_and_replay(std::vector<int64_t> lens = {3000, 17, 0, 1200, 640},
                              int64_t plan_bound = 0, int64_t window_left = -1,
                              float softcap = 0.0f) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(test::case_note(0, seed, "graph capture"));
  const int64_t hkv = 2, group = 4, d = 128, bs = 16, H = hkv * group;
  const auto B = static_cast<int64_t>(lens.size());
  test::PagedKv kv = test::make_paged_kv(rng, DType::kBF16, hkv, d, bs, lens);
  Relaid r = relayout_aligned(rng, kv);
  test::RowBuffer qb = test::make_rows(B, H, d, DType::kBF16, 0);
  test::fill_uniform(qb.view, rng);
  Tensor lens_t = test::int_tensor(lens);

  const Mirror caches = Mirror::of(r.storage);
  const Mirror tbl = Mirror::of(kv.table_storage);
  const Mirror q = Mirror::of(qb.storage);
  const Tensor out = Tensor::empty({B, H, d}, DType::kBF16, kGpu);
  const Tensor lse = Tensor::empty({H, B}, DType::kF32, kGpu);
  const Tensor lens_dev = lens_t.to(kGpu);

  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DecodeArgs a;
  a.q = q.on_device(qb.view);
  a.k_cache = caches.on_device(r.k);
  a.v_cache = caches.on_device(r.v);
  a.block_table = tbl.on_device(kv.block_table);
  a.cache_seqlens = lens_dev;
  a.out = out;
  a.lse = lse;
  a.stream = Stream{stream};
  a.window_left = window_left;
  a.softcap = softcap;
  test::RefMask mask;
  mask.window_left = window_left;
  mask.softcap = softcap;
  a.plan = plan_decode(B, H, hkv, d, 1, plan_bound > 0 ? plan_bound : kv.block_table.size(1) * bs,
                       kGpu);
  EXPECT_GT(a.plan.num_splits, 1) << "the case should exercise split + merge";
  const Tensor ws = Tensor::empty({std::max<int64_t>(a.plan.workspace_bytes, 16)}, DType::kU8, kGpu);
  a.workspace = ws;
  decode_attention(a);  // warm-up outside the capture (first-use setup)
  CUDA_OK(cudaStreamSynchronize(stream));

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  decode_attention(a);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  const std::vector<int64_t> full = lens;
  for (int round = 0; round < 4; ++round) {
    if (round == 1) {  // new queries, same graph
      test::fill_uniform(qb.view, rng, -4.0f, 4.0f);
      copy_bytes(q.device.view(), qb.storage.view());
    }
    if (round >= 2) {  // other (shorter) lengths, same graph
      for (size_t i = 0; i < lens.size(); ++i) {
        lens[i] = round == 2 ? full[i] * 2 / 3 : (i % 2 == 1 ? full[i] : full[i] / 3);
      }
      lens_t = test::int_tensor(lens);
      copy_bytes(lens_dev.view(), lens_t.view());
    }
    const test::RefAttention ref = test::decode_reference(qb.view, r.k, r.v, kv.block_table,
                                                          lens_t, 1, 1 / std::sqrt(128.0), true,
                                                          mask);
    CUDA_OK(cudaMemsetAsync(out.data(), 0xFF, static_cast<size_t>(out.nbytes()), stream));
    CUDA_OK(cudaMemsetAsync(lse.data(), 0xFF, static_cast<size_t>(lse.nbytes()), stream));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    const auto e = test::compare(test::to_doubles(out.to(Device::cpu())), ref.out);
    EXPECT_FALSE(e.has_nan) << "round " << round;
    EXPECT_LT(e.rel_l2, 1e-2) << "round " << round << " max abs " << e.max_abs;
    const auto le = test::compare_lse(test::to_doubles(lse.to(Device::cpu())), ref.lse);
    EXPECT_TRUE(le.ok) << "round " << round;
    EXPECT_LT(le.max_abs, 2e-3) << "round " << round;
  }
  EXPECT_EQ(read_device_faults(kGpu), 0u);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(DecodeGpu, CudaGraphCaptureAndReplay) {
  graph_capture_and_replay();  // the small-batch kernel (its LL tags chain from replay to replay)
  {
    SCOPED_TRACE("a lone sequence, planned for its length: the guessed split, then a wrong guess");
    graph_capture_and_replay({2500}, 2500);
  }
  {
    SCOPED_TRACE("interleaved chunks (KVATTN_DECODE_SMALL_INTERLEAVE): the same replays");
    UseVariant inter(Variant{.name = "small interleaved", .heads = 8, .stages = 0, .interleave = 1});
    graph_capture_and_replay();
    graph_capture_and_replay({2500}, 2500);
  }
  {
    SCOPED_TRACE("nosmall: stream kernel + merge kernel");
    UseVariant use(kVariants[4]);
    graph_capture_and_replay();
    graph_capture_and_replay({700, 2900, 31, 0, 1500, 900, 2200, 64, 1800, 333});
  }
}

// The dynamic split's claim counters restart in every replay (their tags chain): ~3,400 tiles,
// enough for its ranges in the first replays, fewer than that in the last ones (the static
// split, inside the same graph). (Its own test: the sanitizer runs take it alone.)
TEST(DecodeGpu, DynamicSplitGraphReplay) {
  UseVariant dyn(Variant{.name = "dynamic nosmall", .heads = 8, .stages = 0, .small = 0,
                         .dynamic_split = 1});
  const int64_t before = cuda::decode_host::dynamic_launches();
  graph_capture_and_replay({8000, 17, 0, 12000, 6400, 9000, 31, 15000, 64, 3000});
  expect_dynamic_launches_since(before);
}

// DecodeArgs::pdl: a decode launched with programmatic dependent launch right after a kernel
// that writes its queries (another decode, whose output is this one's q, sharing its
// workspace) reads them only after that kernel completed: eagerly and in a captured graph with
// new queries each replay, on the small kernel, the stream kernel + merge and the
// whole-sequence form (sm_90: the attribute is ignored elsewhere, and the test still checks
// the plain behaviour).
void pdl_after_writer(const std::vector<int64_t>& lens, int64_t plan_bound, bool whole) {
  const uint64_t seed = test::case_seed();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(test::case_note(0, seed, "pdl after a writer"));
  const int64_t hkv = 2, group = 4, d = 128, bs = 16, H = hkv * group;
  const auto B = static_cast<int64_t>(lens.size());
  test::PagedKv kv = test::make_paged_kv(rng, DType::kBF16, hkv, d, bs, lens);
  Relaid r = relayout_aligned(rng, kv);
  test::RowBuffer qb = test::make_rows(B, H, d, DType::kBF16, 0);
  const Mirror caches = Mirror::of(r.storage);
  const Mirror tbl = Mirror::of(kv.table_storage);
  const Mirror q = Mirror::of(qb.storage);
  const Tensor mid = Tensor::empty({B, H, d}, DType::kBF16, kGpu);  // writer's out, reader's q
  const Tensor out = Tensor::empty({B, H, d}, DType::kBF16, kGpu);
  const Tensor lens_dev = test::int_tensor(lens).to(kGpu);

  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DecodeArgs w;  // the writer: a plain launch
  w.k_cache = caches.on_device(r.k);
  w.v_cache = caches.on_device(r.v);
  w.block_table = tbl.on_device(kv.block_table);
  w.cache_seqlens = lens_dev;
  w.stream = Stream{stream};
  w.plan = whole ? DecodePlan{1, 0, 0}
                 : plan_decode(B, H, hkv, d, 1, plan_bound > 0 ? plan_bound
                                                               : kv.block_table.size(1) * bs,
                               kGpu);
  const Tensor ws =
      Tensor::empty({std::max<int64_t>(w.plan.workspace_bytes, 16)}, DType::kU8, kGpu);
  w.workspace = ws;
  w.q = q.on_device(qb.view);
  w.out = mid;
  DecodeArgs rd = w;  // the reader: q = the writer's output, launched with PDL
  rd.q = mid;
  rd.out = out;
  rd.pdl = true;
  auto run_pair = [&] {
    CUDA_OK(cudaMemsetAsync(mid.data(), 0xFF, static_cast<size_t>(mid.nbytes()), stream));
    CUDA_OK(cudaMemsetAsync(out.data(), 0xFF, static_cast<size_t>(out.nbytes()), stream));
    decode_attention(w);
    decode_attention(rd);
  };
  auto check = [&](const char* what, int round) {
    CUDA_OK(cudaStreamSynchronize(stream));
    const Tensor mid_host = mid.to(Device::cpu());
    const test::RefAttention ref = test::decode_reference(
        mid_host.view(), r.k, r.v, kv.block_table, test::int_tensor(lens), 1,
        1 / std::sqrt(128.0), true, test::RefMask{});
    const auto e = test::compare(test::to_doubles(out.to(Device::cpu())), ref.out);
    EXPECT_FALSE(e.has_nan) << what << " round " << round;
    EXPECT_LT(e.rel_l2, 1e-2) << what << " round " << round << " max abs " << e.max_abs;
  };
  for (int round = 0; round < 3; ++round) {
    test::fill_uniform(qb.view, rng, -2.0f, 2.0f);
    copy_bytes(q.device.view(), qb.storage.view());
    run_pair();
    check("eager", round);
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  run_pair();
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 3; ++round) {
    test::fill_uniform(qb.view, rng, -2.0f, 2.0f);
    copy_bytes(q.device.view(), qb.storage.view());
    CUDA_OK(cudaGraphLaunch(exec, stream));
    check("graph", round);
  }
  EXPECT_EQ(read_device_faults(kGpu), 0u);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST(DecodeGpu, ProgrammaticLaunchAfterAWriter) {
  {
    SCOPED_TRACE("small kernel");
    pdl_after_writer({3000, 17, 0, 1200, 640}, 0, false);
    pdl_after_writer({130}, 4096, false);
  }
  {
    SCOPED_TRACE("whole-sequence form (one split)");
    pdl_after_writer({700, 2900, 31, 0, 1500}, 0, true);
  }
  SCOPED_TRACE("nosmall: stream kernel + merge kernel");
  UseVariant use(kVariants[4]);
  pdl_after_writer({700, 2900, 31, 0, 1500, 900, 2200, 64, 1800, 333}, 0, false);
}

// A windowed decode with softcap captured in a graph: replays with new queries and new
// lengths (the window's first tile moves on the device) read them, in both kernels.
TEST(DecodeGpuFeatures, CudaGraphCaptureAndReplay) {
  graph_capture_and_replay({3000, 17, 0, 1200, 640}, 0, 300, 20.0f);
  SCOPED_TRACE("nosmall: stream kernel + merge kernel");
  UseVariant use(kVariants[4]);
  graph_capture_and_replay({700, 2900, 31, 0, 1500, 900, 2200, 64, 1800, 333}, 0, 500, 0.0f);
}

}  // namespace
}  // namespace kvattn
