// defines: the library's small text helpers, each in one place: fnv1a (a hash that is the same on
//          every rank, whatever its standard library), shortened_list ("a, b, c and 4 more"),
//          dtype_name (Python's names: "float32", "bfloat16").
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::detail {

inline constexpr uint64_t kFnv1aBasis = 1469598103934665603ULL;

// FNV-1a (64 bits) of `text`, continuing from `h` (kFnv1aBasis: a fresh hash).
inline uint64_t fnv1a(std::string_view text, uint64_t h = kFnv1aBasis) {
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// The first `shown` items joined by `separator`, then "<separator>and N more<noun>" for the rest
// (separator ", " gives "a, b and 4 more": the comma is dropped before "and").
inline std::string shortened_list(const std::vector<std::string>& items, size_t shown,
                                  std::string_view separator = ", ", std::string_view noun = "") {
  std::string out;
  for (size_t i = 0; i < items.size() && i < shown; ++i) out += (i ? std::string(separator) : "") + items[i];
  if (items.size() > shown) {
    out += separator == ", " ? std::string(" ") : std::string(separator);
    out += "and " + std::to_string(items.size() - shown) + " more" + std::string(noun);
  }
  return out;
}

// Python's name of a dtype ("float32", "int64", "bool"); c10's for the rest.
inline std::string dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::Double: return "float64";
    case c10::ScalarType::Half: return "float16";
    case c10::ScalarType::BFloat16: return "bfloat16";
    case c10::ScalarType::Long: return "int64";
    case c10::ScalarType::Int: return "int32";
    case c10::ScalarType::Short: return "int16";
    case c10::ScalarType::Char: return "int8";
    case c10::ScalarType::Byte: return "uint8";
    case c10::ScalarType::Bool: return "bool";
    default: return c10::toString(t);
  }
}

}  // namespace ddp::detail
