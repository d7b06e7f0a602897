// A small interpreter for the Jinja subset of chat templates (chat_template.h).
// Values are JSON values; a discarded JSON value stands for Jinja's undefined.
#include "io/chat_template.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

#include "core/json_depth.h"
#include "core/error.h"
#include "core/limits.h"
#include "io/text_input.h"

namespace ulysses {
namespace {

namespace fs = std::filesystem;

// Number text without std::stoll/stod, which throw std::out_of_range past the type's range (found
// by chat_template_fuzz: a 90-digit literal ended the process instead of refusing the template).
std::optional<int64_t> int_of(std::string_view s) {
  int64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}
std::optional<double> float_of(std::string_view s) {
  double v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || s.empty() || !std::isfinite(v)) return std::nullopt;
  return v;
}
using json = nlohmann::ordered_json;

json undefined() { return json(json::value_t::discarded); }
bool is_undef(const json& v) { return v.is_discarded(); }

bool truthy(const json& v) {
  if (is_undef(v) || v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<int64_t>() != 0;
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  return !v.empty();
}

// The characters (code points) of a UTF-8 string, as Python's str sees them; a byte that
// starts no valid sequence is one character of its own.
std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
    if (i + n > s.size()) n = 1;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string py_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[40];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

// json.dumps(v, ensure_ascii=False) with Python's default separators, or with an indent.
void dump_py_json(const json& v, std::string& out, int indent, int depth) {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  if (v.is_object()) {
    if (v.empty()) { out += "{}"; return; }
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += indent < 0 ? ", " : ",";
      first = false;
      newline(depth + 1);
      out += json(it.key()).dump(-1, ' ', false);
      out += ": ";
      dump_py_json(*it, out, indent, depth + 1);
    }
    newline(depth);
    out += '}';
  } else if (v.is_array()) {
    if (v.empty()) { out += "[]"; return; }
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += indent < 0 ? ", " : ",";
      newline(depth + 1);
      dump_py_json(v[i], out, indent, depth + 1);
    }
    newline(depth);
    out += ']';
  } else if (v.is_number_float()) {
    out += py_float(v.get<double>());
  } else if (is_undef(v)) {
    out += "null";
  } else {
    out += v.dump(-1, ' ', false);
  }
}

// Python's str() of a value, as Jinja prints it.
std::string py_str(const json& v, bool nested = false) {
  if (is_undef(v)) return "";
  if (v.is_string()) {
    if (!nested) return v.get<std::string>();
    const std::string& s = v.get_ref<const std::string&>();
    const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
    std::string o(1, q);
    for (char c : s) {
      if (c == q || c == '\\') o += '\\';
      if (c == '\n') { o += "\\n"; continue; }
      o += c;
    }
    return o + q;
  }
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_float()) return py_float(v.get<double>());
  if (v.is_number()) return v.dump();
  std::string o;
  if (v.is_array()) {
    o = "[";
    for (size_t i = 0; i < v.size(); ++i) o += (i ? ", " : "") + py_str(v[i], true);
    return o + "]";
  }
  o = "{";
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it, first = false)
    o += (first ? "" : ", ") + py_str(json(it.key()), true) + ": " + py_str(*it, true);
  return o + "}";
}

// ---- lexing of expressions ----

struct Tok {
  enum Kind { Name, Str, Int, Float, Op, End } kind;
  std::string text;
};

std::vector<Tok> lex_expr(const std::string& s, const std::string& where) {
  std::vector<Tok> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) { ++i; continue; }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Tok::Name, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_' ||
                              (s[j] == '.' && j + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[j + 1])))))
        is_float |= s[j++] == '.';
      std::string num = s.substr(i, j - i);
      num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
      out.push_back({is_float ? Tok::Float : Tok::Int, num});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string v;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          const char e = s[++j];
          v += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
          v += s[j];
        }
      }
      ULY_CHECK(j < s.size(), where << ": unterminated string in '" << s << "'");
      out.push_back({Tok::Str, v});
      i = j + 1;
    } else {
      static const char* ops[] = {"//", "==", "!=", "<=", ">=", "**", "(", ")", "[", "]", "{", "}", ".", ",", ":",
                                  "|",  "~",  "+",  "-",  "*",  "/", "%", "<", ">", "="};
      bool found = false;
      for (const char* op : ops)
        if (s.compare(i, std::strlen(op), op) == 0) {
          out.push_back({Tok::Op, op});
          i += std::strlen(op);
          found = true;
          break;
        }
      ULY_CHECK(found, where << ": unexpected character '" << c << "' in '" << s << "'");
    }
  }
  out.push_back({Tok::End, ""});
  return out;
}

// ---- expressions ----

struct Expr;
using ExprP = std::unique_ptr<Expr>;
struct Expr {
  enum Kind { Lit, Var, Attr, Index, Slice, Call, Filter, Test, Not, Neg, Bin, Cond, List, Dict } kind;
  json value;        // Lit
  std::string name;  // Var, Attr, Filter, Test, Bin (operator), Call (function name when callee is a Var)
  std::vector<ExprP> args;  // operands / arguments (args[0] = subject for Attr/Index/Slice/Filter/Test/Call)
  std::vector<std::pair<std::string, ExprP>> kwargs;
  int depth = 1;  // of the tree below it, bounded by limits::kMaxTemplateDepth
};

ExprP make(Expr::Kind k) {
  auto e = std::make_unique<Expr>();
  e->kind = k;
  return e;
}

// Counts the levels of a recursive descent; more than limits::kMaxTemplateDepth is refused.
struct NestGuard {
  int& depth;
  NestGuard(int& d, const std::string& where) : depth(d) {
    if (++depth > limits::kMaxTemplateDepth) {
      --depth;  // the destructor does not run when the constructor throws
      refuse_nesting(where, limits::kMaxTemplateDepth, "a tag or expression");
    }
  }
  ~NestGuard() { --depth; }
  NestGuard(const NestGuard&) = delete;
  NestGuard& operator=(const NestGuard&) = delete;
};

class ExprParser {
 public:
  ExprParser(std::vector<Tok> toks, std::string where) : t_(std::move(toks)), where_(std::move(where)) {}

