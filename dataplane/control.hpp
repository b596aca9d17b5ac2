// The dataplane's control thread (the EAL main lcore): routing state
// transitions, NI link state, and a Unix-socket command interface that
// lnetr-control and the tests use.  Nothing here is on the forwarding path;
// it reaches the workers through SharedState and command rings.
//
// Protocol: one request line per connection, one answer back, then the
// connection closes.  Each answer is a record of dataplane/status.hpp (the
// status ABI shared with lnetr-control), as JSON with its version; a
// refused request is its status::Error.  Requests:
//   status               routing state, NIs, buffer pools, peers, counters
//   routing 0|1          disable / enable forwarding (Linux's stopping / starting)
//   drop_asym_route [0|1]  show / set the asymmetric-route check
//   lnet_fault add RULE | del ID|all | list | reset
//                        LNet fault injection rules (router/lnet_fault.hpp)
//   buffers tiny|small|large N  router buffers over all CPTs (0: the
//                        default), as lnetctl set tiny_buffers ... does
//   capture start port=NAME|* host=IPV4|* count=N  (with the file's
//                        descriptor passed on the socket, SCM_RIGHTS)
//   capture stop | show  the capture of the DPDK ports' frames (capture.hpp)
//   net add DOC          NIs added at run time: DOC is lnetctl YAML (flow
//                        style, one line) of the nets to add, checked with
//                        the running configuration as the file would be
//   net del NID          an NI deleted at run time
//   net set conns_per_peer N NID...  (N >= 1) those NIs' LND connects N
//                        connections of each kind to a peer from now on
//   net set timeout S NID...  (S >= 1) those NIs' LND timeout
//   net set timeout S NET  every NI of NET's LND (tcp or o2ib), and tcp NIs
//                        added later (ksocklnd's sock_timeout)
//   fault stall WORKER SECONDS  (only with LNETR_TEST_FAULTS=1 in the
//                        environment) block a worker's loop, for the tests
//                        of the service watchdog
// Clients are served side by side on non-blocking sockets, each with a
// deadline: one that sends slowly, or stops reading its answer, is closed
// when its time is up and never holds up the others or the thread's
// periodic work (link watching, ping-info pushes, the routing drain).
#pragma once

#include <array>
#include <chrono>
#include <string>
#include <vector>

#include "dataplane/setup.hpp"
#include "dataplane/shared.hpp"
#include "dataplane/shm/region.hpp"
#include "dataplane/systemd.hpp"
#include "dataplane/worker.hpp"
#include "router/config.hpp"

namespace lnetr::dp {

class Control {
 public:
  // `cfg` is the configuration `setup` was made of (net add checks the
  // nets it adds with it).
  Control(const Setup& setup, const config::Config& cfg, SharedState& shared, Fabric& fabric,
          const shm::Region& region);
  ~Control();

  // Bind the control socket; false with `err` on failure.
  bool open(std::string& err);
  // Run until SharedState::stop.
  void run();

  // The answer to one request line (also used by tests); `passed` is a
  // descriptor passed with it (-1: none), set to -1 if the request took it.
  std::string handle(const std::string& request, int& passed);
  std::string handle(const std::string& request) {
    int none = -1;
    return handle(request, none);
  }

 private:
  struct Client {
    int fd = -1;
    std::string in;                // the request line so far
    bool overlong = false;         // it was longer than the control socket takes
    int passed = -1;               // a descriptor passed with it (closed with the client)
    std::string out;               // the answer, once the request is complete
    std::size_t sent = 0;
    std::chrono::steady_clock::time_point deadline;
  };
  void tick();
  void accept_clients(std::chrono::steady_clock::time_point now);
  // Read, answer or write as the socket allows; false once it is done with.
  bool serve(Client& c, short revents, std::chrono::steady_clock::time_point now);
  std::string status_answer();
  std::string o2ib_connections(const std::string& args);
  std::string set_routing(bool on);
  std::string fault(const std::string& args);
  // "start ..." (with a file), "stop", "show".
  std::string capture(const std::string& args, int& passed);
  // "tiny|small|large N".
  std::string buffers(const std::string& args);
  // "add DOC" | "del NID".
  std::string net(const std::string& args);
  std::string net_add(const std::string& doc);
  std::string net_del(const std::string& nid);
  // net add's o2ib NIs (`added`, into `slots`): each one's RDMA device
  // opened, every pool registered with it and a transport on it in every
  // worker; "" or why not (nothing left open).
  std::string open_o2ib(const std::vector<NiSetup>& added, const std::vector<std::uint32_t>& slots);
  // Every worker closes its transports of o2ib NI slots `slots` (once its
  // engine has let go of them); control's reference to their devices goes.
  void close_o2ib(const std::vector<std::uint32_t>& slots);
  std::string net_set(const std::string& args);
  // LNet fault injection rules (lnetrctl fault): "add RULE", "del ID|all",
  // "list", "reset" (router/lnet_fault.hpp).
  std::string lnet_fault(const std::string& args);
  // Run `fn` on every worker and wait for all (false if one did not answer
  // within 2 s).  `fn` must own what it writes: see Command.
  bool on_workers(const std::function<void(Worker&)>& fn);
  bool caught_up();
  // Give the system back the heap the workers freed, when much of it is
  // free (a flood of made-up peers aged out): from this thread, at most
  // every kTrimPeriod, never from the forwarding path.
  void trim_heap(std::chrono::steady_clock::time_point now);

  const Setup& setup_;
  // The NIs by slot (kMaxNis: SharedState::ni and the workers' NI state
  // are numbered the same), those in service, and the configuration they
  // are of: Setup's at start, then net add / del's.
  config::Config cfg_;
  std::vector<NiSetup> nis_;
  std::vector<bool> ni_on_;
  Placement placement_;
  SharedState& shared_;
  Fabric& fabric_;
  const shm::Region& region_;
  int listen_fd_ = -1;
  std::vector<Client> clients_;
  std::uint64_t clients_timed_out_ = 0;
  std::chrono::steady_clock::time_point routing_since_ = std::chrono::steady_clock::now();
  std::vector<bool> ni_status_;  // per NI slot: UP in our ping info at the last tick
  bool pushed_disabled_ = false; // RTE_DISABLED as last advertised
  std::vector<bool> slow_;       // per worker: did not answer the last status in time
  systemd::ProgressWatchdog watchdog_;  // fed while every worker loops
  bool faults_ = false;          // LNETR_TEST_FAULTS=1: the fault requests are served
  std::vector<FaultRule> fault_rules_;  // in force on every worker, in order
  std::uint32_t next_fault_id_ = 0;
  std::chrono::steady_clock::time_point next_trim_{};
  std::size_t trimmed_free_ = 0;  // free heap after the last trim (or the least since)
  // By pool class and worker: the buffers its pools hold (grown by
  // buffers(), never shrunk).
  std::array<std::vector<std::uint32_t>, kPoolClasses> pool_room_;
  std::uint32_t pools_added_ = 0;  // (for their names)
};

}  // namespace lnetr::dp
