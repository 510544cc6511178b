// safetensors reader: an 8-byte little-endian header length, a JSON header mapping tensor names
// to {dtype, shape, data_offsets}, then the tensor bytes. The file is memory-mapped.
//
// The header is untrusted: its length, every dtype, shape and offset pair is checked (offsets
// inside the data section, end - begin == numel * element size, no overflow in the product of
// dims). A malformed file throws kvattn::Error naming the file and the tensor/field.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvattn/core/tensor.h"

namespace kvattn {

class MappedFile;

struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype;  // as in the file: "F32", "F16", "BF16", "I64", ...
  int64_t elem_size;  // bytes per element
  std::vector<int64_t> shape;
  int64_t numel;
  uint64_t begin, end;  // byte range relative to the start of the data section
};

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);
  // Parses bytes already in memory (copied), reported as `name` in errors. Used by fuzzers.
  static SafetensorsFile from_bytes(std::span<const uint8_t> bytes,
                                    const std::string& name = "<memory>");

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const SafetensorsTensorInfo* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  // __metadata__
  std::span<const uint8_t> tensor_data(const SafetensorsTensorInfo& info) const;
  // A float32 host tensor converted from F32, F16 or BF16; throws for other dtypes.
  Tensor to_f32(const SafetensorsTensorInfo& info) const;
  // The tensor in its file dtype (F32, F16 or BF16 as kF32, kF16, kBF16), read in place from
  // the mapping, which the tensor keeps alive (it outlives this SafetensorsFile); copied only
  // when the bytes are not aligned to the element size. Read-only: never write through it.
  // Throws for other dtypes.
  Tensor tensor_in_place(const SafetensorsTensorInfo& info) const;

 private:
  void parse();

  std::shared_ptr<const MappedFile> file_;
  std::string path_;
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace kvattn
