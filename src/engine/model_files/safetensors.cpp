#include "kvattn/engine/safetensors.h"

#include <algorithm>
#include <cstring>

#include "engine/model_files/json_util.h"
#include "engine/model_files/mapped_file.h"
#include "kvattn/engine/gguf.h"

namespace kvattn {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit

int64_t safetensors_elem_size(const std::string& dtype) {
  static const std::pair<const char*, int64_t> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
      {"I8", 1},  {"U64", 8}, {"U32", 4}, {"U16", 2},  {"U8", 1},   {"BOOL", 1},
      {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [name, size] : kSizes) {
    if (dtype == name) return size;
  }
  return 0;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.file_ = MappedFile::open(path);
  f.parse();
  return f;
}

SafetensorsFile SafetensorsFile::from_bytes(std::span<const uint8_t> bytes,
                                            const std::string& name) {
  SafetensorsFile f;
  f.path_ = name;
  f.file_ = MappedFile::copy_of(bytes);
  f.parse();
  return f;
}

void SafetensorsFile::parse() {
  const std::string& file = path_;
  ByteReader r(file_->bytes(), file);
  const uint64_t header_len = r.read<uint64_t>("header length");
  KVATTN_CHECK(header_len <= r.remaining() && header_len <= kMaxHeaderBytes, file,
               ": header length ", header_len, " exceeds the ", r.remaining(),
               " bytes after it (or the 100 MB limit)");
  const std::string_view header = r.read_bytes(header_len, "header");
  data_offset_ = r.pos();
  const uint64_t data_size = r.remaining();

  const nlohmann::json j = parse_json(header, file + " (header)");
  KVATTN_CHECK(j.is_object(), file, ": header must be a JSON object but is ", j.type_name());
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      KVATTN_CHECK(entry.is_object(), file, ": __metadata__ must be an object");
      for (const auto& [k, v] : entry.items()) {
        metadata_[k] = json_string(v, "__metadata__." + k, file);
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    KVATTN_CHECK(entry.is_object(), file, ": ", where, " entry must be an object");
    SafetensorsTensorInfo t;
    t.name = name;
    t.dtype = json_string(json_field(entry, "dtype", file), where + " dtype", file);
    t.elem_size = safetensors_elem_size(t.dtype);
    KVATTN_CHECK(t.elem_size > 0, file, ": ", where, " has unknown dtype '", t.dtype, "'");
    const nlohmann::json& shape = json_field(entry, "shape", file);
    KVATTN_CHECK(shape.is_array() && shape.size() <= static_cast<size_t>(kMaxDims), file, ": ", where,
                 " shape must be an array of at most ", kMaxDims, " dims");
    t.numel = 1;
    for (const auto& d : shape) {
      const int64_t dim = json_int(d, where + " shape", file);
      KVATTN_CHECK(dim >= 0, file, ": ", where, " has negative dim ", dim);
      t.shape.push_back(dim);
      KVATTN_CHECK(checked_mul(t.numel, dim, &t.numel), file, ": ", where,
                   " element count overflows");
    }
    const nlohmann::json& offs = json_field(entry, "data_offsets", file);
    KVATTN_CHECK(offs.is_array() && offs.size() == 2, file, ": ", where,
                 " data_offsets must be [begin, end]");
    const int64_t begin = json_int(offs[0], where + " data_offsets[0]", file);
    const int64_t end = json_int(offs[1], where + " data_offsets[1]", file);
    KVATTN_CHECK(0 <= begin && begin <= end && static_cast<uint64_t>(end) <= data_size, file,
                 ": ", where, " data_offsets [", begin, ", ", end,
                 "] do not lie inside the data section of ", data_size, " bytes");
    t.begin = static_cast<uint64_t>(begin);
    t.end = static_cast<uint64_t>(end);
    int64_t nbytes = 0;
    KVATTN_CHECK(checked_mul(t.numel, t.elem_size, &nbytes) && nbytes == end - begin, file,
                 ": ", where, " holds ", end - begin, " bytes but its shape and dtype ",
                 t.dtype, " need ", t.numel, " x ", t.elem_size);
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const auto& a, const auto& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < tensors_.size(); ++i) {
    KVATTN_CHECK(tensors_[i].begin >= tensors_[i - 1].end, file, ": tensors '",
                 tensors_[i - 1].name, "' and '", tensors_[i].name, "' overlap");
  }
}

const SafetensorsTensorInfo* SafetensorsFile::find(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::span<const uint8_t> SafetensorsFile::tensor_data(const SafetensorsTensorInfo& info) const {
  return file_->bytes().subspan(data_offset_ + info.begin, info.end - info.begin);
}

Tensor SafetensorsFile::to_f32(const SafetensorsTensorInfo& info) const {
  GgmlType type;
  if (info.dtype == "F32") type = GgmlType::kF32;
  else if (info.dtype == "F16") type = GgmlType::kF16;
  else if (info.dtype == "BF16") type = GgmlType::kBF16;
  else KVATTN_FAIL(path_, ": tensor '", info.name, "' has dtype ", info.dtype,
                   " (only F32, F16 and BF16 convert to float32)");
  Tensor out = Tensor::empty(info.shape, DType::kF32);
  dequantize_row(type, tensor_data(info).data(), out.ptr<float>(), info.numel);
  return out;
}

Tensor SafetensorsFile::tensor_in_place(const SafetensorsTensorInfo& info) const {
  DType dtype;
  if (info.dtype == "F32") dtype = DType::kF32;
  else if (info.dtype == "F16") dtype = DType::kF16;
  else if (info.dtype == "BF16") dtype = DType::kBF16;
  else KVATTN_FAIL(path_, ": tensor '", info.name, "' has dtype ", info.dtype,
                   " (only F32, F16 and BF16 tensors are read in place)");
  const std::span<const uint8_t> bytes = tensor_data(info);
  if (reinterpret_cast<uintptr_t>(bytes.data()) % static_cast<uintptr_t>(info.elem_size) != 0) {
    Tensor out = Tensor::empty(info.shape, dtype);
    if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
  void* data = const_cast<uint8_t*>(bytes.data());
  return Tensor::wrap(TensorView(data, dtype, Device::cpu(), info.shape),
                      std::const_pointer_cast<MappedFile>(file_));
}

}  // namespace kvattn
