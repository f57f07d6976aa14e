// Two small TokenConstraints for the engine's mask path, used by the CPU and
// CUDA engine tests: a fixed ban list (stateless: every token but the banned
// ones), and a forced token sequence (stateful: exactly one token allowed at
// each step, terminated after the last; it counts what it accepted).
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/token_constraint.h"

namespace loom::testing_util {

class BanList final : public TokenConstraint {
 public:
  BanList(std::vector<int32_t> banned, int32_t vocab) : banned_(std::move(banned)), vocab_(vocab) {}
  bool fill_next_token_bitmask(std::span<uint32_t> words) override {
    for (int32_t t = 0; t < vocab_; ++t) words[size_t(t) / 32] |= 1u << (t % 32);
    for (int32_t t : banned_) words[size_t(t) / 32] &= ~(1u << (t % 32));
    return true;
  }
  bool accept_token(int32_t token) override {
    return std::find(banned_.begin(), banned_.end(), token) == banned_.end();
  }
  void rollback(int32_t) override {}
  bool is_terminated() const override { return false; }
  std::unique_ptr<TokenConstraint> clone() const override { return std::make_unique<BanList>(*this); }

 private:
  std::vector<int32_t> banned_;
  int32_t vocab_;
};

class BanListFactory final : public TokenConstraintFactory {
 public:
  BanListFactory(std::vector<int32_t> banned, int32_t vocab) : banned_(std::move(banned)), vocab_(vocab) {}
  std::unique_ptr<TokenConstraint> make() const override { return std::make_unique<BanList>(banned_, vocab_); }
  std::string describe() const override { return "ban list"; }

 private:
  std::vector<int32_t> banned_;
  int32_t vocab_;
};

class ForcedSequence final : public TokenConstraint {
 public:
  explicit ForcedSequence(std::vector<int32_t> tokens) : tokens_(std::move(tokens)) {}
  bool fill_next_token_bitmask(std::span<uint32_t> words) override {
    if (pos_ < tokens_.size()) words[size_t(tokens_[pos_]) / 32] |= 1u << (tokens_[pos_] % 32);
    return true;
  }
  bool accept_token(int32_t token) override {
    if (pos_ >= tokens_.size() || token != tokens_[pos_]) return false;
    ++pos_;
    return true;
  }
  void rollback(int32_t n) override { pos_ -= std::min(pos_, size_t(n)); }
  bool is_terminated() const override { return pos_ == tokens_.size(); }
  std::unique_ptr<TokenConstraint> clone() const override { return std::make_unique<ForcedSequence>(*this); }

 private:
  std::vector<int32_t> tokens_;
  size_t pos_ = 0;
};

class ForcedSequenceFactory final : public TokenConstraintFactory {
 public:
  explicit ForcedSequenceFactory(std::vector<int32_t> tokens) : tokens_(std::move(tokens)) {}
  std::unique_ptr<TokenConstraint> make() const override { return std::make_unique<ForcedSequence>(tokens_); }
  std::string describe() const override { return "forced sequence"; }

 private:
  std::vector<int32_t> tokens_;
};

}  // namespace loom::testing_util
