// TokenConstraint: a per-sequence rule on which tokens may come next (a
// grammar, a JSON schema, a regex, a ban list). The step executor asks each
// constrained sequence for its allowed-token bitmask before the step's tokens
// are chosen, applies it to the logits on the backend (disallowed tokens get
// -inf, for greedy, device and host sampling alike), and tells the constraint
// every token the sequence accepts. rollback() exists for speculative
// decoding: masks for k proposed tokens are filled by accepting them one by
// one, then rolling back the ones the verifier rejects.
// A TokenConstraint belongs to one sequence and is used by one thread at a
// time (the engine thread; the executor may fill the masks of several
// sequences on pool threads while it waits); a TokenConstraintFactory is
// immutable and shared by many requests.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace loom {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Writes the tokens allowed next: bit (t % 32) of words[t / 32] set means
  // token t is allowed; words.size() == ceil(vocab / 32), all bits cleared on
  // entry. Returns false, leaving words unread, when every token is allowed
  // (no mask for this step).
  virtual bool fill_next_token_bitmask(std::span<uint32_t> words) = 0;
  // Advances past `token`, which the sequence accepted. False: the token is
  // not allowed here (the sequence then ends with an error).
  virtual bool accept_token(int32_t token) = 0;
  // Undoes the last `n` accepted tokens (n <= those accepted since creation).
  virtual void rollback(int32_t n) = 0;
  // The constrained output is complete: the sequence stops here.
  virtual bool is_terminated() const = 0;
  // An independent copy in the same state (n > 1 siblings fork from one).
  virtual std::unique_ptr<TokenConstraint> clone() const = 0;
  // Whether forced_tokens() can give any token (false: the engine never asks).
  virtual bool jumps_forward() const { return false; }
  // The tokens the rule forces next, at most max_tokens, into out (cleared
  // first): the vocabulary's tokens for the one continuation the rule allows
  // (empty where it allows several, e.g. free text or optional whitespace).
  // A proposal, not a decision: the tokens the model would choose for the
  // same text may differ. Leaves the state as it was; its work is bounded by
  // max_tokens whatever the rule (a rule may force a string without end).
  virtual void forced_tokens(int32_t max_tokens, std::vector<int32_t>& out) { out.clear(); }
};

class TokenConstraintFactory {
 public:
  virtual ~TokenConstraintFactory() = default;
  // A constraint at the start of the output. Engine thread.
  virtual std::unique_ptr<TokenConstraint> make() const = 0;
  // What it enforces, for logs and errors (e.g. "json_schema").
  virtual std::string describe() const = 0;
};

}  // namespace loom
