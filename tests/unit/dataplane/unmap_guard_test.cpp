// The unmap guard on DPDK's real interrupt thread: an unmap made there (as
// net_memif does when its peer goes away) waits until a poller still inside
// a burst over that memory has reached its quiescent point.  The "burst"
// here reads the mapping until the test lets it go: without the guard the
// unmap lands under it and the test dies of SIGSEGV.
// (DPDK 22.11 marks the interrupt-handle instance calls experimental.)
#define ALLOW_EXPERIMENTAL_API
#include <rte_eal.h>
#include <rte_interrupts.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <iterator>
#include <thread>

#include <gtest/gtest.h>

#include "dataplane/tcp/unmap_guard.hpp"

namespace lnetr::tcp {
namespace {

using namespace std::chrono_literals;

constexpr std::size_t kPage = 4096;

void* map_page() {
  void* p = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  static_cast<volatile std::uint8_t*>(p)[0] = 7;
  return p;
}

bool mapped(void* p) { return msync(p, kPage, MS_ASYNC) == 0 || errno != ENOMEM; }

template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 10s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// Unmaps a page on the EAL interrupt thread when kicked (an eventfd the
// interrupt thread watches, as it watches a memif control socket).
class InterruptThreadUnmapper {
 public:
  InterruptThreadUnmapper() {
    fd_ = eventfd(0, EFD_NONBLOCK);
    handle_ = rte_intr_instance_alloc(RTE_INTR_INSTANCE_F_PRIVATE);
    rte_intr_fd_set(handle_, fd_);
    rte_intr_type_set(handle_, RTE_INTR_HANDLE_EXT);
    EXPECT_EQ(rte_intr_callback_register(handle_, &on_event, this), 0);
  }
  ~InterruptThreadUnmapper() {
    rte_intr_callback_unregister_sync(handle_, &on_event, this);
    rte_intr_instance_free(handle_);
    close(fd_);
  }
  void unmap(void* page) {
    page_ = page;
    const std::uint64_t one = 1;
    ASSERT_EQ(write(fd_, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  }
  bool done() const { return done_.load(); }
  int result() const { return result_; }
  bool on_interrupt_thread() const { return on_intr_; }

 private:
  static void on_event(void* arg) {
    auto* self = static_cast<InterruptThreadUnmapper*>(arg);
    std::uint64_t n;
    if (read(self->fd_, &n, sizeof n) != static_cast<ssize_t>(sizeof n)) return;
    self->on_intr_ = rte_thread_is_intr() != 0;
    self->result_ = munmap(self->page_, kPage);
    self->done_.store(true);
  }

  int fd_ = -1;
  rte_intr_handle* handle_ = nullptr;
  void* page_ = nullptr;
  int result_ = -2;
  bool on_intr_ = false;
  std::atomic<bool> done_{false};
};

// A worker polling a device: reads the device memory inside a "burst" that
// lasts until released, then goes through its quiescent point on every loop.
class BurstingPoller {
 public:
  BurstingPoller(unsigned id, void* memory)
      : thread_([this, id, memory] {
          unmap_guard::Poller poller(id);
          auto* bytes = static_cast<volatile std::uint8_t*>(memory);
          in_burst_.store(true);
          while (!release_.load()) sum_ += bytes[0];
          while (!stop_.load()) {
            poller.quiescent();
            std::this_thread::sleep_for(20us);
          }
        }) {}
  ~BurstingPoller() {
    release_.store(true);
    stop_.store(true);
    thread_.join();
  }
  bool in_burst() const { return in_burst_.load(); }
  void end_burst() { release_.store(true); }

 private:
  std::atomic<bool> in_burst_{false}, release_{false}, stop_{false};
  std::uint64_t sum_ = 0;
  std::thread thread_;
};

TEST(UnmapGuard, AnUnmapOnTheInterruptThreadWaitsForAPollerInsideABurst) {
  ASSERT_TRUE(unmap_guard::installed());
  void* page = map_page();
  BurstingPoller poller(0, page);
  ASSERT_TRUE(eventually([&] { return poller.in_burst(); }));
  InterruptThreadUnmapper unmapper;
  unmapper.unmap(page);
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(unmapper.done());
  EXPECT_TRUE(mapped(page));
  poller.end_burst();
  ASSERT_TRUE(eventually([&] { return unmapper.done(); }));
  EXPECT_TRUE(unmapper.on_interrupt_thread());
  EXPECT_EQ(unmapper.result(), 0);
  EXPECT_FALSE(mapped(page));
}

TEST(UnmapGuard, AnUnmapOnAnyOtherThreadDoesNotWait) {
  void* memory = map_page();
  void* other = map_page();
  {
    BurstingPoller poller(1, memory);
    ASSERT_TRUE(eventually([&] { return poller.in_burst(); }));
    EXPECT_EQ(munmap(other, kPage), 0);  // on the test's thread, mid-burst
    EXPECT_FALSE(mapped(other));
  }
  EXPECT_EQ(munmap(memory, kPage), 0);
}

TEST(UnmapGuard, APollerThatHasStoppedIsNotWaitedFor) {
  void* page = map_page();
  { unmap_guard::Poller gone(2); }
  InterruptThreadUnmapper unmapper;
  unmapper.unmap(page);
  ASSERT_TRUE(eventually([&] { return unmapper.done(); }, 5s));
  EXPECT_EQ(unmapper.result(), 0);
  EXPECT_FALSE(mapped(page));
}

}  // namespace
}  // namespace lnetr::tcp

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const char* eal[] = {"unit-unmap-guard", "--no-huge", "--no-shconf", "-m", "64", "--no-pci", "-l", "0",
                       "--log-level=lib.*:error"};
  if (rte_eal_init(static_cast<int>(std::size(eal)), const_cast<char**>(eal)) < 0) {
    std::fprintf(stderr, "unit-unmap-guard: EAL start failed\n");
    return 1;
  }
  std::string err;
  if (!lnetr::tcp::unmap_guard::install(4, err)) {
    std::fprintf(stderr, "unit-unmap-guard: %s\n", err.c_str());
    return 1;
  }
  const int rc = RUN_ALL_TESTS();
  rte_eal_cleanup();
  return rc;
}
