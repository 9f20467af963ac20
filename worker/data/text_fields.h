// Strict number parsing for the text formats: the whole token must be the
// number, with no spaces, no trailing characters, no overflow. Built on
// std::from_chars (locale-independent, no allocation).
#ifndef PS_WORKER_DATA_TEXT_FIELDS_H_
#define PS_WORKER_DATA_TEXT_FIELDS_H_

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <system_error>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ps::worker::data {

// A decimal integer with an optional sign ("+" or "-").
inline bool ParseInt64(absl::string_view s, int64_t* out) {
  if (!s.empty() && s[0] == '+') {
    s.remove_prefix(1);
    if (s.empty() || s[0] == '-') return false;
  }
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

// A decimal integer >= 0 (an optional "+").
inline bool ParseUint64(absl::string_view s, uint64_t* out) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (s.empty() || s[0] == '-') return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

// Each byte's value as a hex digit, 0xff where it is none.
inline constexpr std::array<uint8_t, 256> kHexDigitValue = [] {
  std::array<uint8_t, 256> table{};
  table.fill(0xff);
  for (int c = '0'; c <= '9'; ++c) table[c] = static_cast<uint8_t>(c - '0');
  for (int c = 'a'; c <= 'f'; ++c)
    table[c] = static_cast<uint8_t>(c - 'a' + 10);
  for (int c = 'A'; c <= 'F'; ++c)
    table[c] = static_cast<uint8_t>(c - 'A' + 10);
  return table;
}();

// 1 to 16 hex digits, either case, no "0x". Branch-free over the digits (the
// Criteo parser's hot loop: 26 ids per line).
inline bool ParseHex64(absl::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 16) return false;
  uint64_t v = 0;
  uint8_t invalid = 0;
  for (const char c : s) {
    const uint8_t d = kHexDigitValue[static_cast<unsigned char>(c)];
    invalid |= d;
    v = (v << 4) | (d & 0xf);
  }
  if ((invalid & 0x80) != 0) return false;
  *out = v;
  return true;
}

// A finite decimal or scientific number ("3", "-0.5", "+1e-3"); no "nan",
// "inf" or hex floats.
inline bool ParseFiniteDouble(absl::string_view s, double* out) {
  if (!s.empty() && s[0] == '+') {
    s.remove_prefix(1);
    if (s.empty() || s[0] == '-') return false;
  }
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out,
                                         std::chars_format::general);
  return ec == std::errc() && end == s.data() + s.size() && std::isfinite(*out);
}

// Splits `line` at every `sep` into at most `max_fields` views; returns the
// number of fields, or max_fields + 1 if there are more. A plain byte loop:
// fields are short (Criteo's are 0 to 8 bytes), where a memchr call per
// field costs more than it saves.
inline int SplitFields(absl::string_view line, char sep, absl::string_view* out,
                       int max_fields) {
  const char* p = line.data();
  const char* const end = p + line.size();
  const char* start = p;
  int n = 0;
  for (; p != end; ++p) {
    if (*p != sep) continue;
    if (n == max_fields) return max_fields + 1;
    out[n++] = absl::string_view(start, static_cast<size_t>(p - start));
    start = p + 1;
  }
  if (n == max_fields) return max_fields + 1;
  out[n++] = absl::string_view(start, static_cast<size_t>(end - start));
  return n;
}

// A token for an error message: quoted, escaped, and cut if long (it comes
// from a file that may hold anything).
inline std::string QuoteToken(absl::string_view token) {
  constexpr size_t kMax = 24;
  return absl::StrCat("'", absl::CHexEscape(token.substr(0, kMax)),
                      token.size() > kMax ? "'..." : "'");
}

}  // namespace ps::worker::data

#endif  // PS_WORKER_DATA_TEXT_FIELDS_H_
