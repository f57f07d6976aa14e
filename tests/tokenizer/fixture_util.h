// Helpers shared by the tokenizer tests: fixture paths, JSON loading, and a
// comparison of one tokenizer against HF's expected ids/decodes.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace loom::test {

inline std::string fixture_dir() { return std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/tokenizer"; }

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

inline std::string show_ids(const std::vector<int32_t>& ids) { return fmt::format("[{}]", fmt::join(ids, ",")); }

struct CompareResult {
  int strings = 0;
  int mismatches = 0;  // strings with any difference
};

// Compares every case of an expected.json-style `cases` array; reports each
// difference through gtest (ADD_FAILURE) and returns the counts.
inline CompareResult compare_with_hf(const Tokenizer& tok, const nlohmann::json& cases, const std::string& name) {
  CompareResult r;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const auto want_special = c["ids_special"].get<std::vector<int32_t>>();
    const auto want_unparsed = c["ids_unparsed"].get<std::vector<int32_t>>();
    const auto got = tok.encode(text, false, true);
    const auto got_special = tok.encode(text, true, true);
    const auto got_unparsed = tok.encode(text, false, false);
    const std::string dec = tok.decode(want, false);
    const std::string dec_skip = tok.decode(want, true);
    // Streaming decode must equal the one-shot decode and be valid UTF-8 per chunk.
    IncrementalDecoder inc(tok, true);
    std::string streamed;
    bool chunks_valid = true;
    for (int32_t id : want) {
      const std::string chunk = inc.push(id);
      chunks_valid = chunks_valid && tok::utf8_is_valid(chunk);
      streamed += chunk;
    }
    streamed += inc.flush();

    ++r.strings;
    bool ok = true;
    auto check = [&](bool cond, const std::string& what) {
      if (!cond) {
        ok = false;
        ADD_FAILURE() << name << ": " << what << " differs for text " << nlohmann::json(text).dump();
      }
    };
    check(got == want, fmt::format("ids {} vs HF {}", show_ids(got), show_ids(want)));
    check(got_special == want_special,
          fmt::format("ids(add_special) {} vs HF {}", show_ids(got_special), show_ids(want_special)));
    check(got_unparsed == want_unparsed,
          fmt::format("ids(!parse_special) {} vs HF {}", show_ids(got_unparsed), show_ids(want_unparsed)));
    check(dec == c["decoded"].get<std::string>(), fmt::format("decode '{}'", dec));
    check(dec_skip == c["decoded_skip"].get<std::string>(), fmt::format("decode(skip_special) '{}'", dec_skip));
    check(streamed == dec_skip, fmt::format("incremental decode '{}'", streamed));
    check(chunks_valid, "incremental chunk validity");
    if (!ok) ++r.mismatches;
  }
  return r;
}

}  // namespace loom::test
