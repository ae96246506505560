// The twelve configuration columns (TP … schedule) shared by the plans and rejected-configs
// tables: the text shown, or a number to sort by.
#pragma once

#include <QVariant>

#include "core/parallel_config.h"

namespace loom::gui {

inline constexpr int kConfigCellCount = 12;

// `field` 0..11: tp, cp (its exchange named unless the ring), pp, dp, ep ("8 etp1" where the experts
// are whole on each rank, as `loom plan` prints it), zero, shard (the ranks ZeRO-3 shards over; "-"
// below ZeRO-3), micro-batch, vpp, recompute, sp, schedule.
inline QVariant config_cell(const ParallelConfig& c, int field, bool sort) {
  switch (field) {
    case 0: return c.tp;
    case 1:
      if (sort || c.cp == 1 || c.cp_comm == CpComm::kP2P) return c.cp;
      return QString("%1 %2").arg(c.cp).arg(to_string(c.cp_comm));
    case 2: return c.pp;
    case 3: return c.dp;
    case 4:
      if (sort || c.expert_tp() == c.tp) return c.ep;
      return QString("%1 etp%2").arg(c.ep).arg(c.expert_tp());
    case 5: return c.zero;
    case 6:
      if (c.zero >= 3) return c.zero_shards();
      return sort ? QVariant(0) : QVariant("-");
    case 7: return c.micro_batch;
    case 8: return c.vpp;
    case 9: return sort ? QVariant(static_cast<int>(c.recompute)) : QVariant(to_string(c.recompute));
    case 10: return sort ? QVariant(c.sequence_parallel ? 1 : 0) : QVariant(c.sequence_parallel ? "on" : "off");
    case 11: return sort ? QVariant(static_cast<int>(c.schedule)) : QVariant(to_string(c.schedule));
    default: return {};
  }
}

}  // namespace loom::gui
