// A YAML document (JSON included) as a small tree of nodes with positions,
// read with libyaml.  Used by the configuration loader and by lnetr-control's
// management API.
//
// Accepted YAML: one document; anchors are ignored and aliases refused (the
// tree stays a tree); tags are ignored; every scalar is kept as text, with
// whether it was plain (unquoted), so the reader decides what `16` means.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lnetr::yaml {

inline constexpr std::size_t kMaxDepth = 64;  // nesting of collections

struct Mark {
  std::uint32_t line = 1;    // 1-based
  std::uint32_t column = 1;  // 1-based
};

struct Entry;

struct Node {
  enum class Kind : std::uint8_t { scalar, mapping, sequence };
  Kind kind = Kind::scalar;
  bool plain = true;  // a scalar written without quotes or block style
  std::string text;
  Mark mark;
  std::vector<Node> items;      // sequence
  std::vector<Entry> entries;   // mapping, in document order
};

struct Entry {
  std::string key;
  Mark key_mark;
  Node value;
};

// YAML's null: an empty plain scalar, "~" or "null".
bool is_null(const Node& n);
// "a mapping", "a sequence", or the scalar quoted (cut at 64 characters).
std::string describe(const Node& n);

struct TreeError {
  Mark mark;
  std::string message;
};

struct Tree {
  std::optional<Node> root;  // absent: an empty stream
  std::optional<TreeError> error;
};

// Parse `text`, one document of `what` (for messages: "a configuration").
Tree parse(std::string_view text, std::string_view what);

}  // namespace lnetr::yaml
