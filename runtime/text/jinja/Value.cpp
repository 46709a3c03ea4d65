#include "runtime/text/jinja/Value.h"

#include "runtime/core/Utf8.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kiln::text::jinja {

Value Value::none() {
  Value v;
  v.kind = Kind::None;
  return v;
}
Value Value::of(bool value) {
  Value v;
  v.kind = Kind::Bool;
  v.boolean = value;
  return v;
}
Value Value::of(int64_t value) {
  Value v;
  v.kind = Kind::Int;
  v.integer = value;
  return v;
}
Value Value::of(double value) {
  Value v;
  v.kind = Kind::Float;
  v.number = value;
  return v;
}
Value Value::of(std::string value) {
  Value v;
  v.kind = Kind::String;
  v.string = std::move(value);
  return v;
}
Value Value::ofList(List items) {
  Value v;
  v.kind = Kind::List;
  v.list = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::ofDict(Dict items) {
  Value v;
  v.kind = Kind::Dict;
  v.dict = std::make_shared<Dict>(std::move(items));
  return v;
}
Value Value::ofFunction(Function function) {
  Value v;
  v.kind = Kind::Function;
  v.function = std::make_shared<Function>(std::move(function));
  return v;
}

Value Value::fromJson(const nlohmann::ordered_json &json) {
  switch (json.type()) {
  case nlohmann::ordered_json::value_t::null:
    return none();
  case nlohmann::ordered_json::value_t::boolean:
    return of(json.get<bool>());
  case nlohmann::ordered_json::value_t::number_integer:
  case nlohmann::ordered_json::value_t::number_unsigned:
    return of(json.get<int64_t>());
  case nlohmann::ordered_json::value_t::number_float:
    return of(json.get<double>());
  case nlohmann::ordered_json::value_t::string:
    return of(json.get<std::string>());
  case nlohmann::ordered_json::value_t::array: {
    List items;
    for (const auto &item : json)
      items.push_back(fromJson(item));
    return ofList(std::move(items));
  }
  case nlohmann::ordered_json::value_t::object: {
    Dict items;
    for (auto it = json.begin(); it != json.end(); ++it)
      items.emplace_back(it.key(), fromJson(it.value()));
    return ofDict(std::move(items));
  }
  default:
    return Value();
  }
}

bool Value::truthy() const {
  switch (kind) {
  case Kind::Undefined:
  case Kind::None:
    return false;
  case Kind::Bool:
    return boolean;
  case Kind::Int:
    return integer != 0;
  case Kind::Float:
    return number != 0;
  case Kind::String:
    return !string.empty();
  case Kind::List:
    return !list->empty();
  case Kind::Dict:
    return isNamespace || !dict->empty();
  case Kind::Function:
    return true;
  }
  return false;
}

namespace {

// Python's repr of a float: the shortest text that reads back the same,
// with ".0" where it would look like an integer.
std::string floatText(double value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value > 0 ? "inf" : "-inf";
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value)
      break;
  }
  std::string out = text;
  if (out.find_first_of(".en") == std::string::npos)
    out += ".0";
  return out;
}

std::string quote(const std::string &text) {
  const char q =
      text.find('\'') != std::string::npos && text.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (const char c : text) {
    if (c == q || c == '\\')
      out += '\\';
    if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out + q;
}

void json(const Value &v, int indent, int depth, std::string &out) {
  const auto newline = [&](int level) {
    if (indent >= 0) {
      out += '\n';
      out.append(static_cast<size_t>(indent * level), ' ');
    }
  };
  switch (v.kind) {
  case Value::Kind::Undefined:
  case Value::Kind::None:
  case Value::Kind::Function:
    out += "null";
    return;
  case Value::Kind::Bool:
    out += v.boolean ? "true" : "false";
    return;
  case Value::Kind::Int:
    out += std::to_string(v.integer);
    return;
  case Value::Kind::Float:
    out += floatText(v.number);
    return;
  case Value::Kind::String:
    out += nlohmann::ordered_json(v.string).dump(-1, ' ', false,
                                                 nlohmann::ordered_json::error_handler_t::replace);
    return;
  case Value::Kind::List: {
    if (v.list->empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < v.list->size(); ++i) {
      if (i)
        out += indent >= 0 ? "," : ", ";
      newline(depth + 1);
      json((*v.list)[i], indent, depth + 1, out);
    }
    newline(depth);
    out += ']';
    return;
  }
  case Value::Kind::Dict: {
    if (v.dict->empty()) {
      out += "{}";
      return;
    }
    out += '{';
    for (size_t i = 0; i < v.dict->size(); ++i) {
      if (i)
        out += indent >= 0 ? "," : ", ";
      newline(depth + 1);
      json(Value::of((*v.dict)[i].first), indent, depth + 1, out);
      out += ": ";
      json((*v.dict)[i].second, indent, depth + 1, out);
    }
    newline(depth);
    out += '}';
    return;
  }
  }
}

} // namespace

