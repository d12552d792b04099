// defines: checked files — a payload behind a small header (8 magic bytes, format version, size,
//          CRC-32), written atomically (temp file in the same folder, fsync, rename, fsync of the
//          folder: a crash at any moment leaves the old file or the new one, never a torn one) and
//          read back with the reason a file is unusable (truncated, foreign, corrupt), since
//          LibTorch's own loader would load flipped bytes silently. Plain C++.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ddp {

uint32_t crc32(std::string_view bytes);

// Replaces `path` atomically with `bytes` (mode 0600). Removes temp files that earlier writers
// killed mid-write left behind. Throws ddp::Error naming the file on failure.
void write_file_atomically(const std::string& path, const std::string& bytes);

// `magic` must be 8 characters; `version` is the caller's format version.
void write_checked_file(const std::string& path, std::string_view magic, uint32_t version, const std::string& payload);

// Why a checked file cannot be used, in words that follow its name ("is truncated (12 bytes)").
class CheckedFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CheckedPayload {
  std::string bytes;
  uint32_t crc = 0;  // the payload's CRC-32, as in the header
};

// nullopt when `path` does not exist; CheckedFileError when it is unreadable, truncated, padded,
// of another magic ("is not a ddp-workshop <kind>") or version, or its checksum does not match.
std::optional<CheckedPayload> read_checked_file(const std::string& path, std::string_view magic, uint32_t version,
                                                const std::string& kind);

}  // namespace ddp
