// defines: checked files — a payload behind a small header (8 magic bytes, format version, size,
//          CRC-32), written atomically (files.h's write_file_atomically) and read back with the
//          reason a file is unusable (truncated, foreign, corrupt), since LibTorch's own loader
//          would load flipped bytes silently. The training snapshots and the shards of the sharded
//          snapshots are such files. Plain C++.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ddp {

uint32_t crc32(std::string_view bytes);  // CRC-32 as zlib's crc32 (the checksum the header carries)

// `magic` must be 8 characters; `version` is the caller's format version; `option` (e.g.
// setting_name(Setting::kSnapshotPath)) names the setting to change when the file cannot be written.
void write_checked_file(const std::string& path, std::string_view magic, uint32_t version, const std::string& payload,
                        const std::string& option);

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
