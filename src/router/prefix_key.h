// The routing key of a generation request: the start of what the replica
// will prefill, so that requests sharing a prefix (a system prompt, a few-shot
// preamble, the earlier turns of a conversation) meet the same prefix cache.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace loom::router {

// For POST /v1/completions: the first `n` bytes of the prompt (the first
// prompt of a batch), or "ids:" and the first `n` token ids when the prompt
// is ids. For POST /v1/chat/completions: the first `n` bytes of the messages
// rendered as "role\ncontent\n" (text parts of array contents joined).
// nullopt when the body has no usable prompt (the replica will say why) or
// the path is another route. Never throws.
std::optional<std::string> routing_prefix(std::string_view path, const nlohmann::ordered_json& body,
                                          size_t n);

}  // namespace loom::router
