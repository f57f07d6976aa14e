// ChatTemplate: parses once (lexer + parser), renders many times; each render
// gets its own Renderer, so a parsed template is shared read-only.
#include "tokenizer/jinja/chat_template.h"

#include "core/error.h"
#include "tokenizer/jinja/evaluator.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace loom {

struct ChatTemplate::Impl {
  TemplateLimits limits;
  jinja::Body body;
};

ChatTemplate::ChatTemplate(const std::string& source, TemplateLimits limits)
    : impl_(std::make_unique<Impl>()) {
  if (limits.max_steps <= 0 || limits.max_output_bytes <= 0 || limits.max_depth <= 0)
    LOOM_THROW("template limits must be positive");
  if (static_cast<int64_t>(source.size()) > limits.max_output_bytes)
    LOOM_THROW("template source too large ({} bytes)", source.size());
  impl_->limits = limits;
  try {
    impl_->body = jinja::parse(jinja::tokenize(source), limits.max_depth);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // safety net: nothing but loom::Error leaves
    LOOM_THROW("template error: {}", e.what());
  }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;

namespace {
template <typename Json>
std::string render_json(const TemplateLimits& limits, const jinja::Body& body, const Json& context,
                        const RenderOptions& options) {
  if (!context.is_object()) LOOM_THROW("template context must be a JSON object");
  jinja::Value globals = jinja::from_json(context, limits.max_depth);
  jinja::Renderer renderer(limits, options.now_unix_seconds);
  try {
    return renderer.render(body, globals);
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    LOOM_THROW("template rendering ran out of memory");
  } catch (const std::exception& e) {  // safety net: nothing but loom::Error leaves
    LOOM_THROW("template error: {}", e.what());
  }
}
}  // namespace

std::string ChatTemplate::render(const nlohmann::json& context) const {
  return render_json(impl_->limits, impl_->body, context, RenderOptions{});
}

std::string ChatTemplate::render(const nlohmann::json& context,
                                 const RenderOptions& options) const {
  return render_json(impl_->limits, impl_->body, context, options);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context,
                                 const RenderOptions& options) const {
  return render_json(impl_->limits, impl_->body, context, options);
}

}  // namespace loom
