// lnetr-decode: prints every LNet PDU in pcap/pcapng captures: socklnd
// acceptor requests, HELLOs, NOOPs / ZC-ACKs / keepalives and LNet messages;
// o2iblnd messages over RoCEv2 and the IB CM exchange that connects them.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "cli/decode/capture.hpp"
#include "cli/decode/format.hpp"
#include "cli/decode/pcap_file.hpp"

namespace {

using namespace lnetr::decode;

constexpr const char* kUsage =
    "usage: lnetr-decode [--fields] [--transport] FILE.pcap...\n"
    "       lnetr-decode --help | --version\n"
    "\n"
    "Prints every LNet PDU found in the captures (tcpdump -w, pcap or pcapng;\n"
    "Ethernet, Linux cooked or raw IP): socklnd connections to port 988 and\n"
    "o2iblnd over RoCEv2 (UDP 4791), one line per PDU, in capture order.\n"
    "\n"
    "  --fields      also print every field: offset, wire bytes, name, value\n"
    "  --transport   also print plain RoCE RC ACKs (NAKs are always printed)\n"
    "\n"
    "Exit status: 0 if every file was read, 1 if one could not be, 2 on usage errors.\n";

struct Args {
  bool help = false;
  bool version = false;
  FormatOptions format;
  std::vector<std::string> files;
};

bool parse_args(int argc, char** argv, Args& args) {
  bool options_done = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (!options_done && a == "--") options_done = true;
    else if (!options_done && a == "--fields") args.format.fields = true;
    else if (!options_done && a == "--transport") args.format.transport = true;
    else if (!options_done && (a == "-h" || a == "--help")) args.help = true;
    else if (!options_done && a == "--version") args.version = true;
    else if (!options_done && a.size() > 1 && a[0] == '-') {
      std::fprintf(stderr, "lnetr-decode: unknown option %s\n", a.c_str());
      return false;
    } else {
      args.files.push_back(a);
    }
  }
  return args.help || args.version || !args.files.empty();
}

void emit(PduPrinter& printer, std::vector<Pdu>& pdus) {
  for (const Pdu& p : pdus) std::fputs(printer.print(p).c_str(), stdout);
  pdus.clear();
}

// Decodes one file to stdout; false (with a message on stderr) if it could
// not be read.
bool decode_file(const std::string& path, const FormatOptions& opts) {
  std::string error;
  auto file = PcapFile::open(path, error);
  if (!file) {
    // libpcap's message names the file itself when it could not open it.
    const bool named = error.rfind(path + ":", 0) == 0;
    std::fprintf(stderr, "lnetr-decode: %s\n", (named ? error : path + ": " + error).c_str());
    return false;
  }
  const auto link = file->link(error);
  if (!link) {
    std::fprintf(stderr, "lnetr-decode: %s: %s\n", path.c_str(), error.c_str());
    return false;
  }
  std::printf("== %s\n", path.c_str());
  CaptureDecoder decoder(*link);
  PduPrinter printer(opts);
  std::vector<Pdu> pdus;
  CapturedFrame frame;
  while (file->next(frame, error)) {
    decoder.add_frame(frame, pdus);
    emit(printer, pdus);
  }
  decoder.finish(pdus);
  emit(printer, pdus);
  std::fputs(printer.flush().c_str(), stdout);

  const std::vector<SockConnection> conns = decoder.connections();
  if (!conns.empty()) std::printf("socklnd connections:\n");
  for (const SockConnection& c : conns) std::printf("  %s\n", connection_line(c).c_str());
  std::printf("%s\n", stats_text(decoder.stats()).c_str());
  if (!error.empty()) {
    std::fprintf(stderr, "lnetr-decode: %s: read error after frame %llu: %s\n", path.c_str(),
                 static_cast<unsigned long long>(decoder.stats().frames), error.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse_args(argc, argv, args)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (args.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (args.version) {
    std::printf("lnetr-decode %s\n", LNETR_VERSION);
    return 0;
  }
  try {
    bool ok = true;
    for (const std::string& f : args.files) ok = decode_file(f, args.format) && ok;
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lnetr-decode: %s\n", e.what());
    return 1;
  }
}
