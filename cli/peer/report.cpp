#include "cli/peer/report.hpp"

#include <cstdio>
#include <cstring>

#include "cli/peer/endpoint.hpp"

namespace lnetr::peer {

// ---- Yaml -----------------------------------------------------------------------

void Yaml::prefix() {
  if (pending_item_) {
    out_.append(static_cast<std::size_t>(indent_ - 2), ' ');
    out_ += "- ";
    pending_item_ = false;
  } else {
    out_.append(static_cast<std::size_t>(indent_), ' ');
  }
}

Yaml& Yaml::map(std::string_view key) {
  prefix();
  out_.append(key);
  out_ += ":\n";
  stack_.push_back(indent_);
  indent_ += 2;
  return *this;
}

Yaml& Yaml::list(std::string_view key) {
  prefix();
  out_.append(key);
  out_ += ":\n";
  stack_.push_back(indent_);
  return *this;
}

Yaml& Yaml::item() {
  if (pending_item_) {  // an item with no keys
    out_.append(static_cast<std::size_t>(indent_ - 2), ' ');
    out_ += "-\n";
  }
  stack_.push_back(indent_);
  indent_ += 2;
  pending_item_ = true;
  return *this;
}

Yaml& Yaml::end() {
  if (pending_item_) {
    out_.append(static_cast<std::size_t>(indent_ - 2), ' ');
    out_ += "-\n";
    pending_item_ = false;
  }
  if (!stack_.empty()) {
    indent_ = stack_.back();
    stack_.pop_back();
  }
  return *this;
}

Yaml& Yaml::kv(std::string_view key, std::string_view value) {
  prefix();
  out_.append(key);
  out_ += ": ";
  out_ += yaml_scalar(value);
  out_ += '\n';
  return *this;
}

Yaml& Yaml::null(std::string_view key) {
  prefix();
  out_.append(key);
  out_ += ":\n";
  return *this;
}

Yaml& Yaml::kv(std::string_view key, std::uint64_t value) { return kv(key, std::string_view(std::to_string(value))); }
Yaml& Yaml::kv(std::string_view key, std::int64_t value) { return kv(key, std::string_view(std::to_string(value))); }
Yaml& Yaml::kv(std::string_view key, double value, int decimals) {
  return kv(key, std::string_view(fixed(value, decimals)));
}
Yaml& Yaml::kv(std::string_view key, bool value) { return kv(key, std::string_view(value ? "true" : "false")); }

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string yaml_scalar(std::string_view s) {
  bool plain = !s.empty() && s.front() != ' ' && s.back() != ' ';
  for (char c : s) {
    if (c == ':' || c == '#' || c == '\'' || c == '"' || c == '\n' || c == '{' || c == '}' || c == '[' ||
        c == ']' || c == ',' || c == '&' || c == '*' || c == '!' || c == '|' || c == '>' || c == '%' || c == '`')
      plain = false;
  }
  if (!s.empty() && (s.front() == '-' || s.front() == '?' || s.front() == '@')) plain = plain && s.size() > 1 &&
                                                                                    s[1] != ' ';
  if (plain) return std::string(s);
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "''";
    else out += c;
  }
  out += '\'';
  return out;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

// ---- ping -----------------------------------------------------------------------

std::string ping_yaml(const std::vector<PingResult>& ok, const std::vector<PingFailure>& failed) {
  Yaml y;
  if (!ok.empty()) {
    y.list("ping");
    for (const PingResult& r : ok) {
      y.item();
      const Nid primary = r.summary.nis.empty() ? Nid{} : r.summary.nis.front().nid;
      y.kv("primary nid", ping_nid_text(r.summary.pid, primary));
      y.kv("Multi-Rail", r.summary.multi_rail());
      y.list("peer_ni");
      for (const PingNi& ni : r.summary.nis) y.item().kv("nid", ping_nid_text(r.summary.pid, ni.nid)).end();
      y.end();
      y.kv("rtt_us", r.rtt_us, 1);
      // Beyond lnetctl's shape: what the ping info said (a router's
      // RTE_DISABLED bit and NI status are what its users act on).
      char features[16];
      std::snprintf(features, sizeof features, "0x%x", r.summary.features);
      y.kv("features", features);
      y.map("status");
      for (const PingNi& ni : r.summary.nis)
        y.kv(ping_nid_text(r.summary.pid, ni.nid), ni.status == kNiStatusUp ? "up" : "down");
      y.end();
      y.end();
    }
    y.end();
  }
  if (!failed.empty()) {
    y.list("manage");
    for (const PingFailure& f : failed) {
      y.item().null("ping");
      y.kv("errno", f.err);
      y.kv("descr", "failed to ping " + to_string(f.nid) + ": " + std::strerror(-f.err));
      y.end();
    }
    y.end();
  }
  return y.str();
}

// ---- latency and stats --------------------------------------------------------------

void latency_yaml(Yaml& y, const LatencyHistogram& h) {
  auto us = [](std::uint64_t ns) { return static_cast<double>(ns) / 1000.0; };
  y.kv("min", us(h.min()), 1);
  y.kv("mean", h.mean() / 1000.0, 1);
  y.kv("p50", us(h.percentile(0.50)), 1);
  y.kv("p90", us(h.percentile(0.90)), 1);
  y.kv("p99", us(h.percentile(0.99)), 1);
  y.kv("max", us(h.max()), 1);
}

namespace {

void type_counters(Yaml& y, std::string_view key, const TypeCounters& c) {
  static constexpr const char* kNames[] = {"ack", "put", "get", "reply"};
  y.map(key);
  for (std::size_t i = 0; i < c.msgs.size(); ++i) {
    y.map(kNames[i]).kv("messages", c.msgs[i]).kv("bytes", c.bytes[i]).end();
  }
  y.end();
}

}  // namespace

void gateways_yaml(Yaml& y, const Endpoint& ep);

void stats_yaml(Yaml& y, const Endpoint& ep) {
  const EndpointStats& s = ep.stats();
  type_counters(y, "received", s.rx);
  type_counters(y, "sent", s.tx);
  y.kv("pings_answered", s.pings_answered);
  y.kv("pushes_received", s.pushes_received);
  y.kv("pushes_invalid", s.pushes_invalid);
  y.kv("puts_verified", s.puts_verified);
  y.kv("pattern_errors", s.pattern_errors);
  y.kv("gets_served", s.gets_served);
  y.kv("protocol_errors", s.protocol_errors);
  y.kv("response_failures", s.response_failures);
  y.map("drops");
  for (std::size_t i = 0; i < kDropReasonCount; ++i) y.kv(name(static_cast<DropReason>(i)), s.drops[i]);
  y.end();

  if (const o2ib::Stats* o = ep.o2ib_stats()) {
    y.map("o2iblnd");
    y.kv("conns_accepted", o->conns_accepted);
    y.kv("conns_connected", o->conns_connected);
    y.kv("reconnects", o->reconnects);
    y.map("connect_failed");
    for (std::size_t i = 0; i < o2ib::kConnectFailureCount; ++i)
      if (o->connect_failed[i]) y.kv(o2ib::name(static_cast<o2ib::ConnectFailure>(i)), o->connect_failed[i]);
    y.end();
    y.map("closed");
    for (std::size_t i = 0; i < o2ib::kCloseReasonCount; ++i)
      if (o->closed[i]) y.kv(o2ib::name(static_cast<o2ib::CloseReason>(i)), o->closed[i]);
    y.end();
    y.map("rejects_sent");
    for (std::size_t i = 1; i < o2ib::kRejectSlots; ++i)
      if (o->rejects_sent[i]) y.kv(o2ib::to_string(static_cast<o2ib::RejectReason>(i)), o->rejects_sent[i]);
    y.end();
    y.map("rejects_received");
    for (std::size_t i = 1; i < o2ib::kRejectSlots; ++i)
      if (o->rejects_received[i]) y.kv(o2ib::to_string(static_cast<o2ib::RejectReason>(i)), o->rejects_received[i]);
    y.end();
    y.kv("rdma_bytes_written", o->rdma_bytes_written);
    y.kv("rdma_bytes_received", o->rdma_bytes_received);
    y.kv("bytes_copied", o->bytes_copied);
    y.kv("bytes_bounced", o->bytes_bounced);
    y.kv("bytes_gathered", o->bytes_gathered);
    y.kv("noops_sent", o->tx_msgs[o2ib::type_slot(o2ib::MsgType::noop)]);
    y.kv("completions", o->completions);
    y.end();
  }
  const sock::Stats& k = ep.sock_stats();
  if (ep.on_o2ib()) return gateways_yaml(y, ep);
  y.map("socklnd");
  y.kv("conns_accepted", k.conns_accepted);
  y.kv("conns_connected", k.conns_connected);
  y.kv("connect_failures", k.connect_failures);
  y.kv("zc_acks_sent", k.zc_acks_sent);
  y.kv("keepalives_sent", k.keepalives_sent);
  y.kv("bytes_copied", k.bytes_copied);
  y.kv("bytes_zero_copy", k.bytes_zero_copy);
  y.kv("zc_sends", k.zc_sends);
  y.kv("zc_copied", k.zc_copied);
  y.kv("zc_fallbacks", k.zc_fallbacks);
  y.kv("zc_unsupported", k.zc_unsupported);
  y.kv("zc_nobufs", k.zc_nobufs);
  y.kv("zc_drains", k.zc_drains);
  y.map("closed");
  for (std::size_t i = 0; i < sock::kCloseReasonCount; ++i)
    if (k.closed[i]) y.kv(sock::name(static_cast<sock::CloseReason>(i)), k.closed[i]);
  y.end();
  y.map("refused");
  for (std::size_t i = 0; i < sock::kCloseReasonCount; ++i)
    if (ep.refused()[i]) y.kv(sock::name(static_cast<sock::CloseReason>(i)), ep.refused()[i]);
  y.end();
  y.end();
  if (const auto d = ep.dpdk_counters()) {
    y.map("dpdk");
    y.kv("rx_frames", d->rx_frames);
    y.kv("tx_frames", d->tx_frames);
    y.kv("tx_dropped", d->tx_dropped);
    y.kv("bytes_copied", d->bytes_copied);
    y.kv("retransmits", d->retransmits);
    y.kv("tso_frames", d->tso_frames);
    y.kv("tso_segments", d->tso_segments);
    y.kv("rx_lro", d->rx_lro);
    y.end();
  }
  gateways_yaml(y, ep);
}

void gateways_yaml(Yaml& y, const Endpoint& ep) {
  if (!ep.routes().gateways().empty()) {
    y.list("gateways");
    for (const auto& g : ep.routes().gateways()) {
      y.item();
      y.kv("nid", to_string(g.nid));
      y.kv("usable", g.usable());
      y.kv("verdict", name(g.verdict));
      y.kv("checks", g.checks);
      y.kv("failures", g.failures);
      y.end();
    }
    y.end();
  }
}

}  // namespace lnetr::peer
