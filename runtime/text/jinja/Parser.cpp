// Template text to statements: a lexer that cuts the source into text and
// tags (whitespace control: "-" on a tag's side, trim_blocks and
// lstrip_blocks for statement and comment tags, as Hugging Face configures
// Jinja2 for chat templates), each tag into tokens, and a recursive-descent
// parser with Jinja2's precedence: conditional, or, and, not, comparisons
// and tests, + and -, ~, *, / and // and %, unary, then postfix (attribute,
// subscript, slice, call) and filters.
#include "runtime/text/jinja/Ast.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace kiln::text::jinja {
namespace {

struct Token {
  enum class Kind { Name, Int, Float, String, Op, End };
  Kind kind = Kind::End;
  std::string text;
  int line = 0;
};

// A piece of the source: text, an output tag's tokens or a statement's.
struct Piece {
  enum class Kind { Text, Output, Statement };
  Kind kind;
  std::string text;
  std::vector<Token> tokens;
  int line = 0;
};

class Lexer {
public:
  Lexer(const std::string &source, const std::string &name) : src_(source), name_(name) {}

  std::vector<Piece> pieces() {
    std::vector<Piece> out;
    std::string text;
    bool trimNext = false;    // strip whitespace at the start of the next text
    bool trimNewline = false; // drop one newline there (trim_blocks)
    while (at_ < src_.size()) {
      const size_t open = findOpen(at_);
      const size_t begin = at_;
      std::string chunk = src_.substr(at_, open - at_);
      advanceLines(chunk);
      if (trimNext) {
        size_t first = 0;
        while (first < chunk.size() && std::isspace(static_cast<unsigned char>(chunk[first])))
          ++first;
        chunk.erase(0, first);
      } else if (trimNewline) {
        if (chunk.compare(0, 1, "\n") == 0)
          chunk.erase(0, 1);
        else if (chunk.compare(0, 2, "\r\n") == 0)
          chunk.erase(0, 2);
      }
      trimNext = trimNewline = false;
      at_ = open;
      if (open >= src_.size()) {
        text += chunk;
        break;
      }
      const char type = src_[open + 1]; // '{', '%' or '#'
      const int line = line_;
      at_ = open + 2;
      bool stripBefore = false, keepBefore = false;
      if (at_ < src_.size() && src_[at_] == '-')
        stripBefore = true, ++at_;
      else if (at_ < src_.size() && src_[at_] == '+')
        keepBefore = true, ++at_;
      if (stripBefore) {
        while (!chunk.empty() && std::isspace(static_cast<unsigned char>(chunk.back())))
          chunk.pop_back();
      } else if (type != '{' && !keepBefore) {
        // lstrip_blocks: spaces and tabs from the line's start to the tag.
        size_t p = open;
        while (p > begin && (src_[p - 1] == ' ' || src_[p - 1] == '\t'))
          --p;
        if (p == 0 || src_[p - 1] == '\n')
          chunk.resize(chunk.size() - std::min(chunk.size(), open - p));
      }
      text += chunk;
      bool stripAfter = false;
      if (type == '#') {
        const size_t close = src_.find("#}", at_);
        if (close == std::string::npos)
          fail(line, "a comment is not closed (#})");
        stripAfter = close > at_ && src_[close - 1] == '-';
        advanceLines(src_.substr(at_, close - at_));
        at_ = close + 2;
      } else {
        Piece piece;
        piece.kind = type == '{' ? Piece::Kind::Output : Piece::Kind::Statement;
        piece.line = line;
        piece.tokens = tokens(type == '{' ? '}' : '%', &stripAfter);
        if (!text.empty()) {
          out.push_back({Piece::Kind::Text, text, {}, line});
          text.clear();
        }
        out.push_back(std::move(piece));
      }
      trimNext = stripAfter;
      trimNewline = !stripAfter && type != '{';
    }
    if (!text.empty())
      out.push_back({Piece::Kind::Text, text, {}, line_});
    return out;
  }

private:
  [[noreturn]] void fail(int line, const std::string &what) {
    throw TemplateError(name_ + ":" + std::to_string(line) + ": " + what);
  }

  size_t findOpen(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    return src_.size();
  }

  void advanceLines(const std::string &text) {
    for (const char c : text)
      line_ += c == '\n';
  }

