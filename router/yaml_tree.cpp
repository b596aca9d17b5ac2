#include "router/yaml_tree.hpp"

#include <yaml.h>

#include <algorithm>
#include <limits>

namespace lnetr::yaml {

// YAML's null: an empty plain scalar, "~" or "null".
bool is_null(const Node& n) {
  return n.kind == Node::Kind::scalar && n.plain &&
         (n.text.empty() || n.text == "~" || n.text == "null" || n.text == "Null" || n.text == "NULL");
}

std::string describe(const Node& n) {
  switch (n.kind) {
    case Node::Kind::mapping: return "a mapping";
    case Node::Kind::sequence: return "a sequence";
    case Node::Kind::scalar: break;
  }
  std::string out = "\"";
  for (char c : n.text.substr(0, 64)) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += '?';
      continue;
    }
    out += c;
  }
  if (n.text.size() > 64) out += "...";
  return out + '"';
}

namespace {

Mark to_mark(const yaml_mark_t& m) {
  auto clamp = [](std::size_t v) {
    return static_cast<std::uint32_t>(std::min<std::size_t>(v, std::numeric_limits<std::uint32_t>::max() - 1));
  };
  return {clamp(m.line) + 1, clamp(m.column) + 1};
}

// Line and column of a byte offset (for reader errors, which carry no mark).
Mark mark_of_offset(std::string_view text, std::size_t offset) {
  Mark m;
  offset = std::min(offset, text.size());
  for (std::size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++m.line;
      m.column = 1;
    } else {
      ++m.column;
    }
  }
  return m;
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view what) : text_(text), what_(what) {
    ok_ = yaml_parser_initialize(&p_) != 0;
    if (ok_)
      yaml_parser_set_input_string(&p_, reinterpret_cast<const unsigned char*>(text.data()), text.size());
  }
  ~Parser() {
    if (ok_) yaml_parser_delete(&p_);
  }
  Parser(const Parser&) = delete;
  Parser& operator=(const Parser&) = delete;

  Tree read();

 private:
  struct Frame {
    Node node;
    bool have_key = false;
    Entry pending;
  };

  std::string_view text_;
  std::string_view what_;
  yaml_parser_t p_{};
  bool ok_ = false;

  TreeError syntax_error() const;
};

class Event {
 public:
  yaml_event_t ev{};
  bool live = false;
  Event() = default;
  ~Event() {
    if (live) yaml_event_delete(&ev);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

TreeError Parser::syntax_error() const {
  std::string msg = "YAML syntax error: ";
  msg += p_.problem ? p_.problem : "unknown problem";
  if (p_.error == YAML_READER_ERROR) return {mark_of_offset(text_, p_.problem_offset), msg};
  if (p_.error == YAML_MEMORY_ERROR) return {Mark{}, "out of memory while reading YAML"};
  if (p_.context) {
    msg += " (";
    msg += p_.context;
    msg += ')';
  }
  return {to_mark(p_.problem_mark), msg};
}

Tree Parser::read() {
  Tree tree;
  if (!ok_) {
    tree.error = TreeError{Mark{}, "cannot initialise the YAML parser"};
    return tree;
  }
  std::vector<Frame> stack;
  int documents = 0;

  // Attaches a finished node to its parent; false (with tree.error set) if
  // it cannot be.
  auto attach = [&](Node&& n) -> bool {
    if (stack.empty()) {
      tree.root = std::move(n);
      return true;
    }
    Frame& f = stack.back();
    if (f.node.kind == Node::Kind::sequence) {
      f.node.items.push_back(std::move(n));
    } else if (!f.have_key) {
      if (n.kind != Node::Kind::scalar) {
        tree.error = TreeError{n.mark, "a mapping key must be a plain value, not " + describe(n)};
        return false;
      }
      f.pending.key = std::move(n.text);
      f.pending.key_mark = n.mark;
      f.have_key = true;
    } else {
      f.pending.value = std::move(n);
      f.node.entries.push_back(std::move(f.pending));
      f.pending = Entry{};
      f.have_key = false;
    }
    return true;
  };

  for (;;) {
    Event e;
    if (!yaml_parser_parse(&p_, &e.ev)) {
      tree.error = syntax_error();
      return tree;
    }
    e.live = true;
    const Mark at = to_mark(e.ev.start_mark);
    switch (e.ev.type) {
      case YAML_STREAM_END_EVENT:
        return tree;
      case YAML_DOCUMENT_START_EVENT:
        if (++documents > 1) {
          tree.error = TreeError{at, "more than one YAML document; " + std::string(what_) + " is one document"};
          return tree;
        }
        break;
      case YAML_ALIAS_EVENT:
        tree.error = TreeError{at, "YAML aliases are not supported in " + std::string(what_)};
        return tree;
      case YAML_SCALAR_EVENT: {
        Node n;
        n.kind = Node::Kind::scalar;
        n.plain = e.ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
        n.text.assign(reinterpret_cast<const char*>(e.ev.data.scalar.value), e.ev.data.scalar.length);
        n.mark = at;
        if (!attach(std::move(n))) return tree;
        break;
      }
      case YAML_SEQUENCE_START_EVENT:
      case YAML_MAPPING_START_EVENT: {
        if (stack.size() >= kMaxDepth) {
          tree.error = TreeError{at, "nesting deeper than " + std::to_string(kMaxDepth) + " levels"};
          return tree;
        }
        Frame f;
        f.node.kind = e.ev.type == YAML_SEQUENCE_START_EVENT ? Node::Kind::sequence : Node::Kind::mapping;
        f.node.mark = at;
        stack.push_back(std::move(f));
        break;
      }
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT: {
        Node n = std::move(stack.back().node);
        stack.pop_back();
        if (!attach(std::move(n))) return tree;
        break;
      }
      default:  // stream start, document end, no event
        break;
    }
  }
}

}  // namespace

Tree parse(std::string_view text, std::string_view what) { return Parser(text, what).read(); }

}  // namespace lnetr::yaml
