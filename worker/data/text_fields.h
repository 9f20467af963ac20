// Strict number parsing for the text formats: the whole token must be the
// number, with no spaces, no trailing characters, no overflow. Built on
// std::from_chars (locale-independent, no allocation).
#ifndef PS_WORKER_DATA_TEXT_FIELDS_H_
#define PS_WORKER_DATA_TEXT_FIELDS_H_

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

// 1 to 16 hex digits, either case, no "0x".
inline bool ParseHex64(absl::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 16) return false;
  uint64_t v = 0;
  for (const char c : s) {
    unsigned d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return false;
    }
    v = (v << 4) | d;
  }
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
// number of fields, or max_fields + 1 if there are more.
inline int SplitFields(absl::string_view line, char sep, absl::string_view* out,
                       int max_fields) {
  int n = 0;
  size_t start = 0;
  for (;;) {
    const size_t next = line.find(sep, start);
    if (n == max_fields) return max_fields + 1;
    if (next == absl::string_view::npos) {
      out[n++] = line.substr(start);
      return n;
    }
    out[n++] = line.substr(start, next - start);
    start = next + 1;
  }
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
