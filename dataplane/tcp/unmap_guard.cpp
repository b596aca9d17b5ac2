// The guard of device memory against unmaps on DPDK's interrupt thread
// (unmap_guard.hpp), and the munmap() that waits for it.
#include "dataplane/tcp/unmap_guard.hpp"

#include <dlfcn.h>
#include <rte_interrupts.h>
#include <rte_rcu_qsbr.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace lnetr::tcp::unmap_guard {
namespace {

using MunmapFn = int (*)(void*, std::size_t);

// Set once by install() and never freed (an unmap on the interrupt thread
// may still be reading it while the process exits).  Acquire pairs with
// install()'s release: a thread that sees the pointer sees it initialised.
std::atomic<rte_rcu_qsbr*> g_qsbr{nullptr};

// The next munmap in the lookup order (the C library's, or a sanitizer's
// interceptor in front of it), found before main() so that no unmap has to
// look it up; the raw system call if there is none.
MunmapFn g_next = nullptr;

__attribute__((constructor)) void find_next_munmap() {
  g_next = reinterpret_cast<MunmapFn>(dlsym(RTLD_NEXT, "munmap"));
}

}  // namespace

bool install(unsigned max_pollers, std::string& err) {
  if (g_qsbr.load(std::memory_order_acquire) != nullptr) return true;
  const std::size_t size = rte_rcu_qsbr_get_memsize(max_pollers);
  // aligned_alloc wants a multiple of the alignment; the size already is.
  auto* v = static_cast<rte_rcu_qsbr*>(std::aligned_alloc(RTE_CACHE_LINE_SIZE, size));
  if (v == nullptr || rte_rcu_qsbr_init(v, max_pollers) != 0) {
    err = "cannot set up the guard of device memory (RCU, " + std::to_string(max_pollers) + " pollers)";
    std::free(v);
    return false;
  }
  g_qsbr.store(v, std::memory_order_release);
  return true;
}

bool installed() noexcept { return g_qsbr.load(std::memory_order_acquire) != nullptr; }

Poller::Poller(unsigned id) noexcept : qsbr_(g_qsbr.load(std::memory_order_acquire)), id_(id) {
  if (qsbr_ == nullptr) return;
  rte_rcu_qsbr_thread_register(qsbr_, id_);
  rte_rcu_qsbr_thread_online(qsbr_, id_);
}

Poller::~Poller() {
  if (qsbr_ == nullptr) return;
  rte_rcu_qsbr_thread_offline(qsbr_, id_);
  rte_rcu_qsbr_thread_unregister(qsbr_, id_);
}

void Poller::quiescent() noexcept {
  if (qsbr_ != nullptr) rte_rcu_qsbr_quiescent(qsbr_, id_);
}

}  // namespace lnetr::tcp::unmap_guard

// The interposed munmap (see the header).  Exported from the executable by
// the link (meson: --export-dynamic-symbol=munmap, in tcp_dep), so DPDK's
// drivers, loaded as plugins, call this one.
extern "C" int munmap(void* addr, std::size_t len) noexcept {
  using namespace lnetr::tcp::unmap_guard;
  rte_rcu_qsbr* v = g_qsbr.load(std::memory_order_acquire);
  if (v != nullptr && rte_thread_is_intr()) rte_rcu_qsbr_synchronize(v, RTE_QSBR_THRID_INVALID);
  if (g_next != nullptr) return g_next(addr, len);
  return static_cast<int>(syscall(SYS_munmap, addr, len));
}
