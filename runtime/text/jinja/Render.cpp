#include "runtime/text/jinja/Render.h"

#include "runtime/core/Utf8.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>
#include <map>

namespace kiln::text::jinja {
namespace {

struct BreakLoop {};
struct ContinueLoop {};

// A std::string as UTF-32 and back, for Python's indexing of strings.
std::u32string codePoints(const std::string &text) {
  std::u32string out;
  for (size_t at = 0, length = 0; at < text.size(); at += length)
    out += static_cast<char32_t>(decodeUtf8At(text, at, &length));
  return out;
}

std::string utf8(const std::u32string &text) {
  std::string out;
  for (const char32_t c : text)
    appendUtf8(out, c);
  return out;
}

std::string strip(const std::string &text, const std::string &chars, bool left, bool right) {
  const auto isStripped = [&](char c) {
    return chars.empty() ? std::isspace(static_cast<unsigned char>(c)) != 0
                         : chars.find(c) != std::string::npos;
  };
  size_t begin = 0, end = text.size();
  while (left && begin < end && isStripped(text[begin]))
    ++begin;
  while (right && end > begin && isStripped(text[end - 1]))
    --end;
  return text.substr(begin, end - begin);
}

class Renderer {
public:
  Renderer(const Template &tmpl, const Value &variables) : tmpl_(tmpl) {
    Dict globals;
    globals.emplace_back(
        "raise_exception", Value::ofFunction([this](Args &args, Kwargs &) -> Value {
          throw TemplateError(tmpl_.name + ":" + std::to_string(line_) + ": " +
                              (args.empty() ? std::string("raise_exception") : args[0].str()));
        }));
    globals.emplace_back("namespace", Value::ofFunction([](Args &, Kwargs &kwargs) {
                           Value ns = Value::ofDict(Dict(kwargs.begin(), kwargs.end()));
                           ns.isNamespace = true;
                           return ns;
                         }));
    globals.emplace_back("range", Value::ofFunction([this](Args &args, Kwargs &) {
                           int64_t start = 0, stop = 0, step = 1;
                           if (args.size() == 1)
                             stop = integer(args[0]);
                           else if (args.size() >= 2) {
                             start = integer(args[0]);
                             stop = integer(args[1]);
                             if (args.size() > 2)
                               step = integer(args[2]);
                           }
                           if (step == 0)
                             fail("range() step must not be zero");
                           List out;
                           for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
                             out.push_back(Value::of(i));
                           return Value::ofList(std::move(out));
                         }));
    globals.emplace_back("strftime_now", Value::ofFunction([](Args &args, Kwargs &) {
                           const std::time_t now = std::time(nullptr);
                           std::tm local{};
                           localtime_r(&now, &local);
                           char text[256] = {};
                           std::strftime(text, sizeof text,
                                         args.empty() ? "%Y-%m-%d" : args[0].str().c_str(), &local);
                           return Value::of(std::string(text));
                         }));
    scopes_.push_back(std::move(globals));
    Dict top;
    if (variables.kind == Value::Kind::Dict)
      top = *variables.dict;
    scopes_.push_back(std::move(top));
  }

  std::string run() {
    std::string out;
    body(tmpl_.body, out);
    return out;
  }

private:
  [[noreturn]] void fail(const std::string &what) const {
    throw TemplateError(tmpl_.name + ":" + std::to_string(line_) + ": " + what);
  }

  int64_t integer(const Value &v) const {
    if (v.kind == Value::Kind::Int)
      return v.integer;
    if (v.kind == Value::Kind::Bool)
      return v.boolean;
    if (v.kind == Value::Kind::Float)
      return static_cast<int64_t>(v.number);
    fail("expected an integer, found " + v.typeName());
  }

  Value lookup(const std::string &name) const {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope)
      for (const auto &[key, value] : *scope)
        if (key == name)
          return value;
    return Value();
  }

  void assign(const std::string &name, Value value) {
    for (auto &[key, existing] : scopes_.back())
      if (key == name) {
        existing = std::move(value);
        return;
      }
    scopes_.back().emplace_back(name, std::move(value));
  }

  void body(const Body &statements, std::string &out) {
    for (const auto &s : statements)
      statement(*s, out);
  }

