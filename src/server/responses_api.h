// POST /v1/responses: OpenAI's Responses API over the chat path
// (chat_adapter.h), stateless: nothing is stored, so previous_response_id
// and store: true are refused with 400 (send the whole conversation in
// `input`). Requests: model, input (a string, or message items whose content
// is a string or input_text / output_text parts), instructions (a system
// message first), max_output_tokens, temperature, top_p, reasoning.effort,
// text.format (text, json_object, json_schema), stream, user, metadata;
// function tools (tools, tool_choice, parallel_tool_calls), function_call and
// function_call_output input items (as the chat path's tool_calls and role
// "tool" messages); other tools and item types (images, files) are refused.
// Function calls come back as function_call output items after the message
// (streamed: response.function_call_arguments.delta / .done). Responses: a "response" object with one assistant
// message of output_text, status completed / incomplete
// (incomplete_details.reason max_output_tokens) and usage; streaming sends
// response.created, response.in_progress, response.output_item.added,
// response.content_part.added, response.output_text.delta...,
// response.output_text.done, response.content_part.done,
// response.output_item.done and response.completed (response.incomplete
// when cut at max_output_tokens), each with a sequence_number. Errors keep
// OpenAI's error object.
#pragma once

#include <memory>

#include "server/chat_adapter.h"

namespace loom::server {

std::shared_ptr<ChatAdapter> make_responses_adapter(std::shared_ptr<ResponseSink> inner);

}  // namespace loom::server
