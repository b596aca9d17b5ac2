// lnetr-o2ib-probe: one RDMA CM connection request with chosen private data,
// as a misbehaving o2iblnd peer would send it, and what came back.
//
//   lnetr-o2ib-probe --src IP --dst IP [--port 987] [--src-port N] --data HEX
//
// Prints one line:
//   rejected status=<IB CM reason> data=<hex of the reject private data>
//   established data=<hex of the accept private data>
//   error <what>
// and exits 0 for rejected/established, 1 otherwise.  The tests judge the
// bytes; this tool only carries them.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lnetr-o2ib-probe: one RDMA CM connection request with chosen private data"};
  std::string src, dst, data;
  int port = 987, src_port = 1023;
  app.add_option("--src", src, "our IPv4 address (on an RDMA device)")->required();
  app.add_option("--dst", dst, "the listener's IPv4 address")->required();
  app.add_option("--port", port, "the listener's port")->capture_default_str();
  app.add_option("--src-port", src_port, "our port (0: any)")->capture_default_str();
  app.add_option("--data", data, "the private data, hex")->required();
  CLI11_PARSE(app, argc, argv);

  std::vector<std::uint8_t> priv;
  if (!unhex(data, priv) || priv.size() > 56) {
    std::printf("error --data: expected up to 56 bytes of hex\n");
    return 1;
  }
  sockaddr_in s{}, d{};
  s.sin_family = d.sin_family = AF_INET;
  s.sin_port = htons(static_cast<std::uint16_t>(src_port));
  d.sin_port = htons(static_cast<std::uint16_t>(port));
  if (inet_pton(AF_INET, src.c_str(), &s.sin_addr) != 1 || inet_pton(AF_INET, dst.c_str(), &d.sin_addr) != 1) {
    std::printf("error bad address\n");
    return 1;
  }
  rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) return fail("rdma_create_event_channel");
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) return fail("rdma_create_id");
  int one = 1;
  rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one);
  if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&s)) != 0) return fail("rdma_bind_addr");
  rdma_cm_event* ev = nullptr;
  if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&d), 5000) != 0 ||
      !expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, &ev))
    return fail("resolve address");
  rdma_ack_cm_event(ev);
  if (rdma_resolve_route(id, 5000) != 0 || !expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, &ev)) return fail("resolve route");
  rdma_ack_cm_event(ev);
  ibv_pd* pd = ibv_alloc_pd(id->verbs);
  ibv_cq* cq = pd ? ibv_create_cq(id->verbs, 16, nullptr, nullptr, 0) : nullptr;
  if (!cq) return fail("pd/cq");
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  qa.qp_type = IBV_QPT_RC;
  if (rdma_create_qp(id, pd, &qa) != 0) return fail("rdma_create_qp");
  rdma_conn_param cp{};
  cp.private_data = priv.data();
  cp.private_data_len = static_cast<std::uint8_t>(priv.size());
  cp.flow_control = 1;
  cp.retry_count = 5;
  cp.rnr_retry_count = 6;
  if (rdma_connect(id, &cp) != 0) return fail("rdma_connect");
  if (rdma_get_cm_event(ch, &ev) != 0) return fail("rdma_get_cm_event");
  int rc = 0;
  const std::size_t n = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;
  if (ev->event == RDMA_CM_EVENT_REJECTED) {
    std::printf("rejected status=%d data=%s\n", ev->status, hex(ev->param.conn.private_data, n).c_str());
  } else if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
    std::printf("established data=%s\n", hex(ev->param.conn.private_data, n).c_str());
  } else {
    std::printf("error event %s status %d\n", rdma_event_str(ev->event), ev->status);
    rc = 1;
  }
  rdma_ack_cm_event(ev);
  rdma_disconnect(id);
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  rdma_destroy_event_channel(ch);
  return rc;
}
