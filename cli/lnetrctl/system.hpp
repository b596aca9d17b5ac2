// lnetrctl's `system` verbs: the router as a whole (system show), the drain
// before a reboot, and on the appliance image its root slots (versions,
// update, rollback, reboot) through /usr/sbin/lnetr-update, run as root
// (directly, or with `sudo -n`: the image lets members of lnetr-admin run
// it).
#pragma once

#include <string>
#include <vector>

#include "cli/lnetrctl/verbs.hpp"

namespace lnetr::lnetrctl {

struct DrainOptions {
  int timeout = 360;  // s: give up (and say so) after this long
  int quiet = 5;      // s: nothing forwarded for this long counts as moved off
};

// Disable routing (a kernel router's drain: peers are told, forwarding
// goes on meanwhile) and wait until clients have moved off: the dataplane
// has stopped routing, or no router buffer is held, nothing was forwarded
// for `quiet` seconds and every peer that used the router as a gateway has
// seen routing disabled (pinged it since, or took its push) - or had a
// gateway check interval to.
int drain(Context& ctx, const DrainOptions& o);

// Run lnetr-update with `args` as root, its output passing through; the
// exit status as lnetrctl's.
int appliance(Context& ctx, const std::string& verb, const std::vector<std::string>& args);

}  // namespace lnetr::lnetrctl