  // The tokens up to the tag's close ("}}" or "%}", with an optional "-").
  std::vector<Token> tokens(char close, bool *stripAfter) {
    std::vector<Token> out;
    const int start = line_;
    for (;;) {
      while (at_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[at_]))) {
        line_ += src_[at_] == '\n';
        ++at_;
      }
      if (at_ >= src_.size())
        fail(start, std::string("a tag is not closed (") + close + "})");
      const char c = src_[at_];
      const auto charAt = [&](size_t i) { return i < src_.size() ? src_[i] : '\0'; };
      if ((c == '-' || c == '+') && charAt(at_ + 1) == close && charAt(at_ + 2) == '}') {
        *stripAfter = c == '-';
        at_ += 3;
        return out;
      }
      if (c == close && at_ + 1 < src_.size() && src_[at_ + 1] == '}') {
        *stripAfter = false;
        at_ += 2;
        return out;
      }
      Token token;
      token.line = line_;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        const size_t begin = at_;
        while (at_ < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[at_])) || src_[at_] == '_'))
          ++at_;
        token.kind = Token::Kind::Name;
        token.text = src_.substr(begin, at_ - begin);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        const size_t begin = at_;
        while (at_ < src_.size() &&
               (std::isdigit(static_cast<unsigned char>(src_[at_])) || src_[at_] == '_'))
          ++at_;
        token.kind = Token::Kind::Int;
        if (at_ + 1 < src_.size() && src_[at_] == '.' &&
            std::isdigit(static_cast<unsigned char>(src_[at_ + 1]))) {
          ++at_;
          while (at_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[at_])))
            ++at_;
          token.kind = Token::Kind::Float;
        }
        token.text = src_.substr(begin, at_ - begin);
      } else if (c == '\'' || c == '"') {
        token.kind = Token::Kind::String;
        ++at_;
        while (at_ < src_.size() && src_[at_] != c) {
          char d = src_[at_++];
          if (d == '\\' && at_ < src_.size()) {
            const char e = src_[at_++];
            d = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
          }
          line_ += d == '\n';
          token.text += d;
        }
        if (at_ >= src_.size())
          fail(token.line, "a string is not closed");
        ++at_;
      } else {
        static const char *const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                           "/",  "%",  "~",  "<",  ">",  "(",  ")", "[", "]",
                                           "{",  "}",  ",",  ".",  ":",  "|",  "="};
        token.kind = Token::Kind::Op;
        for (const char *op : kOps)
          if (src_.compare(at_, std::char_traits<char>::length(op), op) == 0) {
            token.text = op;
            break;
          }
        if (token.text.empty())
          fail(line_, std::string("unexpected character '") + c + "'");
        at_ += token.text.size();
      }
      out.push_back(std::move(token));
    }
  }

  const std::string &src_;
  const std::string &name_;
  size_t at_ = 0;
  int line_ = 1;
};

class ExprParser {
public:
  ExprParser(const std::vector<Token> &tokens, size_t start, const std::string &name, int line)
      : tokens_(tokens), at_(start), name_(name), line_(line) {}

