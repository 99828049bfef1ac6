"""Offline identity-aware batch scheduling, schedule I/O and hard-negative mining.

See docs/scheduling.md.  Heavy modules (faiss, torch) are imported only by ``mining``.
"""

from vis_embed.sampling.build import build_schedule, subdatasets_from_config
from vis_embed.sampling.schedule_io import (
    COLUMNS,
    ScheduledBatch,
    ScheduledMember,
    ScheduleInfo,
    check_data_fingerprint,
    iter_batches,
    rank_rows,
    read_schedule_info,
    write_schedule,
)
from vis_embed.sampling.scheduler import Schedule, ScheduleSettings, SubDataset, plan_schedule

__all__ = [
    "COLUMNS", "Schedule", "ScheduleInfo", "ScheduleSettings", "ScheduledBatch", "ScheduledMember",
    "SubDataset", "build_schedule", "check_data_fingerprint", "iter_batches", "plan_schedule",
    "rank_rows", "read_schedule_info", "subdatasets_from_config", "write_schedule",
]
