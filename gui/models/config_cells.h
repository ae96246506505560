// The nine configuration columns (TP … schedule) shared by the plans and rejected-configs
// tables: the text shown, or a number to sort by.
#pragma once

#include <QVariant>

#include "core/parallel_config.h"

namespace loom::gui {

inline constexpr int kConfigCellCount = 9;

// `field` 0..8: tp, pp, dp, zero, micro-batch, vpp, recompute, sp, schedule.
inline QVariant config_cell(const ParallelConfig& c, int field, bool sort) {
  switch (field) {
    case 0: return c.tp;
    case 1: return c.pp;
    case 2: return c.dp;
    case 3: return c.zero;
    case 4: return c.micro_batch;
    case 5: return c.vpp;
    case 6: return sort ? QVariant(static_cast<int>(c.recompute)) : QVariant(to_string(c.recompute));
    case 7: return sort ? QVariant(c.sequence_parallel ? 1 : 0) : QVariant(c.sequence_parallel ? "on" : "off");
    case 8: return sort ? QVariant(static_cast<int>(c.schedule)) : QVariant(to_string(c.schedule));
    default: return {};
  }
}

}  // namespace loom::gui
