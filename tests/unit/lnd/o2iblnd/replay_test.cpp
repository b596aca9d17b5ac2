// Real kernel traffic replayed against the o2iblnd engine: the capture
// v3-o2iblnd-pair-rxe (ko2iblnd between two Linux nodes, P 10.201.1.2@o2ib
// and Q 10.201.1.4@o2ib, over soft-RoCE: a ping, discovery, lnet_selftest
// sessions, brw writes and reads of 4 KiB and 64 KiB, keepalive NOOPs).
//
// The engine plays Q, the passive side, on the simulated fabric
// (tests/support/o2ib_fabric).  A RawPeer plays P: it connects with P's
// captured CONNREQ and sends P's captured messages in capture order.  Each
// time the capture shows Q sending, the engine must have sent the same
// message: compared field by field, except what depends on memory addresses
// (RDMA keys and addresses) or on Q's choice of its own cookies.  The
// credits each message returns (ibm_credits) are the heart of it: the
// engine must give back its peer's credits when the kernel did.
//
// What is not the engine's job is played from the capture as well.  An
// Upper (CapturedQ) stands for Q's LNet layer and lnet_selftest: when the
// engine delivers one of P's messages (or completes one of Q's GETs or
// bulk PUTs), it sends Q's next LNet messages of the capture, with their
// captured headers and payloads.  P's side of the RDMA is the RawPeer's:
// it writes P's captured bulk bytes into the sinks the engine's GET_REQs
// name, and offers sinks of the captured sizes in P's PUT_ACKs.
//
// The vectors are found through LNETR_VECTORS (meson sets it), else at the
// directory meson was configured with; without them the tests skip.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/decode/capture.hpp"
#include "cli/decode/pcap_file.hpp"
#include "cli/decode/roce.hpp"
#include "lnd/o2iblnd/engine.hpp"
#include "tests/support/o2ib_fabric.hpp"

#ifndef LNETR_VECTORS_DIR
#define LNETR_VECTORS_DIR "../shared/vectors"
#endif