  void statement(const Stmt &s, std::string &out) {
    line_ = s.line;
    switch (s.kind) {
    case Stmt::Kind::Text:
      out += s.text;
      return;
    case Stmt::Kind::Output:
      out += eval(*s.expr).str();
      return;
    case Stmt::Kind::If:
      for (size_t i = 0; i < s.conditions.size(); ++i)
        if (eval(*s.conditions[i]).truthy())
          return body(s.branches[i], out);
      if (s.branches.size() > s.conditions.size())
        body(s.branches.back(), out);
      return;
    case Stmt::Kind::For:
      return loop(s, out);
    case Stmt::Kind::Set:
    case Stmt::Kind::SetBlock: {
      Value value;
      if (s.kind == Stmt::Kind::Set) {
        value = eval(*s.expr);
      } else {
        std::string text;
        body(s.body, text);
        value = Value::of(std::move(text));
      }
      if (s.targets.size() == 1)
        return assign(s.targets[0], std::move(value));
      Value ns = lookup(s.targets[0]);
      if (!ns.isNamespace)
        fail("cannot set an attribute of '" + s.targets[0] + "', which is not a namespace()");
      for (auto &[key, existing] : *ns.dict)
        if (key == s.targets[1]) {
          existing = std::move(value);
          return;
        }
      ns.dict->emplace_back(s.targets[1], std::move(value));
      return;
    }
    case Stmt::Kind::Break:
      throw BreakLoop{};
    case Stmt::Kind::Continue:
      throw ContinueLoop{};
    }
  }

  void loop(const Stmt &s, std::string &out) {
    const Value iterable = eval(*s.expr);
    if (iterable.kind == Value::Kind::Dict && s.targets.size() == 2)
      fail("iterate a dict's items() to unpack two names");
    List items = iterable.items();
    if (s.filter) {
      List kept;
      for (Value &item : items) {
        scopes_.emplace_back();
        bind(s, item);
        if (eval(*s.filter).truthy())
          kept.push_back(item);
        scopes_.pop_back();
      }
      items = std::move(kept);
    }
    if (items.empty())
      return body(s.orElse, out);
    for (size_t i = 0; i < items.size(); ++i) {
      scopes_.emplace_back();
      const auto n = static_cast<int64_t>(items.size()), at = static_cast<int64_t>(i);
      Value loopInfo = Value::ofDict({{"index", Value::of(at + 1)},
                                      {"index0", Value::of(at)},
                                      {"revindex", Value::of(n - at)},
                                      {"revindex0", Value::of(n - at - 1)},
                                      {"first", Value::of(i == 0)},
                                      {"last", Value::of(i + 1 == items.size())},
                                      {"length", Value::of(n)},
                                      {"previtem", i ? items[i - 1] : Value()},
                                      {"nextitem", i + 1 < items.size() ? items[i + 1] : Value()}});
      assign("loop", std::move(loopInfo));
      bind(s, items[i]);
      bool stop = false;
      try {
        body(s.body, out);
      } catch (const BreakLoop &) {
        stop = true;
      } catch (const ContinueLoop &) {
      }
      scopes_.pop_back();
      if (stop)
        break;
    }
  }

  void bind(const Stmt &s, const Value &item) {
    if (s.targets.size() == 1)
      return assign(s.targets[0], item);
    const List parts = item.items();
    if (parts.size() != s.targets.size())
      fail("cannot unpack " + std::to_string(parts.size()) + " values into " +
           std::to_string(s.targets.size()) + " names");
    for (size_t t = 0; t < s.targets.size(); ++t)
      assign(s.targets[t], parts[t]);
  }