  ExprPtr expression() { return conditional(); }
  // Without `a if b else c` at the top: a for-loop's iterable, which an
  // `if` filter may follow.
  ExprPtr plainExpression() { return orExpr(); }
  size_t position() const { return at_; }
  bool done() const { return at_ >= tokens_.size(); }
  const Token &peek(size_t ahead = 0) const {
    static const Token kEnd;
    return at_ + ahead < tokens_.size() ? tokens_[at_ + ahead] : kEnd;
  }
  bool isOp(const char *op, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::Op && peek(ahead).text == op;
  }
  bool isName(const char *name, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::Name && peek(ahead).text == name;
  }
  void expectOp(const char *op) {
    if (!isOp(op))
      fail(std::string("expected '") + op + "'" + found());
    ++at_;
  }
  std::string expectName() {
    if (peek().kind != Token::Kind::Name)
      fail("expected a name" + found());
    return tokens_[at_++].text;
  }
  [[noreturn]] void fail(const std::string &what) const {
    throw TemplateError(name_ + ":" + std::to_string(peek().line ? peek().line : line_) + ": " +
                        what);
  }
  std::string found() const {
    return done() ? ", found the end of the tag" : ", found '" + peek().text + "'";
  }

private:
  ExprPtr node(Expr::Kind kind) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = peek().line ? peek().line : line_;
    return e;
  }

  ExprPtr conditional() {
    ExprPtr value = orExpr();
    if (!isName("if"))
      return value;
    ++at_;
    ExprPtr e = node(Expr::Kind::Conditional);
    ExprPtr condition = orExpr();
    ExprPtr otherwise;
    if (isName("else")) {
      ++at_;
      otherwise = conditional();
    } else {
      otherwise = node(Expr::Kind::Literal); // undefined
    }
    e->items.push_back(std::move(value));
    e->items.push_back(std::move(condition));
    e->items.push_back(std::move(otherwise));
    return e;
  }

  ExprPtr binary(ExprPtr left, const std::string &op, ExprPtr right) {
    ExprPtr e = node(Expr::Kind::Binary);
    e->name = op;
    e->items.push_back(std::move(left));
    e->items.push_back(std::move(right));
    return e;
  }

  ExprPtr orExpr() {
    ExprPtr left = andExpr();
    while (isName("or")) {
      ++at_;
      left = binary(std::move(left), "or", andExpr());
    }
    return left;
  }

  ExprPtr andExpr() {
    ExprPtr left = notExpr();
    while (isName("and")) {
      ++at_;
      left = binary(std::move(left), "and", notExpr());
    }
    return left;
  }

  ExprPtr notExpr() {
    if (isName("not")) {
      ++at_;
      ExprPtr e = node(Expr::Kind::Unary);
      e->name = "not";
      e->items.push_back(notExpr());
      return e;
    }
    return compare();
  }

  ExprPtr compare() {
    ExprPtr left = additive();
    for (;;) {
      static const char *const kOps[] = {"==", "!=", "<=", ">=", "<", ">"};
      bool matched = false;
      for (const char *op : kOps)
        if (isOp(op)) {
          ++at_;
          left = binary(std::move(left), op, additive());
          matched = true;
          break;
        }
      if (matched)
        continue;
      if (isName("in")) {
        ++at_;
        left = binary(std::move(left), "in", additive());
      } else if (isName("not") && isName("in", 1)) {
        at_ += 2;
        left = binary(std::move(left), "not in", additive());
      } else {
        return left;
      }
    }
  }

  ExprPtr additive() {
    ExprPtr left = concat();
    while (isOp("+") || isOp("-")) {
      const std::string op = tokens_[at_++].text;
      left = binary(std::move(left), op, concat());
    }
    return left;
  }

  ExprPtr concat() {
    ExprPtr left = multiplicative();
    while (isOp("~")) {
      ++at_;
      left = binary(std::move(left), "~", multiplicative());
    }
    return left;
  }

  ExprPtr multiplicative() {
    ExprPtr left = unary();
    while (isOp("*") || isOp("/") || isOp("//") || isOp("%")) {
      const std::string op = tokens_[at_++].text;
      left = binary(std::move(left), op, unary());
    }
    return left;
  }

  ExprPtr unary() {
    if (isOp("-") || isOp("+")) {
      ExprPtr e = node(Expr::Kind::Unary);
      e->name = tokens_[at_++].text;
      e->items.push_back(unary());
      return e;
    }
    return filtered(postfix(primary()));
  }

  void arguments(Expr &call) {
    expectOp("(");
    while (!isOp(")")) {
      if (peek().kind == Token::Kind::Name && isOp("=", 1)) {
        std::string key = tokens_[at_].text;
        at_ += 2;
        call.kwargs.emplace_back(std::move(key), expression());
      } else {
        call.items.push_back(expression());
      }
      if (!isOp(","))
        break;
      ++at_;
    }
    expectOp(")");
  }

  ExprPtr filtered(ExprPtr value) {
    for (;;) {
      if (isOp("|")) {
        ++at_;
        ExprPtr e = node(Expr::Kind::Filter);
        e->name = expectName();
        e->items.push_back(std::move(value));
        if (isOp("("))
          arguments(*e);
        value = std::move(e);
      } else if (isName("is")) {
        ++at_;
        ExprPtr e = node(Expr::Kind::Test);
        if (isName("not")) {
          ++at_;
          e->negated = true;
        }
        e->name = peek().kind == Token::Kind::Name ? expectName() : "";
        if (e->name.empty() && (isOp("==") || isOp("!=")))
          e->name = tokens_[at_++].text;
        if (e->name == "none")
          e->name = "none";
        e->items.push_back(std::move(value));
        if (isOp("("))
          arguments(*e);
        else if (!done() &&
                 (peek().kind == Token::Kind::String || peek().kind == Token::Kind::Int ||
                  (peek().kind == Token::Kind::Name && !isName("and") && !isName("or") &&
                   !isName("else") && !isName("if"))))
          e->items.push_back(primary()); // `is divisibleby 3`, `is equalto 'x'`
        value = std::move(e);
      } else {
        return value;
      }
    }
  }

  ExprPtr postfix(ExprPtr value) {
    for (;;) {
      if (isOp(".")) {
        ++at_;
        ExprPtr e = node(Expr::Kind::Attribute);
        e->name = peek().kind == Token::Kind::Int ? tokens_[at_++].text : expectName();
        e->items.push_back(std::move(value));
        value = std::move(e);
      } else if (isOp("[")) {
        ++at_;
        ExprPtr parts[3];
        int colons = 0;
        for (;;) {
          if (isOp("]"))
            break;
          if (isOp(":")) {
            ++at_;
            if (++colons > 2)
              fail("a slice has at most two ':'");
            continue;
          }
          parts[colons] = expression();
        }
        expectOp("]");
        ExprPtr e = node(colons ? Expr::Kind::Slice : Expr::Kind::Subscript);
        e->items.push_back(std::move(value));
        if (!colons && !parts[0])
          fail("an empty subscript");
        for (int p = 0; p < (colons ? 3 : 1); ++p)
          e->items.push_back(std::move(parts[p]));
        value = std::move(e);
      } else if (isOp("(")) {
        ExprPtr e = node(Expr::Kind::Call);
        e->items.push_back(std::move(value));
        arguments(*e);
        value = std::move(e);
      } else {
        return value;
      }
    }
  }

  ExprPtr primary() {
    const Token &token = peek();
    if (done())
      fail("expected an expression, found the end of the tag");
    if (token.kind == Token::Kind::Int || token.kind == Token::Kind::Float) {
      ExprPtr e = node(Expr::Kind::Literal);
      std::string digits;
      for (char c : token.text)
        if (c != '_')
          digits += c;
      e->value = token.kind == Token::Kind::Int
                     ? Value::of(static_cast<int64_t>(std::strtoll(digits.c_str(), nullptr, 10)))
                     : Value::of(std::strtod(digits.c_str(), nullptr));
      ++at_;
      return e;
    }
    if (token.kind == Token::Kind::String) {
      ExprPtr e = node(Expr::Kind::Literal);
      std::string text;
      while (peek().kind == Token::Kind::String) // adjacent strings join
        text += tokens_[at_++].text;
      e->value = Value::of(std::move(text));
      return e;
    }
    if (token.kind == Token::Kind::Name) {
      ExprPtr e = node(Expr::Kind::Literal);
      const std::string &name = token.text;
      if (name == "true" || name == "True")
        e->value = Value::of(true);
      else if (name == "false" || name == "False")
        e->value = Value::of(false);
      else if (name == "none" || name == "None")
        e->value = Value::none();
      else {
        e->kind = Expr::Kind::Name;
        e->name = name;
      }
      ++at_;
      return e;
    }
    if (isOp("(")) {
      ++at_;
      ExprPtr inner = expression();
      if (isOp(",")) { // a tuple: a list here
        ExprPtr e = node(Expr::Kind::ListLit);
        e->items.push_back(std::move(inner));
        while (isOp(",")) {
          ++at_;
          if (isOp(")"))
            break;
          e->items.push_back(expression());
        }
        inner = std::move(e);
      }
      expectOp(")");
      return inner;
    }
    if (isOp("[")) {
      ++at_;
      ExprPtr e = node(Expr::Kind::ListLit);
      while (!isOp("]")) {
        e->items.push_back(expression());
        if (!isOp(","))
          break;
        ++at_;
      }
      expectOp("]");
      return e;
    }
    if (isOp("{")) {
      ++at_;
      ExprPtr e = node(Expr::Kind::DictLit);
      while (!isOp("}")) {
        e->keys.push_back(expression());
        expectOp(":");
        e->items.push_back(expression());
        if (!isOp(","))
          break;
        ++at_;
      }
      expectOp("}");
      return e;
    }
    fail("expected an expression" + found());
  }

  const std::vector<Token> &tokens_;
  size_t at_;
  const std::string &name_;
  int line_;
};

