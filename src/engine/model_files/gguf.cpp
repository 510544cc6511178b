// GGUF parsing. Layout (little-endian):
//   "GGUF" u32 version u64 n_tensors u64 n_kv
//   n_kv x   { string key; u32 type; value }          string = u64 length + bytes
//   n_tensors x { string name; u32 n_dims; u64 ne[n_dims]; u32 ggml_type; u64 offset }
//   padding to general.alignment (default 32), then the data section.
// Counts are checked against the bytes left before anything is reserved, so a forged count can
// not trigger a huge allocation.
#include <algorithm>
#include <unordered_set>

#include "engine/model_files/mapped_file.h"
#include "kvattn/engine/gguf.h"

namespace kvattn {
namespace {

using VT = GgufValue::Type;

constexpr uint32_t kMaxGgufDims = 4;        // GGML_MAX_DIMS
constexpr uint64_t kMaxNameLen = 4096;  // tensor names (GGML itself allows 63)

// Smallest encoding of one value of the type: bounds how many elements a count can claim.
uint64_t min_value_bytes(VT t) {
  switch (t) {
    case VT::kU8: case VT::kI8: case VT::kBool: return 1;
    case VT::kU16: case VT::kI16: return 2;
    case VT::kU32: case VT::kI32: case VT::kF32: return 4;
    case VT::kU64: case VT::kI64: case VT::kF64: case VT::kString: return 8;
    case VT::kArray: return 12;
  }
  return 1;
}

bool known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(VT::kF64); }

class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, const std::string& file) : r_(bytes, file), file_(file) {}

  std::string read_string(const std::string& field) {
    const uint64_t len = r_.read<uint64_t>(field + " length");
    KVATTN_CHECK(len <= r_.remaining(), file_, ": ", field, " length ", len, " at offset ",
                 r_.pos() - 8, " exceeds the ", r_.remaining(),
                 " bytes left in the file (file truncated or corrupt)");
    return std::string(r_.read_bytes(len, field));
  }

  int64_t read_int(VT t, const std::string& field) {
    switch (t) {
      case VT::kU8: return r_.read<uint8_t>(field);
      case VT::kI8: return r_.read<int8_t>(field);
      case VT::kU16: return r_.read<uint16_t>(field);
      case VT::kI16: return r_.read<int16_t>(field);
      case VT::kU32: return r_.read<uint32_t>(field);
      case VT::kI32: return r_.read<int32_t>(field);
      case VT::kI64: return r_.read<int64_t>(field);
      case VT::kU64: {
        const uint64_t v = r_.read<uint64_t>(field);
        KVATTN_CHECK(v <= static_cast<uint64_t>(INT64_MAX), file_, ": ", field, " value ", v,
                     " is out of range");
        return static_cast<int64_t>(v);
      }
      default: break;
    }
    KVATTN_FAIL(file_, ": ", field, ": not an integer type");
  }

  double read_float(VT t, const std::string& field) {
    return t == VT::kF32 ? static_cast<double>(r_.read<float>(field)) : r_.read<double>(field);
  }

  bool read_bool(const std::string& field) {
    const uint8_t b = r_.read<uint8_t>(field);
    KVATTN_CHECK(b <= 1, file_, ": ", field, " bool has value ", int(b));
    return b != 0;
  }

  VT read_type(const std::string& field) {
    const uint32_t t = r_.read<uint32_t>(field);
    KVATTN_CHECK(known_value_type(t), file_, ": ", field, " has unknown value type ", t);
    return static_cast<VT>(t);
  }

  GgufValue read_value(VT type, const std::string& field) {
    switch (type) {
      case VT::kF32: case VT::kF64: return {type, type, read_float(type, field)};
      case VT::kBool: return {type, type, read_bool(field)};
      case VT::kString: return {type, type, read_string(field)};
      case VT::kArray: return read_array(field);
      default: return {type, type, read_int(type, field)};
    }
  }

  GgufValue read_array(const std::string& field) {
    const VT elem = read_type(field + " element type");
    KVATTN_CHECK(elem != VT::kArray, file_, ": ", field, " is a nested array (not supported)");
    const uint64_t n = r_.read<uint64_t>(field + " count");
    KVATTN_CHECK(n <= r_.remaining() / min_value_bytes(elem), file_, ": ", field, " count ", n,
                 " of ", gguf_type_name(elem), " exceeds the ", r_.remaining(),
                 " bytes left in the file");
    const std::string item = field + " item";
    if (elem == VT::kString) {
      std::vector<std::string> v;
      v.reserve(n);
      for (uint64_t i = 0; i < n; ++i) v.push_back(read_string(item));
      return {VT::kArray, elem, std::move(v)};
    }
    if (elem == VT::kF32 || elem == VT::kF64) {
      std::vector<double> v;
      v.reserve(n);
      for (uint64_t i = 0; i < n; ++i) v.push_back(read_float(elem, item));
      return {VT::kArray, elem, std::move(v)};
    }
    std::vector<int64_t> v;
    v.reserve(n);
    for (uint64_t i = 0; i < n; ++i) {
      v.push_back(elem == VT::kBool ? int64_t{read_bool(item)} : read_int(elem, item));
    }
    return {VT::kArray, elem, std::move(v)};
  }

  ByteReader r_;
  const std::string& file_;
};

}  // namespace