namespace lnetr::o2ib {
namespace {

using namespace std::chrono_literals;
using sim::Fabric;
using sim::RawPeer;
using sim::SimTransport;

constexpr const char* kCaptureFile = "v3-o2iblnd-pair-rxe.pcap";
const Nid kP = *parse_nid("10.201.1.2@o2ib");
const Nid kQ = *parse_nid("10.201.1.4@o2ib");
// Both kernels ran with keepalive set to 10 s (the capture's description).
// Q's keepalive NOOPs are frames 402 and 410, both with credits 0; P's,
// frame 408, carries credits 1: the credit of Q's IMMEDIATE 400 (a V2 NOOP
// is out of band and earns no credit, so not that of Q's NOOP 402).
constexpr auto kKeepalive = 10s;

// ---- the capture ------------------------------------------------------------------------

// One event of the capture, as the replay uses it.
struct Event {
  enum class Kind : std::uint8_t {
    connreq,     // bytes: the o2iblnd CONNREQ (REQ private data after the rdma_cm header)
    connack,     // bytes: the REP private data (the CONNACK, then the CM's zero padding)
    message,     // bytes: an o2iblnd message (RC SEND)
    rdma_write,  // bytes: the data of one RDMA WRITE packet
  };
  Kind kind = Kind::message;
  std::uint32_t frame = 0;
  double time = 0;  // seconds since the first frame
  bool from_p = false;
  std::uint16_t port = 0;  // connreq: the rdma_cm source port
  std::vector<std::uint8_t> bytes;
};

std::string vectors_dir() {
  if (const char* d = std::getenv("LNETR_VECTORS"); d && *d) return d;
  return LNETR_VECTORS_DIR;
}

// The capture's events in order, read with lnetr-decode's library: its
// PDUs give the CM private data and the o2iblnd messages with their frame
// and direction; RDMA WRITE packets, which the decoder keeps without their
// data, are parsed again for it (retransmissions left out as the decoder
// marked them).
std::vector<Event> read_capture(const std::string& path) {
  std::string error;
  auto file = decode::PcapFile::open(path, error);
  if (!file) throw std::runtime_error(path + ": " + error);
  const auto link = file->link(error);
  if (!link) throw std::runtime_error(path + ": " + error);
  decode::CaptureDecoder decoder(*link);
  const decode::IpAddress p_ip = decode::IpAddress::v4(kP.addr4());
  std::vector<Event> events;
  std::vector<decode::Pdu> pdus;
  decode::CapturedFrame frame;
  while (file->next(frame, error)) {
    pdus.clear();
    decoder.add_frame(frame, pdus);
    for (const decode::Pdu& pdu : pdus) {
      const decode::RoceWhere* where = pdu.roce();
      if (!where) continue;
      if (pdu.error) throw std::runtime_error("frame " + std::to_string(pdu.frames.first) + " did not decode");
      Event e;
      e.frame = pdu.frames.first;
      e.time = pdu.frames.time;
      e.from_p = where->src.ip == p_ip;
      if (const auto* cm = pdu.as<decode::CmPdu>(); cm && cm->msg) {
        const ByteSpan ulp = ByteSpan(pdu.bytes).subspan(cm->ulp_offset);
        if (cm->cm.attr == decode::CmAttr::req) {
          e.kind = Event::Kind::connreq;
          e.bytes.assign(ulp.begin(), ulp.begin() + kConnMsgSize);
          e.port = cm->cma ? cm->cma->port : 0;
        } else {
          e.kind = Event::Kind::connack;
          e.bytes.assign(ulp.begin(), ulp.end());
        }
      } else if (pdu.as<decode::O2ibPdu>()) {
        e.kind = Event::Kind::message;
        e.bytes = pdu.bytes;
      } else if (where->packet && where->packet->is_write() && !where->packet->retransmission) {
        auto parsed = decode::parse_frame(*link, frame.data);
        if (!parsed) throw std::runtime_error("frame " + std::to_string(e.frame) + ": RDMA WRITE did not parse");
        auto pkt = decode::parse_roce(parsed->udp.payload);
        if (!pkt) throw std::runtime_error("frame " + std::to_string(e.frame) + ": RDMA WRITE did not parse");
        e.kind = Event::Kind::rdma_write;
        e.bytes.assign(pkt->payload.begin(), pkt->payload.end());
      } else {
        continue;
      }
      events.push_back(std::move(e));
    }
  }
  if (!error.empty()) throw std::runtime_error(path + ": " + error);
  return events;
}

Msg decoded(const std::vector<std::uint8_t>& bytes) {
  auto d = decode_msg(bytes);
  if (!d) throw std::runtime_error("an o2iblnd message of the capture does not decode");
  return d->msg;
}

bool is_lnet(MsgType t) { return t == MsgType::immediate || t == MsgType::put_req || t == MsgType::get_req; }

// The cookie a completion or PUT_ACK echoes: the one the other side chose
// for its request.
std::optional<Cookie> echoed_cookie(const Msg& m) {
  if (const auto* pa = m.put_ack()) return pa->src_cookie;
  if (const auto* c = m.completion()) return c->cookie;
  return std::nullopt;
}

// The cookie a node chooses for itself: a PUT_REQ's or GET_REQ's, a
// PUT_ACK's own (echoed in PUT_DONE).
std::optional<Cookie> own_cookie(const Msg& m) {
  if (const auto* pr = m.put_req()) return pr->cookie;
  if (const auto* gr = m.get_req()) return gr->cookie;
  if (const auto* pa = m.put_ack()) return pa->dst_cookie;
  return std::nullopt;
}

std::vector<RdmaFrag> frags_of(const RdmaDesc& rd) {
  std::vector<RdmaFrag> out;
  for (std::size_t i = 0; i < rd.nfrags(); ++i) out.push_back(rd.frag(i));
  return out;
}

std::string hex(ByteSpan b) {
  std::string s;
  char x[4];
  for (std::size_t i = 0; i < b.size(); ++i) {
    std::snprintf(x, sizeof x, i ? " %02x" : "%02x", b[i]);
    s += x;
  }
  return s;
}

// ---- Q's LNet layer, played from the capture ------------------------------------------------

// Stands for Q's LNet layer and lnet_selftest: sends Q's LNet messages of
// the capture, in order, when what they answer has been delivered, and
// keeps what the engine delivers.
class CapturedQ final : public lnd::Upper {
 public:
  struct Message {
    std::uint32_t frame = 0;
    LnetHeader hdr;
    std::vector<std::uint8_t> payload;     // inline, or the bulk of a PUT_REQ (Q's RDMA writes)
    std::vector<std::uint8_t> reply_sink;  // a GET's: P's REPLY is written here
    lnd::Tx tx;
    bool sent = false;
    int status = 1;  // on_sent's (1: not yet)
  };
  struct Delivered {
    LnetHeader hdr;
    std::vector<std::uint8_t> payload;
  };

