// Kiln's Jinja where Python's Jinja2 is the reference and the JavaScript
// oracle of the lit tests differs or is silent: printing (True, None, 1.0,
// lists and dicts as Python's repr), scoping, loop controls, slices,
// whitespace control, and errors that name the line.
#include "runtime/text/jinja/Render.h"

#include <gtest/gtest.h>

namespace kiln::text::jinja {
namespace {

std::string run(const std::string &source, const std::string &variables = "{}") {
  return render(parseTemplate(source, "t"),
                Value::fromJson(nlohmann::ordered_json::parse(variables)));
}

std::string errorOf(const std::string &source, const std::string &variables = "{}") {
  try {
    run(source, variables);
  } catch (const TemplateError &error) {
    return error.what();
  }
  return "(no error)";
}

TEST(JinjaTest, PrintsAsPythonDoes) {
  EXPECT_EQ(run("{{ true }} {{ none }} {{ 1.0 }} {{ 2.5 }} {{ 7 / 2 }} {{ 6 / 2 }} {{ x }}!"),
            "True None 1.0 2.5 3.5 3.0 !");
  EXPECT_EQ(run("{{ [1, 'a', none, true] }} {{ {'k': 'v'} }}"), "[1, 'a', None, True] {'k': 'v'}");
  EXPECT_EQ(run("{{ -7 // 2 }} {{ -7 % 3 }} {{ 2 * 'ab' }} {{ 'a' ~ 1 }}"), "-4 2 abab a1");
  EXPECT_EQ(
      run("{{ x | tojson }}|{{ x | tojson(indent=2) }}", R"({"x": {"a": [1, "é"], "b": {}}})"),
      "{\"a\": [1, \"é\"], \"b\": {}}|{\n  \"a\": [\n    1,\n    \"é\"\n  ],\n  \"b\": {}\n}");
}

TEST(JinjaTest, ALoopHasItsOwnScopeANamespaceDoesNot) {
  EXPECT_EQ(run("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(run("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = i %}{% endfor %}"
                "{{ ns.x }}"),
            "2");
  EXPECT_EQ(run("{% for i in range(10) %}{% if i is odd %}{% continue %}{% endif %}"
                "{% if i > 6 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "0246");
  EXPECT_EQ(run("{% for k, v in d.items() %}{{ loop.index }}{{ k }}{{ v }}{% endfor %}",
                R"({"d": {"b": 1, "a": 2}})"),
            "1b12a2");
  EXPECT_EQ(run("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(run("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}"),
            "2242");
}

TEST(JinjaTest, SlicesAndMethodsAsPythons) {
  EXPECT_EQ(run("{{ 'héllo'[1:3] }} {{ 'héllo'[::-1] }} {{ [1, 2, 3][-1] }} {{ [1, 2, 3][:-1] }}"),
            "él olléh 3 [1, 2]");
  EXPECT_EQ(run("{{ '  a b  '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'Ab'.lower() }}|"
                "{{ d.get('x', 'none') }}",
                R"({"d": {}})"),
            "a b|['a', 'b']|ab|none");
  EXPECT_EQ(
      run("{{ m.tool_calls is defined }} {{ m.content is string }}", R"({"m": {"content": "c"}})"),
      "False True");
}

TEST(JinjaTest, TrimsBlocksAndTheTemplatesLastNewline) {
  EXPECT_EQ(run("a\n  {% if true %}\n  b\n  {% endif %}\nc\n"), "a\n  b\nc");
  EXPECT_EQ(run("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(run("{# a comment #}\nx{{ 1 -}}\n  y"), "x1y");
}

TEST(JinjaTest, ErrorsNameTheLine) {
  EXPECT_EQ(errorOf("a\n{{ raise_exception('no ' ~ 1) }}"), "t:2: no 1");
  EXPECT_EQ(errorOf("\n\n{% for x in y %}"), "t:3: the template ends inside a block: expected "
                                             "{% endfor %}");
  EXPECT_EQ(errorOf("{{ x | frobnicate }}"), "t:1: no filter 'frobnicate'");
  EXPECT_EQ(errorOf("{% macro m() %}{% endmacro %}"),
            "t:1: {% macro %} is not a statement Kiln's chat templates take (if, for, set, "
            "break, continue)");
  EXPECT_EQ(errorOf("{{ 1 / 0 }}"), "t:1: division by zero");
}

} // namespace
} // namespace kiln::text::jinja
