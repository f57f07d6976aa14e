// GrammarCompiler over xgrammar: the compile pool, the deadline, the LRU
// cache of compiled grammars (one entry per spec, shared by concurrent
// requests for it while it compiles).
#include "structured/grammar_compiler.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "structured/xgrammar/xgrammar_constraint.h"

namespace loom::structured {

using Factory = std::shared_ptr<const TokenConstraintFactory>;

struct GrammarCompiler::Impl {
  struct Entry {
    std::shared_future<Factory> result;
    bool done = false;
    int64_t bytes = 0;
    std::list<std::string>::iterator lru;  // position in lru_ (front: most recent)
  };

  Impl(const Tokenizer& tokenizer, int32_t vocab_size, CompilerOptions opts)
      : Impl(grammar_vocab(tokenizer, vocab_size), vocab_size, opts, &tokenizer) {}
  Impl(const GrammarVocab& vocab, int32_t vocab_size, CompilerOptions opts, const Tokenizer* tok)
      : tokenizer(tok),
        options(opts),
        compiler(make_tokenizer_info(vocab, vocab_size), std::max(1, opts.threads),
                 /*cache_enabled=*/false),
        utf8(std::make_shared<const Utf8TokenMasks>(
            vocab.bytes, xgrammar::GetBitmaskSize(vocab_size), vocab.stop)) {
    for (int i = 0; i < std::max(1, opts.threads); ++i) workers.emplace_back([this] { work(); });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cv.notify_all();
    for (auto& w : workers) w.join();
  }

  void work() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return stop || !queue.empty(); });
        if (stop) return;  // queued tasks' promises break: waiters get broken_promise
        task = std::move(queue.front());
        queue.pop_front();
      }
      task();
    }
  }

  // Runs on a pool thread. A compile still running at its deadline (its
  // start plus --max-grammar-compile-ms: its first waiter has given up by
  // then) is interrupted between token masks, which frees the thread for the
  // next compile instead of finishing a grammar nobody waits for.
  void run_compile(const std::string& key, const GrammarSpec& spec,
                   std::shared_ptr<std::promise<Factory>> promise) {
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + options.max_compile_time;
    xgrammar::SetCompileInterruptCheck(
        [deadline] { return std::chrono::steady_clock::now() > deadline; });
    Factory factory;
    std::exception_ptr error;
    bool interrupted = false;
    int64_t bytes = 0;
    try {
      const std::string tag =
          nlohmann::ordered_json{{"type", "structural_tag"}, {"format", spec.format}}.dump();
      xgrammar::CompiledGrammar compiled = compiler.CompileStructuralTag(tag);
      bytes = int64_t(compiled.MemorySizeBytes());
      factory = std::make_shared<XGrammarConstraintFactory>(std::move(compiled), spec.describe(),
                                                            utf8, tokenizer);
    } catch (const GrammarError&) {
      error = std::current_exception();
    } catch (const xgrammar::CompileInterruptedError&) {
      interrupted = true;
      error = std::make_exception_ptr(timeout_error(spec));
    } catch (const std::exception& e) {
      // xgrammar reports a bad regex, grammar or schema as an exception whose
      // message says what is wrong.
      error = std::make_exception_ptr(GrammarError(
          GrammarError::Kind::Invalid, fmt::format("{}: {}", spec.describe(), e.what())));
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    {
      std::lock_guard<std::mutex> lk(mu);
      --in_flight;
      auto it = cache.find(key);
      if (error) {
        ++(interrupted ? stats.interrupted : stats.failures);
        if (it != cache.end()) {
          lru.erase(it->second.lru);
          cache.erase(it);
        }
      } else {
        ++stats.compiles;
        if (it != cache.end()) {
          it->second.done = true;
          it->second.bytes = bytes;
          stats.cache_bytes += bytes;
          evict_locked();
        }
      }
    }
    xgrammar::SetCompileInterruptCheck({});
    spdlog::debug("grammar compile: {} in {:.1f} ms, {} bytes{}", spec.describe(), ms, bytes,
                  interrupted ? " (interrupted at the deadline)"
                  : error     ? " (failed)"
                              : "");
    if (error)
      promise->set_exception(error);
    else
      promise->set_value(std::move(factory));
  }

  GrammarError timeout_error(const GrammarSpec& spec) const {
    return GrammarError(GrammarError::Kind::Timeout,
                        fmt::format("compiling the {} took longer than {} ms "
                                    "(--max-grammar-compile-ms); simplify it",
                                    spec.describe(), options.max_compile_time.count()));
  }

  // Drops least recently used finished entries past the byte budget.
  void evict_locked() {
    auto it = lru.end();
    while (stats.cache_bytes > options.cache_bytes && it != lru.begin()) {
      --it;
      auto e = cache.find(*it);
      if (e == cache.end() || !e->second.done) continue;
      stats.cache_bytes -= e->second.bytes;
      auto victim = it++;
      cache.erase(e);
      lru.erase(victim);
    }
  }

  const Tokenizer* tokenizer;  // cuts forced strings into tokens (jump-forward)
  CompilerOptions options;
  xgrammar::GrammarCompiler compiler;
  std::shared_ptr<const Utf8TokenMasks> utf8;  // valid-UTF-8 masks of the vocabulary

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  std::vector<std::thread> workers;
  bool stop = false;
  int32_t in_flight = 0;
  std::unordered_map<std::string, Entry> cache;
  std::list<std::string> lru;
  CompilerStats stats;
};

GrammarCompiler::GrammarCompiler(const Tokenizer& tokenizer, int32_t vocab_size,
                                 CompilerOptions options)
    : impl_(std::make_unique<Impl>(tokenizer, vocab_size, options)) {}

GrammarCompiler::~GrammarCompiler() = default;

bool GrammarCompiler::available() {
  return true;
}

CompilerStats GrammarCompiler::stats() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->stats;
}

std::shared_ptr<const TokenConstraintFactory> GrammarCompiler::compile(const GrammarSpec& spec) {
  Impl& m = *impl_;
  const auto deadline = std::chrono::steady_clock::now() + m.options.max_compile_time;
  const std::string key = spec.key();
  std::shared_future<Factory> result;
  {
    std::lock_guard<std::mutex> lk(m.mu);
    auto it = m.cache.find(key);
    if (it != m.cache.end()) {
      ++m.stats.cache_hits;
      m.lru.splice(m.lru.begin(), m.lru, it->second.lru);
      result = it->second.result;
    } else {
      if (m.in_flight >= m.options.max_queued)
        throw GrammarError(GrammarError::Kind::Busy,
                           fmt::format("{} grammar compiles are already running or queued; try "
                                       "again later",
                                       m.in_flight));
      auto promise = std::make_shared<std::promise<Factory>>();
      result = promise->get_future().share();
      m.lru.push_front(key);
      m.cache.emplace(key, Impl::Entry{result, false, 0, m.lru.begin()});
      ++m.in_flight;
      m.queue.push_back([&m, key, spec, promise] { m.run_compile(key, spec, promise); });
      m.cv.notify_one();
    }
  }
  if (result.wait_until(deadline) == std::future_status::timeout) {
    {
      std::lock_guard<std::mutex> lk(m.mu);
      ++m.stats.timeouts;
    }
    throw m.timeout_error(spec);
  }
  return result.get();
}

}  // namespace loom::structured
