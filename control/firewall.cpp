#include "control/firewall.hpp"

#include <set>
#include <sstream>

namespace lnetr::control {

namespace {

// nft's quoted string (interface names are [A-Za-z0-9_.-]; quoted anyway).
std::string q(const std::string& s) { return "\"" + s + "\""; }

// The port of "ADDRESS:PORT" when it listens beyond loopback, else 0.
unsigned exposed_metrics_port(const std::string& metrics) {
  if (metrics == "off") return 0;
  const std::size_t colon = metrics.rfind(':');
  if (colon == std::string::npos) return 0;
  const std::string addr = metrics.substr(0, colon);
  if (addr.starts_with("127.") || addr == "[::1]" || addr == "localhost") return 0;
  return static_cast<unsigned>(std::stoul(metrics.substr(colon + 1)));
}

}  // namespace

std::string nftables_ruleset(const config::Config& cfg) {
  std::ostringstream o;
  o << "# The lnetr router's firewall (lnetr-control --nftables), from its configuration.\n"
    << "table inet lnetr\n"
    << "delete table inet lnetr\n"
    << "table inet lnetr {\n"
    << "\tchain input {\n"
    << "\t\ttype filter hook input priority filter; policy drop;\n"
    << "\t\tiif \"lo\" accept\n"
    << "\t\tct state established,related accept\n"
    << "\t\tct state invalid drop\n"
    // By number: a minimal system has no /etc/protocols to name them.
    << "\t\tmeta l4proto { 1, 58 } accept comment \"ICMP, ICMPv6\"\n";
  const unsigned accept_port = cfg.dataplane.accept_port.value;
  std::set<std::string> lines;  // one rule per interface or address and port
  for (const config::NetConfig& net : cfg.nets) {
    const bool o2ib = net.net.value.lnd() == LndType::o2ib;
    for (const config::NiConfig& ni : net.nis) {
      if (config::on_port(cfg, ni)) continue;
      std::string match;
      if (ni.interface) {
        match = "iifname " + q(ni.interface->value);
      } else if (ni.nid) {
        std::string addr = to_string(ni.nid->value);
        addr = addr.substr(0, addr.rfind('@'));
        if (addr.size() > 2 && addr.front() == '[') addr = addr.substr(1, addr.size() - 2);
        match = (addr.find(':') != std::string::npos ? "ip6 daddr " : "ip daddr ") + addr;
      } else {
        continue;
      }
      const std::string why = " comment " + q("LNet on " + to_string(net.net.value));
      if (o2ib) lines.insert(match + " udp dport 4791 accept" + why);
      else lines.insert(match + " tcp dport " + std::to_string(accept_port) + " accept" + why);
    }
  }
  for (const std::string& l : lines) o << "\t\t" << l << "\n";
  const std::string& mgmt = cfg.control.management_interface.value;
  if (!mgmt.empty()) {
    const std::string m = "iifname " + q(mgmt);
    o << "\t\t" << m << " tcp dport 22 accept comment \"ssh\"\n";
    if (const unsigned port = exposed_metrics_port(cfg.control.metrics.value))
      o << "\t\t" << m << " tcp dport " << port << " accept comment \"metrics\"\n";
    o << "\t\t" << m << " udp dport { 68, 546 } accept comment \"DHCP client\"\n";
  } else {
    o << "\t\t# no control.management_interface: ssh and metrics are closed to the network\n";
  }
  o << "\t\tcounter comment \"dropped\"\n"
    << "\t}\n"
    << "\tchain forward {\n"
    << "\t\ttype filter hook forward priority filter; policy drop;\n"
    << "\t}\n"
    << "}\n";
  return o.str();
}

}  // namespace lnetr::control
