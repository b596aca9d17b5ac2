#include "control/metrics.hpp"

#include "control/service.hpp"

namespace lnetr::control {

void Families::add(const std::string& name, const std::string& help, prometheus::MetricType type,
                   const Labels& labels, double value) {
  prometheus::MetricFamily* f = nullptr;
  for (auto& existing : out_)
    if (existing.name == name) f = &existing;
  if (f == nullptr) {
    out_.push_back({});
    f = &out_.back();
    f->name = name;
    f->help = help;
    f->type = type;
  }
  prometheus::ClientMetric m;
  for (const auto& [k, v] : labels) m.label.push_back({k, v});
  if (type == prometheus::MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
  f->metric.push_back(std::move(m));
}

std::vector<prometheus::MetricFamily> Metrics::Collect() const {
  Families f;
  svc_.collect(f);
  return f.take();
}

}  // namespace lnetr::control
