// WeightMatrix over GGUF blocks (kGguf): stacked parts of different types read in place,
// decode-sized steps (int8 activations, qdot) and prefill-sized steps (panels + sgemm)
// against float64, beta 0 and 1, row() against dequantize_row, and the fallbacks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "engine/model/qdot/qdot.h"
#include "engine/model/weight_matrix.h"
#include "kvattn/core/dtype.h"

namespace kvattn::cpu_model {
namespace {

// A [rows, cols] tensor of `type` with random quants and small random fp16 scales.
QuantizedWeight random_weight(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const int64_t be = qdot::block_elems(type), bb = qdot::block_bytes(type);
  auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(rows * cols / be * bb));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& v : *buf) v = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  const std::vector<int> fields = type == GgmlType::kQ6_K ? std::vector<int>{208}
                                  : type == GgmlType::kQ8_0 ? std::vector<int>{0}
                                  : type == GgmlType::kQ3_K ? std::vector<int>{108}
                                  : type == GgmlType::kQ2_K ? std::vector<int>{80, 82}
                                                            : std::vector<int>{0, 2};
  for (size_t b = 0; b < buf->size() / bb; ++b) {
    for (int off : fields) {
      const uint16_t h = float_to_f16(scale(rng)).bits;
      std::memcpy(buf->data() + b * bb + off, &h, 2);
    }
  }
  return QuantizedWeight{type, {rows, cols}, std::span<const uint8_t>(*buf), buf};
}

struct Part {
  GgmlType type;
  int64_t rows;
};

void check(const std::vector<Part>& parts, int64_t in, std::mt19937& rng) {
  ModelWeights w;
  std::vector<std::string> names;
  std::vector<float> dense;  // the dequantized stack, [out, in]
  int64_t out = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    names.push_back("w" + std::to_string(i));
    QuantizedWeight q = random_weight(parts[i].type, parts[i].rows, in, rng);
    Tensor f = q.dequantize();
    dense.insert(dense.end(), f.ptr<float>(), f.ptr<float>() + f.numel());
    w.quantized.emplace(names.back(), std::move(q));
    out += parts[i].rows;
  }
  WeightMatrix m(w, names, WeightFormat::kGguf);
  ASSERT_EQ(m.format(), WeightFormat::kGguf);
  ASSERT_EQ(m.out_features(), out);
  ASSERT_EQ(m.owned_bytes(), 0);
  EXPECT_TRUE(w.quantized.empty());
  std::vector<float> row(in);
  for (int64_t n = 0; n < out; ++n) {
    m.row(n, row.data());
    ASSERT_EQ(0, std::memcmp(row.data(), &dense[n * in], in * sizeof(float))) << "row " << n;
  }
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t rows : {1, 2, 3, 4, 5, 9, 300}) {
    for (float beta : {0.0f, 1.0f}) {
      SCOPED_TRACE(::testing::Message() << "rows " << rows << " beta " << beta);
      const int64_t ldx = in + 7, ldy = out + 3;
      std::vector<float> x(rows * ldx), y(rows * ldy);
      for (auto& v : x) v = normal(rng);
      for (auto& v : y) v = beta == 0.0f ? NAN : normal(rng);
      const std::vector<float> y0 = y;
      m.apply(x.data(), ldx, rows, y.data(), ldy, beta);
      for (int64_t r = 0; r < rows; ++r) {
        // Decode-sized steps see x as qdot quantizes it (22-bit for 32-blocks, int8 per 256
        // for K types); prefill-sized ones see it as float32 (32-blocks) or the same int8 (K).
        std::vector<double> xs(in);
        const bool quantized = rows <= kStreamingMaxRows || qdot::block_elems(parts[0].type) == 256;
        for (int64_t k = 0; k < in; ++k) xs[k] = x[r * ldx + k];
        if (quantized) {
          // Each part's type decides the activation blocks; these tests use one block size.
          const int64_t be = qdot::block_elems(parts[0].type);
          std::vector<int8_t> q(in), rq(in), tq(in);
          std::vector<float> d(in / 32), s(in / 32);
          std::vector<int16_t> bs(in / 16);
          if (be == 32) {
            qdot::quantize_row_32(&x[r * ldx], in, q.data(), rq.data(), tq.data(), d.data(),
                                  s.data());
          } else {
            qdot::quantize_row_256(&x[r * ldx], in, q.data(), d.data(), bs.data());
          }
          for (int64_t k = 0; k < in; ++k) {
            xs[k] = be == 32 ? (16384.0 * q[k] + 128.0 * rq[k] + tq[k]) * (d[k / 32] / 16384.0)
                             : q[k] * static_cast<double>(d[k / be]);
          }
        }
        double worst = 0, scale = 0;
        for (int64_t n = 0; n < out; ++n) {
          double ref = beta == 0.0f ? 0.0 : beta * static_cast<double>(y0[r * ldy + n]);
          double mag = std::fabs(ref);
          for (int64_t k = 0; k < in; ++k) {
            ref += dense[n * in + k] * xs[k];
            mag += std::fabs(dense[n * in + k] * xs[k]);
          }
          ASSERT_FALSE(std::isnan(y[r * ldy + n])) << "row " << r << " col " << n;
          worst = std::max(worst, std::fabs(y[r * ldy + n] - ref) / mag);
          scale = std::max(scale, mag);
        }
        // float32 sums of `in` terms (sgemm) or of the blocks (qdot): well under 1e-5 of the
        // magnitudes.
        EXPECT_LT(worst, 1e-5) << "activation row " << r;
        for (int64_t n = out; n < ldy; ++n) EXPECT_EQ(std::isnan(y[r * ldy + n]), std::isnan(y0[r * ldy + n]));
      }
    }
  }
}

