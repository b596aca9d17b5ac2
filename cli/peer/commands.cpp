#include "cli/peer/commands.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "cli/peer/pattern.hpp"
#include "cli/peer/report.hpp"

namespace lnetr::peer {

namespace {

using namespace std::chrono_literals;

std::chrono::milliseconds millis(double s) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000.0 + 0.5));
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

std::uint64_t ns(Clock::duration d) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

// Remembers that an Op finished (the listener of a command's Ops).
struct Done final : OpListener {
  std::size_t count = 0;
  Op* last = nullptr;
  void op_done(Op& op) override {
    ++count;
    last = &op;
  }
};

// An Op with its own buffer, for commands that run one Op at a time: a
// fresh one is taken when the previous is not idle yet (it timed out while
// the engine still held its Tx or was receiving into its buffer).
struct OwnedOp {
  Op op;
  std::vector<std::uint8_t> buf;
  bool counted = true;  // brw: started after the warm-up
};

OwnedOp& idle_op(std::vector<std::unique_ptr<OwnedOp>>& ops, std::size_t bytes) {
  for (auto& o : ops)
    if (o->op.idle()) return *o;
  ops.push_back(std::make_unique<OwnedOp>());
  ops.back()->buf.resize(bytes);
  return *ops.back();
}

std::string errno_text(int err) { return err < 0 ? std::strerror(-err) : "success"; }

}  // namespace

std::uint64_t seed_base(const Endpoint& ep) noexcept {
  // Distinct per run (incarnation) and spread over the 64 bits.
  return pattern_word(ep.incarnation(), 0x5eed);
}

// ---- ping -----------------------------------------------------------------------

int run_ping(Endpoint& ep, const PingArgs& a, std::FILE* out) {
  std::vector<std::unique_ptr<OwnedOp>> ops;
  std::vector<PingResult> ok;
  std::vector<PingFailure> failed;
  Done done;
  bool interrupted = false;
  for (unsigned i = 0; i < a.count && !interrupted; ++i) {
    OwnedOp& o = idle_op(ops, kPingSinkLnetctl);
    Op& op = o.op;
    op.kind = OpKind::ping;
    op.dest = a.nid;
    op.size = kPingSinkLnetctl;
    op.sink = o.buf;
    op.timeout = millis(a.timeout_s);
    op.listener = &done;
    const std::size_t before = done.count;
    ep.start(op);
    if (ep.run([&] { return done.count > before; }, Clock::time_point::max()) != Endpoint::RunEnd::done) {
      interrupted = true;
      break;
    }
    if (!op.ok()) {
      failed.push_back({a.nid, op.status});
      continue;
    }
    auto info = decode_ping_info(ByteSpan(o.buf.data(), op.received));
    if (!info) {
      failed.push_back({a.nid, -EPROTO});
      continue;
    }
    ok.push_back({summarize(*info), micros(op.finished - op.started)});
  }
  ep.flush(200ms);
  ep.shutdown();  // before the Ops go away
  std::fputs(ping_yaml(ok, failed).c_str(), out);
  if (interrupted) std::fputs("# interrupted\n", out);
  return failed.empty() && !interrupted ? 0 : 1;
}

// ---- put / get ----------------------------------------------------------------------

