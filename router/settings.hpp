// The one table of lnetr's settings: every key of the configuration's
// setting sections (`global`, an NI's `tunables` and `lnd tunables`, a
// route's, `buffers`, `routing`, `dataplane` and its subsections, `control`),
// spelt as `lnetctl export` spells it, with the Config field it fills, its
// values, its default and where it takes effect.
//
// The YAML loader parses these sections from the table (router/config_yaml*),
// holds each value to its effect (a value lnetr does not apply is warned about
// or refused by name), and docs/configuration.md's key reference is generated
// from it (tests/unit/router/settings_test.cpp checks the document, that
// every field the table fills has a reader, and that every Field of those
// sections is in the table).  Keys whose values have a grammar of their own
// (NIDs, lists, choices) are `custom`: listed here, parsed by hand code.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "router/config.hpp"

namespace lnetr::config {

enum class Section : std::uint8_t {
  global,
  tunables,      // net[].local NI(s)[].tunables (or the net's)
  lnd_tunables,  // net[].local NI(s)[].lnd tunables (or the net's)
  route,         // route[]
  routing,
  buffers,
  dataplane,
  socklnd,  // dataplane.socklnd
  o2iblnd,  // dataplane.o2iblnd
  limits,   // dataplane.limits
  port,     // dataplane.ports[]
  impair,   // dataplane.ports[].impair
  control,
};

// The section's path as written in a file ("dataplane.socklnd").
std::string_view section_path(Section s) noexcept;

enum class Kind : std::uint8_t {
  integer,  // [lo, hi]
  flag,     // 0 or 1
  text,     // 1..hi characters
  custom,   // parsed by the loader's own code
};

// Where a setting takes effect.
enum class Effect : std::uint8_t {
  start,    // applied when the process that reads it starts (an import that differs is warned about)
  runtime,  // applied at start and changed while running (lnetrctl set, route add, import)
  warned,   // lnetr does not do it: a value other than the default is named in a warning, not in force
  refused,  // only the default is what lnetr does: another value is refused by name
  ignored,  // deprecated or obsolete, ignored as the kernel ignores it
  derived,  // computed from other settings (as the kernel computes it); accepted from exports
};
std::string_view to_string(Effect e) noexcept;

// The process that applies it.
enum class Applier : std::uint8_t { dataplane, control, both, none };
std::string_view to_string(Applier a) noexcept;

using FieldRef = std::variant<Field<std::int32_t>*, Field<std::uint32_t>*, Field<std::uint16_t>*,
                              Field<bool>*, Field<std::string>*>;

struct Setting {
  Section section;
  std::string_view key;    // as written in the file
  std::string_view field;  // the member it fills, "SocklndParams::keepalive"; empty: not kept
  Kind kind;
  std::int64_t lo = 0, hi = 0;  // integer: the range; text: hi is the longest
  Effect effect = Effect::start;
  Applier applier = Applier::dataplane;
  // The field in a section object (Tunables, GlobalConfig, ...), for the
  // kinds the table parses; null for custom keys and keys not kept.
  FieldRef (*ref)(void* section) = nullptr;
  // The default as written, where `ref` gives none (custom keys, keys not kept).
  std::string_view dflt = {};
  // What it does in lnetr (the reference's text); for warned and refused
  // keys, why another value is not in force (the warning's text).
  std::string_view note = {};
  bool o2ib_only = false;  // an o2iblnd key of `lnd tunables` (warned about on tcp nets)
};

// Every setting, section by section, in the reference's order.
std::span<const Setting> settings() noexcept;
const Setting* find_setting(Section s, std::string_view key) noexcept;

// A field's value as the file writes it ("1", "16384", "transfer").
std::string value_text(const FieldRef& f);
// The setting's default as written.
std::string default_text(const Setting& s);

// docs/configuration.md's key reference (Markdown), generated from the table.
std::string reference_markdown();

}  // namespace lnetr::config
