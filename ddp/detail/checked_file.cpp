#include "ddp/detail/checked_file.h"

#include <array>
#include <cerrno>
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

void write_checked_file(const std::string& path, std::string_view magic, uint32_t version, const std::string& payload,
                        const std::string& option) {
  DDP_INTERNAL_ASSERT(magic.size() == 8, "a checked file's magic must be 8 bytes");
  std::string file(magic);
  put<uint32_t>(file, version);
  put<uint64_t>(file, payload.size());
  put<uint32_t>(file, crc32(payload));
  file += payload;
  write_file_atomically(path, file, option);
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
