// The settings table (router/settings.hpp) against the loader, the sources
// and docs/configuration.md: every key parses into the field its row names,
// a value lnetr does not apply is warned about or refused by name, every
// Field of the setting sections is a row, every applied field has a reader,
// and the document's reference is the one the table generates.
#include "router/settings.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace lnetr::config {
namespace {

using ::testing::HasSubstr;

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A value for a custom key whose default is no value.
std::string sample(const Setting& s) {
  static const std::map<std::string_view, std::string_view> kSamples = {
      {"main_core", "1"},         {"name", "dpdk0"}, {"device", "net_null0"}, {"address", "10.9.0.1/24"},
      {"vlan", "100"},            {"net", "tcp9"},   {"gateway", "10.1.0.2@o2ib"},
      {"socket_group", "lnetr-admin"}, {"readonly_socket", "/run/lnetr/ro.sock"},
      {"readonly_socket_group", "lnetr-monitor"}, {"management_interface", "eth9"}};
  const std::string d = default_text(s);
  if (!d.empty()) return d;
  auto it = kSamples.find(s.key);
  return it == kSamples.end() ? "" : std::string(it->second);
}

bool is_subsection(const Setting& s) {
  return s.kind == Kind::custom && s.field.empty() && s.key != "max_intf" && s.key != "map_on_demand";
}

// `key: value` lines of every row of `sec` (indented), values as `value` says.
template <class V>
std::string lines(Section sec, const std::string& indent, V&& value) {
  std::string out;
  for (const Setting& s : settings()) {
    if (s.section != sec || is_subsection(s) || s.key == "max_intf") continue;
    const std::string v = value(s);
    if (!v.empty()) out += indent + std::string(s.key) + ": " + v + "\n";
  }
  return out;
}

// A whole configuration giving every key of the table, each as `value` says.
template <class V>
std::string every_key(V&& value) {
  return "net:\n  - net type: o2ib\n    local NI(s):\n      - nid: 10.1.0.1@o2ib\n        tunables:\n" +
         lines(Section::tunables, "          ", value) + "        lnd tunables:\n" +
         lines(Section::lnd_tunables, "          ", value) + "route:\n  - " +
         lines(Section::route, "    ", value).substr(4) + "routing:\n" + lines(Section::routing, "  ", value) +
         "buffers:\n" + lines(Section::buffers, "  ", value) + "global:\n" + lines(Section::global, "  ", value) +
         "dataplane:\n" + lines(Section::dataplane, "  ", value) + "  socklnd:\n" +
         lines(Section::socklnd, "    ", value) + "  o2iblnd:\n" + lines(Section::o2iblnd, "    ", value) +
         "  limits:\n" + lines(Section::limits, "    ", value) + "  ports:\n    - " +
         lines(Section::port, "      ", value).substr(6) + "      impair:\n" +
         lines(Section::impair, "        ", value) + "control:\n" + lines(Section::control, "  ", value);
}

void* object(Config& c, Section s) {
  switch (s) {
    case Section::global: return &c.global;
    case Section::tunables: return &c.nets.at(0).nis.at(0).tunables;
    case Section::lnd_tunables: return &c.nets.at(0).nis.at(0).lnd_tunables;
    case Section::route: return &c.routes.at(0);
    case Section::routing: return &c.routing;
    case Section::buffers: return &c.buffers;
    case Section::dataplane: return &c.dataplane;
    case Section::socklnd: return &c.dataplane.socklnd;
    case Section::o2iblnd: return &c.dataplane.o2iblnd;
    case Section::limits: return &c.dataplane.limits;
    case Section::port: return &c.dataplane.ports.at(0);
    case Section::impair: return &c.dataplane.ports.at(0).impair;
    case Section::control: return &c.control;
  }
  return nullptr;
}

std::vector<std::string> texts(const std::vector<ConfigError>& v) {
  std::vector<std::string> out;
  for (const auto& e : v) out.push_back(e.to_string());
  return out;
}

TEST(Settings, EveryKeyLoadsAtItsDefaultIntoItsFieldWithoutAWord) {
  const std::string text = every_key(sample);
  auto r = load_config(text, "every.yaml");
  ASSERT_TRUE(r.has_value()) << text << "\n" << ::testing::PrintToString(texts(r.error()));
  EXPECT_THAT(texts(r.value().warnings), ::testing::IsEmpty()) << text;
  Config& c = r.value().config;
  for (const Setting& s : settings()) {
    if (!s.ref) continue;
    const bool given = std::visit([](auto* f) { return f->given(); }, s.ref(object(c, s.section)));
    EXPECT_TRUE(given) << section_path(s.section) << "." << s.key << " was not filled from the file";
    EXPECT_EQ(value_text(s.ref(object(c, s.section))), sample(s)) << s.key;
  }
}

TEST(Settings, EveryKeyOutsideItsRangeIsRefusedByName) {
  for (const Setting& s : settings()) {
    if (s.kind != Kind::integer || s.lo <= std::numeric_limits<std::int32_t>::min()) continue;
    const std::string text = every_key([&](const Setting& o) { return &o == &s ? std::to_string(s.lo - 1) : sample(o); });
    auto r = load_config(text, "every.yaml");
    ASSERT_FALSE(r.has_value()) << s.key;
    ASSERT_EQ(r.error().size(), 1u) << ::testing::PrintToString(texts(r.error()));
    EXPECT_THAT(r.error()[0].to_string(), HasSubstr(std::string(s.key) + ": expected ")) << s.key;
  }
}

// A value lnetr does not apply is never taken silently.
TEST(Settings, EveryValueNotInForceIsWarnedOrRefusedByName) {
  int held = 0;
  for (const Setting& s : settings()) {
    if (s.effect != Effect::warned && s.effect != Effect::refused) continue;
    if (s.kind != Kind::integer && s.kind != Kind::flag) continue;
    const std::string d = default_text(s);
    const std::string other = s.kind == Kind::flag ? (d == "1" ? "0" : "1") : std::to_string(d == std::to_string(s.lo) ? s.lo + 1 : s.lo);
    const std::string text = every_key([&](const Setting& o) { return &o == &s ? other : sample(o); });
    auto r = load_config(text, "every.yaml");
    const std::string said = std::string(s.key) + " " + other + " is not " +
                             (s.effect == Effect::warned ? "in force: " : "supported: ") + std::string(s.note);
    if (s.effect == Effect::warned) {
      ASSERT_TRUE(r.has_value()) << s.key;
      EXPECT_THAT(texts(r.value().warnings), ::testing::ElementsAre(HasSubstr(said))) << s.key;
    } else {
      ASSERT_FALSE(r.has_value()) << s.key;
      EXPECT_THAT(texts(r.error()), ::testing::ElementsAre(HasSubstr(said))) << s.key;
    }
    ++held;
  }
  EXPECT_GE(held, 12);
}

// The structs of the setting sections and the fields the loader fills
// outside the table (an NI's identity, CPTs; a peer's NIDs).
const std::map<std::string, Section> kStructs = {
    {"GlobalConfig", Section::global},   {"Tunables", Section::tunables},      {"LndTunables", Section::lnd_tunables},
    {"RouteConfig", Section::route},     {"RoutingConfig", Section::routing},  {"BufferConfig", Section::buffers},
    {"DataplaneConfig", Section::dataplane}, {"SocklndParams", Section::socklnd}, {"O2iblndParams", Section::o2iblnd},
    {"LimitsConfig", Section::limits},   {"PortConfig", Section::port},        {"ImpairConfig", Section::impair},
    {"ControlConfig", Section::control}};

// Every Field<...> member of those structs in router/config.hpp.
std::set<std::string> declared_fields() {
  const std::string hpp = read(std::filesystem::path(LNETR_SOURCE_DIR) / "router" / "config.hpp");
  std::set<std::string> out;
  const std::regex start(R"(^struct (\w+) \{)"), field(R"(^\s+Field<.*>\s+(\w+)\s*[{;])");
  std::string current;
  std::istringstream in(hpp);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, start)) current = kStructs.count(m[1]) ? std::string(m[1]) : "";
    else if (line.starts_with("};")) current.clear();
    else if (!current.empty() && std::regex_search(line, m, field)) out.insert(current + "::" + std::string(m[1]));
  }
  return out;
}

