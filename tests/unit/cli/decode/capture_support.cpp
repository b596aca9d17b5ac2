#include "capture_support.hpp"

#include <sys/stat.h>

#include <cstdlib>
#include <stdexcept>

#include "cli/decode/pcap_file.hpp"

namespace lnetr::test {

std::string vectors_dir() {
  const char* dir = std::getenv("LNETR_VECTORS");
  if (!dir || !*dir)
    throw std::runtime_error("LNETR_VECTORS is not set: it must name the directory of the Lustre wire captures "
                             "(meson sets it from -Dvectors_dir; run the tests with 'meson test')");
  struct stat st {};
  if (::stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::runtime_error(std::string("LNETR_VECTORS=") + dir + " is not a readable directory");
  return dir;
}

std::string vector_path(const std::string& file) { return vectors_dir() + "/" + file; }

DecodedCapture decode_capture(const std::string& pcap_path) {
  std::string error;
  auto file = decode::PcapFile::open(pcap_path, error);
  if (!file) throw std::runtime_error(pcap_path + ": " + error);
  const auto link = file->link(error);
  if (!link) throw std::runtime_error(pcap_path + ": " + error);
  decode::CaptureDecoder decoder(*link);
  DecodedCapture out;
  decode::CapturedFrame frame;
  while (file->next(frame, error)) decoder.add_frame(frame, out.pdus);
  if (!error.empty()) throw std::runtime_error(pcap_path + ": " + error);
  decoder.finish(out.pdus);
  out.conns = decoder.connections();
  out.stats = decoder.stats();
  return out;
}

}  // namespace lnetr::test
