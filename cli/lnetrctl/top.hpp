// `lnetrctl top`: forwarding rates per net and per peer, from successive
// samples of lnetr-control's counters, redrawn in place on a terminal (one
// frame after another otherwise), like routerstat.
#pragma once

#include <cstddef>
#include <string>

#include "cli/lnetrctl/verbs.hpp"

namespace lnetr::lnetrctl {

struct TopOptions {
  double interval = 1.0;  // s
  int count = 0;          // frames (0: until stopped)
  std::size_t peers = 10;
};

// What the frames are computed from: one sample of the counters.
struct TopSample {
  double t = 0;  // s, monotonic
  Json stats, peers, dataplane;
};

// One frame from two samples (pure: tested).
std::string top_frame(const TopSample& a, const TopSample& b, const TopOptions& o, const std::string& title);

int run_top(Context& ctx, const TopOptions& o);

}  // namespace lnetr::lnetrctl