GgufFile GgufFile::open(const std::string& path) {
  GgufFile f;
  f.path_ = path;
  f.file_ = MappedFile::open(path);
  f.parse();
  return f;
}

GgufFile GgufFile::from_bytes(std::span<const uint8_t> bytes, const std::string& name) {
  GgufFile f;
  f.path_ = name;
  f.file_ = MappedFile::copy_of(bytes);
  f.parse();
  return f;
}

uint64_t GgufFile::file_size() const { return file_->size(); }

void GgufFile::parse() {
  const std::string& file = path_;
  Parser p(file_->bytes(), file);
  ByteReader& r = p.r_;

  const std::string_view magic = r.read_bytes(4, "magic");
  KVATTN_CHECK(magic == "GGUF", file, ": not a GGUF file (magic is not 'GGUF')");
  version_ = r.read<uint32_t>("version");
  KVATTN_CHECK(version_ != 1, file, ": GGUF version 1 is not supported (versions 2 and 3 are)");
  KVATTN_CHECK(!(version_ > 0xFFFF && (version_ & 0xFFFF) == 0), file,
               ": looks like a big-endian GGUF (version field ", version_,
               "); only little-endian files are supported");
  KVATTN_CHECK(version_ == 2 || version_ == 3, file, ": GGUF version ", version_,
               " is not supported (versions 2 and 3 are)");
  const uint64_t n_tensors = r.read<uint64_t>("tensor count");
  const uint64_t n_kv = r.read<uint64_t>("metadata count");
  KVATTN_CHECK(n_kv <= r.remaining() / 12, file, ": metadata count ", n_kv,
               " is larger than the file could hold");
  KVATTN_CHECK(n_tensors <= r.remaining() / 24, file, ": tensor count ", n_tensors,
               " is larger than the file could hold");

  std::unordered_set<std::string> keys;
  metadata_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = p.read_string("metadata key #" + std::to_string(i));
    KVATTN_CHECK(keys.insert(key).second, file, ": metadata key '", key, "' appears twice");
    const std::string field = "metadata '" + key + "'";
    const VT type = p.read_type(field + " type");
    GgufValue value = p.read_value(type, field);
    metadata_.emplace_back(std::move(key), std::move(value));
  }

  if (const GgufValue* a = find("general.alignment")) {
    KVATTN_CHECK(!a->is_array() && a->type() != VT::kString && a->type() != VT::kF32 &&
                     a->type() != VT::kF64, file, ": metadata 'general.alignment' must be an "
                     "integer");
    const int64_t al = a->as_int();
    KVATTN_CHECK(al > 0 && al <= (1 << 30) && (al & (al - 1)) == 0, file,
                 ": metadata 'general.alignment' is ", al, " but must be a power of two");
    alignment_ = static_cast<uint64_t>(al);
  }

  std::unordered_set<std::string> names;
  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = p.read_string("tensor #" + std::to_string(i) + " name");
    KVATTN_CHECK(t.name.size() <= kMaxNameLen, file, ": tensor #", i, " name is ",
                 t.name.size(), " bytes long");
    KVATTN_CHECK(names.insert(t.name).second, file, ": tensor '", t.name, "' appears twice");
    const std::string field = "tensor '" + t.name + "'";
    const uint32_t n_dims = r.read<uint32_t>(field + " n_dims");
    KVATTN_CHECK(n_dims <= kMaxGgufDims, file, ": ", field, " has ", n_dims,
                 " dimensions (at most ", kMaxGgufDims, ")");
    // The product of the nonzero dims is bounded too: with a zero dim (numel 0) the others
    // still size shapes and row strides, which must not overflow in any order.
    int64_t numel = 1, nonzero = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = r.read<uint64_t>(field + " ne[" + std::to_string(d) + "]");
      KVATTN_CHECK(ne <= static_cast<uint64_t>(INT64_MAX), file, ": ", field, " ne[", d,
                   "] = ", ne, " is out of range");
      t.ne.push_back(static_cast<int64_t>(ne));
      KVATTN_CHECK(checked_mul(numel, t.ne.back(), &numel) &&
                       checked_mul(nonzero, std::max<int64_t>(t.ne.back(), 1), &nonzero),
                   file, ": ", field, " element count overflows (dims ", ne, "...)");
    }
    t.numel = numel;
    const uint32_t type_id = r.read<uint32_t>(field + " type");
    const auto traits = ggml_type_traits(type_id);
    KVATTN_CHECK(traits.has_value(), file, ": ", field, " has unknown GGML type id ", type_id);
    t.type = static_cast<GgmlType>(type_id);
    const int64_t ne0 = t.ne.empty() ? 1 : t.ne[0];
    KVATTN_CHECK(ne0 % traits->block_elems == 0, file, ": ", field, " ne[0] = ", ne0,
                 " is not a multiple of the ", traits->name, " block size ",
                 traits->block_elems);
    uint64_t nbytes = 0;
    KVATTN_CHECK(checked_mul(static_cast<uint64_t>(numel / traits->block_elems),
                             static_cast<uint64_t>(traits->block_bytes), &nbytes),
                 file, ": ", field, " byte size overflows");
    t.nbytes = nbytes;
    t.offset = r.read<uint64_t>(field + " offset");
    KVATTN_CHECK(t.offset % alignment_ == 0, file, ": ", field, " offset ", t.offset,
                 " is not a multiple of the alignment ", alignment_);
    tensors_.push_back(std::move(t));
  }

  uint64_t data = 0;
  KVATTN_CHECK(checked_add(r.pos(), alignment_ - 1, &data), file, ": data offset overflows");
  data_offset_ = data / alignment_ * alignment_;
  const uint64_t size = file_->size();
  for (const GgufTensorInfo& t : tensors_) {
    uint64_t begin = 0, end = 0;
    const bool ok = checked_add(data_offset_, t.offset, &begin) &&
                    checked_add(begin, t.nbytes, &end);
    KVATTN_CHECK(ok && end <= size, file, ": tensor '", t.name, "' data [offset ", t.offset,
                 ", ", t.nbytes, " bytes) lies past the end of the file (data section starts at ",
                 data_offset_, ", file is ", size, " bytes)");
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& [k, v] : metadata_) {
    if (k == key) return &v;
  }
  return nullptr;
}