  Value eval(const Expr &e) {
    line_ = e.line ? e.line : line_;
    switch (e.kind) {
    case Expr::Kind::Literal:
      return e.value;
    case Expr::Kind::Name:
      return lookup(e.name);
    case Expr::Kind::ListLit: {
      List items;
      for (const ExprPtr &item : e.items)
        items.push_back(eval(*item));
      return Value::ofList(std::move(items));
    }
    case Expr::Kind::DictLit: {
      Dict items;
      for (size_t i = 0; i < e.items.size(); ++i)
        items.emplace_back(eval(*e.keys[i]).str(), eval(*e.items[i]));
      return Value::ofDict(std::move(items));
    }
    case Expr::Kind::Attribute:
      return attribute(eval(*e.items[0]), e.name);
    case Expr::Kind::Subscript:
      return subscript(eval(*e.items[0]), eval(*e.items[1]));
    case Expr::Kind::Slice:
      return slice(eval(*e.items[0]), e.items[1] ? eval(*e.items[1]) : Value(),
                   e.items[2] ? eval(*e.items[2]) : Value(),
                   e.items[3] ? eval(*e.items[3]) : Value());
    case Expr::Kind::Call:
      return call(e);
    case Expr::Kind::Filter:
      return filter(e);
    case Expr::Kind::Test: {
      const bool result = test(e);
      return Value::of(e.negated ? !result : result);
    }
    case Expr::Kind::Unary: {
      const Value v = eval(*e.items[0]);
      if (e.name == "not")
        return Value::of(!v.truthy());
      if (!v.isNumber())
        fail("unary " + e.name + " of " + v.typeName());
      if (e.name == "+")
        return v;
      return v.kind == Value::Kind::Int ? Value::of(-v.integer) : Value::of(-v.number);
    }
    case Expr::Kind::Binary:
      return binary(e);
    case Expr::Kind::Conditional:
      return eval(*e.items[1]).truthy() ? eval(*e.items[0]) : eval(*e.items[2]);
    }
    return Value();
  }

  Value attribute(const Value &object, const std::string &name) {
    if (object.kind == Value::Kind::Dict) {
      Value found = object.get(name);
      if (!found.isUndefined() || object.isNamespace)
        return found;
    }
    // A method, bound: called by the Call that follows. Other names are
    // undefined (`message.tool_calls is defined`).
    static const char *const kStringMethods[] = {"strip",    "lstrip",  "rstrip",     "upper",
                                                 "lower",    "title",   "capitalize", "startswith",
                                                 "endswith", "replace", "split",      "find"};
    static const char *const kDictMethods[] = {"items", "keys", "values", "get"};
    if (object.kind == Value::Kind::String)
      for (const char *known : kStringMethods)
        if (name == known)
          return method(object, name);
    if (object.kind == Value::Kind::Dict && !object.isNamespace)
      for (const char *known : kDictMethods)
        if (name == known)
          return method(object, name);
    return Value();
  }

  Value method(const Value &self, const std::string &name) {
    return Value::ofFunction([this, self, name](Args &args, Kwargs &) -> Value {
      const auto arg = [&](size_t i) { return i < args.size() ? args[i] : Value(); };
      if (self.kind == Value::Kind::String) {
        const std::string &s = self.string;
        if (name == "strip" || name == "lstrip" || name == "rstrip")
          return Value::of(
              strip(s, arg(0).isString() ? arg(0).string : "", name != "rstrip", name != "lstrip"));
        if (name == "upper" || name == "lower") {
          std::string out = s;
          for (char &c : out)
            c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                                  : std::tolower(static_cast<unsigned char>(c)));
          return Value::of(out);
        }
        if (name == "title" || name == "capitalize")
          return filterByName(name, self, {}, {});
        if (name == "startswith" || name == "endswith") {
          const std::string p = arg(0).str();
          const bool ok = p.size() <= s.size() &&
                          (name == "startswith" ? s.compare(0, p.size(), p) == 0
                                                : s.compare(s.size() - p.size(), p.size(), p) == 0);
          return Value::of(ok);
        }
        if (name == "replace")
          return filterByName("replace", self, {arg(0), arg(1)}, {});
        if (name == "split") {
          List parts;
          if (arg(0).isString()) {
            const std::string sep = arg(0).string;
            size_t from = 0;
            for (size_t at; !sep.empty() && (at = s.find(sep, from)) != std::string::npos;
                 from = at + sep.size())
              parts.push_back(Value::of(s.substr(from, at - from)));
            parts.push_back(Value::of(s.substr(from)));
          } else {
            size_t at = 0;
            while (at < s.size()) {
              while (at < s.size() && std::isspace(static_cast<unsigned char>(s[at])))
                ++at;
              size_t end = at;
              while (end < s.size() && !std::isspace(static_cast<unsigned char>(s[end])))
                ++end;
              if (end > at)
                parts.push_back(Value::of(s.substr(at, end - at)));
              at = end;
            }
          }
          return Value::ofList(std::move(parts));
        }
        if (name == "find")
          return Value::of(static_cast<int64_t>(s.find(arg(0).str()) == std::string::npos
                                                    ? -1
                                                    : static_cast<int64_t>(s.find(arg(0).str()))));
      }
      if (self.kind == Value::Kind::Dict) {
        if (name == "items") {
          List out;
          for (const auto &[key, value] : *self.dict)
            out.push_back(Value::ofList({Value::of(key), value}));
          return Value::ofList(std::move(out));
        }
        if (name == "keys" || name == "values") {
          List out;
          for (const auto &[key, value] : *self.dict)
            out.push_back(name == "keys" ? Value::of(key) : value);
          return Value::ofList(std::move(out));
        }
        if (name == "get") {
          const Value found = self.get(arg(0).str());
          return found.isUndefined() ? (args.size() > 1 ? args[1] : Value::none()) : found;
        }
      }
      fail("no method '" + name + "' of " + self.typeName());
    });
  }