  ExprP parse_full() {
    ExprP e = expr();
    expect_end();
    return e;
  }
  ExprP expr() {  // a if c else b
    NestGuard nest(nesting_, where_);
    ExprP e = or_();
    if (is_name("if")) {
      ++p_;
      auto c = make(Expr::Cond);
      adopt(*c, std::move(e));
      adopt(*c, or_());
      if (is_name("else")) {
        ++p_;
        adopt(*c, expr());
      }
      return c;
    }
    return e;
  }
  ExprP or_() { return binary_chain(&ExprParser::and_, {"or"}); }
  ExprP and_() { return binary_chain(&ExprParser::not_, {"and"}); }
  ExprP not_() {
    if (is_name("not")) {
      NestGuard nest(nesting_, where_);
      ++p_;
      auto e = make(Expr::Not);
      adopt(*e, not_());
      return e;
    }
    return compare();
  }
  ExprP compare() {
    ExprP l = math1();
    for (;;) {
      std::string op;
      if (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">=")) op = t_[p_++].text;
      else if (is_name("in")) { ++p_; op = "in"; }
      else if (is_name("not") && t_[p_ + 1].kind == Tok::Name && t_[p_ + 1].text == "in") { p_ += 2; op = "not in"; }
      else return l;
      auto b = make(Expr::Bin);
      b->name = op;
      adopt(*b, std::move(l));
      adopt(*b, math1());
      l = std::move(b);
    }
  }
  ExprP math1() { return binary_chain(&ExprParser::concat, {"+", "-"}); }
  ExprP concat() { return binary_chain(&ExprParser::math2, {"~"}); }
  ExprP math2() { return binary_chain(&ExprParser::unary, {"*", "/", "//", "%"}); }
  ExprP unary() {
    if (is_op("-") || is_op("+")) {
      NestGuard nest(nesting_, where_);
      if (is_op("+")) {
        ++p_;
        return unary();
      }
      ++p_;
      auto e = make(Expr::Neg);
      adopt(*e, unary());
      return filters(std::move(e));
    }
    return filters(postfix(primary()));
  }

  std::vector<std::string> name_list() {  // for-loop targets: a or a, b
    std::vector<std::string> names;
    do {
      ULY_CHECK(t_[p_].kind == Tok::Name, where_ << ": expected a loop variable name");
      names.push_back(t_[p_++].text);
    } while (is_op(",") && ++p_);
    return names;
  }
  bool is_name(const char* n) const { return t_[p_].kind == Tok::Name && t_[p_].text == n; }
  bool is_op(const char* o) const { return t_[p_].kind == Tok::Op && t_[p_].text == o; }
  bool at_end() const { return t_[p_].kind == Tok::End; }
  void skip() { ++p_; }
  void expect_name(const char* n) {
    ULY_CHECK(is_name(n), where_ << ": expected '" << n << "', found '" << t_[p_].text << "'");
    ++p_;
  }
  void expect_end() { ULY_CHECK(at_end(), where_ << ": unexpected '" << t_[p_].text << "'"); }
  std::string take_name() {
    ULY_CHECK(t_[p_].kind == Tok::Name, where_ << ": expected a name, found '" << t_[p_].text << "'");
    return t_[p_++].text;
  }

 private:
  ExprP binary_chain(ExprP (ExprParser::*next)(), std::initializer_list<const char*> ops) {
    ExprP l = (this->*next)();
    for (;;) {
      const char* hit = nullptr;
      for (const char* o : ops)
        if (is_op(o) || is_name(o)) hit = o;
      if (!hit) return l;
      ++p_;
      auto b = make(Expr::Bin);
      b->name = hit;
      adopt(*b, std::move(l));
      adopt(*b, (this->*next)());
      l = std::move(b);
    }
  }
  void expect_op(const char* o) {
    ULY_CHECK(is_op(o), where_ << ": expected '" << o << "', found '" << t_[p_].text << "'");
    ++p_;
  }
  void call_args(Expr& call) {  // after '('
    while (!is_op(")")) {
      if (t_[p_].kind == Tok::Name && t_[p_ + 1].kind == Tok::Op && t_[p_ + 1].text == "=") {
        std::string k = t_[p_].text;
        p_ += 2;
        ExprP v = expr();
        deepen(call, *v);
        call.kwargs.emplace_back(k, std::move(v));
      } else {
        adopt(call, expr());
      }
      if (!is_op(",")) break;
      ++p_;
    }
    expect_op(")");
  }
  ExprP primary() {
    const Tok& t = t_[p_];
    if (t.kind == Tok::Str) {
      auto e = make(Expr::Lit);
      e->value = t.text;
      ++p_;
      while (t_[p_].kind == Tok::Str) e->value = e->value.get<std::string>() + t_[p_++].text;  // "a" "b"
      return e;
    }
    if (t.kind == Tok::Int || t.kind == Tok::Float) {
      auto e = make(Expr::Lit);
      if (t.kind == Tok::Int) {
        const std::optional<int64_t> v = int_of(t.text);
        ULY_CHECK(v, where_ << ": the integer " << t.text.substr(0, 40) << (t.text.size() > 40 ? "..." : "")
                            << " is out of the 64-bit range");
        e->value = *v;
      } else {
        const std::optional<double> v = float_of(t.text);
        ULY_CHECK(v, where_ << ": the number " << t.text.substr(0, 40) << (t.text.size() > 40 ? "..." : "")
                            << " is out of the double range");
        e->value = *v;
      }
      ++p_;
      return e;
    }
    if (t.kind == Tok::Name) {
      ++p_;
      auto e = make(Expr::Lit);
      if (t.text == "true" || t.text == "True") e->value = true;
      else if (t.text == "false" || t.text == "False") e->value = false;
      else if (t.text == "none" || t.text == "None") e->value = nullptr;
      else {
        e->kind = Expr::Var;
        e->name = t.text;
      }
      return e;
    }
    if (is_op("(")) {
      ++p_;
      ExprP e = expr();
      if (is_op(",")) {  // a tuple: a list will do
        auto l = make(Expr::List);
        adopt(*l, std::move(e));
        while (is_op(",")) {
          ++p_;
          if (is_op(")")) break;
          adopt(*l, expr());
        }
        e = std::move(l);
      }
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      ++p_;
      auto l = make(Expr::List);
      while (!is_op("]")) {
        adopt(*l, expr());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("]");
      return l;
    }
    if (is_op("{")) {
      ++p_;
      auto d = make(Expr::Dict);
      while (!is_op("}")) {
        adopt(*d, expr());
        expect_op(":");
        adopt(*d, expr());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("}");
      return d;
    }
    ULY_FAIL(where_ << ": unexpected '" << t.text << "' in an expression");
  }
  ExprP postfix(ExprP e) {
    for (;;) {
      if (is_op(".")) {
        ++p_;
        auto a = make(Expr::Attr);
        a->name = take_name();
        adopt(*a, std::move(e));
        e = std::move(a);
      } else if (is_op("[")) {
        ++p_;
        ExprP idx[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!is_op(":") && !is_op("]")) idx[k] = expr();
          if (k < 2 && is_op(":")) {
            ++p_;
            slice = true;
          } else {
            break;
          }
        }
        expect_op("]");
        // x[] names no item (found by chat_template_fuzz: evaluated as a null operand).
        ULY_CHECK(slice || idx[0], where_ << ": an empty subscript '[]'; give an index or a slice");
        auto s = make(slice ? Expr::Slice : Expr::Index);
        adopt(*s, std::move(e));
        for (int k = 0; k < (slice ? 3 : 1); ++k) adopt(*s, std::move(idx[k]));
        e = std::move(s);
      } else if (is_op("(")) {
        ++p_;
        auto c = make(Expr::Call);
        adopt(*c, std::move(e));
        call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprP filters(ExprP e) {
    for (;;) {
      if (is_op("|")) {
        ++p_;
        auto f = make(Expr::Filter);
        f->name = take_name();
        adopt(*f, std::move(e));
        if (is_op("(")) {
          ++p_;
          call_args(*f);
        }
        e = std::move(f);
      } else if (is_name("is")) {
        ++p_;
        bool negate = false;
        if (is_name("not")) {
          ++p_;
          negate = true;
        }
        auto t = make(Expr::Test);
        t->name = take_name();
        adopt(*t, std::move(e));
        if (is_op("(")) {
          ++p_;
          call_args(*t);
        } else if (!at_end() && (t_[p_].kind == Tok::Str || t_[p_].kind == Tok::Int ||
                                 (t_[p_].kind == Tok::Name && !is_name("and") && !is_name("or") &&
                                  !is_name("else") && !is_name("if")))) {
          adopt(*t, primary());  // `is equalto 3`, `is sameas none`
        }
        e = std::move(t);
        if (negate) {
          auto n = make(Expr::Not);
          adopt(*n, std::move(e));
          e = std::move(n);
        }
      } else {
        return e;
      }
    }
  }

  // Makes `child` an operand of `parent` (null: an absent slice part), keeping trees shallow
  // enough for the recursive evaluation and destruction.
  void deepen(Expr& parent, const Expr& child) {
    parent.depth = std::max(parent.depth, child.depth + 1);
    if (parent.depth > limits::kMaxTemplateDepth) refuse_nesting(where_, limits::kMaxTemplateDepth, "an expression");
  }
  void adopt(Expr& parent, ExprP child) {
    if (child) deepen(parent, *child);
    parent.args.push_back(std::move(child));
  }

  std::vector<Tok> t_;
  std::string where_;
  size_t p_ = 0;
  int nesting_ = 0;
};

// ---- statements ----

struct Node {
  enum Kind { Text, Output, If, For, Set, Break, Continue } kind;
  explicit Node(Kind k) : kind(k) {}
  std::string text;                                             // Text
  ExprP expr;                                                   // Output, For (iterable), Set (value)
  std::vector<std::pair<ExprP, std::vector<Node>>> branches;    // If: condition (null: else) and body
  std::vector<std::string> targets;                             // For: loop variables; Set: name [, attribute]
  ExprP cond;                                                   // For: `if` filter
  std::vector<Node> body, else_body;                            // For
};

struct Piece {
  enum Kind { Text, Expr, Stmt } kind;
  std::string text;
};

// The closing "}}" or "%}" of a tag whose body starts at `from`, skipping string literals
// (`{{ "}}" }}` is one tag, as Jinja's lexer reads it); npos when there is none.
size_t find_tag_end(const std::string& s, size_t from, const std::string& close) {
  for (size_t i = from; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\'' || c == '"') {
      for (++i; i < s.size() && s[i] != c; ++i)
        if (s[i] == '\\') ++i;
      if (i >= s.size()) return std::string::npos;
    } else if (s.compare(i, close.size(), close) == 0) {
      return i;
    }
  }
  return std::string::npos;
}

// Splits the source into text, {{ }} and {% %} pieces, applying whitespace control,
// trim_blocks and lstrip_blocks as transformers configures Jinja.
std::vector<Piece> split_template(const std::string& s, const std::string& origin) {
  std::vector<Piece> out;
  size_t i = 0;
  bool strip_next = false, trim_newline = false;
  while (i <= s.size()) {
    size_t open = s.find('{', i);
    while (open != std::string::npos && open + 1 < s.size() && s[open + 1] != '{' && s[open + 1] != '%' &&
           s[open + 1] != '#')
      open = s.find('{', open + 1);
    if (open != std::string::npos && open + 1 >= s.size()) open = std::string::npos;
    std::string text = s.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (trim_newline && !text.empty() && text[0] == '\n') text.erase(0, 1);
    if (strip_next) text.erase(0, text.find_first_not_of(" \t\r\n") == std::string::npos ? text.size()
                                                                                            : text.find_first_not_of(" \t\r\n"));
    strip_next = trim_newline = false;
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Piece::Text, text});
      break;
    }
    const char kind = s[open + 1];
    const bool block = kind == '%' || kind == '#';
    const bool minus = open + 2 < s.size() && s[open + 2] == '-';
    const bool plus = open + 2 < s.size() && s[open + 2] == '+';
    if (minus) {
      text.erase(text.find_last_not_of(" \t\r\n") + 1);
    } else if (block && !plus) {
      // lstrip_blocks: a tag preceded on its line (in the source) by spaces and tabs only drops them.
      const std::string raw = s.substr(i, open - i);
      const size_t nl = raw.find_last_of('\n');
      const size_t from = nl == std::string::npos ? 0 : nl + 1;
      if ((nl != std::string::npos || i == 0) && raw.find_first_not_of(" \t", from) == std::string::npos)
        text.erase(text.find_last_not_of(" \t") + 1);
    }
    if (!text.empty()) out.push_back({Piece::Text, text});
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const size_t body = open + 2 + ((minus || plus) ? 1 : 0);
    const size_t end = kind == '#' ? s.find(close, body) : find_tag_end(s, body, close);
    ULY_CHECK(end != std::string::npos, origin << ": unterminated '{" << kind << "' at offset " << open);
    size_t body_end = end;
    if (body_end > body && s[body_end - 1] == '-') {
      strip_next = true;
      --body_end;
    }
    if (block && !strip_next) trim_newline = true;
    if (kind != '#') out.push_back({kind == '{' ? Piece::Expr : Piece::Stmt, s.substr(body, body_end - body)});
    i = end + 2;
  }
  return out;
}