class Parser {
public:
  Parser(std::vector<Piece> pieces, const std::string &name)
      : pieces_(std::move(pieces)), name_(name) {}

  Body parse() {
    std::string end;
    Body body = block({}, &end);
    return body;
  }

private:
  [[noreturn]] void fail(int line, const std::string &what) const {
    throw TemplateError(name_ + ":" + std::to_string(line) + ": " + what);
  }

  // Statements up to one of `ends` (its keyword into *end), or the end.
  Body block(const std::vector<std::string> &ends, std::string *end) {
    Body body;
    while (at_ < pieces_.size()) {
      const Piece &piece = pieces_[at_];
      if (piece.kind == Piece::Kind::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Text;
        s->text = piece.text;
        body.push_back(std::move(s));
        ++at_;
        continue;
      }
      if (piece.kind == Piece::Kind::Output) {
        ExprParser p(piece.tokens, 0, name_, piece.line);
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Output;
        s->line = piece.line;
        s->expr = p.expression();
        if (!p.done())
          p.fail("unexpected '" + p.peek().text + "' in {{ }}");
        body.push_back(std::move(s));
        ++at_;
        continue;
      }
      if (piece.tokens.empty() || piece.tokens[0].kind != Token::Kind::Name)
        fail(piece.line, "a statement tag needs a keyword");
      const std::string keyword = piece.tokens[0].text;
      for (const std::string &e : ends)
        if (keyword == e) {
          *end = keyword;
          return body;
        }
      body.push_back(statement(keyword));
    }
    if (!ends.empty())
      fail(pieces_.empty() ? 1 : pieces_.back().line,
           "the template ends inside a block: expected {% " + ends.back() + " %}");
    return body;
  }

