// The ten configuration columns (TP … schedule) shared by the plans and rejected-configs
// tables: the text shown, or a number to sort by.
#pragma once

#include <QVariant>

#include "core/parallel_config.h"

namespace loom::gui {

inline constexpr int kConfigCellCount = 10;

// `field` 0..9: tp, pp, dp, zero, shard (the ranks ZeRO-3 shards over; "-" below ZeRO-3),
// micro-batch, vpp, recompute, sp, schedule.
inline QVariant config_cell(const ParallelConfig& c, int field, bool sort) {
  switch (field) {
    case 0: return c.tp;
    case 1: return c.pp;
    case 2: return c.dp;
    case 3: return c.zero;
    case 4:
      if (c.zero >= 3) return c.zero_shards();
      return sort ? QVariant(0) : QVariant("-");
    case 5: return c.micro_batch;
    case 6: return c.vpp;
    case 7: return sort ? QVariant(static_cast<int>(c.recompute)) : QVariant(to_string(c.recompute));
    case 8: return sort ? QVariant(c.sequence_parallel ? 1 : 0) : QVariant(c.sequence_parallel ? "on" : "off");
    case 9: return sort ? QVariant(static_cast<int>(c.schedule)) : QVariant(to_string(c.schedule));
    default: return {};
  }
}

}  // namespace loom::gui