  std::deque<Message> script;
  std::vector<Delivered> delivered;
  Node* node = nullptr;
  int aborted = 0;

  // Fill every message's Tx (before any is sent: a GET's REPLY may be named
  // in rx.reply before it goes).
  void prepare() {
    for (Message& m : script) {
      m.tx.hdr = m.hdr;
      m.tx.payload = ByteSpan(m.payload.data(), m.payload.size());
      if (m.hdr.type == lnetr::MsgType::get) {
        m.reply_sink.assign(m.hdr.get().sink_length, 0x5a);
        m.tx.reply_sink = MutableByteSpan(m.reply_sink.data(), m.reply_sink.size());
      }
    }
  }
  // Q's messages before `end` are owed to P: sent once the engine has
  // delivered something or completed a send (what they answer).
  void owe(std::size_t end) {
    owed_end_ = std::max(owed_end_, end);
    woken_ = false;
  }
  std::size_t sent_count() const noexcept { return next_; }

  lnd::RxVerdict on_head(lnd::Rx& rx) override {
    switch (rx.hdr.type) {
      case lnetr::MsgType::get:
        // LNet matched it and answers with a REPLY, named here for an LND
        // whose REPLY travels on the GET's own exchange (GET_REQ).  P's
        // GETs in the capture are IMMEDIATEs: their REPLY is an ordinary
        // message.
        if (Message* r = owed(lnetr::MsgType::reply)) rx.reply = &r->tx;
        rx.discard = true;
        return lnd::RxVerdict::accept;
      case lnetr::MsgType::reply:
        // The REPLY of one of Q's optimized GETs: already in the GET's sink.
        for (Message& m : script)
          if (m.hdr.type == lnetr::MsgType::get && m.sent && m.hdr.get().return_wmd == rx.hdr.reply().dst_wmd) {
            rx.sink = MutableByteSpan(m.reply_sink.data(),
                                      std::min<std::size_t>(rx.hdr.payload_length, m.reply_sink.size()));
            return lnd::RxVerdict::accept;
          }
        break;
      default:
        break;
    }
    auto& s = sinks_.emplace_back(rx.hdr.payload_length);
    rx.sink = MutableByteSpan(s.data(), s.size());
    return lnd::RxVerdict::accept;
  }
  void on_received(lnd::Rx& rx) override {
    Delivered d{rx.hdr, {}};
    if (!rx.discard) d.payload.assign(rx.sink.begin(), rx.sink.end());
    delivered.push_back(std::move(d));
    woken_ = true;
    // LNet sends a PUT's ACK from lnet_finalize(), which Linux's o2iblnd
    // calls inside its receive, before the receive buffer is reposted; and
    // the REPLY to a GET right after the LND has released the GET's buffer,
    // still inside lnet_parse().  Both are sent from here; Q's other
    // messages come from its threads, later (pump()).
    if (rx.hdr.type == lnetr::MsgType::put && !rx.hdr.put().ack_wmd.is_none() && owed(lnetr::MsgType::ack))
      send_next();
    if (rx.hdr.type == lnetr::MsgType::get && owed(lnetr::MsgType::reply)) send_next();
  }
  void on_rx_aborted(lnd::Rx&) override { ++aborted; }
  void on_sent(lnd::Tx& tx, int status) override {
    for (Message& m : script)
      if (&m.tx == &tx) m.status = status;
    woken_ = true;
  }
  void on_peer_down(const Nid&) override {}

  // Send what is owed, once something woke Q's LNet up.
  bool pump() {
    if (!woken_) return false;
    bool any = false;
    while (next_ < owed_end_) {
      send_next();
      any = true;
    }
    return any;
  }

 private:
  // The next message owed, if it is of this LNet type.
  Message* owed(lnetr::MsgType t) {
    if (next_ >= owed_end_ || script[next_].hdr.type != t) return nullptr;
    return &script[next_];
  }
  void send_next() {
    Message& m = script[next_++];
    m.sent = true;
    const int rc = node->send(kP, m.tx);
    if (rc != 0) {
      m.status = rc;
      ADD_FAILURE() << "frame " << m.frame << ": the engine refused Q's message: " << rc;
    }
  }

