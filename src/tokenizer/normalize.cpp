// NFC: decompose canonically (Hangul algorithmically), put combining marks in
// canonical order, then compose primary composites (UAX #15).
#include "tokenizer/normalize.h"

#include <algorithm>
#include <vector>

#include "tokenizer/unicode.h"
#include "tokenizer/unicode_nfc_data.h"

namespace loom::tok {

namespace {

using namespace nfc_data;

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

uint32_t ccc(uint32_t cp) {
  if (cp < 0x300) return 0;
  const CccRun* end = kCccRuns + kCccRunCount;
  const CccRun* it = std::upper_bound(kCccRuns, end, cp, [](uint32_t v, const CccRun& r) { return v < r.first; });
  if (it == kCccRuns) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out, int depth = 0) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0 && depth < 8) {
    const Decomposition* end = kDecompositions + kDecompositionCount;
    const Decomposition* it = std::lower_bound(kDecompositions, end, cp,
                                               [](const Decomposition& d, uint32_t v) { return d.cp < v; });
    if (it != end && it->cp == cp) {
      decompose(it->first, out, depth + 1);
      if (it->second != 0) decompose(it->second, out, depth + 1);
      return;
    }
  }
  out.push_back(cp);
}

// The primary composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const Composition* end = kCompositions + kCompositionCount;
  const Composition* it = std::lower_bound(kCompositions, end, std::pair{a, b}, [](const Composition& c, auto v) {
    return c.first != v.first ? c.first < v.first : c.second < v.second;
  });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

}  // namespace

std::string nfc(std::string_view text) {
  // Below U+0300 (lead bytes < 0xCC) every string is already in NFC.
  if (std::none_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) >= 0xCC; }))
    return std::string(text);
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Step st = utf8_step(text, i);
    decompose(st.cp, cps);
    i += st.len;
  }
  // Canonical ordering: stable sort of each run of non-starters by class.
  for (size_t i = 0; i < cps.size();) {
    if (ccc(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc(cps[j]) != 0) ++j;
    if (j - i > 1)
      std::stable_sort(cps.begin() + i, cps.begin() + j, [](uint32_t a, uint32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  // Canonical composition.
  std::vector<uint32_t> out;
  out.reserve(cps.size());
  ptrdiff_t starter = -1;
  uint32_t last_ccc = 0;
  for (uint32_t cp : cps) {
    const uint32_t cc = ccc(cp);
    if (starter >= 0) {
      const bool adjacent = static_cast<ptrdiff_t>(out.size()) - 1 == starter;
      if (adjacent || (last_ccc != 0 && last_ccc < cc)) {
        if (const uint32_t c = compose(out[starter], cp)) {
          out[starter] = c;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<ptrdiff_t>(out.size());
    out.push_back(cp);
    last_ccc = cc;
  }
  std::string result;
  result.reserve(text.size());
  for (uint32_t cp : out) utf8_append(result, cp);
  return result;
}

}  // namespace loom::tok
