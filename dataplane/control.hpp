// The dataplane's control thread (the EAL main lcore): routing state
// transitions, NI link state, and a Unix-socket command interface that
// lnetr-control and the tests use.  Nothing here is on the forwarding path;
// it reaches the workers through SharedState and command rings.
//
// Protocol: one request line per connection, one YAML document back, then
// the connection closes.  Requests:
//   status          routing state, NIs, buffer pools, peers, counters
//   routing 0|1     disable / enable forwarding (Linux's stopping / starting)
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "dataplane/setup.hpp"
#include "dataplane/shared.hpp"
#include "dataplane/shm/region.hpp"
#include "dataplane/worker.hpp"

namespace lnetr::dp {

class Control {
 public:
  Control(const Setup& setup, SharedState& shared, Fabric& fabric, const shm::Region& region);
  ~Control();

  // Bind the control socket; false with `err` on failure.
  bool open(std::string& err);
  // Run until SharedState::stop.
  void run();

  // The answer to one request line (also used by tests).
  std::string handle(const std::string& request);

 private:
  void tick();
  std::string status();
  std::string set_routing(bool on);
  // Run `fn` on every worker and wait for all (false if one did not answer).
  bool on_workers(const std::function<void(Worker&)>& fn);

  const Setup& setup_;
  SharedState& shared_;
  Fabric& fabric_;
  const shm::Region& region_;
  int listen_fd_ = -1;
  std::chrono::steady_clock::time_point routing_since_{};
  std::vector<bool> ni_status_;  // per NI: UP in our ping info at the last tick
  bool pushed_disabled_ = false; // RTE_DISABLED as last advertised
};

}  // namespace lnetr::dp
