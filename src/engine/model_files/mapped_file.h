// Read-only bytes of a model file (memory-mapped, or a private copy for in-memory parsing) and a
// bounds-checked little-endian reader over them. Every read names the field it is reading so a
// truncated file reports which field ran past the end.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvattn/core/error.h"

namespace kvattn {

class MappedFile {
 public:
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  static std::shared_ptr<const MappedFile> copy_of(std::span<const uint8_t> bytes);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, static_cast<size_t>(size_)}; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  void* map_ = nullptr;  // munmap target when mapped
  std::vector<uint8_t> copy_;
};

// Overflow-checked arithmetic on untrusted sizes; false on overflow.
inline bool checked_add(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
inline bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
inline bool checked_mul(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> bytes, const std::string& file) : bytes_(bytes), file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  T read(std::string_view field) {
    require(sizeof(T), field);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string_view read_bytes(uint64_t n, std::string_view field) {
    require(n, field);
    std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }

  void require(uint64_t n, std::string_view field) const {
    KVATTN_CHECK(n <= remaining(), file_, ": ", field, " at offset ", pos_, " needs ", n,
                 " bytes but only ", remaining(), " remain (file truncated or corrupt)");
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& file_;
  uint64_t pos_ = 0;
};

}  // namespace kvattn