  Value subscript(const Value &object, const Value &key) {
    if (object.kind == Value::Kind::Dict)
      return object.get(key.str());
    if (object.kind == Value::Kind::List || object.kind == Value::Kind::String) {
      if (key.kind != Value::Kind::Int)
        return object.kind == Value::Kind::List ? Value() : attribute(object, key.str());
      const List items = object.kind == Value::Kind::List ? *object.list : object.items();
      int64_t i = key.integer;
      if (i < 0)
        i += static_cast<int64_t>(items.size());
      if (i < 0 || i >= static_cast<int64_t>(items.size()))
        return Value();
      return items[static_cast<size_t>(i)];
    }
    return Value();
  }

  Value slice(const Value &object, const Value &startValue, const Value &stopValue,
              const Value &stepValue) {
    const bool text = object.kind == Value::Kind::String;
    if (!text && object.kind != Value::Kind::List)
      fail("cannot slice " + object.typeName());
    const std::u32string chars = text ? codePoints(object.string) : std::u32string();
    const auto n = static_cast<int64_t>(text ? chars.size() : object.list->size());
    const int64_t step =
        stepValue.isUndefined() || stepValue.kind == Value::Kind::None ? 1 : integer(stepValue);
    if (step == 0)
      fail("a slice step must not be zero");
    const auto bound = [&](const Value &v, int64_t fallback) {
      if (v.isUndefined() || v.kind == Value::Kind::None)
        return fallback;
      int64_t i = integer(v);
      if (i < 0)
        i += n;
      return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t start = bound(startValue, step > 0 ? 0 : n - 1);
    const int64_t stop = bound(stopValue, step > 0 ? n : -1);
    std::u32string outText;
    List outList;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (text)
        outText += chars[static_cast<size_t>(i)];
      else
        outList.push_back((*object.list)[static_cast<size_t>(i)]);
    }
    return text ? Value::of(utf8(outText)) : Value::ofList(std::move(outList));
  }

  Value call(const Expr &e) {
    const Value callee = eval(*e.items[0]);
    if (callee.kind != Value::Kind::Function)
      fail("calling " + callee.typeName() + ", which is not a function" +
           (e.items[0]->kind == Expr::Kind::Name ? " ('" + e.items[0]->name + "' is undefined?)"
                                                 : std::string()));
    Args args;
    for (size_t i = 1; i < e.items.size(); ++i)
      args.push_back(eval(*e.items[i]));
    Kwargs kwargs;
    for (const auto &[key, value] : e.kwargs)
      kwargs.emplace_back(key, eval(*value));
    return (*callee.function)(args, kwargs);
  }