int run_xfer(Endpoint& ep, const XferArgs& a, std::FILE* out) {
  std::vector<std::unique_ptr<OwnedOp>> ops;
  Done done;
  LatencyHistogram lat;
  struct Failure {
    std::uint64_t index;
    OpError error;
    int status;
    std::uint32_t mlength, received;
    std::size_t bad_offset;
  };
  std::vector<Failure> failures;
  std::uint64_t okn = 0, bytes = 0;
  bool interrupted = false;
  const std::uint64_t base = seed_base(ep);
  const auto t0 = Clock::now();
  for (std::uint64_t i = 0; i < a.count; ++i) {
    OwnedOp& o = idle_op(ops, a.size);
    Op& op = o.op;
    op.kind = a.put ? OpKind::put : OpKind::get;
    op.dest = a.nid;
    op.seed = base + i;
    op.size = a.size;
    op.offset = a.offset;
    op.timeout = millis(a.timeout_s);
    op.listener = &done;
    if (a.put) {
      fill_pattern(o.buf, op.seed, op.offset);
      if (a.corrupt && *a.corrupt < o.buf.size()) o.buf[*a.corrupt] ^= 0x01;
      op.payload = o.buf;
    } else {
      op.sink = o.buf;
      op.verify = true;
    }
    const std::size_t before = done.count;
    ep.start(op);
    if (ep.run([&] { return done.count > before; }, Clock::time_point::max()) != Endpoint::RunEnd::done) {
      interrupted = true;
      break;
    }
    if (op.ok()) {
      ++okn;
      bytes += a.size;
      lat.record(ns(op.finished - op.started));
    } else {
      failures.push_back({i, op.error, op.status, op.mlength, op.received, op.bad_offset});
    }
  }
  const double elapsed = seconds(Clock::now() - t0);
  ep.flush(200ms);
  ep.shutdown();  // before the Ops go away

  Yaml y;
  y.map(a.put ? "put" : "get");
  y.kv("nid", to_string(a.nid));
  y.kv("size", a.size);
  y.kv("offset", a.offset);
  y.kv("count", a.count);
  y.kv("ok", okn);
  y.kv("errors", static_cast<std::uint64_t>(failures.size()));
  y.kv("bytes", bytes);
  y.kv("elapsed_s", elapsed, 6);
  y.kv("MB_per_s", elapsed > 0 ? static_cast<double>(bytes) / 1e6 / elapsed : 0.0, 3);
  y.map("latency_us");
  latency_yaml(y, lat);
  y.end();
  y.end();
  if (!failures.empty()) {
    y.list("failures");
    for (const Failure& f : failures) {
      y.item();
      y.kv("index", f.index);
      y.kv("errno", f.status);
      y.kv("error", name(f.error));
      std::string descr = std::string(a.put ? "put" : "get") + " to " + to_string(a.nid) + ": " +
                          std::string(describe(f.error));
      if (f.error == OpError::ack_short)
        descr += " (ACK mlength " + std::to_string(f.mlength) + " of " + std::to_string(a.size) + ")";
      if (f.error == OpError::reply_short)
        descr += " (" + std::to_string(f.received) + " of " + std::to_string(a.size) + " bytes)";
      if (f.error == OpError::reply_corrupt) descr += " (first wrong byte at " + std::to_string(f.bad_offset) + ")";
      if (f.error == OpError::send_failed || f.error == OpError::timeout || f.error == OpError::no_route)
        descr += ": " + errno_text(f.status);
      y.kv("descr", descr);
      if (a.put) y.kv("mlength", f.mlength);
      y.end();
    }
    y.end();
  }
  std::fputs(y.str().c_str(), out);
  if (interrupted) std::fputs("# interrupted\n", out);
  return failures.empty() && !interrupted ? 0 : 1;
}

// ---- server ---------------------------------------------------------------------------

int run_server(Endpoint& ep, const ServerArgs& a, std::FILE* out) {
  const auto t0 = Clock::now();
  const auto until = a.duration_s > 0 ? t0 + millis(a.duration_s) : Clock::time_point::max();
  ep.run([] { return false; }, until);
  const double elapsed = seconds(Clock::now() - t0);
  Yaml y;
  y.map("server");
  y.kv("nid", to_string(ep.nid()));
  y.kv("elapsed_s", elapsed, 3);
  y.kv("ended_by", ep.signalled() ? "signal" : "duration");
  stats_yaml(y, ep);
  y.end();
  std::fputs(y.str().c_str(), out);
  return ep.stats().pattern_errors == 0 ? 0 : 1;
}

// ---- brw ------------------------------------------------------------------------------

namespace {

// lnet_selftest-style load: `concurrency` Ops always in flight until the
// duration ends.  Slots (Op + buffer) are made once; the loop allocates
// nothing.
class Brw final : public OpListener {
 public:
  Brw(Endpoint& ep, const BrwArgs& a) : ep_(ep), a_(a), base_(seed_base(ep)) {
    if (a_.sizes.empty()) a_.sizes.push_back(a.size);
    const std::uint32_t max_size = *std::max_element(a_.sizes.begin(), a_.sizes.end());
    slots_.reserve(a.concurrency);
    for (std::uint32_t i = 0; i < a.concurrency; ++i) {
      auto s = std::make_unique<OwnedOp>();
      s->buf.resize(max_size);
      Op& op = s->op;
      op.kind = a.write ? OpKind::put : OpKind::get;
      op.dest = a.nid;
      op.size = a.size;
      op.timeout = millis(a.timeout_s);
      op.listener = this;
      op.tag = i;
      op.verify = a.check;
      if (a.write) op.payload = s->buf; else op.sink = s->buf;
      if (!a.check) {  // one seed per slot: the payload is filled once
        op.seed = base_ + i;
        if (a.write) fill_pattern(s->buf, op.seed, 0);
      }
      slots_.push_back(std::move(s));
    }
    waiting_.reserve(a.concurrency);
  }