class TemplateParser {
 public:
  TemplateParser(std::vector<Piece> pieces, std::string origin) : pieces_(std::move(pieces)), origin_(std::move(origin)) {}

  std::vector<Node> parse_all() {
    std::string end;
    std::vector<Node> nodes = block({}, &end);
    return nodes;
  }

 private:
  // Parses nodes until a statement whose keyword is in `stops` (returned in *stop with its parser).
  std::vector<Node> block(std::initializer_list<const char*> stops, std::string* stop,
                          std::unique_ptr<ExprParser>* stop_parser = nullptr) {
    NestGuard nest(nesting_, origin_);
    std::vector<Node> nodes;
    while (p_ < pieces_.size()) {
      const Piece& piece = pieces_[p_++];
      if (piece.kind == Piece::Text) {
        Node n{Node::Text};
        n.text = piece.text;
        nodes.push_back(std::move(n));
        continue;
      }
      const std::string where = origin_ + ": '" + (piece.kind == Piece::Expr ? "{{" : "{%") + piece.text +
                                (piece.kind == Piece::Expr ? "}}'" : "%}'");
      auto ep = std::make_unique<ExprParser>(lex_expr(piece.text, where), where);
      if (piece.kind == Piece::Expr) {
        Node n{Node::Output};
        n.expr = ep->parse_full();
        nodes.push_back(std::move(n));
        continue;
      }
      const std::string kw = ep->take_name();
      for (const char* s : stops)
        if (kw == s) {
          *stop = kw;
          if (stop_parser) *stop_parser = std::move(ep);
          return nodes;
        }
      if (kw == "if") {
        Node n{Node::If};
        ExprP cond = ep->parse_full();
        for (;;) {
          std::string end;
          std::unique_ptr<ExprParser> next;
          std::vector<Node> body = block({"elif", "else", "endif"}, &end, &next);
          ULY_CHECK(!end.empty(), where << ": no {% endif %}");
          n.branches.emplace_back(std::move(cond), std::move(body));
          if (end == "endif") break;
          if (end == "else") {
            std::vector<Node> els = block({"endif"}, &end);
            ULY_CHECK(end == "endif", where << ": no {% endif %} after {% else %}");
            n.branches.emplace_back(nullptr, std::move(els));
            break;
          }
          cond = next->parse_full();
        }
        nodes.push_back(std::move(n));
      } else if (kw == "for") {
        Node n{Node::For};
        n.targets = ep->name_list();
        ep->expect_name("in");
        n.expr = ep->or_();
        if (ep->is_name("if")) {
          ep->take_name();
          n.cond = ep->or_();
        }
        ep->expect_end();
        std::string end;
        n.body = block({"else", "endfor"}, &end);
        ULY_CHECK(!end.empty(), where << ": no {% endfor %}");
        if (end == "else") {
          n.else_body = block({"endfor"}, &end);
          ULY_CHECK(end == "endfor", where << ": no {% endfor %}");
        }
        nodes.push_back(std::move(n));
      } else if (kw == "set") {
        Node n{Node::Set};
        n.targets.push_back(ep->take_name());
        if (ep->is_op(".")) {
          ep->skip();
          n.targets.push_back(ep->take_name());
        }
        ULY_CHECK(ep->is_op("="), where << ": only '{% set name = value %}' and '{% set ns.attr = value %}' are supported");
        ep->skip();
        n.expr = ep->parse_full();
        nodes.push_back(std::move(n));
      } else if (kw == "break" || kw == "continue") {
        ep->expect_end();
        nodes.push_back(Node{kw == "break" ? Node::Break : Node::Continue});
      } else if (kw == "generation" || kw == "endgeneration") {
        // transformers' assistant-mask marker: rendered as its body.
      } else {
        ULY_FAIL(where << ": the tag '" << kw << "' is not supported by this chat-template renderer "
                       << "(supported: if, for, set, break, continue, generation)");
      }
    }
    return nodes;
  }

