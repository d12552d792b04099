// defines: small POSIX file helpers (parent folder, base name, exists, is a folder, remove a tree) and
//          write_file_atomically (temp file, fsync, rename: what snapshots and exported weights use).
// Not std::filesystem: the torch wheels export their own, older copy of parts of it
// (pytorch/pytorch#133437), and a call that binds to that copy crashes (remove_all did here).
#pragma once

#include <string>

namespace ddp {

std::string parent_dir(const std::string& path);  // "a/b/c.pt" -> "a/b"; "c.pt" -> "."
std::string base_name(const std::string& path);   // "a/b/c.pt" -> "c.pt"
bool path_exists(const std::string& path);        // a file, folder or anything else
bool is_directory(const std::string& path);       // a folder (following links)
void remove_tree(const std::string& path);        // rm -rf, quietly

// Writes `bytes` to `path` (readable by the user only) through <path>.tmp.<pid> in the same folder:
// write, fsync, rename over `path`, fsync the folder. A crash at any moment leaves the old file or
// the new one, never a torn one; temp files left by writers that died are removed. Throws
// ddp::Error; `option` (e.g. setting_name(Setting::kSnapshotPath)) names the setting to change in the hint.
void write_file_atomically(const std::string& path, const std::string& bytes, const std::string& option);

}  // namespace ddp
