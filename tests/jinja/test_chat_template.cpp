// Golden tests: every case in tests/fixtures/jinja/{chat,language}_cases.json
// (rendered by transformers' jinja2 environment, scripts/make_template_fixtures.py)
// must render byte-for-byte the same, or fail where jinja2 failed.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/jinja/chat_template.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace loom {
namespace {

using ordered_json = nlohmann::ordered_json;

std::string fixture_dir() { return std::string(LOOM_SOURCE_DIR) + "/tests/fixtures/jinja/"; }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ordered_json load_cases(const std::string& file) {
  return ordered_json::parse(read_file(fixture_dir() + file))["cases"];
}

// Cases where loom deliberately differs from jinja2.
const std::set<std::string> kIntentionalDifferences = {
    // jinja2's sandbox renders an unsafe attribute as an empty undefined; loom refuses it.
    "dunder_refused",
};

struct Outcome {
  bool ok = false;
  std::string text;  // output, or error message
};

Outcome render_case(const std::string& source, const ordered_json& c) {
  Outcome out;
  try {
    ChatTemplate tmpl(source);
    RenderOptions options;
    options.now_unix_seconds = c.at("now").get<int64_t>();
    out.text = tmpl.render(c.at("context"), options);
    out.ok = true;
  } catch (const Error& e) {
    out.text = e.what();
  }
  return out;
}

// Checks one case; returns an empty string when it passes.
std::string check_case(const std::string& source, const ordered_json& c) {
  Outcome got = render_case(source, c);
  if (c.contains("expected")) {
    std::string want = c["expected"].get<std::string>();
    if (!got.ok) return "raised: " + got.text;
    if (got.text != want) {
      size_t i = 0;
      while (i < want.size() && i < got.text.size() && want[i] == got.text[i]) ++i;
      size_t from = i > 40 ? i - 40 : 0;
      return "output differs at byte " + std::to_string(i) + "\n  want: " +
             ordered_json(want.substr(from, 120)).dump() + "\n  got:  " +
             ordered_json(got.text.substr(from, 120)).dump();
    }
    return "";
  }
  std::string type = c.value("error_type", "");
  std::string want = c["error"].get<std::string>();
  if (got.ok) return "expected error (" + type + ": " + want + "), got output " + ordered_json(got.text).dump();
  // raise_exception() messages reach the caller unchanged.
  if (type == "TemplateError" && got.text != want)
    return "raise_exception message differs: want " + want + ", got " + got.text;
  if (type == "TemplateSyntaxError" && c.contains("error_line")) {
    std::string line = "line " + std::to_string(c["error_line"].get<int>());
    if (got.text.find(line) == std::string::npos)
      return "syntax error should mention " + line + ": " + got.text;
  }
  return "";
}

void run_cases(const ordered_json& cases, const std::map<std::string, std::string>& templates) {
  int passed = 0, failed = 0;
  for (const auto& c : cases) {
    std::string name = c["name"].get<std::string>();
    if (kIntentionalDifferences.count(name)) continue;
    std::string source = c.contains("source") ? c["source"].get<std::string>()
                                              : templates.at(c["template"].get<std::string>());
    std::string problem = check_case(source, c);
    if (problem.empty()) {
      ++passed;
    } else {
      ++failed;
      ADD_FAILURE() << name << ": " << problem;
    }
  }
  std::cout << passed << " cases match jinja2, " << failed << " differ\n";
  EXPECT_GT(passed, 0);
}

TEST(ChatTemplateGolden, RealTemplatesMatchTransformers) {
  ordered_json cases = load_cases("chat_cases.json");
  std::map<std::string, std::string> templates;
  for (const auto& c : cases) {
    std::string name = c["template"].get<std::string>();
    if (!templates.count(name)) templates[name] = read_file(fixture_dir() + "templates/" + name + ".jinja");
  }
  EXPECT_GE(templates.size(), 12u);
  run_cases(cases, templates);
}

TEST(ChatTemplateGolden, LanguageFeaturesMatchJinja2) {
  run_cases(load_cases("language_cases.json"), {});
}

}  // namespace
}  // namespace loom
