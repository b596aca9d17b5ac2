#include "cli/lnetrctl/yaml_out.hpp"

#include <cctype>
#include <cstdio>
#include <string_view>

namespace lnetr::lnetrctl {
namespace {

bool looks_like_number(std::string_view s) {
  if (s.empty()) return false;
  std::size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == s.size()) return false;
  bool digit = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (std::isdigit(static_cast<unsigned char>(c))) digit = true;
    else if (c != '.' && c != 'e' && c != 'E' && c != '_' && c != 'x' && c != 'X' && c != 'o' && c != '+' &&
             c != '-' && !std::isxdigit(static_cast<unsigned char>(c)))
      return false;
  }
  return digit;
}

bool reserved(std::string_view s) {
  std::string l;
  for (char c : s) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view w : {"true", "false", "null", "~", "yes", "no", "on", "off", "y", "n", ".inf", "-.inf",
                             "+.inf", ".nan"})
    if (l == w) return true;
  return false;
}

// Plain text YAML reads back as this string.  A key is always read as a
// string, so it may look like a number or a boolean (lnetctl's `0: eth0`).
bool plain_ok(std::string_view s, bool key = false) {
  if (s.empty() || (!key && (reserved(s) || looks_like_number(s)))) return false;
  // YAML 1.1 readers (PyYAML) turn 1:30 into 90 and dates into timestamps,
  // and refuse plain = and <<: quote those shapes too.
  if (!key && (s.find(':') != std::string_view::npos || s == "=" || s.starts_with("<<") ||
               (s.size() >= 10 && std::isdigit(static_cast<unsigned char>(s[0])) && s[4] == '-' && s[7] == '-')))
    return false;
  if (std::string_view("-?:,[]{}#&*!|>'\"%@` ").find(s.front()) != std::string_view::npos) return false;
  if (s.starts_with("...")) return false;  // at the start of a line: the end of the document
  if (s.back() == ' ' || s.back() == ':') return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c >= 0x80) return false;  // escapes are quoted
    if (c == ':' && i + 1 < s.size() && s[i + 1] == ' ') return false;
    if (c == '#' && s[i - 1] == ' ') return false;
  }
  return true;
}

std::string dquote(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        // Line breaks YAML would fold inside quotes: NEL, LS, PS.
        if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) {
          out += "\\N";
          ++i;
        } else if (c == 0xe2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
                   (static_cast<unsigned char>(s[i + 2]) == 0xa8 || static_cast<unsigned char>(s[i + 2]) == 0xa9)) {
          out += static_cast<unsigned char>(s[i + 2]) == 0xa8 ? "\\L" : "\\P";
          i += 2;
        } else if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else if (c == 0xc2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) >= 0x80 &&
                   static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
          // C1 controls are not printable in a YAML stream: escaped (\xNN
          // is U+00NN).
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[i + 1]));
          out += buf;
          ++i;
        } else if (c == 0xef && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0xbf &&
                   (static_cast<unsigned char>(s[i + 2]) == 0xbe || static_cast<unsigned char>(s[i + 2]) == 0xbf)) {
          out += static_cast<unsigned char>(s[i + 2]) == 0xbe ? "\\uFFFE" : "\\uFFFF";  // noncharacters, likewise
          i += 2;
        } else {
          out += ch;  // UTF-8 passes through
        }
    }
  }
  return out + "\"";
}

void emit_mapping(std::string& out, const Json& m, std::size_t indent, bool first_inline);
void emit_sequence(std::string& out, const Json& s, std::size_t indent);

bool nested(const Json& v) { return (v.is_object() || v.is_array()) && !v.empty(); }

// `key:` then its value: inline if a scalar, below if a collection.
void emit_value(std::string& out, const Json& v, std::size_t key_col) {
  if (v.is_null()) {
    out += "\n";  // `key:` alone, as lnetctl prints an empty value
  } else if (!nested(v)) {
    out += " " + yaml_scalar(v) + "\n";
  } else if (v.is_object()) {
    out += "\n";
    emit_mapping(out, v, key_col + 4, false);
  } else {
    out += "\n";
    emit_sequence(out, v, key_col == 0 ? 4 : key_col + 2);
  }
}

void emit_mapping(std::string& out, const Json& m, std::size_t indent, bool first_inline) {
  bool first = true;
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!(first && first_inline)) out.append(indent, ' ');
    first = false;
    out += (plain_ok(it.key(), true) ? it.key() : dquote(it.key())) + ":";
    emit_value(out, *it, indent);
  }
}

void emit_sequence(std::string& out, const Json& s, std::size_t indent) {
  for (const Json& item : s) {
    out.append(indent, ' ');
    out += "-";
    if (!nested(item)) {
      out += " " + yaml_scalar(item) + "\n";
    } else if (item.is_object()) {
      out += " ";
      emit_mapping(out, item, indent + 2, true);
    } else {
      out += "\n";
      emit_sequence(out, item, indent + 2);
    }
  }
}

}  // namespace

std::string yaml_scalar(const Json& v) {
  if (v.is_null()) return "~";
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_object()) return "{}";
  if (v.is_array()) return "[]";
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return plain_ok(s) ? s : dquote(s);
  }
  return v.dump();  // numbers as JSON writes them (YAML reads them back)
}

std::string to_yaml(const Json& doc) {
  std::string out;
  if (doc.is_object() && !doc.empty()) emit_mapping(out, doc, 0, false);
  else if (doc.is_array() && !doc.empty()) emit_sequence(out, doc, 0);
  else out = yaml_scalar(doc) + "\n";
  return out;
}

}  // namespace lnetr::lnetrctl