  std::vector<Piece> pieces_;
  std::string origin_;
  size_t p_ = 0;
  int nesting_ = 0;
};

// ---- evaluation ----

struct LoopBreak {};
struct LoopContinue {};

class Renderer {
 public:
  Renderer(const std::string& origin, const json& context, int64_t max_steps, const std::atomic<bool>* stop)
      : origin_(origin), max_steps_(max_steps), stop_(stop), cpu_start_(thread_cpu_seconds()) {
    scopes_.push_back(context);
  }

  void run(const std::vector<Node>& nodes, std::string& out) {
    for (const Node& n : nodes) {
      step();
      switch (n.kind) {
        case Node::Text:
          out += n.text;
          check_size(out.size());
          break;
        case Node::Output:
          out += py_str(printable(eval(*n.expr)));
          check_size(out.size());
          break;
        case Node::If:
          for (const auto& [cond, body] : n.branches)
            if (!cond || truthy(eval(*cond))) {
              run(body, out);
              break;
            }
          break;
        case Node::Set: {
          json v = eval(*n.expr);
          if (n.targets.size() == 1) {
            scopes_.back()[n.targets[0]] = checked_depth(std::move(v));
          } else {
            json* ns = lookup(n.targets[0]);
            ULY_CHECK(ns && ns->is_object(), origin_ << ": '{% set " << n.targets[0] << "." << n.targets[1]
                                                     << " %}' needs " << n.targets[0] << " to be a namespace()");
            (*ns)[n.targets[1]] = checked_depth(std::move(v), 1);  // the value alone: not the whole namespace
          }
          break;
        }
        case Node::For: run_for(n, out); break;
        case Node::Break: throw LoopBreak{};
        case Node::Continue: throw LoopContinue{};
      }
    }
  }

