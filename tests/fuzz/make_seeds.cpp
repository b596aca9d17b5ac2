// lnetr-fuzz-seeds VECTORS_DIR CORPUS_DIR: cuts the Lustre captures into
// seed inputs for each fuzz target (CORPUS_DIR/<target>/<n>), so that every
// fuzzer starts from real kernel traffic.  Built in the normal (non-fuzz)
// configuration; tests/fuzz/run calls it before a run.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "cli/decode/capture.hpp"
#include "cli/decode/pcap_file.hpp"

namespace fs = std::filesystem;
using namespace lnetr;
using namespace lnetr::decode;

namespace {

class Seeds {
 public:
  explicit Seeds(fs::path dir) : dir_(std::move(dir)) {}

  void add(const std::string& target, ByteSpan bytes) {
    const fs::path d = dir_ / target;
    fs::create_directories(d);
    std::ofstream(d / ("vec" + std::to_string(++count_[target])), std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  void add(const std::string& target, const std::string& text) {
    add(target, ByteSpan(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
  }
  std::size_t total() const {
    std::size_t n = 0;
    for (const auto& [t, c] : count_) n += c;
    return n;
  }

 private:
  fs::path dir_;
  std::map<std::string, std::size_t> count_;
};

// One socklnd stream seed: the fuzz target's first byte selects version
// (1 + (b & 3)) and byte order (b & 4: big).
std::vector<std::uint8_t> stream_seed(const SockMsgPdu& m, ByteSpan bytes) {
  std::vector<std::uint8_t> s{static_cast<std::uint8_t>((m.version - 1) | (m.order == ByteOrder::big ? 4 : 0))};
  s.insert(s.end(), bytes.begin(), bytes.end());
  return s;
}

void seed_from(const Pdu& p, Seeds& seeds) {
  if (p.error) return;
  const ByteSpan b(p.bytes);
  if (p.as<AcceptorPdu>()) seeds.add("socklnd_acceptor", b);
  if (p.as<HelloPdu>()) seeds.add("socklnd_hello", b);
  if (const auto* m = p.as<SockMsgPdu>()) {
    // Bulk payloads add nothing a fuzzer can use: keep small messages whole.
    if (b.size() <= 4096) seeds.add("socklnd_stream", stream_seed(*m, b));
    if (m->ping) seeds.add("ping_info", m->msg.payload);
  }
  if (const auto* o = p.as<O2ibPdu>()) {
    seeds.add("o2iblnd_msg", b);
    if (o->ping) seeds.add("ping_info", o->msg.msg.immediate()->payload);
  }
  if (const auto* cm = p.as<CmPdu>(); cm && cm->msg) seeds.add("o2iblnd_msg", b.subspan(cm->ulp_offset));
  if (const LnetHeader* h = lnet_header_of(p)) {
    std::uint8_t hdr[kLnetHeaderSize];
    if (encode_header(*h, hdr, HeaderForm::nid4)) seeds.add("lnet_header", ByteSpan(hdr));
    seeds.add("nid_string", to_string(h->src_nid));
    seeds.add("nid_string", std::to_string(h->src_pid) + "-" + to_string(h->dest_nid));
  }
}

// A capture_ seed: link type byte, then length-prefixed frames (see
// fuzz_capture.cpp), a handful of frames per seed.
// Byte 0 = 0 selects Ethernet, the link type of every Lustre capture.  Seeds
// stay small (a few short frames): fuzz_capture walks its input ten ways, so
// its speed falls with the input's size.
void seed_capture(PcapFile& pcap, Seeds& seeds) {
  constexpr std::size_t kFramesPerSeed = 4, kMaxSeeds = 16, kMaxFrame = 512;
  std::vector<std::uint8_t> seed{0};
  std::size_t frames = 0, made = 0;
  CapturedFrame f;
  std::string err;
  while (made < kMaxSeeds && pcap.next(f, err)) {
    if (f.data.size() > kMaxFrame) continue;
    const auto n = static_cast<std::uint16_t>(f.data.size());
    seed.push_back(static_cast<std::uint8_t>(n));
    seed.push_back(static_cast<std::uint8_t>(n >> 8));
    seed.insert(seed.end(), f.data.begin(), f.data.end());
    if (++frames == kFramesPerSeed) {
      seeds.add("capture", seed);
      seed.resize(1);
      frames = 0;
      ++made;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: lnetr-fuzz-seeds VECTORS_DIR CORPUS_DIR\n");
    return 2;
  }
  Seeds seeds{fs::path(argv[2])};
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(argv[1], ec)) {
    if (entry.path().extension() != ".pcap") continue;
    std::string err;
    auto pcap = PcapFile::open(entry.path(), err);
    std::optional<LinkType> link;
    if (pcap) link = pcap->link(err);
    if (!link) {
      std::fprintf(stderr, "lnetr-fuzz-seeds: %s: %s\n", entry.path().c_str(), err.c_str());
      return 1;
    }
    CaptureDecoder dec(*link);
    std::vector<Pdu> pdus;
    CapturedFrame f;
    while (pcap->next(f, err)) dec.add_frame(f, pdus);
    dec.finish(pdus);
    for (const Pdu& p : pdus) seed_from(p, seeds);
    auto again = PcapFile::open(entry.path(), err);
    if (again && *link == LinkType::ethernet) seed_capture(*again, seeds);
  }
  // lnetctl's YAML (exports, imports) seeds the configuration loader.
  for (const auto& entry : fs::recursive_directory_iterator(argv[1], ec)) {
    if (entry.path().extension() != ".yaml") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    seeds.add("config", std::string(std::istreambuf_iterator<char>(in), {}));
  }
  if (ec || seeds.total() == 0) {
    std::fprintf(stderr, "lnetr-fuzz-seeds: no captures in %s\n", argv[1]);
    return 1;
  }
  return 0;
}