  void op_done(Op& op) override {
    ++finished_;
    const bool integrity = op.error == OpError::reply_corrupt || op.error == OpError::reply_too_long ||
                           op.error == OpError::reply_short || op.error == OpError::ack_short;
    if (!slots_[op.tag]->counted && !integrity) {  // started while warming up: not counted
      ++warmup_ops_;   // (but wrong data is an error whenever it comes)
    } else if (op.ok()) {
      ++counted_;
      last_done_ = op.finished;
      ++ok_;
      bytes_ok_ += op.size;
      lat_.record(ns(op.finished - op.started));
    } else {
      ++counted_;
      last_done_ = op.finished;
      ++errors_[static_cast<std::size_t>(op.error)];
      if (first_error_.empty())
        first_error_ = std::string(name(op.error)) + ": " + std::string(describe(op.error)) + " (" +
                       errno_text(op.status) + ")";
    }
    if (stopping_) return;
    if (op.ok()) {
      issue(*slots_[op.tag]);
    } else {
      // A failure can be immediate (no route, connection refused): retry a
      // little later rather than spin.
      waiting_.push_back({slots_[op.tag].get(), Clock::now() + kRetryDelay});
    }
  }

  int run(std::FILE* out) {
    if (a_.delay_s > 0 && ep_.run_for(millis(a_.delay_s)) == Endpoint::RunEnd::signal) {
      interrupted_ = true;
      report(out);
      return 1;
    }
    // Ops started during the warm-up (connections, route checks) are not
    // counted (nor in --count); the rates are of those started after it.
    t0_ = Clock::now() + millis(a_.warmup_s);
    end_ = t0_ + millis(a_.duration_s);
    for (auto& s : slots_) issue(*s);
    // Until the duration ends, keep every slot busy; then wait for the Ops
    // in flight (each ends by its own timeout at the latest).
    auto end = ep_.run([this] { return pump() || (a_.count && counted_ >= a_.count); }, end_);
    stopping_ = true;
    if (end != Endpoint::RunEnd::signal)
      end = ep_.run([this] { return in_flight() == 0; }, Clock::now() + millis(a_.timeout_s) + 1s);
    interrupted_ = end == Endpoint::RunEnd::signal;
    ep_.flush(200ms);
    report(out);
    return errors() == 0 && ok_ > 0 && !interrupted_ ? 0 : 1;
  }

 private:
  static constexpr auto kRetryDelay = 100ms;
  struct Waiting {
    OwnedOp* slot;
    Clock::time_point at;
  };

  void issue(OwnedOp& s) {
    const auto now = Clock::now();
    if (now >= end_ || (a_.count && now >= t0_ && counted_started_ >= a_.count)) return;
    if (!s.op.idle()) {  // timed out and still held by the engine: retry later
      waiting_.push_back({&s, now});
      return;
    }
    s.op.size = a_.sizes[started_ % a_.sizes.size()];
    if (a_.check) {
      s.op.seed = base_ + next_seed_++;
      if (a_.write) fill_pattern(std::span(s.buf).first(s.op.size), s.op.seed, 0);
    }
    ++started_;
    s.counted = now >= t0_;
    if (s.counted) ++counted_started_;
    ep_.start(s.op);
  }
  // Restart waiting slots whose time has come and whose Op is idle.
  bool pump() {
    if (!waiting_.empty() && !stopping_) {
      const auto now = Clock::now();
      for (std::size_t i = waiting_.size(); i-- > 0;) {
        const Waiting w = waiting_[i];
        if (now < w.at || !w.slot->op.idle()) continue;
        waiting_[i] = waiting_.back();
        waiting_.pop_back();
        issue(*w.slot);
      }
    }
    return false;
  }
  std::uint64_t in_flight() const noexcept { return started_ - finished_; }
  std::uint64_t errors() const noexcept {
    std::uint64_t n = 0;
    for (std::uint64_t e : errors_) n += e;
    return n;
  }