 private:
  json* lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (it->is_object() && it->contains(name)) return &(*it)[name];
    return nullptr;
  }

  void run_for(const Node& n, std::string& out) {
    json seq = eval(*n.expr);
    std::vector<json> items;
    if (seq.is_array()) {
      items.assign(seq.begin(), seq.end());
    } else if (seq.is_object()) {
      for (auto it = seq.begin(); it != seq.end(); ++it) items.push_back(it.key());
    } else if (seq.is_string()) {
      for (std::string& c : utf8_chars(seq.get<std::string>())) items.push_back(std::move(c));
    } else if (!is_undef(seq) && !seq.is_null()) {
      ULY_FAIL(origin_ << ": cannot loop over " << seq.type_name());
    }
    auto bind = [&](json& scope, const json& item) {
      if (n.targets.size() == 1) {
        scope[n.targets[0]] = item;
        return;
      }
      ULY_CHECK(item.is_array() && item.size() == n.targets.size(),
                origin_ << ": cannot unpack " << py_str(item, true) << " into " << n.targets.size() << " loop variables");
      for (size_t k = 0; k < n.targets.size(); ++k) scope[n.targets[k]] = item[k];
    };
    if (n.cond) {  // the loop's `if` filters before loop.* is counted
      std::vector<json> kept;
      for (const json& item : items) {
        step();
        scopes_.push_back(json::object());
        bind(scopes_.back(), item);
        const bool keep = truthy(eval(*n.cond));
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items.swap(kept);
    }
    if (items.empty()) {
      run(n.else_body, out);
      return;
    }
    const auto len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      step();  // an empty body still costs a step
      json scope = json::object();
      bind(scope, items[i]);
      scope["loop"] = {{"index", i + 1},       {"index0", i},           {"first", i == 0},
                       {"last", i + 1 == len}, {"length", len},         {"revindex", len - i},
                       {"revindex0", len - i - 1},
                       {"previtem", i > 0 ? items[i - 1] : undefined()},
                       {"nextitem", i + 1 < len ? items[i + 1] : undefined()}};
      scopes_.push_back(std::move(scope));
      try {
        run(n.body, out);
      } catch (const LoopBreak&) {
        scopes_.pop_back();
        break;
      } catch (const LoopContinue&) {
      }
      scopes_.pop_back();
    }
  }

  // The bounds of limits.h: evaluation steps per render, and the size of strings and lists.
  // n: the work of one step that builds or walks n items (range(), join) counts n.
  void step(int64_t n = 1) {
    steps_ += n;
    ULY_CHECK(steps_ <= max_steps_,
              origin_ << ": the template took more than " << max_steps_
                      << " evaluation steps (a runaway loop?)");
    // The CPU time of this thread, looked at every 64 steps (a clock read costs about what a
    // step does): some steps are slow (a 60 MB string built, a filter over a long list), so the
    // step count alone does not bound the time.
    if (steps_ - last_clock_check_ >= 64) {
      last_clock_check_ = steps_;
      ULY_CHECK(!stop_ || !stop_->load(std::memory_order_relaxed),
                origin_ << ": the render was stopped (another render of this job was refused)");
      ULY_CHECK(thread_cpu_seconds() - cpu_start_ <= limits::kMaxTemplateSeconds,
                origin_ << ": the template ran for more than " << limits::kMaxTemplateSeconds
                        << " s of CPU time (a runaway loop?)");
    }
  }
  static double thread_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  void check_size(size_t bytes) const {
    ULY_CHECK(bytes <= limits::kMaxTemplateBytes,
              origin_ << ": the template built a string of more than " << (limits::kMaxTemplateBytes >> 20) << " MiB");
  }
  void check_items(size_t n) const {
    ULY_CHECK(n <= limits::kMaxTemplateItems,
              origin_ << ": the template built a list of more than " << limits::kMaxTemplateItems << " items");
  }

  // A value the template builds (a list, a mapping, a namespace) nests at most kMaxTemplateDepth
  // levels: a loop of `set ns.a = [ns.a]` would otherwise nest once per step, and printing,
  // tojson, == and copies of it recurse once per level. Walked without recursion; the walk
  // costs what the copy into the new value already cost.
  // `within`: the levels above v once it is stored (1 for a namespace attribute).
  json checked_depth(json v, int within = 0) const {
    check_depth(v, 1 + within, "a value the template built");
    return v;
  }
  // The same bound for a value printed or given to tojson, whether the template built it or was
  // given it (a record's tool calls, --chat-template-kwargs: JSON allows 128 levels there):
  // printing and dumping recurse once per level.
  const json& printable(const json& v) const {
    if (v.is_structured()) check_depth(v, 1, "a value printed or given to tojson");
    return v;
  }
  // v's levels, v itself being at level `first`: more than kMaxTemplateDepth is refused.
  void check_depth(const json& v, int first, const char* what) const {
    std::vector<std::pair<const json*, int>> todo{{&v, first}};
    while (!todo.empty()) {
      const auto [p, d] = todo.back();
      todo.pop_back();
      if (!p->is_structured()) continue;
      if (d > limits::kMaxTemplateDepth) refuse_nesting(origin_, limits::kMaxTemplateDepth, what);
      for (const json& c : *p) todo.emplace_back(&c, d + 1);
    }
  }

  [[noreturn]] void type_error(const std::string& what, const json& v) {
    ULY_FAIL(origin_ << ": " << what << " (got " << (is_undef(v) ? "undefined" : v.type_name()) << " "
                     << py_str(v, true) << ")");
  }

  static int64_t to_int(const json& v) {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number()) {  // clamped: a double past 2^63 cast to int64 is undefined
      const double d = v.get<double>();
      if (std::isnan(d)) return 0;
      if (d >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
      if (d <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
      return static_cast<int64_t>(d);
    }
    if (v.is_boolean()) return v.get<bool>();
    if (v.is_string()) {
      return int_of(v.get<std::string>()).value_or(0);
    }
    return 0;
  }

  json slice(const json& v, const json& a, const json& b, const json& c) {
    const bool str = v.is_string();
    if (!str && !v.is_array()) type_error("only strings and lists can be sliced", v);
    const std::vector<std::string> chars = str ? utf8_chars(v.get_ref<const std::string&>()) : std::vector<std::string>();
    const int64_t n = static_cast<int64_t>(str ? chars.size() : v.size());
    const int64_t step = is_undef(c) || c.is_null() ? 1 : to_int(c);
    ULY_CHECK(step != 0, origin_ << ": slice step cannot be zero");
    auto norm = [&](const json& x, int64_t dflt) {
      if (is_undef(x) || x.is_null()) return dflt;
      int64_t i = to_int(x);
      if (i < 0) i += n;
      return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t from = norm(a, step > 0 ? 0 : n - 1), to = norm(b, step > 0 ? n : -1);
    json out = str ? json("") : json::array();
    // i in __int128: a huge step past the end must not wrap.
    for (__int128 i = from; step > 0 ? i < to : i > to; i += step) {
      if (str) out.get_ref<std::string&>() += chars[static_cast<size_t>(i)];
      else out.push_back(v[static_cast<size_t>(i)]);
    }
    return out;
  }

  json index(const json& v, const json& k) {
    if (v.is_object()) {
      const std::string key = k.is_string() ? k.get<std::string>() : py_str(k);
      return v.contains(key) ? v[key] : undefined();
    }
    if ((v.is_array() || v.is_string()) && k.is_number()) {
      const std::vector<std::string> chars = v.is_string() ? utf8_chars(v.get_ref<const std::string&>())
                                                           : std::vector<std::string>();
      const int64_t n = static_cast<int64_t>(v.is_string() ? chars.size() : v.size());
      int64_t i = to_int(k);
      if (i < 0) i += n;
      if (i < 0 || i >= n) return undefined();
      return v.is_string() ? json(chars[static_cast<size_t>(i)]) : v[i];
    }
    return undefined();
  }

  static std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
    size_t b = 0, e = s.size();
    if (left) while (b < e && chars.find(s[b]) != std::string::npos) ++b;
    if (right) while (e > b && chars.find(s[e - 1]) != std::string::npos) --e;
    return s.substr(b, e - b);
  }

  json method(const json& self, const std::string& name, const std::vector<json>& args) {
    auto arg = [&](size_t k) { return k < args.size() ? args[k] : undefined(); };
    if (self.is_string()) {
      const std::string& s = self.get_ref<const std::string&>();
      const std::string ws = " \t\n\r\f\v";
      const std::string chars = arg(0).is_string() ? arg(0).get<std::string>() : ws;
      if (name == "strip") return strip_chars(s, chars, true, true);
      if (name == "lstrip") return strip_chars(s, chars, true, false);
      if (name == "rstrip") return strip_chars(s, chars, false, true);
      if (name == "startswith") return arg(0).is_string() && s.rfind(arg(0).get<std::string>(), 0) == 0;
      if (name == "endswith") {
        const std::string x = arg(0).is_string() ? arg(0).get<std::string>() : "";
        return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
      }
      if (name == "upper" || name == "lower") {
        std::string o = s;
        for (char& c : o) c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                                                : std::tolower(static_cast<unsigned char>(c)));
        return o;
      }
      if (name == "replace") return replace_all(s, py_str(arg(0)), py_str(arg(1)));
      if (name == "split") {
        json out = json::array();
        if (!arg(0).is_string()) {
          std::istringstream is(s);
          for (std::string w; is >> w;) out.push_back(w);
          return out;
        }
        const std::string sep = arg(0).get<std::string>();
        ULY_CHECK(!sep.empty(), origin_ << ": split() with an empty separator");
        size_t p = 0;
        for (size_t q; (q = s.find(sep, p)) != std::string::npos; p = q + sep.size()) out.push_back(s.substr(p, q - p));
        out.push_back(s.substr(p));
        return out;
      }
    }
    if (self.is_object()) {
      if (name == "items") {
        json out = json::array();
        for (auto it = self.begin(); it != self.end(); ++it) out.push_back({it.key(), *it});
        return out;
      }
      if (name == "keys" || name == "values") {
        json out = json::array();
        for (auto it = self.begin(); it != self.end(); ++it) out.push_back(name == "keys" ? json(it.key()) : *it);
        return out;
      }
      if (name == "get") {
        const json v = index(self, arg(0));
        return is_undef(v) ? (args.size() > 1 ? arg(1) : json(nullptr)) : v;
      }
    }
    type_error("no method '" + name + "'", self);
  }

  std::string replace_all(const std::string& s, const std::string& from, const std::string& to) const {
    if (from.empty()) return s;
    std::string out;
    size_t p = 0;
    for (size_t q; (q = s.find(from, p)) != std::string::npos; p = q + from.size()) {
      out.append(s, p, q - p);
      out += to;
      check_size(out.size());
    }
    out.append(s, p, std::string::npos);
    return out;
  }

  json call(const Expr& e) {
    std::vector<json> args;
    for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::Attr) return method(eval(*callee.args[0]), callee.name, args);
    ULY_CHECK(callee.kind == Expr::Var, origin_ << ": only named functions and methods can be called");
    const std::string& f = callee.name;
    if (f == "raise_exception") ULY_FAIL(origin_ << ": the template refused the input: " << py_str(args.empty() ? json("") : args[0]));
    if (f == "namespace") {
      json ns = json::object();
      for (const auto& [k, v] : e.kwargs) ns[k] = eval(*v);
      return checked_depth(std::move(ns));
    }
    if (f == "range") {
      int64_t a = 0, b = 0, step = 1;
      if (args.size() == 1) b = to_int(args[0]);
      else if (args.size() >= 2) a = to_int(args[0]), b = to_int(args[1]);
      if (args.size() == 3) step = to_int(args[2]);
      ULY_CHECK(step != 0, origin_ << ": range() step cannot be zero");
      // The count first, in a width that cannot overflow.
      const __int128 span = step > 0 ? __int128{b} - a : __int128{a} - b;
      const __int128 count = span <= 0 ? 0 : (span + (step > 0 ? step : -__int128{step}) - 1) / (step > 0 ? step : -__int128{step});
      check_items(count > static_cast<__int128>(limits::kMaxTemplateItems) ? limits::kMaxTemplateItems + 1
                                                                           : static_cast<size_t>(count));
      this->step(static_cast<int64_t>(count));
      json out = json::array();
      __int128 i = a;  // one step past the last item may leave int64
      for (int64_t k = 0; k < static_cast<int64_t>(count); ++k, i += step) out.push_back(static_cast<int64_t>(i));
      return out;
    }
    if (f == "strftime_now") {
      char buf[128];
      const std::time_t t = std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      std::strftime(buf, sizeof buf, args.empty() ? "%d %b %Y" : py_str(args[0]).c_str(), &tm);
      return std::string(buf);
    }
    ULY_FAIL(origin_ << ": unknown function '" << f << "' (supported: raise_exception, namespace, range, strftime_now)");
  }

  json filter(const Expr& e) {
    const json v = eval(*e.args[0]);
    std::vector<json> args;
    for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
    json kwargs = json::object();
    for (const auto& [k, x] : e.kwargs) kwargs[k] = eval(*x);
    return apply_filter(e.name, v, args, kwargs);
  }

  // v.<attribute>, where the attribute may be a dotted path ("function.name") or an index.
  json attribute_of(const json& v, const json& attribute) {
    if (!attribute.is_string()) return index(v, attribute);
    json out = v;
    const std::string path = attribute.get<std::string>();
    for (size_t p = 0; p <= path.size();) {
      size_t q = path.find('.', p);
      if (q == std::string::npos) q = path.size();
      const std::string part = path.substr(p, q - p);
      const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
      out = index(out, digits && out.is_array() ? json(int_of(part).value_or(std::numeric_limits<int64_t>::max())) : json(part));
      p = q + 1;
    }
    return out;
  }

  // select/reject(test, args...), selectattr/rejectattr(attribute, test, args...): the items
  // of a list (or the keys of a mapping) for which the test, or without one truthiness, holds.
  json select_items(const std::string& f, const json& v, const std::vector<json>& args) {
    const bool by_attr = f == "selectattr" || f == "rejectattr", keep = f == "select" || f == "selectattr";
    ULY_CHECK(!by_attr || !args.empty(), origin_ << ": '" << f << "' needs an attribute name");
    const size_t t = by_attr ? 1 : 0;
    const std::vector<json> test_args(args.begin() + static_cast<std::ptrdiff_t>(std::min(args.size(), t + 1)),
                                      args.end());
    json out = json::array();
    for (const json& item : v.is_array() ? v : run_list(v)) {
      const json x = by_attr ? attribute_of(item, args[0]) : item;
      const bool hit = args.size() > t ? test_value(py_str(args[t]), x, test_args) : truthy(x);
      if (hit == keep) out.push_back(item);
    }
    return out;
  }

  json apply_filter(const std::string& f, const json& v, const std::vector<json>& args, const json& kwargs) {
    if (f == "trim") return json(strip_chars(py_str(v), " \t\n\r\f\v", true, true));
    if (f == "length" || f == "count") {
      if (v.is_string()) return static_cast<int64_t>(utf8_chars(v.get_ref<const std::string&>()).size());
      if (v.is_array() || v.is_object()) return static_cast<int64_t>(v.size());
      return 0;
    }
    if (f == "select" || f == "reject" || f == "selectattr" || f == "rejectattr") {
      if (is_undef(v) || v.is_null()) return json::array();
      if (!v.is_array() && !v.is_object()) type_error("'" + f + "' needs a list", v);
      return select_items(f, v, args);
    }
    if (f == "map") {  // map(attribute="a"[, default=x]) or map("filter", args...)
      if (is_undef(v) || v.is_null()) return json::array();
      if (!v.is_array() && !v.is_object()) type_error("'map' needs a list", v);
      json out = json::array();
      const std::vector<json> rest(args.begin() + (args.empty() ? 0 : 1), args.end());
      for (const json& item : v.is_array() ? v : run_list(v)) {
        if (kwargs.contains("attribute")) {
          const json x = attribute_of(item, kwargs["attribute"]);
          out.push_back(is_undef(x) && kwargs.contains("default") ? kwargs["default"] : x);
        } else {
          ULY_CHECK(!args.empty(), origin_ << ": 'map' needs a filter name or attribute=");
          const std::string inner = py_str(args[0]);
          ULY_CHECK(inner != "map", origin_ << ": 'map' of 'map' is not supported");
          out.push_back(apply_filter(inner, item, rest, json::object()));
        }
      }
      return out;
    }
    if (f == "tojson") {
      int indent = -1;
      const json& n = !args.empty() && !args[0].is_null() ? args[0] : kwargs.contains("indent") ? kwargs["indent"] : json();
      if (!n.is_null()) {
        const int64_t k = to_int(n);
        ULY_CHECK(k >= 0 && k <= 64, origin_ << ": tojson(indent=" << k << "): an indent in [0, 64] is supported");
        indent = static_cast<int>(k);
      }
      std::string out;
      dump_py_json(printable(v), out, indent, 0);
      return out;
    }
    if (f == "upper" || f == "lower") return method(json(py_str(v)), f, {});
    if (f == "capitalize" || f == "title") {
      std::string s = py_str(v);
      bool start = true;
      for (char& c : s) {
        const bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
        c = static_cast<char>(start && alpha ? std::toupper(static_cast<unsigned char>(c))
                                             : std::tolower(static_cast<unsigned char>(c)));
        if (f == "capitalize") start = false;
        else start = !alpha;
      }
      return s;
    }
    if (f == "first" || f == "last") {
      if (v.is_array()) return v.empty() ? undefined() : (f == "first" ? v.front() : v.back());
      if (v.is_string()) return index(v, f == "first" ? 0 : -1);
      type_error("'" + f + "' needs a list or a string", v);
    }
    if (f == "join") {
      std::string out, sep = args.empty() ? "" : py_str(args[0]);
      if (v.is_array())
        for (size_t k = 0; k < v.size(); ++k) {
          step();
          if (k) out += sep;
          out += py_str(v[k]);
          check_size(out.size());
        }
      return out;
    }
    if (f == "default" || f == "d") {
      const bool boolean = args.size() > 1 && truthy(args[1]);
      return (is_undef(v) || (boolean && !truthy(v))) ? (args.empty() ? json("") : args[0]) : v;
    }
    if (f == "string") return py_str(printable(v));
    if (f == "int") return to_int(v);
    if (f == "list") {
      if (v.is_array()) return v;
      return run_list(v);
    }
    if (f == "items") return method(v, "items", {});
    if (f == "replace") return replace_all(py_str(v), args.size() > 0 ? py_str(args[0]) : "", args.size() > 1 ? py_str(args[1]) : "");
    if (f == "reverse") {
      if (v.is_string()) {
        std::vector<std::string> chars = utf8_chars(v.get<std::string>());
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
        return out;
      }
      if (v.is_array()) return json(std::vector<json>(v.rbegin(), v.rend()));
      type_error("'reverse' needs a list or a string", v);
    }
    if (f == "safe" || f == "e" || f == "escape") return v;
    ULY_FAIL(origin_ << ": unknown filter '" << f << "'");
  }

  json run_list(const json& v) {
    json out = json::array();
    if (v.is_object())
      for (auto it = v.begin(); it != v.end(); ++it) out.push_back(it.key());
    else if (v.is_string())
      for (std::string& c : utf8_chars(v.get<std::string>())) out.push_back(std::move(c));
    return out;
  }

  bool test(const Expr& e) {
    const json v = eval(*e.args[0]);
    std::vector<json> args;
    for (size_t k = 1; k < e.args.size(); ++k) args.push_back(eval(*e.args[k]));
    return test_value(e.name, v, args);
  }

  bool test_value(const std::string& t, const json& v, const std::vector<json>& args) {
    if (t == "defined") return !is_undef(v);
    if (t == "undefined") return is_undef(v);
    if (t == "none") return v.is_null();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.is_number_integer();
    if (t == "float") return v.is_number_float();
    if (t == "boolean") return v.is_boolean();
    if (t == "mapping") return v.is_object();
    if (t == "sequence" || t == "iterable") return v.is_array() || v.is_string() || (t == "iterable" && v.is_object());
    if (t == "true") return v.is_boolean() && v.get<bool>();
    if (t == "false") return v.is_boolean() && !v.get<bool>();
    if (t == "even" || t == "odd") return v.is_number() && (to_int(v) % 2 == 0) == (t == "even");
    if (t == "equalto" || t == "eq" || t == "==" || t == "sameas") return !args.empty() && v == args[0];
    if (t == "ne" || t == "!=") return args.empty() || v != args[0];
    if (t == "in") return !args.empty() && contains(args[0], v);
    if (t == "lt" || t == "<" || t == "le" || t == "<=" || t == "gt" || t == ">" || t == "ge" || t == ">=") {
      ULY_CHECK(!args.empty() && ((v.is_number() && args[0].is_number()) || (v.is_string() && args[0].is_string())),
                origin_ << ": cannot compare " << py_str(v, true) << " and " << (args.empty() ? "nothing" : py_str(args[0], true)));
      const json& b = args[0];
      if (t == "lt" || t == "<") return v < b;
      if (t == "le" || t == "<=") return !(b < v);
      if (t == "gt" || t == ">") return b < v;
      return !(v < b);
    }
    ULY_FAIL(origin_ << ": unknown test 'is " << t << "'");
  }

  json arith(const std::string& op, const json& a, const json& b) {
    if (op == "~" || (op == "+" && a.is_string() && b.is_string())) {
      std::string out = op == "~" ? py_str(a) : a.get<std::string>();
      const std::string tail = op == "~" ? py_str(b) : b.get<std::string>();
      check_size(out.size() + tail.size());
      return out + tail;
    }
    if (op == "+" && a.is_array() && b.is_array()) {
      check_items(a.size() + b.size());
      json out = a;
      out.insert(out.end(), b.begin(), b.end());
      return out;
    }
    if (op == "*" && a.is_string() && b.is_number_integer()) {
      const std::string& unit = a.get_ref<const std::string&>();
      const int64_t times = std::max<int64_t>(b.get<int64_t>(), 0);
      if (!unit.empty()) check_size(times > static_cast<int64_t>(limits::kMaxTemplateBytes / unit.size())
                                        ? limits::kMaxTemplateBytes + 1 : unit.size() * static_cast<size_t>(times));
      std::string out;
      for (int64_t k = 0; k < times && !unit.empty(); ++k) out += unit;
      return out;
    }
    if (!(a.is_number() || a.is_boolean()) || !(b.is_number() || b.is_boolean()))
      ULY_FAIL(origin_ << ": cannot apply '" << op << "' to " << py_str(a, true) << " and " << py_str(b, true));
    const bool ints = !a.is_number_float() && !b.is_number_float();
    if (ints && op != "/") {
      const int64_t x = to_int(a), y = to_int(b);
      // Python's integers do not overflow; ours are 64-bit, and a result past them is refused
      // (a wrapped value would be wrong, and signed overflow is undefined behaviour).
      int64_t r = 0;
      bool overflow = false;
      if (op == "+") overflow = __builtin_add_overflow(x, y, &r);
      else if (op == "-") overflow = __builtin_sub_overflow(x, y, &r);
      else if (op == "*") overflow = __builtin_mul_overflow(x, y, &r);
      ULY_CHECK(!overflow, origin_ << ": integer overflow in '" << x << " " << op << " " << y
                                   << "' (integers are 64-bit here)");
      if (op == "+" || op == "-" || op == "*") return r;
      ULY_CHECK(y != 0, origin_ << ": division by zero");
      if (y == -1) {  // x / -1 and x % -1 trap (SIGFPE) for the smallest x
        ULY_CHECK(op == "%" || x != std::numeric_limits<int64_t>::min(),
                  origin_ << ": integer overflow in '" << x << " // -1' (integers are 64-bit here)");
        return op == "%" ? int64_t{0} : -x;
      }
      if (op == "//") return x / y - ((x % y != 0) && ((x < 0) != (y < 0)));
      if (op == "%") {  // Python's sign: that of the divisor (no sum that can overflow)
        const int64_t m = x % y;
        return m != 0 && ((m < 0) != (y < 0)) ? m + y : m;
      }
    }
    const double x = a.get<double>(), y = b.get<double>();
    if (op == "+") return x + y;
    if (op == "-") return x - y;
    if (op == "*") return x * y;
    ULY_CHECK(y != 0, origin_ << ": division by zero");
    if (op == "/") return x / y;
    if (op == "//") return std::floor(x / y);
    return std::fmod(std::fmod(x, y) + y, y);
  }

  bool contains(const json& hay, const json& needle) {
    if (hay.is_string()) return needle.is_string() && hay.get<std::string>().find(needle.get<std::string>()) != std::string::npos;
    if (hay.is_array()) return std::find(hay.begin(), hay.end(), needle) != hay.end();
    if (hay.is_object()) return needle.is_string() && hay.contains(needle.get<std::string>());
    return false;
  }

  json eval(const Expr& e) {
    step();
    switch (e.kind) {
      case Expr::Lit: return e.value;
      case Expr::Var: {
        const json* v = lookup(e.name);
        return v ? *v : undefined();
      }
      case Expr::Attr: {
        const json o = eval(*e.args[0]);
        return o.is_object() && o.contains(e.name) ? o[e.name] : undefined();
      }
      case Expr::Index: return index(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Slice: {
        auto part = [&](size_t k) { return e.args[k] ? eval(*e.args[k]) : undefined(); };
        return slice(eval(*e.args[0]), part(1), part(2), part(3));
      }
      case Expr::Call: return call(e);
      case Expr::Filter: return filter(e);
      case Expr::Test: return test(e);
      case Expr::Not: return !truthy(eval(*e.args[0]));
      case Expr::Neg: {
        const json v = eval(*e.args[0]);
        if (v.is_number_float()) return json(-v.get<double>());
        const int64_t x = to_int(v);
        ULY_CHECK(x != std::numeric_limits<int64_t>::min(),
                  origin_ << ": integer overflow in '-(" << x << ")' (integers are 64-bit here)");
        return json(-x);
      }
      case Expr::Cond:
        if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
        return e.args.size() > 2 ? eval(*e.args[2]) : undefined();
      case Expr::List: {
        json out = json::array();
        for (const auto& a : e.args) out.push_back(eval(*a));
        return checked_depth(std::move(out));
      }
      case Expr::Dict: {
        json out = json::object();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) out[py_str(eval(*e.args[k]))] = eval(*e.args[k + 1]);
        return checked_depth(std::move(out));
      }
      case Expr::Bin: break;
    }
    const std::string& op = e.name;
    if (op == "and") {
      const json a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    if (op == "or") {
      const json a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    const json a = eval(*e.args[0]), b = eval(*e.args[1]);
    if (op == "==") return !is_undef(a) && !is_undef(b) ? a == b : is_undef(a) && is_undef(b);
    if (op == "!=") return !(!is_undef(a) && !is_undef(b) ? a == b : is_undef(a) && is_undef(b));
    if (op == "in") return contains(b, a);
    if (op == "not in") return !contains(b, a);
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      const bool comparable = (a.is_number() && b.is_number()) || (a.is_string() && b.is_string());
      if (!comparable) ULY_FAIL(origin_ << ": cannot compare " << py_str(a, true) << " " << op << " " << py_str(b, true));
      if (op == "<") return a < b;
      if (op == ">") return b < a;
      if (op == "<=") return !(b < a);
      return !(a < b);
    }
    return arith(op, a, b);
  }

  std::string origin_;
  std::vector<json> scopes_;
  int64_t steps_ = 0;
  const int64_t max_steps_;
  const std::atomic<bool>* stop_;
  const double cpu_start_;
  int64_t last_clock_check_ = 0;
};