  Value binary(const Expr &e) {
    if (e.name == "and") {
      const Value left = eval(*e.items[0]);
      return left.truthy() ? eval(*e.items[1]) : left;
    }
    if (e.name == "or") {
      const Value left = eval(*e.items[0]);
      return left.truthy() ? left : eval(*e.items[1]);
    }
    const Value a = eval(*e.items[0]), b = eval(*e.items[1]);
    if (e.name == "~")
      return Value::of(a.str() + b.str());
    if (e.name == "==")
      return Value::of(equal(a, b));
    if (e.name == "!=")
      return Value::of(!equal(a, b));
    if (e.name == "<" || e.name == ">" || e.name == "<=" || e.name == ">=") {
      try {
        if (e.name == "<")
          return Value::of(less(a, b));
        if (e.name == ">")
          return Value::of(less(b, a));
        if (e.name == "<=")
          return Value::of(!less(b, a));
        return Value::of(!less(a, b));
      } catch (const TemplateError &error) {
        fail(error.what());
      }
    }
    if (e.name == "in" || e.name == "not in") {
      bool found = false;
      if (b.kind == Value::Kind::String)
        found = b.string.find(a.str()) != std::string::npos;
      else if (b.kind == Value::Kind::Dict)
        found = !b.get(a.str()).isUndefined();
      else if (b.kind == Value::Kind::List)
        found = std::any_of(b.list->begin(), b.list->end(),
                            [&](const Value &item) { return equal(item, a); });
      else if (!b.isUndefined())
        fail("'in' of " + b.typeName());
      return Value::of(e.name == "in" ? found : !found);
    }
    if (e.name == "+") {
      if (a.isString() && b.isString())
        return Value::of(a.string + b.string);
      if (a.kind == Value::Kind::List && b.kind == Value::Kind::List) {
        List joined = *a.list;
        joined.insert(joined.end(), b.list->begin(), b.list->end());
        return Value::ofList(std::move(joined));
      }
    }
    if (e.name == "*" && ((a.isString() && b.kind == Value::Kind::Int) ||
                          (b.isString() && a.kind == Value::Kind::Int))) {
      const Value &text = a.isString() ? a : b;
      const int64_t times = a.isString() ? b.integer : a.integer;
      std::string out;
      for (int64_t i = 0; i < times; ++i)
        out += text.string;
      return Value::of(out);
    }
    const auto number = [&](const Value &v) {
      if (v.kind == Value::Kind::Bool)
        return Value::of(int64_t{v.boolean});
      if (!v.isNumber())
        fail("'" + e.name + "' of " + a.typeName() + " and " + b.typeName());
      return v;
    };
    const Value x = number(a), y = number(b);
    const bool ints = x.kind == Value::Kind::Int && y.kind == Value::Kind::Int;
    if (e.name == "+")
      return ints ? Value::of(x.integer + y.integer) : Value::of(x.asDouble() + y.asDouble());
    if (e.name == "-")
      return ints ? Value::of(x.integer - y.integer) : Value::of(x.asDouble() - y.asDouble());
    if (e.name == "*")
      return ints ? Value::of(x.integer * y.integer) : Value::of(x.asDouble() * y.asDouble());
    if (y.asDouble() == 0)
      fail("division by zero");
    if (e.name == "/")
      return Value::of(x.asDouble() / y.asDouble());
    if (e.name == "//")
      return ints ? Value::of(static_cast<int64_t>(std::floor(static_cast<double>(x.integer) /
                                                              static_cast<double>(y.integer))))
                  : Value::of(std::floor(x.asDouble() / y.asDouble()));
    if (e.name == "%") {
      if (ints) {
        int64_t r = x.integer % y.integer;
        if (r != 0 && ((r < 0) != (y.integer < 0)))
          r += y.integer;
        return Value::of(r);
      }
      const double r = std::fmod(x.asDouble(), y.asDouble());
      return Value::of(r != 0 && ((r < 0) != (y.asDouble() < 0)) ? r + y.asDouble() : r);
    }
    fail("unknown operator '" + e.name + "'");
  }

  bool test(const Expr &e) {
    const Value v = eval(*e.items[0]);
    const Value arg = e.items.size() > 1 ? eval(*e.items[1]) : Value();
    const std::string &t = e.name;
    if (t == "defined")
      return !v.isUndefined();
    if (t == "undefined")
      return v.isUndefined();
    if (t == "none")
      return v.kind == Value::Kind::None;
    if (t == "string")
      return v.isString();
    if (t == "number")
      return v.isNumber();
    if (t == "integer")
      return v.kind == Value::Kind::Int;
    if (t == "float")
      return v.kind == Value::Kind::Float;
    if (t == "boolean")
      return v.kind == Value::Kind::Bool;
    if (t == "true")
      return v.kind == Value::Kind::Bool && v.boolean;
    if (t == "false")
      return v.kind == Value::Kind::Bool && !v.boolean;
    if (t == "mapping")
      return v.kind == Value::Kind::Dict;
    if (t == "iterable")
      return v.isIterable();
    if (t == "sequence")
      return v.kind == Value::Kind::List || v.isString() || v.kind == Value::Kind::Dict;
    if (t == "callable")
      return v.kind == Value::Kind::Function;
    if (t == "odd" || t == "even")
      return (integer(v) % 2 != 0) == (t == "odd");
    if (t == "divisibleby")
      return integer(arg) != 0 && integer(v) % integer(arg) == 0;
    if (t == "equalto" || t == "eq" || t == "==" || t == "sameas")
      return equal(v, arg);
    if (t == "ne" || t == "!=")
      return !equal(v, arg);
    if (t == "in") {
      const List items = arg.items();
      return std::any_of(items.begin(), items.end(),
                         [&](const Value &item) { return equal(item, v); });
    }
    if (t == "lower" || t == "upper") {
      const std::string s = v.str();
      return std::none_of(s.begin(), s.end(), [&](char c) {
        return t == "lower" ? std::isupper(static_cast<unsigned char>(c)) != 0
                            : std::islower(static_cast<unsigned char>(c)) != 0;
      });
    }
    fail("no test '" + t + "'");
  }

