// The parsed form of a template: expressions and statements, as the
// Parser builds them and the Renderer walks them.
#pragma once

#include "runtime/text/jinja/Value.h"

#include <memory>
#include <string>
#include <vector>

namespace kiln::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,     // value
    Name,        // name
    ListLit,     // items
    DictLit,     // keys[i]: items[i]
    Attribute,   // items[0].name
    Subscript,   // items[0][items[1]]
    Slice,       // items[0][items[1]:items[2]:items[3]] (null parts absent)
    Call,        // items[0](items[1..], kwargs)
    Filter,      // items[0] | name(items[1..], kwargs)
    Test,        // items[0] is [not] name(items[1..])
    Unary,       // op items[0]: "not", "-", "+"
    Binary,      // items[0] op items[1]
    Conditional, // items[0] if items[1] else items[2]
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;     // a name, attribute, filter, test or operator
  bool negated = false; // "is not"
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<ExprPtr> keys;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Break, Continue };
  Kind kind;
  int line = 0;
  std::string text;                 // Text
  ExprPtr expr;                     // Output, Set's value, For's iterable
  std::vector<ExprPtr> conditions;  // If: one per branch with a condition
  std::vector<Body> branches;       // If: one per condition, then else
  std::vector<std::string> targets; // For: loop names; Set: name (and attribute)
  ExprPtr filter;                   // For: "if" condition
  Body body, orElse;                // For
};

struct Template {
  std::string name;
  Body body;
};

// Parses `source` as Hugging Face renders chat templates: Jinja2 with
// trim_blocks and lstrip_blocks, and the loopcontrols extension.
Template parseTemplate(const std::string &source, const std::string &name);

} // namespace kiln::text::jinja
