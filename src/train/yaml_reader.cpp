#include "train/yaml_reader.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/limits.h"

namespace ulysses {
namespace {

std::string at_mark(const YAML::Mark& m) {
  return "line " + std::to_string(m.line + 1) + ", column " + std::to_string(m.column + 1);
}

nlohmann::json scalar_value(const std::string& tag, const std::string& s) {
  if (tag == "!") return s;  // quoted
  if (s == "true" || s == "True") return true;
  if (s == "false" || s == "False") return false;
  if (s == "null" || s == "~") return nullptr;
  // from_chars, not stoll/stod: no exception per non-number (an alias-expanded config
  // can hold a million scalars).
  const char* first = s.data() + (!s.empty() && s[0] == '+' ? 1 : 0);
  const char* last = s.data() + s.size();
  long long i = 0;
  if (auto r = std::from_chars(first, last, i); r.ec == std::errc() && r.ptr == last && first != last) return i;
  double d = 0;
  // "nan" and "inf" stay text: a folder may be called nan, and no option takes them as numbers.
  if (auto r = std::from_chars(first, last, d);
      r.ec == std::errc() && r.ptr == last && first != last && std::isfinite(d))
    return d;
  return s;
}

// Builds the JSON value of one document with an explicit stack (no recursion of ours).
class JsonBuilder : public YAML::EventHandler {
 public:
  explicit JsonBuilder(const std::string& source) : source_(source) {}

  std::optional<YAML::Mark> document_start;
  nlohmann::json root;

  void OnDocumentStart(const YAML::Mark& mark) override { document_start = mark; }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (expecting_key()) ULY_FAIL(source_ << ": a key must be a plain name, got an empty key at " << at_mark(mark));
    add(nullptr, 1, anchor);
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const auto it = anchors_.find(anchor);
    ULY_CHECK(it != anchors_.end(), source_ << ": an alias to an unknown anchor at " << at_mark(mark));
    if (expecting_key()) {
      ULY_CHECK(it->second.value.is_string(), source_ << ": a key must be a plain name, got an alias of a "
                                                      << it->second.value.type_name() << " at " << at_mark(mark));
      take_key(it->second.value.get<std::string>(), mark);
      return;
    }
    count(it->second.nodes);  // before the copy: aliases of aliases stand for exponentially many nodes
    add(it->second.value, it->second.nodes, 0);
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    if (expecting_key()) {
      take_key(value, mark);
      if (anchor != 0) anchors_[anchor] = {value, 1};
      return;
    }
    add(scalar_value(tag, value), 1, anchor);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, nlohmann::json::array(), anchor, "list");
  }
  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, nlohmann::json::object(), anchor, "mapping");
  }
  void OnMapEnd() override { close(); }

 private:
  struct Frame {
    nlohmann::json value;
    std::string path;                          // dotted, for messages ("optimizer")
    YAML::anchor_t anchor = 0;
    size_t nodes = 1;                          // of this subtree, for its aliases' budget
    std::optional<std::string> key;            // a mapping's key waiting for its value
    std::map<std::string, size_t> key_lines;   // a mapping's keys so far, with their lines
  };
  struct Anchored {
    nlohmann::json value;
    size_t nodes;
  };

  bool expecting_key() const { return !stack_.empty() && stack_.back().value.is_object() && !stack_.back().key; }

  void take_key(const std::string& key, const YAML::Mark& mark) {
    Frame& f = stack_.back();
    const std::string name = f.path.empty() ? key : f.path + "." + key;
    const auto [it, fresh] = f.key_lines.emplace(key, mark.line + 1);
    ULY_CHECK(fresh, source_ << ": key '" << name << "' is given twice (line " << it->second << " and line "
                             << mark.line + 1 << "); a reader would silently keep only the last");
    count(1);
    f.key = key;
  }

  void count(size_t n) {
    nodes_ += n;
    ULY_CHECK(nodes_ <= limits::kMaxYamlNodes,
              source_ << ": the YAML expands to more than " << limits::kMaxYamlNodes
                      << " nodes (aliases of aliases?); a training config is a few dozen keys");
  }

  void open(const YAML::Mark& mark, nlohmann::json empty, YAML::anchor_t anchor, const char* what) {
    if (expecting_key()) ULY_FAIL(source_ << ": a key must be a plain name, got a " << what << " at " << at_mark(mark));
    // Checked before the parser descends into the new level.
    if (stack_.size() + 1 > static_cast<size_t>(limits::kMaxYamlDepth))
      refuse_nesting(source_, limits::kMaxYamlDepth, at_mark(mark));
    count(1);
    std::string path;
    if (!stack_.empty()) {
      const Frame& p = stack_.back();
      const std::string part = p.key ? *p.key : "[" + std::to_string(p.value.size()) + "]";
      path = p.path.empty() ? part : p.path + (p.key ? "." : "") + part;
    }
    stack_.push_back({std::move(empty), std::move(path), anchor, 1, std::nullopt, {}});
  }

  void close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    add_counted(std::move(f.value), f.nodes, f.anchor);
  }

  // A scalar or alias: counted here; a container was counted when it opened.
  void add(nlohmann::json v, size_t nodes, YAML::anchor_t anchor) {
    if (nodes == 1) count(1);
    add_counted(std::move(v), nodes, anchor);
  }

  void add_counted(nlohmann::json v, size_t nodes, YAML::anchor_t anchor) {
    if (anchor != 0) anchors_[anchor] = {v, nodes};
    if (stack_.empty()) {
      root = std::move(v);
      return;
    }
    Frame& p = stack_.back();
    p.nodes += nodes;
    if (p.value.is_array()) {
      p.value.push_back(std::move(v));
    } else {
      p.value[*p.key] = std::move(v);
      p.key.reset();
    }
  }

  const std::string& source_;
  std::vector<Frame> stack_;
  std::unordered_map<YAML::anchor_t, Anchored> anchors_;
  size_t nodes_ = 0;
};

}  // namespace

nlohmann::json read_yaml(const std::string& text, const std::string& source) {
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    JsonBuilder first(source);
    if (!parser.HandleNextDocument(first)) return nlohmann::json::object();  // no document at all
    JsonBuilder second(source);
    ULY_CHECK(!parser.HandleNextDocument(second),
              source << ": a second YAML document at "
                     << (second.document_start ? at_mark(*second.document_start) : std::string("its end"))
                     << " (after '---'); a training config is one document");
    if (first.root.is_null()) return nlohmann::json::object();
    return std::move(first.root);
  } catch (const YAML::Exception& e) {
    ULY_FAIL(source << ": invalid YAML at line " << e.mark.line + 1 << ", column " << e.mark.column + 1 << ": "
                    << e.msg);
  }
}

}  // namespace ulysses