  std::size_t next_ = 0;
  std::size_t owed_end_ = 0;
  bool woken_ = false;
  std::deque<std::vector<std::uint8_t>> sinks_;
};

// ---- the replay -------------------------------------------------------------------------------

// A field where the engine's message is not the kernel's.
struct Diff {
  std::uint32_t frame = 0;  // the kernel's message in the capture (P's, for one the engine sent too early)
  std::string field;
  std::string kernel, engine;
};

std::ostream& operator<<(std::ostream& os, const Diff& d) {
  return os << "frame " << d.frame << " " << d.field << ": kernel " << d.kernel << ", engine " << d.engine;
}

class Replay {
 public:
  explicit Replay(const std::vector<Event>& events) : events_(events) {}
  Replay(const Replay&) = delete;
  Replay& operator=(const Replay&) = delete;

  // Runs the whole capture; the differences found.  Anything that stops the
  // replay from following the capture (a message the engine did not send,
  // a delivery missing, a violation of the fabric) is a test failure.
  std::vector<Diff> run();

  std::size_t messages_compared = 0;  // Q's messages after the CONNACK
  std::size_t deliveries_checked = 0;

 private:
  void build_script();
  void settle();
  void advance_to(double t);
  void connect(const Event& e);
  void check_connack(const Event& e);
  void send_p(std::size_t i);
  void compare_q(const Event& e);
  void rdma_write(ByteSpan data, std::uint32_t rkey, const std::vector<RdmaFrag>& frags);
  void diff(std::uint32_t frame, std::string field, std::string kernel, std::string engine) {
    diffs_.push_back({frame, std::move(field), std::move(kernel), std::move(engine)});
  }
  template <class T>
  void check(std::uint32_t frame, const char* field, const T& kernel, const T& engine) {
    if (kernel == engine) return;
    std::ostringstream k, e;
    k << kernel;
    e << engine;
    diff(frame, field, k.str(), e.str());
  }
  void check_bytes(std::uint32_t frame, const char* field, ByteSpan kernel, ByteSpan engine) {
    if (std::equal(kernel.begin(), kernel.end(), engine.begin(), engine.end())) return;
    diff(frame, field, hex(kernel), hex(engine));
  }

  const std::vector<Event>& events_;
  std::vector<Diff> diffs_;

  Clock::time_point base_{std::chrono::seconds(1'000'000)};
  Clock::time_point now_ = base_;
  Fabric fabric_;
  SimTransport q_tr_{fabric_, "Q"};
  CapturedQ upper_;
  std::unique_ptr<Node> node_;
  std::unique_ptr<RawPeer> p_;
  Region p_region_{};
  std::vector<std::uint8_t> p_bulk_;  // P's RDMA source, then its PUT sink

