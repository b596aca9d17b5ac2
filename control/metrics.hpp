// lnetr-control's Prometheus metrics: every series is built at scrape time
// from what lnetr-control knows (routes, gateway health), the dataplane's
// counters in shared memory, and the dataplane's status document (NIs,
// buffer pools, peer credits, connections).  One prefix, `lnetr_`.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <string>
#include <utility>
#include <vector>

namespace lnetr::control {

class Service;

// Families under construction, with the help text each series carries.
class Families {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;
  void gauge(const std::string& name, const std::string& help, const Labels& labels, double value) {
    add(name, help, prometheus::MetricType::Gauge, labels, value);
  }
  void counter(const std::string& name, const std::string& help, const Labels& labels, double value) {
    add(name, help, prometheus::MetricType::Counter, labels, value);
  }
  std::vector<prometheus::MetricFamily> take() { return std::move(out_); }

 private:
  void add(const std::string& name, const std::string& help, prometheus::MetricType type, const Labels& labels,
           double value);
  std::vector<prometheus::MetricFamily> out_;
};

class Metrics final : public prometheus::Collectable {
 public:
  explicit Metrics(Service& svc) : svc_(svc) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  Service& svc_;
};

}  // namespace lnetr::control