  std::unique_ptr<Stmt> statement(const std::string &keyword) {
    const Piece &piece = pieces_[at_];
    ExprParser p(piece.tokens, 1, name_, piece.line);
    auto s = std::make_unique<Stmt>();
    s->line = piece.line;
    ++at_;
    const auto finish = [&] {
      if (!p.done())
        p.fail("unexpected '" + p.peek().text + "' in {% " + keyword + " %}");
    };
    if (keyword == "if") {
      s->kind = Stmt::Kind::If;
      s->conditions.push_back(p.expression());
      finish();
      for (;;) {
        std::string end;
        s->branches.push_back(block({"elif", "else", "endif"}, &end));
        const Piece &tag = pieces_[at_];
        ExprParser q(tag.tokens, 1, name_, tag.line);
        ++at_;
        if (end == "endif")
          break;
        if (end == "elif") {
          s->conditions.push_back(q.expression());
          continue;
        }
        std::string last;
        s->branches.push_back(block({"endif"}, &last));
        ++at_;
        break;
      }
      return s;
    }
    if (keyword == "for") {
      s->kind = Stmt::Kind::For;
      s->targets.push_back(p.expectName());
      while (p.isOp(",")) {
        p.expectOp(",");
        s->targets.push_back(p.expectName());
      }
      if (!p.isName("in"))
        p.fail("expected 'in'" + p.found());
      ExprParser rest(piece.tokens, p.position() + 1, name_, piece.line);
      s->expr = rest.plainExpression();
      if (rest.isName("if")) {
        ExprParser condition(piece.tokens, rest.position() + 1, name_, piece.line);
        s->filter = condition.expression();
        if (!condition.done())
          condition.fail("unexpected '" + condition.peek().text + "' in {% for %}");
      } else if (!rest.done()) {
        rest.fail("unexpected '" + rest.peek().text + "' in {% for %}");
      }
      std::string end;
      s->body = block({"else", "endfor"}, &end);
      ++at_;
      if (end == "else") {
        s->orElse = block({"endfor"}, &end);
        ++at_;
      }
      return s;
    }
    if (keyword == "set") {
      s->targets.push_back(p.expectName());
      if (p.isOp(".")) {
        p.expectOp(".");
        s->targets.push_back(p.expectName());
      }
      if (p.isOp("=")) {
        p.expectOp("=");
        s->kind = Stmt::Kind::Set;
        s->expr = p.expression();
        finish();
        return s;
      }
      finish();
      s->kind = Stmt::Kind::SetBlock;
      std::string end;
      s->body = block({"endset"}, &end);
      ++at_;
      return s;
    }
    if (keyword == "break" || keyword == "continue") {
      s->kind = keyword == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
      finish();
      return s;
    }
    if (keyword == "generation" || keyword == "endgeneration") {
      // Hugging Face's marker of the assistant's tokens: no output of its own.
      s->kind = Stmt::Kind::Text;
      return s;
    }
    fail(piece.line, "{% " + keyword +
                         " %} is not a statement Kiln's chat templates take (if, "
                         "for, set, break, continue)");
  }

  std::vector<Piece> pieces_;
  const std::string &name_;
  size_t at_ = 0;
};

} // namespace

Template parseTemplate(const std::string &source, const std::string &name) {
  Template parsed;
  parsed.name = name;
  // Jinja2 drops one newline at the end of a template (keep_trailing_newline
  // is off in Hugging Face's environment).
  std::string text = source;
  if (text.size() >= 2 && text.compare(text.size() - 2, 2, "\r\n") == 0)
    text.resize(text.size() - 2);
  else if (!text.empty() && text.back() == '\n')
    text.pop_back();
  Lexer lexer(text, name);
  parsed.body = Parser(lexer.pieces(), name).parse();
  return parsed;
}

} // namespace kiln::text::jinja