std::string Value::str() const {
  switch (kind) {
  case Kind::Undefined:
    return "";
  case Kind::None:
    return "None";
  case Kind::Bool:
    return boolean ? "True" : "False";
  case Kind::Int:
    return std::to_string(integer);
  case Kind::Float:
    return floatText(number);
  case Kind::String:
    return string;
  case Kind::List: {
    std::string out = "[";
    for (size_t i = 0; i < list->size(); ++i)
      out += (i ? ", " : "") + (*list)[i].repr();
    return out + "]";
  }
  case Kind::Dict: {
    if (isNamespace)
      return "<Namespace>";
    std::string out = "{";
    for (size_t i = 0; i < dict->size(); ++i)
      out += (i ? ", " : "") + quote((*dict)[i].first) + ": " + (*dict)[i].second.repr();
    return out + "}";
  }
  case Kind::Function:
    return "<function>";
  }
  return "";
}

std::string Value::repr() const { return kind == Kind::String ? quote(string) : str(); }

std::string Value::toJson(int indent) const {
  std::string out;
  json(*this, indent, 0, out);
  return out;
}

Value Value::get(const std::string &key) const {
  if (kind != Kind::Dict)
    return Value();
  for (const auto &[name, value] : *dict)
    if (name == key)
      return value;
  return Value();
}

List Value::items() const {
  if (kind == Kind::List)
    return *list;
  List out;
  if (kind == Kind::Dict)
    for (const auto &entry : *dict)
      out.push_back(of(entry.first));
  if (kind == Kind::String)
    for (size_t at = 0, length = 0; at < string.size(); at += length) {
      decodeUtf8At(string, at, &length);
      out.push_back(of(string.substr(at, length)));
    }
  return out;
}

std::string Value::typeName() const {
  static const char *const kNames[] = {"undefined", "none", "bool", "int",     "float",
                                       "string",    "list", "dict", "function"};
  return kNames[static_cast<int>(kind)];
}

bool equal(const Value &a, const Value &b) {
  if (a.isNumber() && b.isNumber())
    return a.kind == Value::Kind::Int && b.kind == Value::Kind::Int ? a.integer == b.integer
                                                                    : a.asDouble() == b.asDouble();
  if (a.kind == Value::Kind::Bool && b.isNumber())
    return equal(Value::of(int64_t{a.boolean}), b);
  if (b.kind == Value::Kind::Bool && a.isNumber())
    return equal(a, Value::of(int64_t{b.boolean}));
  if (a.kind != b.kind)
    return false;
  switch (a.kind) {
  case Value::Kind::Undefined:
  case Value::Kind::None:
    return true;
  case Value::Kind::Bool:
    return a.boolean == b.boolean;
  case Value::Kind::String:
    return a.string == b.string;
  case Value::Kind::List:
    if (a.list->size() != b.list->size())
      return false;
    for (size_t i = 0; i < a.list->size(); ++i)
      if (!equal((*a.list)[i], (*b.list)[i]))
        return false;
    return true;
  case Value::Kind::Dict:
    if (a.dict->size() != b.dict->size())
      return false;
    for (const auto &[key, value] : *a.dict)
      if (!equal(value, b.get(key)))
        return false;
    return true;
  default:
    return a.function == b.function;
  }
}

bool less(const Value &a, const Value &b) {
  if (a.isNumber() && b.isNumber())
    return a.asDouble() < b.asDouble();
  if (a.isString() && b.isString())
    return a.string < b.string;
  if (a.kind == Value::Kind::List && b.kind == Value::Kind::List) {
    for (size_t i = 0; i < a.list->size() && i < b.list->size(); ++i) {
      if (less((*a.list)[i], (*b.list)[i]))
        return true;
      if (less((*b.list)[i], (*a.list)[i]))
        return false;
    }
    return a.list->size() < b.list->size();
  }
  throw TemplateError("cannot order " + a.typeName() + " and " + b.typeName());
}

} // namespace kiln::text::jinja