TEST(Settings, EveryFieldOfTheSettingSectionsIsARow) {
  const std::set<std::string> fields = declared_fields();
  ASSERT_GE(fields.size(), 80u);  // the scan found the structs
  std::set<std::string> rows;
  for (const Setting& s : settings())
    if (!s.field.empty()) rows.insert(std::string(s.field));
  rows.insert("PortConfig::prefix_len");  // filled by `address` (a.b.c.d/len)
  for (const std::string& f : fields) EXPECT_TRUE(rows.count(f)) << f << " is parsed but has no row in the settings table";
  for (const std::string& r : rows) EXPECT_TRUE(fields.count(r)) << r << " names no Field of router/config.hpp";
}

// Every field the table says is applied is read by code other than the
// loader's: a field parsed and never read fails here.
TEST(Settings, EveryAppliedFieldHasAReader) {
  namespace fs = std::filesystem;
  const fs::path root(LNETR_SOURCE_DIR);
  std::string sources;
  for (const char* dir : {"router", "dataplane", "control", "lnd", "cli"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string name = e.path().filename().string();
      if (!e.is_regular_file() || !(name.ends_with(".cpp") || name.ends_with(".hpp"))) continue;
      // The loader, its checks and this table only read what they fill.
      if (name.starts_with("config") || name.starts_with("settings")) continue;
      sources += read(e.path());
    }
  }
  ASSERT_GT(sources.size(), 100000u);
  // Fields read through an accessor of their struct (router/config.*).
  const std::map<std::string_view, std::string> kAccessors = {
      {"DataplaneConfig::main_core", "effective_main_core("},
      {"ControlConfig::readonly_socket", "readonly_socket_path("},
      {"SocklndParams::conns_per_peer", "effective_conns_per_peer("}};
  for (const Setting& s : settings()) {
    if (s.field.empty() || !(s.effect == Effect::start || s.effect == Effect::runtime)) continue;
    const std::string member(s.field.substr(s.field.find("::") + 2));
    bool read = false;
    for (const std::string& use : {"." + member + ".value", "." + member + ".given()", ">" + member + ".value"})
      read = read || sources.find(use) != std::string::npos;
    if (auto a = kAccessors.find(s.field); a != kAccessors.end()) read = read || sources.find(a->second) != std::string::npos;
    EXPECT_TRUE(read) << s.field << " is applied " << to_string(s.effect) << " but no code reads it";
  }
}

TEST(Settings, TheDocumentsReferenceIsTheTables) {
  const std::filesystem::path doc = std::filesystem::path(LNETR_SOURCE_DIR) / "docs" / "configuration.md";
  const std::string text = read(doc);
  const std::string begin = "<!-- settings reference: generated from router/settings.cpp -->\n";
  const std::string end = "<!-- end of settings reference -->\n";
  const auto b = text.find(begin), e = text.find(end);
  ASSERT_NE(b, std::string::npos) << doc << " has no " << begin;
  ASSERT_NE(e, std::string::npos) << doc << " has no " << end;
  const std::string want = reference_markdown();
  const std::string have = text.substr(b + begin.size(), e - b - begin.size());
  if (have != want && std::getenv("LNETR_UPDATE_DOCS")) {
    std::ofstream(doc) << text.substr(0, b + begin.size()) << want << text.substr(e);
    return;
  }
  EXPECT_EQ(have, want) << "docs/configuration.md's reference differs from the settings table; run "
                           "LNETR_UPDATE_DOCS=1 build/asan/tests/unit/router/unit-settings to write it";
}

}  // namespace
}  // namespace lnetr::config
