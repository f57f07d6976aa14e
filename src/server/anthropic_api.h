// POST /v1/messages: Anthropic's Messages API over the chat path
// (chat_adapter.h). Requests: model, max_tokens (required), messages of
// user/assistant turns with string or text-block content, system (string or
// text blocks), stop_sequences, temperature, top_p, top_k, stream, metadata;
// image/document/tool blocks, tools and extended thinking are refused with
// 400 until loom serves them. Responses: a "message" object with text
// content, stop_reason (end_turn / max_tokens / stop_sequence, and which
// stop sequence) and usage; streaming sends Anthropic's event sequence
// (message_start, content_block_start, ping, content_block_delta...,
// content_block_stop, message_delta with the stop reason and usage,
// message_stop). Errors are Anthropic error objects
// ({"type": "error", "error": {"type", "message"}}).
#pragma once

#include <memory>

#include "server/chat_adapter.h"

namespace loom::server {

std::shared_ptr<ChatAdapter> make_anthropic_adapter(std::shared_ptr<ResponseSink> inner);

// Anthropic's error type for an HTTP status (invalid_request_error,
// authentication_error, not_found_error, rate_limit_error, overloaded_error...).
const char* anthropic_error_type(int status);

}  // namespace loom::server