  // Q's cookies as captured -> the engine's, and the sinks of the engine's
  // GET_REQs by Q's captured cookie.
  std::map<Cookie, Cookie> cookies_;
  struct SinkDesc {
    std::uint32_t key = 0;
    std::vector<RdmaFrag> frags;
  };
  std::map<Cookie, SinkDesc> get_sinks_;
  std::vector<std::uint8_t> p_writes_, q_writes_;  // RDMA data since the last completion
  std::size_t p_sink_len_ = 0;                     // bytes of p_bulk_ offered in the last PUT_ACK
  std::size_t next_got_ = 0;                       // the engine's next message P has not matched
  std::size_t next_delivered_ = 0;
  // Q's credits as the capture shows them: queue depth, less Q's
  // credit-consuming messages, plus what P returned.
  int q_credits_ = kDefaultQueueDepth;
  std::uint16_t queue_depth_ = kDefaultQueueDepth;
};

// Q's LNet messages, and the bulk of each PUT_REQ: the data Q wrote into
// the sink P's PUT_ACK named, found through the cookies (PUT_DONE echoes
// P's cookie, P's PUT_ACK pairs it with Q's).
void Replay::build_script() {
  std::map<Cookie, std::size_t> put_by_cookie;  // Q's PUT_REQ cookie -> script index
  std::map<Cookie, Cookie> put_of_sink;         // P's PUT_ACK cookie -> Q's PUT_REQ cookie
  std::vector<std::uint8_t> writes;
  for (const Event& e : events_) {
    if (e.kind == Event::Kind::rdma_write && !e.from_p) writes.insert(writes.end(), e.bytes.begin(), e.bytes.end());
    if (e.kind != Event::Kind::message) continue;
    const Msg m = decoded(e.bytes);
    if (e.from_p) {
      if (const auto* pa = m.put_ack()) put_of_sink[pa->dst_cookie] = pa->src_cookie;
      continue;
    }
    CapturedQ::Message q;
    q.frame = e.frame;
    if (const auto* im = m.immediate()) {
      q.hdr = im->hdr;
      q.payload.assign(im->payload.begin(), im->payload.end());
    } else if (const auto* pr = m.put_req()) {
      q.hdr = pr->hdr;
      put_by_cookie[pr->cookie] = upper_.script.size();
    } else if (const auto* gr = m.get_req()) {
      q.hdr = gr->hdr;
    } else if (m.hdr.type == MsgType::put_done) {
      auto s = put_of_sink.find(m.completion()->cookie);
      if (s == put_of_sink.end() || !put_by_cookie.count(s->second))
        throw std::runtime_error("frame " + std::to_string(e.frame) + ": PUT_DONE of no PUT");
      upper_.script[put_by_cookie[s->second]].payload = std::move(writes);
      writes.clear();
      continue;
    } else {
      continue;
    }
    upper_.script.push_back(std::move(q));
  }
  for (const auto& q : upper_.script)
    if (q.hdr.type != lnetr::MsgType::get && q.payload.size() != q.hdr.payload_length)
      throw std::runtime_error("frame " + std::to_string(q.frame) + ": payload not all in the capture");
  upper_.prepare();
}

// Run the fabric and Q's owed messages until nothing moves.
void Replay::settle() {
  for (int i = 0; i < 1000; ++i) {
    fabric_.run();
    const bool any = upper_.pump();
    if (!any && fabric_.idle()) return;
  }
  ADD_FAILURE() << "the fabric never settled";
}

// The clock to capture time `t`, ticking the engine every second on the
// way as Linux's timer checks its connections (keepalive NOOPs come from
// there).
void Replay::advance_to(double t) {
  const auto target = base_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t));
  while (now_ + 1s <= target) {
    now_ += 1s;
    node_->tick();
    settle();
  }
  if (target > now_) now_ = target;
  node_->tick();
  settle();
}

void Replay::connect(const Event& e) {
  const Msg req = decoded(e.bytes);
  p_ = std::make_unique<RawPeer>(fabric_, "10.201.1.2@o2ib", req.hdr.srcstamp);
  p_bulk_.assign(1u << 20, 0);
  p_->tr.register_memory(p_bulk_.data(), p_bulk_.size(), true, p_region_);
  queue_depth_ = req.connparams()->queue_depth;
  q_credits_ = queue_depth_;
  p_->connect(kQ, e.bytes, e.port);
  settle();
  ASSERT_TRUE(p_->established) << "frame " << e.frame << ": the engine did not accept P's CONNREQ";
}

// The engine's CONNACK is the kernel's, byte for byte (the CM pads the
// private data of its REP with zeros: the kernel's CONNACK is what comes
// before them).
void Replay::check_connack(const Event& e) {
  ASSERT_TRUE(p_ && p_->established);
  const ByteSpan kernel(e.bytes);
  ASSERT_GE(kernel.size(), kConnMsgSize);
  EXPECT_TRUE(std::all_of(kernel.begin() + kConnMsgSize, kernel.end(), [](std::uint8_t b) { return b == 0; }));
  check_bytes(e.frame, "CONNACK", kernel.first(kConnMsgSize), ByteSpan(p_->connack));
}