  void report(std::FILE* out) {
    const double elapsed =
        t0_ == Clock::time_point{} ? 0.0
                                   : std::max(0.0, counted_ > 0 ? seconds(last_done_ - t0_) : seconds(Clock::now() - t0_));
    const double ops_s = elapsed > 0 ? static_cast<double>(ok_) / elapsed : 0;
    const double bytes = static_cast<double>(bytes_ok_);
    const double mb_s = elapsed > 0 ? bytes / 1e6 / elapsed : 0;
    const double mib_s = elapsed > 0 ? bytes / (1024.0 * 1024.0) / elapsed : 0;
    auto us = [](std::uint64_t v) { return static_cast<double>(v) / 1000.0; };

    Yaml y;
    y.map("brw");
    y.kv("nid", to_string(a_.nid));
    y.kv("op", a_.write ? "write" : "read");
    if (a_.sizes.size() == 1) {
      y.kv("size", a_.sizes[0]);
    } else {
      std::string list;
      for (std::uint32_t v : a_.sizes) list += (list.empty() ? "" : ",") + std::to_string(v);
      y.kv("sizes", list);
    }
    y.kv("concurrency", a_.concurrency);
    y.kv("check", a_.check ? "full" : "none");
    y.kv("elapsed_s", elapsed, 6);
    if (a_.warmup_s > 0) y.kv("warmup_ops", warmup_ops_);
    y.kv("ops", ok_);
    y.kv("bytes", bytes_ok_);
    y.kv("errors", errors());
    y.kv("ops_per_s", ops_s, 1);
    y.kv("msgs_per_s", 2 * ops_s, 1);
    y.kv("MB_per_s", mb_s, 3);
    y.kv("MiB_per_s", mib_s, 3);
    y.map("latency_us");
    latency_yaml(y, lat_);
    y.end();
    if (errors() > 0) {
      y.map("errors_by_kind");
      for (std::size_t i = 0; i < kOpErrorCount; ++i)
        if (errors_[i]) y.kv(name(static_cast<OpError>(i)), errors_[i]);
      y.end();
      y.kv("first_error", first_error_);
    }
    if (interrupted_) y.kv("interrupted", true);
    y.end();
    std::fputs(y.str().c_str(), out);

    if (a_.json.empty()) return;
    std::string j = "{\n";
    auto field = [&](std::string_view k, const std::string& v, bool last = false) {
      j += "  " + json_string(k) + ": " + v + (last ? "\n" : ",\n");
    };
    field("nid", json_string(to_string(a_.nid)));
    field("op", json_string(a_.write ? "write" : "read"));
    field("size", std::to_string(a_.size));
    field("concurrency", std::to_string(a_.concurrency));
    field("check", json_string(a_.check ? "full" : "none"));
    field("duration_s", fixed(a_.duration_s, 3));
    field("elapsed_s", fixed(elapsed, 6));
    field("warmup_ops", std::to_string(warmup_ops_));
    field("ops", std::to_string(ok_));
    field("bytes", std::to_string(bytes_ok_));
    field("errors", std::to_string(errors()));
    std::string kinds = "{";
    bool first = true;
    for (std::size_t i = 0; i < kOpErrorCount; ++i) {
      if (!errors_[i]) continue;
      kinds += std::string(first ? "" : ", ") + json_string(name(static_cast<OpError>(i))) + ": " +
               std::to_string(errors_[i]);
      first = false;
    }
    field("errors_by_kind", kinds + "}");
    field("ops_per_s", fixed(ops_s, 3));
    field("msgs_per_s", fixed(2 * ops_s, 3));
    field("MB_per_s", fixed(mb_s, 3));
    field("MiB_per_s", fixed(mib_s, 3));
    field("latency_us", "{\"min\": " + fixed(us(lat_.min()), 3) + ", \"mean\": " + fixed(lat_.mean() / 1000.0, 3) +
                            ", \"p50\": " + fixed(us(lat_.percentile(0.5)), 3) +
                            ", \"p90\": " + fixed(us(lat_.percentile(0.9)), 3) +
                            ", \"p99\": " + fixed(us(lat_.percentile(0.99)), 3) +
                            ", \"max\": " + fixed(us(lat_.max()), 3) + "}");
    field("interrupted", interrupted_ ? "true" : "false", true);
    j += "}\n";
    if (std::FILE* f = std::fopen(a_.json.c_str(), "w")) {
      std::fputs(j.c_str(), f);
      std::fclose(f);
    } else {
      std::fprintf(stderr, "lnetr-peer: cannot write %s: %s\n", a_.json.c_str(), std::strerror(errno));
      json_failed_ = true;
    }
  }

 public:
  bool json_failed_ = false;

 private:
  Endpoint& ep_;
  BrwArgs a_;
  std::uint64_t base_;
  std::uint64_t next_seed_ = 0;
  std::vector<std::unique_ptr<OwnedOp>> slots_;
  std::vector<Waiting> waiting_;
  LatencyHistogram lat_;
  std::array<std::uint64_t, kOpErrorCount> errors_{};
  std::string first_error_;
  std::uint64_t started_ = 0, finished_ = 0, ok_ = 0, bytes_ok_ = 0;
  Clock::time_point t0_{}, end_{}, last_done_{};
  std::uint64_t counted_started_ = 0;  // started after the warm-up
  std::uint64_t counted_ = 0;          // ... and finished
  std::uint64_t warmup_ops_ = 0;       // started during it, finished
  bool stopping_ = false;
  bool interrupted_ = false;
};

}  // namespace

int run_brw(Endpoint& ep, const BrwArgs& a, std::FILE* out) {
  auto brw = std::make_unique<Brw>(ep, a);
  int rc = brw->run(out);
  if (brw->json_failed_) rc = 1;
  ep.shutdown();  // before the Ops go away
  return rc;
}

}  // namespace lnetr::peer
