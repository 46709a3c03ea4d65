// The values a chat template computes with, as Python's Jinja2 has them:
// undefined, none, booleans, integers, floats, strings, lists and dicts
// (insertion-ordered, shared by reference as Python's are), functions and
// namespaces. Conversions, truth, equality, ordering and printing follow
// Python's, since the templates were written against it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kiln::text::jinja {

// A template that cannot be parsed or rendered: "<name>:<line>: <what>".
struct TemplateError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;
using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;
using Function = std::function<Value(Args &, Kwargs &)>;

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };
  Kind kind = Kind::Undefined;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  std::string string;
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict; // also a namespace's attributes
  std::shared_ptr<Function> function;
  bool isNamespace = false;

  static Value none();
  static Value of(bool value);
  static Value of(int64_t value);
  static Value of(double value);
  static Value of(std::string value);
  static Value of(const char *value) { return of(std::string(value)); }
  static Value ofList(List items = {});
  static Value ofDict(Dict items = {});
  static Value ofFunction(Function function);
  static Value fromJson(const nlohmann::ordered_json &json);

  bool isUndefined() const { return kind == Kind::Undefined; }
  bool isString() const { return kind == Kind::String; }
  bool isNumber() const { return kind == Kind::Int || kind == Kind::Float; }
  bool isIterable() const {
    return kind == Kind::List || kind == Kind::Dict || kind == Kind::String;
  }
  double asDouble() const { return kind == Kind::Int ? static_cast<double>(integer) : number; }

  // Python's truth.
  bool truthy() const;
  // What {{ value }} prints: str() of Python ("None", "True", "1.0",
  // "['a', 1]"); undefined prints nothing.
  std::string str() const;
  // repr() of Python: strings quoted.
  std::string repr() const;
  // JSON as Hugging Face's tojson writes it (json.dumps, ensure_ascii off;
  // ", " and ": " separators, or `indent`).
  std::string toJson(int indent = -1) const;
  // A dict's entry, or undefined.
  Value get(const std::string &key) const;
  // The items iteration gives: a list's values, a dict's keys, a string's
  // characters.
  List items() const;
  std::string typeName() const;
};

bool equal(const Value &a, const Value &b);
// Python's <, for numbers and strings (and lists of them); throws otherwise.
bool less(const Value &a, const Value &b);

} // namespace kiln::text::jinja