// P's message of event `i`, with what P echoes of Q's choices (cookies,
// RDMA sinks) translated to the engine's, and P's RDMA before it.
void Replay::send_p(std::size_t i) {
  const Event& e = events_[i];
  SCOPED_TRACE("frame " + std::to_string(e.frame) + " (P)");
  // Nothing the kernel had not sent before this point (a NOOP too early,
  // an answer before its question).
  for (; next_got_ < p_->got.size(); ++next_got_) {
    auto early = decode_msg(p_->got[next_got_]);
    diff(e.frame, "sent before P's message", "nothing", early ? std::string(to_string(early->msg.hdr.type)) : "?");
  }
  // Q's LNet messages before P's next one answer this one.
  std::uint32_t next_p = UINT32_MAX;
  for (std::size_t j = i + 1; j < events_.size(); ++j)
    if (events_[j].kind == Event::Kind::message && events_[j].from_p) {
      next_p = events_[j].frame;
      break;
    }
  std::size_t owed = 0;
  while (owed < upper_.script.size() && upper_.script[owed].frame < next_p) ++owed;
  upper_.owe(owed);

  Msg m = decoded(e.bytes);
  q_credits_ += m.hdr.credits;
  std::vector<std::uint8_t> out = e.bytes;
  if (const auto echoed = echoed_cookie(m)) {
    auto c = cookies_.find(*echoed);
    ASSERT_NE(c, cookies_.end()) << "P echoes cookie " << *echoed << ", which the engine never sent";
    std::vector<RdmaFrag> sink;
    if (auto* pa = std::get_if<PutAck>(&m.body)) {
      // A sink of the captured fragments' sizes in P's memory.
      std::uint64_t at = 0;
      for (const RdmaFrag& f : frags_of(pa->rd)) {
        sink.push_back({f.nob, reinterpret_cast<std::uint64_t>(p_bulk_.data()) + at});
        at += f.nob;
      }
      ASSERT_LE(at, p_bulk_.size());
      std::fill_n(p_bulk_.begin(), at, 0x5a);
      p_sink_len_ = at;
      pa->src_cookie = c->second;
      pa->rd = RdmaDesc(p_region_.rkey, sink);
    } else if (auto* done = std::get_if<Completion>(&m.body)) {
      if (m.hdr.type == MsgType::get_done && done->status > 0) {
        // P's REPLY: its captured RDMA writes, into the engine's sink.
        EXPECT_EQ(p_writes_.size(), static_cast<std::size_t>(done->status));
        const SinkDesc& s = get_sinks_.at(*echoed);
        rdma_write(p_writes_, s.key, s.frags);
      }
      done->cookie = c->second;
    }
    std::vector<std::uint8_t> enc(kMaxMsgSize);
    auto n = encode_msg(m, enc);
    ASSERT_TRUE(n);
    enc.resize(*n);
    out = std::move(enc);
  }
  p_->send(out);
  settle();

  // What the engine delivered to Q's LNet: P's message as captured.
  const Msg pm = decoded(e.bytes);
  if (is_lnet(pm.hdr.type)) {
    const LnetHeader* h = nullptr;
    ByteSpan payload;
    if (const auto* im = pm.immediate()) h = &im->hdr, payload = im->payload;
    if (const auto* pr = pm.put_req()) h = &pr->hdr;
    if (const auto* gr = pm.get_req()) h = &gr->hdr;
    ASSERT_LT(next_delivered_, upper_.delivered.size()) << "the engine delivered nothing to LNet";
    const auto& d = upper_.delivered[next_delivered_++];
    EXPECT_EQ(d.hdr, *h);
    if (pm.immediate()) {
      EXPECT_TRUE(std::equal(d.payload.begin(), d.payload.end(), payload.begin(), payload.end()));
    }
    ++deliveries_checked;
  } else if (pm.hdr.type == MsgType::get_done && pm.completion()->status > 0) {
    // The REPLY of Q's GET, written by P, handed to Q's LNet.
    ASSERT_LT(next_delivered_, upper_.delivered.size()) << "the engine delivered no REPLY";
    const auto& d = upper_.delivered[next_delivered_++];
    EXPECT_EQ(d.hdr.type, lnetr::MsgType::reply);
    EXPECT_EQ(d.payload, p_writes_);
    ++deliveries_checked;
  }
  if (pm.hdr.type == MsgType::get_done) p_writes_.clear();
  EXPECT_EQ(next_delivered_, upper_.delivered.size()) << "the engine delivered more than P sent";
}

// P writes `data` into the sink of `frags` (as kiblnd_init_rdma does: one
// work request per fragment), on its connection before what it sends next.
void Replay::rdma_write(ByteSpan data, std::uint32_t rkey, const std::vector<RdmaFrag>& frags) {
  std::uint8_t* src = p_bulk_.data();
  ASSERT_LE(data.size(), p_bulk_.size());
  std::memcpy(src, data.data(), data.size());
  std::vector<Sge> sges;
  sges.reserve(frags.size());
  std::vector<SendWr> wrs;
  std::size_t at = 0;
  for (const RdmaFrag& f : frags) {
    if (at == data.size()) break;
    const std::uint32_t n = static_cast<std::uint32_t>(std::min<std::size_t>(f.nob, data.size() - at));
    sges.push_back(Sge{reinterpret_cast<std::uint64_t>(src + at), n, p_region_.lkey});
    SendWr w;
    w.op = WrOp::rdma_write;
    w.sge = &sges.back();
    w.num_sge = 1;
    w.remote_addr = f.addr;
    w.rkey = rkey;
    wrs.push_back(w);
    at += n;
  }
  ASSERT_EQ(at, data.size()) << "the engine's sink is smaller than P's REPLY";
  ASSERT_EQ(p_->tr.post_send(p_->id, wrs.data(), wrs.size()), 0);
}

