// JSON read/write of ClusterSpec: the cost-file schema "loom-cost/1" (kCostFormat) shared by the spec-derived
// profiles in profiles/ and the ones `loom profile` measures.
#include <fmt/format.h>

#include "core/json_fields.h"
#include "core/json_io.h"
#include "core/names.h"
#include "core/units.h"

namespace loom {

double ClusterSpec::gpu_memory_gib() const { return device.memory_bytes / kGiB; }

namespace {

constexpr double kHuge = 1e30;

Result<LinkSpec> link_from_json(const Json& json, const std::string& what) {
  FieldReader r(json, what);
  LinkSpec link;
  link.bandwidth_bytes_per_s = r.number("bandwidth_bytes_per_s", std::nullopt, 1.0, kHuge);
  link.latency_s = r.number("latency_s", 0.0, 0.0, 10.0);
  if (!r.ok()) return make_error(r.error());
  return link;
}

Json link_to_json(const LinkSpec& link) {
  Json j;
  j["bandwidth_bytes_per_s"] = link.bandwidth_bytes_per_s;
  j["latency_s"] = link.latency_s;
  return j;
}

// Collective and link names must be ones the simulator knows: an unknown one (a typo, a newer
// Loom's collective) would otherwise leave its measurements unused without a word.
Status check_collective_names(const std::string& collective, const std::string& level, const std::string& where) {
  if (!parse_collective(collective))
    return make_error(fmt::format("cost file: {}.collective '{}' is not a collective Loom knows ({})", where,
                                  collective, one_of<Collective>()));
  if (!parse_link_level(level))
    return make_error(
        fmt::format("cost file: {}.level '{}' is not a link level Loom knows ({})", where, level, one_of<LinkLevel>()));
  return {};
}

Status read_collectives(const Json& json, ClusterSpec& c) {
  FieldReader r(json, "cost file: collectives");
  c.collective_library = r.string("library", std::string());
  c.host_cpu_vendor = r.string("host_cpu_vendor", std::string());
  if (!r.ok()) return make_error(r.error());
  if (!c.collective_library.empty() && c.collective_library != "nccl")
    return make_error(fmt::format("cost file: collectives.library '{}' is not one Loom models (nccl, or none)",
                                  c.collective_library));
  if (!c.host_cpu_vendor.empty() && c.host_cpu_vendor != "amd" && c.host_cpu_vendor != "intel")
    return make_error(
        fmt::format("cost file: collectives.host_cpu_vendor '{}' must be amd or intel", c.host_cpu_vendor));
  if (json.contains("fits")) {
    if (!json["fits"].is_array()) return make_error("cost file: 'collectives.fits' must be an array");
    for (const auto& f : json["fits"]) {
      const std::string where = fmt::format("collectives.fits[{}]", c.collective_fits.size());
      FieldReader r(f, "cost file: " + where);
      CollectiveFit fit;
      fit.collective = r.string("collective", std::nullopt);
      fit.level = r.string("level", std::nullopt);
      fit.group_size = static_cast<int>(r.integer("group_size", std::nullopt, 1, 1 << 24));
      fit.alpha_s = r.number("alpha_s", std::nullopt, 0.0, 10.0);
      fit.bus_bandwidth_bytes_per_s = r.number("bus_bandwidth_bytes_per_s", std::nullopt, 1.0, kHuge);
      fit.r2 = r.number("r2", 0.0, -kHuge, 1.0);
      fit.min_bytes = r.number("min_bytes", 0.0, 0.0, kHuge);
      fit.max_bytes = r.number("max_bytes", 0.0, 0.0, kHuge);
      if (!r.ok()) return make_error(r.error());
      if (auto s = check_collective_names(fit.collective, fit.level, where); !s) return s.error();
      c.collective_fits.push_back(fit);
    }
  }
  if (json.contains("points")) {
    if (!json["points"].is_array()) return make_error("cost file: 'collectives.points' must be an array");
    for (const auto& p : json["points"]) {
      const std::string where = fmt::format("collectives.points[{}]", c.collective_points.size());
      FieldReader r(p, "cost file: " + where);
      CollectivePoint point;
      point.collective = r.string("collective", std::nullopt);
      point.level = r.string("level", std::nullopt);
      point.group_size = static_cast<int>(r.integer("group_size", std::nullopt, 1, 1 << 24));
      point.bytes = r.number("bytes", std::nullopt, 1.0, kHuge);
      point.seconds = r.number("seconds", std::nullopt, 1e-12, 1e6);
      if (!r.ok()) return make_error(r.error());
      if (auto s = check_collective_names(point.collective, point.level, where); !s) return s.error();
      c.collective_points.push_back(point);
    }
  }
  return {};
}

}  // namespace

Result<ClusterSpec> cluster_from_json(const Json& json) {
  FieldReader top(json, "cost file");
  if (auto tag = check_format_tag(json, "schema", kCostFormat, "cost file"); !tag) return tag.error();
  ClusterSpec c;
  c.name = top.string("name", std::nullopt);
  c.description = top.string("description", std::string());
  c.framework_reserve_bytes = top.number("framework_reserve_bytes", 0.0, 0.0, kHuge);
  if (!top.ok()) return make_error(top.error());
  for (const char* key : {"node", "device", "compute", "links"})
    if (!json.contains(key)) return make_error(fmt::format("cost file '{}': missing section '{}'", c.name, key));

  FieldReader node(json["node"], "cost file: node");
  c.gpus_per_node = static_cast<int>(node.integer("gpus_per_node", std::nullopt, 1, 1 << 16));
  c.max_nodes = static_cast<int>(node.integer("max_nodes", 0, 0, 1 << 24));
  if (!node.ok()) return make_error(node.error());

  FieldReader dev(json["device"], "cost file: device");
  c.device.name = dev.string("name", std::nullopt);
  c.device.memory_bytes = dev.number("memory_bytes", std::nullopt, 1.0, kHuge);
  c.device.peak_flops = dev.number("peak_flops", std::nullopt, 1.0, kHuge);
  c.device.memory_bandwidth_bytes_per_s = dev.number("memory_bandwidth_bytes_per_s", std::nullopt, 1.0, kHuge);
  c.device.peak_fp8_flops = dev.number("peak_fp8_flops", 0.0, 0.0, kHuge);
  c.device.peak_fp4_flops = dev.number("peak_fp4_flops", 0.0, 0.0, kHuge);
  c.device.fp8_gemm_tn_only = dev.boolean("fp8_gemm_tn_only", false);
  if (!dev.ok()) return make_error(dev.error());

  FieldReader comp(json["compute"], "cost file: compute");
  c.compute.gemm_max_efficiency = comp.number("gemm_max_efficiency", std::nullopt, 1e-6, 1.0);
  c.compute.gemm_half_saturation_flops = comp.number("gemm_half_saturation_flops", 0.0, 0.0, kHuge);
  c.compute.gemm_fp8_max_efficiency = comp.number("gemm_fp8_max_efficiency", 0.0, 0.0, 1.0);
  c.compute.gemm_fp8_rowwise_max_efficiency = comp.number("gemm_fp8_rowwise_max_efficiency", 0.0, 0.0, 1.0);
  c.compute.memory_bound_efficiency = comp.number("memory_bound_efficiency", std::nullopt, 1e-6, 1.0);
  c.compute.kernel_launch_s = comp.number("kernel_launch_s", 0.0, 0.0, 1.0);
  c.compute.flash_attention_efficiency = comp.number("flash_attention_efficiency", 0.0, 0.0, 1.0);
  c.compute.flash_attention_half_saturation_flops =
      comp.number("flash_attention_half_saturation_flops", 0.0, 0.0, kHuge);
  c.compute.fa2_attention_efficiency = comp.number("fa2_attention_efficiency", 0.0, 0.0, 1.0);
  c.compute.fa2_attention_half_saturation_flops = comp.number("fa2_attention_half_saturation_flops", 0.0, 0.0, kHuge);
  c.compute.collective_sm_fraction = comp.number("collective_sm_fraction", 0.0, 0.0, 0.9);
  if (!comp.ok()) return make_error(comp.error());
  if (json["compute"].contains("memory_op_efficiency")) {
    const Json& ops = json["compute"]["memory_op_efficiency"];
    if (!ops.is_object())
      return make_error("cost file: compute.memory_op_efficiency must be an object of op: fraction");
    for (const auto& [op, value] : ops.items()) {
      if (!value.is_number() || value.get<double>() <= 0.0 || value.get<double>() > 1.0)
        return make_error(fmt::format("cost file: compute.memory_op_efficiency.{} must be a number in (0, 1]", op));
      c.compute.memory_op_efficiency[op] = value.get<double>();
    }
  }

  const Json& links = json["links"];
  for (const auto& [level, name] : kLinkLevelNames) {
    if (!links.contains(name)) return make_error(fmt::format("cost file: missing links.{}", name));
    auto link = link_from_json(links[name], fmt::format("cost file: links.{}", name));
    if (!link) return link.error();
    (level == LinkLevel::kIntraNode ? c.intra_node : c.inter_node) = *link;
  }

  if (json.contains("gemm_table")) {
    if (!json["gemm_table"].is_array()) return make_error("cost file: 'gemm_table' must be an array");
    for (const auto& g : json["gemm_table"]) {
      FieldReader r(g, "cost file: gemm_table[]");
      GemmPoint p;
      p.m = r.integer("m", std::nullopt, 1, 1LL << 40);
      p.n = r.integer("n", std::nullopt, 1, 1LL << 40);
      p.k = r.integer("k", std::nullopt, 1, 1LL << 40);
      p.seconds = r.number("seconds", std::nullopt, 1e-12, 1e6);
      p.ranks = static_cast<int>(r.integer("ranks", 0, 0, 1 << 20));
      if (!r.ok()) return make_error(r.error());
      c.gemm_table.push_back(p);
    }
  }
  if (json.contains("memory_op_table")) {
    if (!json["memory_op_table"].is_array()) return make_error("cost file: 'memory_op_table' must be an array");
    for (const auto& o : json["memory_op_table"]) {
      FieldReader r(o, "cost file: memory_op_table[]");
      MemoryOpTime t;
      t.op = r.string("op", std::nullopt);
      t.bytes = r.number("bytes", std::nullopt, 1.0, kHuge);
      t.seconds = r.number("seconds", std::nullopt, 1e-12, 1e6);
      t.ranks = static_cast<int>(r.integer("ranks", 0, 0, 1 << 20));
      if (!r.ok()) return make_error(r.error());
      c.memory_op_table.push_back(t);
    }
  }
  if (json.contains("collectives")) {
    if (auto s = read_collectives(json["collectives"], c); !s) return s.error();
  }
  if (json.contains("provenance") && json["provenance"].is_object()) {
    for (const auto& [key, value] : json["provenance"].items())
      c.provenance[key] = value.is_string() ? value.get<std::string>() : value.dump();
  }
  return c;
}

Json to_json(const ClusterSpec& c) {
  Json j;
  j["schema"] = kCostFormat;
  j["name"] = c.name;
  j["description"] = c.description;
  j["node"] = {{"gpus_per_node", c.gpus_per_node}, {"max_nodes", c.max_nodes}};
  j["device"] = {{"name", c.device.name},
                 {"memory_bytes", c.device.memory_bytes},
                 {"peak_flops", c.device.peak_flops},
                 {"memory_bandwidth_bytes_per_s", c.device.memory_bandwidth_bytes_per_s}};
  if (c.device.peak_fp8_flops > 0) j["device"]["peak_fp8_flops"] = c.device.peak_fp8_flops;
  if (c.device.peak_fp4_flops > 0) j["device"]["peak_fp4_flops"] = c.device.peak_fp4_flops;
  if (c.device.fp8_gemm_tn_only) j["device"]["fp8_gemm_tn_only"] = true;
  j["compute"] = {{"gemm_max_efficiency", c.compute.gemm_max_efficiency},
                  {"gemm_half_saturation_flops", c.compute.gemm_half_saturation_flops},
                  {"memory_bound_efficiency", c.compute.memory_bound_efficiency},
                  {"kernel_launch_s", c.compute.kernel_launch_s},
                  {"flash_attention_efficiency", c.compute.flash_attention_efficiency}};
  if (c.compute.gemm_fp8_max_efficiency > 0)
    j["compute"]["gemm_fp8_max_efficiency"] = c.compute.gemm_fp8_max_efficiency;
  if (c.compute.gemm_fp8_rowwise_max_efficiency > 0)
    j["compute"]["gemm_fp8_rowwise_max_efficiency"] = c.compute.gemm_fp8_rowwise_max_efficiency;
  if (!c.compute.memory_op_efficiency.empty()) j["compute"]["memory_op_efficiency"] = c.compute.memory_op_efficiency;
  if (c.compute.flash_attention_half_saturation_flops > 0)
    j["compute"]["flash_attention_half_saturation_flops"] = c.compute.flash_attention_half_saturation_flops;
  if (c.compute.fa2_attention_efficiency > 0)
    j["compute"]["fa2_attention_efficiency"] = c.compute.fa2_attention_efficiency;
  if (c.compute.fa2_attention_half_saturation_flops > 0)
    j["compute"]["fa2_attention_half_saturation_flops"] = c.compute.fa2_attention_half_saturation_flops;
  if (c.compute.collective_sm_fraction > 0) j["compute"]["collective_sm_fraction"] = c.compute.collective_sm_fraction;
  j["links"] = {{to_string(LinkLevel::kIntraNode), link_to_json(c.intra_node)},
                {to_string(LinkLevel::kInterNode), link_to_json(c.inter_node)}};
  j["framework_reserve_bytes"] = c.framework_reserve_bytes;
  Json gemms = Json::array();
  for (const auto& g : c.gemm_table) {
    gemms.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"seconds", g.seconds}});
    if (g.ranks > 0) gemms.back()["ranks"] = g.ranks;
  }
  j["gemm_table"] = gemms;
  if (!c.memory_op_table.empty()) {
    Json ops = Json::array();
    for (const auto& o : c.memory_op_table) {
      ops.push_back({{"op", o.op}, {"bytes", o.bytes}, {"seconds", o.seconds}});
      if (o.ranks > 0) ops.back()["ranks"] = o.ranks;
    }
    j["memory_op_table"] = ops;
  }
  Json fits = Json::array();
  for (const auto& f : c.collective_fits) {
    Json fit = {{"collective", f.collective},
                {"level", f.level},
                {"group_size", f.group_size},
                {"alpha_s", f.alpha_s},
                {"bus_bandwidth_bytes_per_s", f.bus_bandwidth_bytes_per_s},
                {"r2", f.r2}};
    if (f.max_bytes > 0) fit["min_bytes"] = f.min_bytes, fit["max_bytes"] = f.max_bytes;
    fits.push_back(fit);
  }
  Json points = Json::array();
  for (const auto& p : c.collective_points)
    points.push_back({{"collective", p.collective},
                      {"level", p.level},
                      {"group_size", p.group_size},
                      {"bytes", p.bytes},
                      {"seconds", p.seconds}});
  j["collectives"] = {{"fits", fits}, {"points", points}};
  if (!c.collective_library.empty()) j["collectives"]["library"] = c.collective_library;
  if (!c.host_cpu_vendor.empty()) j["collectives"]["host_cpu_vendor"] = c.host_cpu_vendor;
  Json prov = Json::object();
  for (const auto& [k, v] : c.provenance) prov[k] = v;
  j["provenance"] = prov;
  return j;
}

}  // namespace loom
