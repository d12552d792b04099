#include "ddp/checked_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include "ddp/error.h"
#include "ddp/files.h"

namespace ddp {
namespace {

constexpr size_t kHeaderSize = 8 + 4 + 8 + 4;  // magic, version, payload size, CRC-32

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}
template <typename T>
T take(const std::string& in, size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof value);
  return value;
}

void write_all(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error("cannot write '" + path + "': " + std::strerror(errno), "check free space and quota (df -h, quota)");
    done += static_cast<size_t>(n);
  }
}

// A write killed mid-way leaves <path>.tmp.<pid> behind: remove those whose writer is gone.
void remove_stale_temp_files(const std::string& path) {
  const std::string dir = parent_dir(path), prefix = base_name(path) + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) != 0) continue;
    const int pid = std::atoi(name.c_str() + prefix.size());
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) ::unlink((dir + "/" + name).c_str());
  }
  ::closedir(d);
}

}  // namespace

uint32_t crc32(std::string_view data) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char byte : data) c = table[(c ^ byte) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  // Temp file in the same folder, fsync, rename over the old one, fsync the folder: a crash at
  // any moment leaves either the old file or the new one, never a torn file.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw Error("cannot create '" + tmp + "': " + std::strerror(errno), "choose a writable --snapshot path");
  try {
    write_all(fd, bytes, tmp);
    if (::fsync(fd) != 0) throw Error("cannot flush '" + tmp + "': " + std::strerror(errno), "check the filesystem");
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error("cannot replace '" + path + "': " + why, "choose a writable --snapshot path");
  }
  const int dfd = ::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  remove_stale_temp_files(path);
}

void write_checked_file(const std::string& path, std::string_view magic, uint32_t version, const std::string& payload) {
  DDP_CHECK(magic.size() == 8, "a checked file's magic must be 8 bytes", "report this");
  std::string file(magic);
  put<uint32_t>(file, version);
  put<uint64_t>(file, payload.size());
  put<uint32_t>(file, crc32(payload));
  file += payload;
  write_file_atomically(path, file);
}

std::optional<CheckedPayload> read_checked_file(const std::string& path, std::string_view magic, uint32_t version,
                                                const std::string& kind) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!path_exists(path)) return std::nullopt;
    throw CheckedFileError("cannot be read (" + std::string(std::strerror(errno)) + ")");
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < kHeaderSize) throw CheckedFileError("is truncated (" + std::to_string(bytes.size()) + " bytes)");
  if (std::string_view(bytes.data(), 8) != magic)
    throw CheckedFileError("is not a ddp-workshop " + kind + " (wrong magic bytes)");
  if (take<uint32_t>(bytes, 8) != version)
    throw CheckedFileError("has format version " + std::to_string(take<uint32_t>(bytes, 8)) + ", expected " +
                           std::to_string(version));
  const auto size = take<uint64_t>(bytes, 12);
  CheckedPayload out;
  out.crc = take<uint32_t>(bytes, 20);
  if (bytes.size() - kHeaderSize != size)
    throw CheckedFileError("is truncated or padded: " + std::to_string(bytes.size() - kHeaderSize) +
                           " bytes of data, the header says " + std::to_string(size));
  out.bytes = bytes.substr(kHeaderSize);
  if (crc32(out.bytes) != out.crc) throw CheckedFileError("is corrupt (checksum mismatch)");
  return out;
}

}  // namespace ddp