std::string read_file_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  ULY_CHECK(in.good(), p.string() << ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

// A template file is text: transformers reads it as UTF-8 and refuses other bytes; rendered, they
// went on into the tokens unseen.
std::string read_chat_template_file(const std::string& path) {
  std::string text = read_file_text(path);
  ULY_CHECK(utf8_valid_bytes(text.data(), text.size()) == text.size(),
            path << ": the chat template holds bytes that are not UTF-8 text");
  return text;
}

namespace {

fs::path folder_of(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
}

json read_tokenizer_config(const fs::path& dir) {
  const fs::path p = dir / "tokenizer_config.json";
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return json::object();
  const std::string text = read_file_text(p);
  check_json_depth(text, p.string());
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    ULY_FAIL(p.string() << ": invalid JSON (" << e.what() << ")");
  }
}

}  // namespace

struct ChatTemplate::Impl {
  std::vector<Node> nodes;
};

ChatTemplate::ChatTemplate(const std::string& source, std::string origin)
    : impl_(std::make_unique<Impl>()), origin_(std::move(origin)) {
  impl_->nodes = TemplateParser(split_template(source, origin_), origin_).parse_all();
}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const json& context, int64_t max_steps, const std::atomic<bool>* stop) const {
  std::string out;
  Renderer r(origin_, context.is_object() ? context : json::object(), max_steps, stop);
  try {
    r.run(impl_->nodes, out);
  } catch (const LoopBreak&) {
    ULY_FAIL(origin_ << ": {% break %} outside a loop");
  } catch (const LoopContinue&) {
    ULY_FAIL(origin_ << ": {% continue %} outside a loop");
  }
  return out;
}

