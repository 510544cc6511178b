#include "engine/model_files/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace kvattn {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  KVATTN_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    KVATTN_FAIL(path, ": not a regular file");
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    KVATTN_CHECK(p != MAP_FAILED, path, ": mmap of ", f->size_, " bytes failed: ",
                 std::strerror(err));
    f->map_ = p;
    f->data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
  return f;
}

std::shared_ptr<const MappedFile> MappedFile::copy_of(std::span<const uint8_t> bytes) {
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->copy_.assign(bytes.begin(), bytes.end());
  f->data_ = f->copy_.data();
  f->size_ = f->copy_.size();
  return f;
}

MappedFile::~MappedFile() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

}  // namespace kvattn
