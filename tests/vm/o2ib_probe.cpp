// lnetr-o2ib-probe: one RDMA CM connection request with chosen private data,
// as a misbehaving o2iblnd peer would send it, and what came back; or a
// storm of them.
//
//   lnetr-o2ib-probe --src IP --dst IP [--port 987] [--src-port N] --data HEX
//                    [--count N [--vary-src] [--parallel P]]
//
// Prints one line:
//   rejected status=<IB CM reason> data=<hex of the reject private data>
//   established data=<hex of the accept private data>
//   error <what>
// and exits 0 for rejected/established, 1 otherwise.  With --count N it
// sends N requests, P in flight at once (32; each from a port of its own;
// --vary-src: each naming another made-up source NID, the CONNREQ's srcnid
// address plus its index) and prints one summary line:
//   storm sent=N established=E rejected=R errors=X reasons=<o2iblnd reason>:<count>,...
//         statuses=<IB CM reject reason>:<count>,...
// The tests judge the bytes; this tool only carries them.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

std::string hex(const void* p, std::size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  const auto* b = static_cast<const std::uint8_t*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    s += d[b[i] >> 4];
    s += d[b[i] & 15];
  }
  return s;
}

bool unhex(const std::string& s, std::vector<std::uint8_t>& out) {
  if (s.size() % 2) return false;
  for (std::size_t i = 0; i < s.size(); i += 2) {
    unsigned v = 0;
    if (std::sscanf(s.c_str() + i, "%2x", &v) != 1) return false;
    out.push_back(static_cast<std::uint8_t>(v));
  }
  return true;
}

int fail(const std::string& what) {
  std::printf("error %s: %s\n", what.c_str(), std::strerror(errno));
  return 1;
}

// The next event, which must be `want` (anything else is reported).
bool expect(rdma_event_channel* ch, rdma_cm_event_type want, rdma_cm_event** ev) {
  if (rdma_get_cm_event(ch, ev) != 0) return false;
  return (*ev)->event == want;
}

struct Outcome {
  enum { rejected, established, error } kind = error;
  int status = 0;
  std::vector<std::uint8_t> data;
  std::string what;
};

// One connection request from `s` to `d` with private data `priv`.
Outcome attempt(const sockaddr_in& s, const sockaddr_in& d, const std::vector<std::uint8_t>& priv) {
  Outcome o;
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) {
    o.what = "rdma_create_event_channel";
    return o;
  }
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  rdma_cm_event* ev = nullptr;
  int one = 1;
  ibv_qp_init_attr qa{};
  rdma_conn_param cp{};
  if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) {
    o.what = "rdma_create_id";
    goto out;
  }
  rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one);
  if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(const_cast<sockaddr_in*>(&s))) != 0) {
    o.what = "rdma_bind_addr";
    goto out;
  }
  if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(const_cast<sockaddr_in*>(&d)), 5000) != 0 ||
      !expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, &ev)) {
    o.what = "resolve address";
    goto out;
  }
  rdma_ack_cm_event(ev);
  if (rdma_resolve_route(id, 5000) != 0 || !expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, &ev)) {
    o.what = "resolve route";
    goto out;
  }
  rdma_ack_cm_event(ev);
  pd = ibv_alloc_pd(id->verbs);
  cq = pd ? ibv_create_cq(id->verbs, 16, nullptr, nullptr, 0) : nullptr;
  if (!cq) {
    o.what = "pd/cq";
    goto out;
  }
  qa.send_cq = qa.recv_cq = cq;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  qa.qp_type = IBV_QPT_RC;
  if (rdma_create_qp(id, pd, &qa) != 0) {
    o.what = "rdma_create_qp";
    goto out;
  }
  cp.private_data = priv.data();
  cp.private_data_len = static_cast<std::uint8_t>(priv.size());
  cp.flow_control = 1;
  cp.retry_count = 5;
  cp.rnr_retry_count = 6;
  if (rdma_connect(id, &cp) != 0 || rdma_get_cm_event(ch, &ev) != 0) {
    o.what = "rdma_connect";
    goto out;
  }
  if (const auto* p = static_cast<const std::uint8_t*>(ev->param.conn.private_data))
    o.data.assign(p, p + ev->param.conn.private_data_len);
  o.status = ev->status;
  if (ev->event == RDMA_CM_EVENT_REJECTED) o.kind = Outcome::rejected;
  else if (ev->event == RDMA_CM_EVENT_ESTABLISHED) o.kind = Outcome::established;
  else o.what = std::string("event ") + rdma_event_str(ev->event) + " status " + std::to_string(ev->status);
  rdma_ack_cm_event(ev);
  rdma_disconnect(id);
