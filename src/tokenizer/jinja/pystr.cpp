// Python str semantics over UTF-8 (see pystr.h).
#include "tokenizer/jinja/pystr.h"

#include "core/error.h"

namespace loom::jinja {

std::vector<uint32_t> decode_utf8(const std::string& s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n <= 0 || i + static_cast<size_t>(n) >= s.size()) {
      out.push_back(c);
      ++i;
      continue;
    }
    uint32_t cp = c & (0x3f >> n);
    bool ok = true;
    for (int k = 1; k <= n; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (!ok) {
      out.push_back(c);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += n + 1;
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::string encode_utf8(const std::vector<uint32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (uint32_t cp : cps) append_utf8(out, cp);
  return out;
}

size_t utf8_length(const std::string& s) {
  size_t ascii = 0;
  for (char c : s) ascii += static_cast<unsigned char>(c) < 0x80;
  if (ascii == s.size()) return s.size();
  return decode_utf8(s).size();
}

bool py_isspace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f);
  return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

uint32_t py_toupper(uint32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 32;
  if (cp < 0x80) return cp;
  if (cp >= 0xe0 && cp <= 0xfe && cp != 0xf7) return cp - 32;
  if (cp == 0xff) return 0x178;
  if (cp >= 0x100 && cp <= 0x17f && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 &&
      cp != 0x17f) {
    bool odd_lower = (cp >= 0x100 && cp <= 0x137) || (cp >= 0x14a && cp <= 0x177);
    if (odd_lower) return (cp & 1) ? cp - 1 : cp;
    return (cp & 1) ? cp : (cp == 0x178 ? cp : cp - 1);
  }
  if (cp >= 0x3b1 && cp <= 0x3c9 && cp != 0x3c2) return cp - 32;
  if (cp == 0x3c2) return 0x3a3;
  if (cp >= 0x430 && cp <= 0x44f) return cp - 32;
  if (cp >= 0x450 && cp <= 0x45f) return cp - 80;
  return cp;
}

uint32_t py_tolower(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp < 0x80) return cp;
  if (cp >= 0xc0 && cp <= 0xde && cp != 0xd7) return cp + 32;
  if (cp == 0x178) return 0xff;
  if (cp >= 0x100 && cp <= 0x17f && cp != 0x130 && cp != 0x131 && cp != 0x138 && cp != 0x149 &&
      cp != 0x17f) {
    bool even_upper = (cp >= 0x100 && cp <= 0x137) || (cp >= 0x14a && cp <= 0x177);
    if (even_upper) return (cp & 1) ? cp : cp + 1;
    return (cp & 1) ? cp + 1 : cp;
  }
  if (cp >= 0x391 && cp <= 0x3a9 && cp != 0x3a2) return cp + 32;
  if (cp >= 0x410 && cp <= 0x42f) return cp + 32;
  if (cp >= 0x400 && cp <= 0x40f) return cp + 80;
  return cp;
}

bool py_iscased(uint32_t cp) { return py_toupper(cp) != cp || py_tolower(cp) != cp; }

namespace {

template <typename F>
std::string map_cps(const std::string& s, F f) {
  std::string out;
  out.reserve(s.size());
  bool ascii = true;
  for (char c : s) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) {
    for (char c : s) out += static_cast<char>(f(static_cast<uint32_t>(c)));
    return out;
  }
  for (uint32_t cp : decode_utf8(s)) append_utf8(out, f(cp));
  return out;
}

bool in_set(uint32_t cp, const std::vector<uint32_t>& set) {
  for (uint32_t c : set)
    if (c == cp) return true;
  return false;
}

}  // namespace

std::string py_upper(const std::string& s) {
  if (s.find("\xc3\x9f") == std::string::npos) return map_cps(s, py_toupper);
  std::string out;  // U+00DF (sharp s) upper-cases to "SS"
  for (uint32_t cp : decode_utf8(s)) {
    if (cp == 0xdf) out += "SS";
    else append_utf8(out, py_toupper(cp));
  }
  return out;
}
std::string py_lower(const std::string& s) { return map_cps(s, py_tolower); }

std::string py_capitalize(const std::string& s) {
  std::vector<uint32_t> cps = decode_utf8(s);
  for (size_t i = 0; i < cps.size(); ++i) cps[i] = i == 0 ? py_toupper(cps[i]) : py_tolower(cps[i]);
  return encode_utf8(cps);
}

std::string py_title(const std::string& s) {
  std::vector<uint32_t> cps = decode_utf8(s);
  bool prev_cased = false;
  for (uint32_t& cp : cps) {
    bool cased = py_iscased(cp);
    cp = prev_cased ? py_tolower(cp) : py_toupper(cp);
    prev_cased = cased;
  }
  return encode_utf8(cps);
}