// The kernel's message of `e` and the engine's next one, field by field.
void Replay::compare_q(const Event& e) {
  SCOPED_TRACE("frame " + std::to_string(e.frame) + " (Q)");
  const Msg k = decoded(e.bytes);
  if (is_lnet(k.hdr.type)) --q_credits_;
  if (next_got_ >= p_->got.size()) {
    diff(e.frame, "message", std::string(to_string(k.hdr.type)), "nothing");
    return;
  }
  ++messages_compared;
  const std::vector<std::uint8_t>& engine_bytes = p_->got[next_got_++];
  auto ed = decode_msg(engine_bytes);
  ASSERT_TRUE(ed) << "the engine sent a message that does not decode";
  const auto kd = decode_msg(e.bytes);
  const Msg& g = ed->msg;
  check(e.frame, "type", std::string(to_string(k.hdr.type)), std::string(to_string(g.hdr.type)));
  check(e.frame, "version", int{k.hdr.version}, int{g.hdr.version});
  check(e.frame, "credits", int{k.hdr.credits}, int{g.hdr.credits});
  check(e.frame, "nob", kd->nob, ed->nob);
  check(e.frame, "cksum", kd->cksum, ed->cksum);
  check(e.frame, "srcnid", to_string(k.hdr.srcnid), to_string(g.hdr.srcnid));
  check(e.frame, "srcstamp", k.hdr.srcstamp, g.hdr.srcstamp);
  check(e.frame, "dstnid", to_string(k.hdr.dstnid), to_string(g.hdr.dstnid));
  check(e.frame, "dststamp", k.hdr.dststamp, g.hdr.dststamp);
  if (k.hdr.type != g.hdr.type) return;

  const ByteSpan kb(e.bytes), gb(engine_bytes);
  const std::size_t lnet_end = kMsgHeaderSize + kLnetHeaderSize;
  if (is_lnet(k.hdr.type)) check_bytes(e.frame, "LNet header", kb.subspan(kMsgHeaderSize, kLnetHeaderSize),
                                       gb.subspan(kMsgHeaderSize, kLnetHeaderSize));
  if (k.immediate()) check_bytes(e.frame, "payload", kb.subspan(lnet_end, kd->nob - lnet_end),
                                 gb.subspan(lnet_end, ed->nob - std::min<std::size_t>(ed->nob, lnet_end)));
  // Sinks: how many fragments of which sizes (keys and addresses are the
  // node's memory).
  const RdmaDesc* krd = nullptr;
  const RdmaDesc* grd = nullptr;
  if (k.get_req()) krd = &k.get_req()->rd, grd = &g.get_req()->rd;
  if (k.put_ack()) krd = &k.put_ack()->rd, grd = &g.put_ack()->rd;
  if (krd) {
    check(e.frame, "rd nfrags", krd->nfrags(), grd->nfrags());
    for (std::size_t i = 0; i < std::min(krd->nfrags(), grd->nfrags()); ++i)
      check(e.frame, "rd frag nob", krd->frag(i).nob, grd->frag(i).nob);
  }
  // Echoes of P's cookies, and completion statuses.
  if (const auto kc = echoed_cookie(k)) check(e.frame, "echoed cookie", *kc, *echoed_cookie(g));
  if (k.completion()) check(e.frame, "status", k.completion()->status, g.completion()->status);
  // Q's own cookies: what P will echo, translated.
  if (const auto kc = own_cookie(k)) cookies_[*kc] = *own_cookie(g);
  if (const auto* gr = g.get_req()) get_sinks_[k.get_req()->cookie] = {gr->rd.key(), frags_of(gr->rd)};
  // Q's bulk as the kernel wrote it, in the sink P offered.
  if (k.hdr.type == MsgType::put_done) {
    EXPECT_EQ(q_writes_.size(), p_sink_len_);
    check_bytes(e.frame, "RDMA data", q_writes_, ByteSpan(p_bulk_.data(), std::min(p_sink_len_, p_bulk_.size())));
    q_writes_.clear();
  }
}

