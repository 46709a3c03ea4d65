// Renders a parsed template (Ast.h) with a dict of variables, as Jinja2
// does in Hugging Face's chat-template environment: for-loops with `loop`
// and their own scope (a `set` inside one does not leak; namespace()
// attributes do), break and continue, Python's operators and string and
// dict methods, the filters and tests chat templates use, and the globals
// raise_exception, namespace, range and strftime_now.
#pragma once

#include "runtime/text/jinja/Ast.h"

#include <string>

namespace kiln::text::jinja {

// Throws TemplateError "<name>:<line>: ..." for what the template does
// wrong (an unknown filter, a type an operator does not take), and for
// raise_exception("...") with its message.
std::string render(const Template &tmpl, const Value &variables);

} // namespace kiln::text::jinja