TEST(WeightMatrixGguf, StackedPartsMatchFloat64) {
  std::mt19937 rng(7);
  check({{GgmlType::kQ4_1, 64}, {GgmlType::kQ4_1, 24}, {GgmlType::kQ4_1, 24}}, 576, rng);
  check({{GgmlType::kQ8_0, 37}}, 96, rng);
  check({{GgmlType::kQ4_0, 5}, {GgmlType::kQ8_0, 11}}, 64, rng);
  check({{GgmlType::kQ4_K, 40}, {GgmlType::kQ6_K, 9}}, 512, rng);
  check({{GgmlType::kQ2_K, 17}, {GgmlType::kQ3_K, 6}, {GgmlType::kQ5_K, 8}}, 256, rng);
}

// A token's output does not depend on the step it is in (decode-sized or prefill-sized)
// beyond float32 summation order: prefix-cache hits and batching change step sizes.
TEST(WeightMatrixGguf, DecodeAndPrefillStepsAgree) {
  std::mt19937 rng(9);
  for (GgmlType t : {GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    ModelWeights w;
    const int64_t in = 512, out = 96;
    w.quantized.emplace("w", random_weight(t, out, in, rng));
    WeightMatrix m(w, {"w"}, WeightFormat::kGguf);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(9 * in), y9(9 * out), y1(out);
    for (auto& v : x) v = normal(rng);
    for (int64_t r = 0; r < 9; ++r) x[r * in + 7 * r] = 300.0f;  // an outlier, as LLMs have
    m.apply(x.data(), in, 9, y9.data(), out);
    double worst = 0;
    for (int64_t r = 0; r < 9; ++r) {
      m.apply(&x[r * in], in, 1, y1.data(), out);
      double scale = 0;
      for (int64_t n = 0; n < out; ++n) scale = std::max(scale, std::fabs(double{y9[r * out + n]}));
      for (int64_t n = 0; n < out; ++n) {
        worst = std::max(worst, std::fabs(double{y1[n]} - y9[r * out + n]) / scale);
      }
    }
    std::printf("%s: decode vs prefill step, worst difference %.3g of the row's largest output\n",
                std::string(ggml_type_name(t)).c_str(), worst);
    // 32-blocks: decode's 22-bit activations vs float32 x; K types: the same int8 x both ways.
    EXPECT_LT(worst, 1e-5) << ggml_type_name(t);
  }
}

// kGguf keeps the precision of what it cannot compute on in place: a type without kernels
// (Q5_0) as f16, the file's F16 / BF16 / F32 tensors as they were, float32 where stacked parts
// differ (session 50: they became int8 kQ8 before, which moved greedy tokens of float files).
TEST(WeightMatrixGguf, FallsBackToTheFilesPrecision) {
  std::mt19937 rng(8);
  ModelWeights w;
  QuantizedWeight q = random_weight(GgmlType::kQ4_1, 8, 64, rng);
  const uint16_t d = float_to_f16(0.01f).bits;
  auto buf = std::make_shared<std::vector<uint8_t>>(8 * 2 * 22, uint8_t{0x5A});
  for (int b = 0; b < 16; ++b) std::memcpy(buf->data() + b * 22, &d, 2);
  w.quantized.emplace("a", QuantizedWeight{GgmlType::kQ5_0, {8, 64}, std::span<const uint8_t>(*buf), buf});
  w.tensors.emplace("b", Tensor::zeros({4, 64}, DType::kF32));
  {
    ModelWeights alone;
    alone.quantized.emplace("a", w.quantized.at("a"));
    WeightMatrix q5(alone, {"a"}, WeightFormat::kGguf);
    EXPECT_EQ(q5.format(), WeightFormat::kF16);
    std::vector<float> row(64), want(64);
    q5.row(5, row.data());
    dequantize_row(GgmlType::kQ5_0, buf->data() + 5 * 2 * 22, want.data(), 64);
    for (int i = 0; i < 64; ++i) EXPECT_NEAR(row[i], want[i], std::fabs(want[i]) * 1e-3) << i;
  }
  WeightMatrix m(w, {"a", "b"}, WeightFormat::kGguf);
  EXPECT_EQ(m.format(), WeightFormat::kF32);  // Q5_0 (f16) beside float32: float32
  EXPECT_EQ(m.out_features(), 12);
  EXPECT_TRUE(w.quantized.empty() && w.tensors.empty());
  for (const auto& [type, want] : {std::pair{GgmlType::kF16, WeightFormat::kF16},
                                   std::pair{GgmlType::kBF16, WeightFormat::kBF16},
                                   std::pair{GgmlType::kF32, WeightFormat::kF32}}) {
    ModelWeights fw;  // a float tensor as load_gguf_model gives it: float32, its type recorded
    fw.tensors.emplace("p", Tensor::zeros({4, 64}, DType::kF32));
    fw.tensors.emplace("r", Tensor::zeros({2, 64}, DType::kF32));
    fw.file_types = {{"p", type}, {"r", type}};
    EXPECT_EQ(WeightMatrix(fw, {"p", "r"}, WeightFormat::kGguf).format(), want);
  }
  // An explicit float format dequantizes quantized parts.
  ModelWeights w2;
  w2.quantized.emplace("c", q);
  WeightMatrix f(w2, {"c"}, WeightFormat::kF32);
  EXPECT_EQ(f.format(), WeightFormat::kF32);
  std::vector<float> row(64), want(64);
  f.row(3, row.data());
  dequantize_row(GgmlType::kQ4_1, q.bytes.data() + 3 * q.row_bytes(), want.data(), 64);
  EXPECT_EQ(row, want);
  ModelWeights w3;
  EXPECT_THROW(WeightMatrix(w3, {"missing"}, WeightFormat::kGguf), Error);
}

}  // namespace
}  // namespace kvattn::cpu_model