std::vector<Diff> Replay::run() {
  build_script();
  q_tr_.add_address(kQ.addr4());
  std::uint64_t q_incarnation = 0;
  for (const Event& e : events_)
    if (e.kind == Event::Kind::connack) q_incarnation = decoded(e.bytes).hdr.srcstamp;
  EXPECT_NE(q_incarnation, 0u) << "no CONNACK in the capture";
  Options opts;
  opts.keepalive = kKeepalive;
  LocalNi ni;
  ni.nid = kQ;
  ni.transport = &q_tr_;
  node_ = std::make_unique<Node>(opts, std::vector<LocalNi>{ni}, q_incarnation, upper_, [this] { return now_; });
  upper_.node = node_.get();
  q_tr_.listen(kQ.addr4(), kServicePort, [this](ConnRequest&& r) { node_->accept_request(std::move(r)); });

  for (std::size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    advance_to(e.time);
    switch (e.kind) {
      case Event::Kind::connreq:
        connect(e);
        break;
      case Event::Kind::connack:
        check_connack(e);
        break;
      case Event::Kind::rdma_write:
        (e.from_p ? p_writes_ : q_writes_).insert((e.from_p ? p_writes_ : q_writes_).end(), e.bytes.begin(),
                                                  e.bytes.end());
        break;
      case Event::Kind::message:
        if (e.from_p) {
          send_p(i);
        } else {
          compare_q(e);
        }
        break;
    }
    if (::testing::Test::HasFatalFailure()) return diffs_;
  }

  // Nothing more than the kernel sent, every message of Q's LNet gone and
  // completed, and the engine's credits where the kernel's are.
  EXPECT_EQ(next_got_, p_->got.size()) << "the engine sent more messages than the kernel did";
  EXPECT_EQ(upper_.sent_count(), upper_.script.size());
  for (const auto& m : upper_.script) EXPECT_EQ(m.status, 0) << "frame " << m.frame;
  EXPECT_EQ(upper_.aborted, 0);
  const auto peers = node_->peers();
  EXPECT_EQ(peers.size(), 1u);
  if (peers.size() == 1 && peers[0].conns.size() == 1) {
    const Node::ConnInfo& c = peers[0].conns[0];
    EXPECT_EQ(c.queue_depth, queue_depth_);
    EXPECT_EQ(c.credits, q_credits_);
    EXPECT_EQ(c.reserved_credits, c.queue_depth);
    EXPECT_EQ(c.outstanding_credits, 0);
    EXPECT_EQ(c.rx_held, 0u);
  } else {
    ADD_FAILURE() << "the engine does not have exactly P's one connection";
  }
  EXPECT_EQ(node_->tx_descs_in_use(), 0u);

  // P goes; the engine lets go of everything.
  p_->close();
  settle();
  node_->shutdown();
  settle();
  node_->reap();
  EXPECT_EQ(node_->connections(), 0u);
  EXPECT_EQ(q_tr_.live_ids(), 0u);
  EXPECT_TRUE(q_tr_.violations.empty()) << q_tr_.violations.front();
  EXPECT_TRUE(p_->tr.violations.empty()) << p_->tr.violations.front();
  p_->tr.deregister(p_region_);
  return diffs_;
}

class V3ReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = vectors_dir() + "/" + kCaptureFile;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      GTEST_SKIP() << path << " is missing: set LNETR_VECTORS to the directory of the Lustre wire captures";
    events = read_capture(path);
  }
  std::vector<Event> events;
};

// Frames 14-18 (discovery) pin an ordering: P's PUSH (14) asks for an ACK;
// the kernel's LNet sends the ACK (16) before the receive buffer is
// reposted, so the ACK carries credits 0 and Q's own PUSH (18) credits 1.
TEST_F(V3ReplayTest, EngineAnswersAsTheKernelDid) {
  Replay replay(events);
  const std::vector<Diff> diffs = replay.run();
  // Every message of Q after its CONNACK (frame 4, compared too): the
  // capture's 32.
  EXPECT_EQ(replay.messages_compared, 32u);
  // P's 18 LNet messages, and the REPLYs of Q's 4 optimized GETs.
  EXPECT_EQ(replay.deliveries_checked, 22u);
  for (const Diff& d : diffs) ADD_FAILURE() << d;
}

}  // namespace
}  // namespace lnetr::o2ib