out:
  if (id && id->qp) rdma_destroy_qp(id);
  if (id) rdma_destroy_id(id);
  if (cq) ibv_destroy_cq(cq);
  if (pd) ibv_dealloc_pd(pd);
  rdma_destroy_event_channel(ch);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lnetr-o2ib-probe: one RDMA CM connection request with chosen private data"};
  std::string src, dst, data;
  int port = 987, src_port = 1023, count = 0, parallel = 32;
  bool vary_src = false;
  app.add_option("--src", src, "our IPv4 address (on an RDMA device)")->required();
  app.add_option("--dst", dst, "the listener's IPv4 address")->required();
  app.add_option("--port", port, "the listener's port")->capture_default_str();
  app.add_option("--src-port", src_port, "our port (0: any)")->capture_default_str();
  app.add_option("--data", data, "the private data, hex")->required();
  app.add_option("--count", count, "send this many requests and print a summary")->check(CLI::Range(1, 1000000));
  app.add_flag("--vary-src", vary_src, "with --count: each request names another source NID");
  app.add_option("--parallel", parallel, "with --count: requests in flight at once")->check(CLI::Range(1, 1024));
  CLI11_PARSE(app, argc, argv);

  std::vector<std::uint8_t> priv;
  if (!unhex(data, priv) || priv.size() > 56) {
    std::printf("error --data: expected up to 56 bytes of hex\n");
    return 1;
  }
  sockaddr_in s{}, d{};
  s.sin_family = d.sin_family = AF_INET;
  s.sin_port = htons(static_cast<std::uint16_t>(count > 0 ? 0 : src_port));
  d.sin_port = htons(static_cast<std::uint16_t>(port));
  if (inet_pton(AF_INET, src.c_str(), &s.sin_addr) != 1 || inet_pton(AF_INET, dst.c_str(), &d.sin_addr) != 1) {
    std::printf("error bad address\n");
    return 1;
  }
  if (count == 0) {
    const Outcome o = attempt(s, d, priv);
    switch (o.kind) {
      case Outcome::rejected:
        std::printf("rejected status=%d data=%s\n", o.status, hex(o.data.data(), o.data.size()).c_str());
        return 0;
      case Outcome::established:
        std::printf("established data=%s\n", hex(o.data.data(), o.data.size()).c_str());
        return 0;
      case Outcome::error:
        return fail(o.what);
    }
  }
  // A storm: up to --parallel requests in flight at once on one event
  // channel; the srcnid's address (bytes 16..19 of a CONNREQ,
  // little-endian) counts up when asked.
  std::vector<std::vector<std::uint8_t>> privs;
  for (int i = 0; i < count; ++i) {
    std::vector<std::uint8_t> p = priv;
    if (vary_src && p.size() >= 20) {
      std::uint32_t a = static_cast<std::uint32_t>(p[16]) | static_cast<std::uint32_t>(p[17]) << 8 |
                        static_cast<std::uint32_t>(p[18]) << 16 | static_cast<std::uint32_t>(p[19]) << 24;
      a += static_cast<std::uint32_t>(i);
      for (int b = 0; b < 4; ++b) p[16 + static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(a >> (8 * b));
    }
    privs.push_back(std::move(p));
  }
  int established = 0, rejected = 0, errors = 0;
  std::map<int, int> reasons;   // o2iblnd reject reason (byte 6 of its reject) -> count
  std::map<int, int> statuses;  // IB CM reject reason (the event's status) -> count
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) return fail("rdma_create_event_channel");
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  int started = 0, finished = 0, in_flight = 0;
  auto finish = [&](rdma_cm_id* id) {
    if (id->qp) rdma_destroy_qp(id);
    rdma_destroy_id(id);
    ++finished;
    --in_flight;
  };
  while (finished < count) {
    while (in_flight < parallel && started < count) {
      rdma_cm_id* id = nullptr;
      ++in_flight;
      const int idx = started++;
      if (rdma_create_id(ch, &id, reinterpret_cast<void*>(static_cast<std::intptr_t>(idx)), RDMA_PS_TCP) != 0) {
        ++errors, ++finished, --in_flight;
        continue;
      }
      int one = 1;
      rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one);
      if (rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&s), reinterpret_cast<sockaddr*>(&d), 5000) != 0) {
        ++errors;
        finish(id);
      }
    }
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ch, &ev) != 0) return fail("rdma_get_cm_event");
    rdma_cm_id* id = ev->id;
    const rdma_cm_event_type type = ev->event;
    const int status = ev->status;
    const auto idx = static_cast<std::size_t>(reinterpret_cast<std::intptr_t>(id->context));
    std::vector<std::uint8_t> answer;
    if (const auto* p = static_cast<const std::uint8_t*>(ev->param.conn.private_data))
      answer.assign(p, p + ev->param.conn.private_data_len);
    rdma_ack_cm_event(ev);
    switch (type) {
      case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(id, 5000) != 0) ++errors, finish(id);
        break;
      case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        if (!pd) pd = ibv_alloc_pd(id->verbs);
        if (pd && !cq) cq = ibv_create_cq(id->verbs, 4096, nullptr, nullptr, 0);
        ibv_qp_init_attr qa{};
        qa.send_cq = qa.recv_cq = cq;
        qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
        qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
        qa.qp_type = IBV_QPT_RC;
        rdma_conn_param cp{};
        cp.private_data = privs[idx].data();
        cp.private_data_len = static_cast<std::uint8_t>(privs[idx].size());
        cp.flow_control = 1;
        cp.retry_count = 5;
        cp.rnr_retry_count = 6;
        if (!cq || rdma_create_qp(id, pd, &qa) != 0 || rdma_connect(id, &cp) != 0) ++errors, finish(id);
        break;
      }
      case RDMA_CM_EVENT_ESTABLISHED:
        ++established;
        rdma_disconnect(id);  // finished at DISCONNECTED
        break;
      case RDMA_CM_EVENT_DISCONNECTED:
        finish(id);
        break;
      case RDMA_CM_EVENT_REJECTED:
        ++rejected;
        ++statuses[status];
        // o2iblnd's reject (a consumer reject, status 28) names its reason.
        ++reasons[status == 28 && answer.size() > 6 ? answer[6] : -1];
        finish(id);
        break;
      case RDMA_CM_EVENT_TIMEWAIT_EXIT:
        break;
      default:  // address, route or connect errors, unreachable
        ++errors;
        finish(id);
        break;
    }
  }
  if (cq) ibv_destroy_cq(cq);
  if (pd) ibv_dealloc_pd(pd);
  rdma_destroy_event_channel(ch);
  std::string why;
  for (const auto& [r, n] : reasons) why += (why.empty() ? "" : ",") + std::to_string(r) + ":" + std::to_string(n);
  std::string cm;
  for (const auto& [st, n] : statuses) cm += (cm.empty() ? "" : ",") + std::to_string(st) + ":" + std::to_string(n);
  std::printf("storm sent=%d established=%d rejected=%d errors=%d reasons=%s statuses=%s\n", count, established,
              rejected, errors, why.c_str(), cm.c_str());
  return 0;
}
