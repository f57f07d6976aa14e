// Python str semantics over UTF-8 std::string: code-point length, indexing,
// whitespace, case mapping (ASCII, Latin-1, Greek and Cyrillic only), strip,
// split, title. Invalid UTF-8 bytes count as one code point each.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom::jinja {

std::vector<uint32_t> decode_utf8(const std::string& s);
void append_utf8(std::string& out, uint32_t cp);
std::string encode_utf8(const std::vector<uint32_t>& cps);
size_t utf8_length(const std::string& s);

bool py_isspace(uint32_t cp);
uint32_t py_toupper(uint32_t cp);
uint32_t py_tolower(uint32_t cp);
bool py_iscased(uint32_t cp);

std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_title(const std::string& s);    // str.title()
std::string jinja_title(const std::string& s);  // the |title filter

enum class StripSide { kLeft, kRight, kBoth };
// chars: the set to strip; nullopt strips whitespace.
std::string py_strip(const std::string& s, const std::optional<std::string>& chars, StripSide side);

// str.split(sep, maxsplit); nullopt sep splits on whitespace runs.
std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
std::vector<std::string> py_rsplit(const std::string& s, const std::optional<std::string>& sep,
                                   int64_t maxsplit);
std::vector<std::string> py_splitlines(const std::string& s, bool keepends);

// str.replace(old, new, count); count < 0 replaces all. max_bytes bounds the result.
std::string py_replace(const std::string& s, const std::string& from, const std::string& to,
                       int64_t count, size_t max_bytes);
// Occurrences of `sub` (non-overlapping), as str.count.
int64_t py_count(const std::string& s, const std::string& sub);
// str.find as a code-point index, -1 when absent.
int64_t py_find(const std::string& s, const std::string& sub, bool reverse);

}  // namespace loom::jinja
