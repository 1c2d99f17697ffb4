// Graph storage, attributes and the def/use index.
#include "ir/graph.h"

#include "support/error.h"

namespace mutwo::ir {

Attrs& Attrs::set(std::string key, Attr value) {
  for (auto& [k, v] : items_)
    if (k == key) {
      v = std::move(value);
      return *this;
    }
  items_.emplace_back(std::move(key), std::move(value));
  return *this;
}

const Attr* Attrs::find(std::string_view key) const {
  for (const auto& [k, v] : items_)
    if (k == key) return &v;
  return nullptr;
}

int64_t Attrs::i(std::string_view key) const {
  const Attr* a = find(key);
  MUTWO_ASSERT(a && std::holds_alternative<int64_t>(*a), "attribute '{}' missing or not an integer", key);
  return std::get<int64_t>(*a);
}

double Attrs::f(std::string_view key) const {
  const Attr* a = find(key);
  MUTWO_ASSERT(a && (std::holds_alternative<double>(*a) || std::holds_alternative<int64_t>(*a)),
               "attribute '{}' missing or not a number", key);
  if (auto* d = std::get_if<double>(a)) return *d;
  return static_cast<double>(std::get<int64_t>(*a));
}

const std::vector<int64_t>& Attrs::ints(std::string_view key) const {
  const Attr* a = find(key);
  MUTWO_ASSERT(a && std::holds_alternative<std::vector<int64_t>>(*a), "attribute '{}' missing or not a list", key);
  return std::get<std::vector<int64_t>>(*a);
}

const std::string& Attrs::s(std::string_view key) const {
  const Attr* a = find(key);
  MUTWO_ASSERT(a && std::holds_alternative<std::string>(*a), "attribute '{}' missing or not a string", key);
  return std::get<std::string>(*a);
}

int64_t Attrs::i_or(std::string_view key, int64_t dflt) const { return has(key) ? i(key) : dflt; }
double Attrs::f_or(std::string_view key, double dflt) const { return has(key) ? f(key) : dflt; }

ValueId Graph::add_value(std::string name, TensorType type, Role role, Init init) {
  MUTWO_ASSERT(!by_name_.count(name), "value name '{}' already used", name);
  auto id = static_cast<ValueId>(values_.size());
  by_name_.emplace(name, id);
  values_.push_back(Value{id, std::move(name), std::move(type), role, init});
  return id;
}

std::string Graph::unique_name(std::string_view base) const {
  std::string name(base);
  for (int k = 1; by_name_.count(name); ++k) name = fmt::format("{}.{}", base, k);
  return name;
}

ValueId Graph::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? kNoValue : it->second;
}

void Graph::rename(ValueId id, std::string name) {
  MUTWO_ASSERT(!by_name_.count(name), "value name '{}' already used", name);
  by_name_.erase(value(id).name);
  by_name_.emplace(name, id);
  value(id).name = std::move(name);
}

UseIndex::UseIndex(const Graph& g) : producer(g.num_values(), -1), users(g.num_values()) {
  const auto& nodes = g.nodes();
  for (size_t n = 0; n < nodes.size(); ++n) {
    for (ValueId v : nodes[n].outputs) producer[static_cast<size_t>(v)] = static_cast<int32_t>(n);
    for (ValueId v : nodes[n].inputs) {
      if (v == kNoValue) continue;
      auto& u = users[static_cast<size_t>(v)];
      if (u.empty() || u.back() != static_cast<int32_t>(n)) u.push_back(static_cast<int32_t>(n));
    }
  }
}

}  // namespace mutwo::ir
