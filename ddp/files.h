// defines: small POSIX file helpers (parent folder, base name, exists, is a folder, remove a tree).
// Not std::filesystem: the torch wheels export their own, older copy of parts of it
// (pytorch/pytorch#133437), and a call that binds to that copy crashes (remove_all did here).
#pragma once

#include <string>

namespace ddp {

std::string parent_dir(const std::string& path);  // "a/b/c.pt" -> "a/b"; "c.pt" -> "."
std::string base_name(const std::string& path);   // "a/b/c.pt" -> "c.pt"
bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
void remove_tree(const std::string& path);        // rm -rf, quietly

}  // namespace ddp