  Value filter(const Expr &e) {
    const Value v = eval(*e.items[0]);
    Args args;
    for (size_t i = 1; i < e.items.size(); ++i)
      args.push_back(eval(*e.items[i]));
    Kwargs kwargs;
    for (const auto &[key, value] : e.kwargs)
      kwargs.emplace_back(key, eval(*value));
    return filterByName(e.name, v, args, kwargs);
  }

  // A test by name for select/reject: `select('equalto', x)`.
  bool namedTest(const std::string &name, const Value &v, const Value &arg) {
    Expr e;
    e.kind = Expr::Kind::Test;
    e.name = name;
    auto subject = std::make_unique<Expr>();
    subject->kind = Expr::Kind::Literal;
    subject->value = v;
    e.items.push_back(std::move(subject));
    if (!arg.isUndefined()) {
      auto a = std::make_unique<Expr>();
      a->kind = Expr::Kind::Literal;
      a->value = arg;
      e.items.push_back(std::move(a));
    }
    return test(e);
  }

  Value filterByName(const std::string &name, const Value &v, const Args &args,
                     const Kwargs &kwargs) {
    const auto arg = [&](size_t i, const char *key) {
      for (const auto &[k, value] : kwargs)
        if (k == key)
          return value;
      return i < args.size() ? args[i] : Value();
    };
    if (name == "length" || name == "count") {
      if (v.isString())
        return Value::of(static_cast<int64_t>(codePoints(v.string).size()));
      if (v.kind == Value::Kind::List)
        return Value::of(static_cast<int64_t>(v.list->size()));
      if (v.kind == Value::Kind::Dict)
        return Value::of(static_cast<int64_t>(v.dict->size()));
      fail("length of " + v.typeName());
    }
    if (name == "trim")
      return Value::of(
          strip(v.str(), arg(0, "chars").isString() ? arg(0, "chars").string : "", true, true));
    if (name == "tojson") {
      const Value indent = arg(0, "indent");
      return Value::of(v.toJson(indent.isUndefined() || indent.kind == Value::Kind::None
                                    ? -1
                                    : static_cast<int>(integer(indent))));
    }
    if (name == "string")
      return Value::of(v.str());
    if (name == "upper" || name == "lower") {
      std::string out = v.str();
      for (char &c : out)
        c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                              : std::tolower(static_cast<unsigned char>(c)));
      return Value::of(out);
    }
    if (name == "capitalize" || name == "title") {
      std::string out = v.str();
      bool start = true;
      for (char &c : out) {
        const bool letter = std::isalpha(static_cast<unsigned char>(c)) != 0;
        c = static_cast<char>(start && letter ? std::toupper(static_cast<unsigned char>(c))
                                              : std::tolower(static_cast<unsigned char>(c)));
        if (name == "capitalize")
          start = false;
        else
          start = !letter && !std::isdigit(static_cast<unsigned char>(c));
      }
      return Value::of(out);
    }
    if (name == "first" || name == "last") {
      const List items = v.items();
      if (items.empty())
        return Value();
      return name == "first" ? items.front() : items.back();
    }
    if (name == "join") {
      std::string out;
      const List items = v.items();
      const Value attr = arg(1, "attribute");
      for (size_t i = 0; i < items.size(); ++i)
        out += (i ? arg(0, "d").str() : "") +
               (attr.isUndefined() ? items[i] : attribute(items[i], attr.str())).str();
      return Value::of(out);
    }
    if (name == "default" || name == "d") {
      const bool boolean = arg(1, "boolean").truthy();
      if (v.isUndefined() || (boolean && !v.truthy()))
        return arg(0, "default_value").isUndefined() ? Value::of("") : arg(0, "default_value");
      return v;
    }
    if (name == "int")
      return Value::of(v.isString()
                           ? static_cast<int64_t>(std::strtoll(v.string.c_str(), nullptr, 10))
                       : v.isNumber() || v.kind == Value::Kind::Bool ? integer(v)
                                                                     : int64_t{0});
    if (name == "float")
      return Value::of(v.isString()   ? std::strtod(v.string.c_str(), nullptr)
                       : v.isNumber() ? v.asDouble()
                                      : 0.0);
    if (name == "abs")
      return v.kind == Value::Kind::Int ? Value::of(static_cast<int64_t>(std::llabs(v.integer)))
                                        : Value::of(std::fabs(v.asDouble()));
    if (name == "list")
      return Value::ofList(v.items());
    if (name == "reverse") {
      if (v.isString()) {
        std::u32string chars = codePoints(v.string);
        std::reverse(chars.begin(), chars.end());
        return Value::of(utf8(chars));
      }
      List items = v.items();
      std::reverse(items.begin(), items.end());
      return Value::ofList(std::move(items));
    }
    if (name == "items") {
      if (v.kind != Value::Kind::Dict)
        return Value::ofList();
      Args none;
      Kwargs noKwargs;
      return (*method(v, "items").function)(none, noKwargs);
    }
    if (name == "replace") {
      std::string s = v.str();
      const std::string from = arg(0, "old").str(), to = arg(1, "new").str();
      if (from.empty())
        return Value::of(s);
      std::string out;
      size_t at = 0;
      for (size_t found; (found = s.find(from, at)) != std::string::npos; at = found + from.size())
        out += s.substr(at, found - at) + to;
      return Value::of(out + s.substr(at));
    }
    if (name == "safe" || name == "e" || name == "escape")
      return name == "safe" ? v : Value::of(v.str());
    if (name == "map" || name == "select" || name == "reject" || name == "selectattr" ||
        name == "rejectattr") {
      List out;
      for (const Value &item : v.items()) {
        if (name == "map") {
          const Value attr = arg(99, "attribute");
          if (!attr.isUndefined()) {
            const Value found = attribute(item, attr.str());
            out.push_back(found.isUndefined() ? arg(99, "default") : found);
          } else {
            Args rest(args.begin() + (args.empty() ? 0 : 1), args.end());
            out.push_back(filterByName(args.empty() ? "" : args[0].str(), item, rest, {}));
          }
          continue;
        }
        const bool byAttr = name == "selectattr" || name == "rejectattr";
        const Value subject = byAttr ? attribute(item, arg(0, "").str()) : item;
        const size_t testAt = byAttr ? 1 : 0;
        const bool ok = testAt < args.size()
                            ? namedTest(args[testAt].str(), subject,
                                        testAt + 1 < args.size() ? args[testAt + 1] : Value())
                            : subject.truthy();
        if (ok == (name == "select" || name == "selectattr"))
          out.push_back(item);
      }
      return Value::ofList(std::move(out));
    }
    if (name == "unique") {
      List out;
      for (const Value &item : v.items())
        if (std::none_of(out.begin(), out.end(), [&](const Value &o) { return equal(o, item); }))
          out.push_back(item);
      return Value::ofList(std::move(out));
    }
    if (name == "indent") {
      const int64_t width = arg(0, "width").isUndefined() ? 4 : integer(arg(0, "width"));
      const bool first = arg(1, "first").truthy();
      const std::string pad(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
      std::string out = first ? pad : "";
      for (const char c : v.str()) {
        out += c;
        if (c == '\n')
          out += pad;
      }
      return Value::of(out);
    }
    fail("no filter '" + name + "'");
  }

  const Template &tmpl_;
  std::vector<Dict> scopes_;
  int line_ = 0;
};

} // namespace

std::string render(const Template &tmpl, const Value &variables) {
  return Renderer(tmpl, variables).run();
}

} // namespace kiln::text::jinja
