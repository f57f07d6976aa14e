#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "cli_app.h"
#include "core/error.h"

namespace loom::cli {

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

void show_defaults(CLI::App& app) {
  app.option_defaults()->always_capture_default();
  app.get_formatter()->column_width(36);
}

std::string closest_flag(const CLI::App& app, const std::string& unknown) {
  const std::string name = unknown.substr(0, unknown.find('='));
  std::string best;
  size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
  for (const CLI::Option* opt : app.get_options()) {
    std::vector<std::string> flags;
    for (const auto& l : opt->get_lnames()) flags.push_back("--" + l);
    for (const auto& s : opt->get_snames()) flags.push_back("-" + s);
    for (const auto& f : opt->get_fnames()) flags.push_back("--" + f);  // negations (--no-x)
    for (const auto& flag : flags) {
      // A known flag that starts with what was typed counts as close.
      const size_t d = flag.rfind(name, 0) == 0 && name.size() > 3 ? 1 : edit_distance(name, flag);
      if (d < best_distance) {
        best_distance = d;
        best = flag;
      }
    }
  }
  return best;
}

std::optional<int> parse_args(CLI::App& app, int argc, char** argv) {
  const std::string who =
      "loom " + (app.get_name().empty() ? std::string(argc > 0 ? argv[0] : "") : app.get_name());
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // A mistyped flag first: it is often why a required one looks missing.
    for (const auto& arg : app.remaining()) {
      if (arg.size() < 2 || arg[0] != '-') continue;
      const std::string name = arg.substr(0, arg.find('='));
      const std::string near = closest_flag(app, name);
      std::fprintf(stderr, "%s: unknown flag '%s'%s\n", who.c_str(), name.c_str(),
                   near.empty() ? "" : (" (did you mean '" + near + "'?)").c_str());
      std::fprintf(stderr, "run '%s --help' for the flags\n", who.c_str());
      return 2;
    }
    std::string what = e.what();
    if (dynamic_cast<const CLI::ExtrasError*>(&e) && !app.remaining().empty())
      what = "unexpected argument '" + app.remaining().front() + "'";
    std::fprintf(stderr, "%s: %s\nrun '%s --help' for the flags\n", who.c_str(), what.c_str(),
                 who.c_str());
    return 2;
  }
}

int guarded(const char* name, const std::function<int()>& body) {
  try {
    return body();
  } catch (const CLI::ParseError&) {
    throw;  // handled by the caller's CLI11 app
  } catch (const Error& e) {
    std::fprintf(stderr, "loom %s: error: %s\n", name, e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom %s: error: %s\n", name, e.what());
  }
  return 1;
}

std::string read_stdin() {
  std::ostringstream ss;
  ss << std::cin.rdbuf();
  return ss.str();
}

std::vector<int32_t> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_array()) LOOM_THROW("expected a JSON array of token ids");
    for (const auto& v : j) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
        LOOM_THROW("token id {} is not a non-negative integer", v.dump());
      ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    return ids;
  }
  std::string cur;
  auto flush = [&] {
    if (cur.empty()) return;
    size_t pos = 0;
    long long v = -1;
    try {
      v = std::stoll(cur, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos != cur.size() || v < 0 || v > INT32_MAX) LOOM_THROW("'{}' is not a token id", cur);
    ids.push_back(static_cast<int32_t>(v));
    cur.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r') flush();
    else cur += c;
  }
  flush();
  return ids;
}

}  // namespace loom::cli