const GgufValue& GgufFile::get(std::string_view key) const {
  const GgufValue* v = find(key);
  KVATTN_CHECK(v != nullptr, path_, ": metadata key '", key, "' is missing");
  return *v;
}

namespace {
template <typename Fn>
auto typed(const std::string& file, std::string_view key, Fn&& fn) {
  try {
    return fn();
  } catch (const Error& e) {
    KVATTN_FAIL(file, ": metadata '", key, "': ", e.what());
  }
}
}  // namespace

std::string GgufFile::get_string(std::string_view key, const std::string& fallback) const {
  const GgufValue* v = find(key);
  return v ? typed(path_, key, [&] { return v->as_string(); }) : fallback;
}

int64_t GgufFile::get_int(std::string_view key, int64_t fallback) const {
  const GgufValue* v = find(key);
  return v ? typed(path_, key, [&] { return v->as_int(); }) : fallback;
}

double GgufFile::get_float(std::string_view key, double fallback) const {
  const GgufValue* v = find(key);
  return v ? typed(path_, key, [&] { return v->as_float(); }) : fallback;
}

bool GgufFile::get_bool(std::string_view key, bool fallback) const {
  const GgufValue* v = find(key);
  return v ? typed(path_, key, [&] { return v->as_bool(); }) : fallback;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const GgufTensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::span<const uint8_t> GgufFile::tensor_data(const GgufTensorInfo& info) const {
  return file_->bytes().subspan(data_offset_ + info.offset, info.nbytes);
}

Tensor GgufFile::dequantize(const GgufTensorInfo& info) const {
  const auto traits = ggml_type_traits(static_cast<uint32_t>(info.type));
  KVATTN_CHECK(traits && traits->dequantizable, path_, ": tensor '", info.name, "' has type ",
               ggml_type_name(info.type), ", which cannot be dequantized (supported: F32, F16, "
               "BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)");
  Tensor out = Tensor::empty(info.shape(), DType::kF32);
  const std::span<const uint8_t> src = tensor_data(info);
  const int64_t row = info.ne.empty() ? 1 : info.ne[0];
  const int64_t rows = row == 0 ? 0 : info.numel / row;
  const int64_t row_bytes = rows == 0 ? 0 : row / traits->block_elems * traits->block_bytes;
  float* dst = out.ptr<float>();
#pragma omp parallel for schedule(static) if (info.numel > (1 << 16))
  for (int64_t i = 0; i < rows; ++i) {
    dequantize_row(info.type, src.data() + i * row_bytes, dst + i * row, row);
  }
  return out;
}

}  // namespace kvattn