std::string jinja_title(const std::string& s) {
  // Words begin after runs of [-\s({\[<]; each word gets its first code
  // point upper-cased and the rest lower-cased.
  std::vector<uint32_t> cps = decode_utf8(s);
  bool word_start = true;
  for (uint32_t& cp : cps) {
    bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || py_isspace(cp);
    if (sep) {
      word_start = true;
      continue;
    }
    cp = word_start ? py_toupper(cp) : py_tolower(cp);
    word_start = false;
  }
  return encode_utf8(cps);
}

std::string py_strip(const std::string& s, const std::optional<std::string>& chars,
                     StripSide side) {
  std::vector<uint32_t> cps = decode_utf8(s);
  std::vector<uint32_t> set;
  if (chars) set = decode_utf8(*chars);
  auto strip_it = [&](uint32_t cp) { return chars ? in_set(cp, set) : py_isspace(cp); };
  size_t b = 0, e = cps.size();
  if (side != StripSide::kRight)
    while (b < e && strip_it(cps[b])) ++b;
  if (side != StripSide::kLeft)
    while (e > b && strip_it(cps[e - 1])) --e;
  return encode_utf8(std::vector<uint32_t>(cps.begin() + b, cps.begin() + e));
}

std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) LOOM_THROW("empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t f = s.find(*sep, pos);
      if (f == std::string::npos) break;
      out.push_back(s.substr(pos, f - pos));
      pos = f + sep->size();
    }
    out.push_back(s.substr(pos));
    return out;
  }
  std::vector<uint32_t> cps = decode_utf8(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && py_isspace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      size_t e = cps.size();
      while (e > i && py_isspace(cps[e - 1])) --e;
      out.push_back(encode_utf8(std::vector<uint32_t>(cps.begin() + i, cps.begin() + e)));
      return out;
    }
    size_t j = i;
    while (j < cps.size() && !py_isspace(cps[j])) ++j;
    out.push_back(encode_utf8(std::vector<uint32_t>(cps.begin() + i, cps.begin() + j)));
    i = j;
  }
  return out;
}

std::vector<std::string> py_rsplit(const std::string& s, const std::optional<std::string>& sep,
                                   int64_t maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) LOOM_THROW("empty separator");
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t f = s.rfind(*sep, end - sep->size());
      if (f == std::string::npos) break;
      out.push_back(s.substr(f + sep->size(), end - f - sep->size()));
      end = f;
    }
    out.push_back(s.substr(0, end));
    return {out.rbegin(), out.rend()};
  }
  std::vector<uint32_t> cps = decode_utf8(s);
  size_t e = cps.size();
  while (e > 0) {
    while (e > 0 && py_isspace(cps[e - 1])) --e;
    if (e == 0) break;
    if (static_cast<int64_t>(out.size()) == maxsplit) {
      size_t b = 0;
      while (b < e && py_isspace(cps[b])) ++b;
      out.push_back(encode_utf8(std::vector<uint32_t>(cps.begin() + b, cps.begin() + e)));
      break;
    }
    size_t b = e;
    while (b > 0 && !py_isspace(cps[b - 1])) --b;
    out.push_back(encode_utf8(std::vector<uint32_t>(cps.begin() + b, cps.begin() + e)));
    e = b;
  }
  return {out.rbegin(), out.rend()};
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < s.size()) {
    size_t brk = 0;
    if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') brk = 2;
    else if (s[i] == '\n' || s[i] == '\r' || s[i] == '\v' || s[i] == '\f' || s[i] == '\x1c' ||
             s[i] == '\x1d' || s[i] == '\x1e')
      brk = 1;
    if (brk) {
      out.push_back(s.substr(start, (keepends ? i + brk : i) - start));
      i += brk;
      start = i;
    } else {
      ++i;
    }
  }
  if (start < s.size()) out.push_back(s.substr(start));
  return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to,
                       int64_t count, size_t max_bytes) {
  std::string out;
  auto check = [&] {
    if (out.size() > max_bytes) LOOM_THROW("string too long ({} bytes)", out.size());
  };
  if (from.empty()) {
    // Python inserts `to` before every code point and at the end.
    std::vector<uint32_t> cps = decode_utf8(s);
    int64_t n = 0;
    for (uint32_t cp : cps) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      append_utf8(out, cp);
      check();
    }
    if (count < 0 || n < count) out += to;
    check();
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t f = s.find(from, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += to;
    check();
    pos = f + from.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  check();
  return out;
}

int64_t py_count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

int64_t py_find(const std::string& s, const std::string& sub, bool reverse) {
  size_t f = reverse ? s.rfind(sub) : s.find(sub);
  if (f == std::string::npos) return -1;
  return static_cast<int64_t>(utf8_length(s.substr(0, f)));
}

}  // namespace loom::jinja