std::optional<std::string> find_chat_template(const std::string& path, std::string* origin) {
  const fs::path dir = folder_of(path);
  std::error_code ec;
  if (fs::is_regular_file(dir / "chat_template.jinja", ec)) {
    if (origin) *origin = (dir / "chat_template.jinja").string();
    return read_chat_template_file((dir / "chat_template.jinja").string());
  }
  const json c = read_tokenizer_config(dir);
  const std::string where = (dir / "tokenizer_config.json").string() + ": chat_template";
  if (!c.is_object() || !c.contains("chat_template") || c["chat_template"].is_null()) return std::nullopt;
  const json& t = c["chat_template"];
  if (origin) *origin = where;
  if (t.is_string()) return t.get<std::string>();
  ULY_CHECK(t.is_array(), where << " must be a string or a list of {\"name\", \"template\"}");
  for (const json& e : t)
    if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
      return e["template"].get<std::string>();
  ULY_FAIL(where << ": the list has no entry named \"default\"");
}

json parse_chat_template_kwargs(const std::string& text, const std::string& option) {
  json kwargs;
  check_json_depth(text, option);
  try {
    kwargs = json::parse(text);
  } catch (const json::exception& e) {
    ULY_FAIL(option << ": not valid JSON (" << e.what() << "): " << text);
  }
  ULY_CHECK(kwargs.is_object(), option << ": expects a JSON object of template variables, e.g. "
                                          "'{\"enable_thinking\": false}', got " << text);
  for (const char* key : {"messages", "add_generation_prompt"})
    ULY_CHECK(!kwargs.contains(key), option << ": '" << key << "' is set from each record; it cannot be a kwarg");
  return kwargs;
}

json chat_special_tokens(const std::string& path) {
  const json c = read_tokenizer_config(folder_of(path));
  json out = json::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    std::string v;
    if (c.is_object() && c.contains(key)) {
      const json& x = c[key];
      if (x.is_string()) v = x.get<std::string>();
      else if (x.is_object() && x.contains("content") && x["content"].is_string()) v = x["content"].get<std::string>();
    }
    out[key] = v;
  }
  return out;
}

}  // namespace ulysses
