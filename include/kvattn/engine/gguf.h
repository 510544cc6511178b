// GGUF (versions 2 and 3) reader: metadata key/values, tensor infos, and dequantization of tensor
// data to float32. The file is memory-mapped once; tensor bytes are read in place.
//
// Every count, length, offset and dimension in the file is untrusted: a malformed file throws
// kvattn::Error naming the file and the field ("model.gguf: tensor 'blk.0.attn_q.weight' data
// [offset 96, 4096 bytes) lies past the end of the file (2048 bytes)").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "kvattn/core/tensor.h"

namespace kvattn {

class MappedFile;

// GGML tensor element types, by their on-disk ids.
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15,
  kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28, kBF16 = 30,
};

struct GgmlTypeTraits {
  std::string_view name;  // "Q4_1"
  int64_t block_elems;    // elements per block (1 for plain types)
  int64_t block_bytes;    // bytes per block
  bool dequantizable;     // dequantize_row() supports it
};

// Traits of a known type id; nullopt for ids this reader does not know.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id);
std::string ggml_type_name(GgmlType type);

// Dequantizes `n` elements (a multiple of the type's block size) from `src` into `dst`.
// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
// Throws for others.
void dequantize_row(GgmlType type, const uint8_t* src, float* dst, int64_t n);

// One metadata value. Integers of any width are kept as int64 (uint64 beyond INT64_MAX is
// rejected at parse time); arrays hold elements of one scalar type (nested arrays are rejected).
class GgufValue {
 public:
  enum class Type : uint32_t {
    kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
    kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
  };
  using Storage = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>,
                               std::vector<double>, std::vector<std::string>>;

  GgufValue(Type type, Type elem_type, Storage value)
      : type_(type), elem_type_(elem_type), value_(std::move(value)) {}

  Type type() const { return type_; }
  Type elem_type() const { return elem_type_; }  // arrays only
  bool is_array() const { return type_ == Type::kArray; }
  size_t array_size() const;

  // Typed access; each throws kvattn::Error when the value has another type.
  int64_t as_int() const;    // any integer type or bool
  double as_float() const;   // any float or integer type
  bool as_bool() const;
  const std::string& as_string() const;
  const std::vector<int64_t>& as_ints() const;      // array of integers or bools
  const std::vector<double>& as_floats() const;     // array of floats
  const std::vector<std::string>& as_strings() const;

  // Short human-readable form; long arrays and strings are elided after `max_items`.
  std::string to_string(size_t max_items = 8) const;

 private:
  Type type_;
  Type elem_type_;
  Storage value_;
};

std::string_view gguf_type_name(GgufValue::Type type);

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // GGUF order: ne[0] is the contiguous (innermost) dimension
  GgmlType type;
  uint64_t offset;  // relative to the data section, a multiple of the alignment
  uint64_t nbytes;
  int64_t numel;

  // Row-major shape (ne reversed), e.g. [vocab, hidden] for token_embd.weight.
  std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
};

class GgufFile {
 public:
  // Memory-maps and parses `path`; the mapping lives as long as any copy of the GgufFile.
  static GgufFile open(const std::string& path);
  // Parses bytes already in memory (copied), reported as `name` in errors. Used by fuzzers.
  static GgufFile from_bytes(std::span<const uint8_t> bytes, const std::string& name = "<memory>");

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute file offset of tensor data
  uint64_t file_size() const;

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  // Throws "<file>: metadata key '<key>' is missing" when absent.
  const GgufValue& get(std::string_view key) const;
  std::string get_string(std::string_view key, const std::string& fallback) const;
  int64_t get_int(std::string_view key, int64_t fallback) const;
  double get_float(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key, bool fallback) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // The tensor's raw bytes (bounds were checked at parse time).
  std::span<const uint8_t> tensor_data(const GgufTensorInfo& info) const;
  // A float32 host tensor with the row-major shape, dequantized from any supported type.
  Tensor dequantize(const GgufTensorInfo& info) const;
  // The mapping itself (tensor_data() spans stay valid while a copy of it lives).
  std::shared_ptr<const void> mapping() const { return file_; }

 private:
  void parse();

  std::shared_ptr<const MappedFile> file_;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
};

}  // namespace kvattn
