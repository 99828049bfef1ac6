"""Offline identity-aware batch scheduling and schedule I/O (hard-negative mining: vis_embed/mining/).

See docs/scheduling.md.  Layout: ``settings`` (the schedule settings, declared once),
``types`` (input, output and statistics), ``record_tables`` (the global record tables), ``draws``
(sampling primitives), ``scheduler`` (the algorithm), ``report`` (built from the
statistics), ``naive`` (the ablation's baseline), ``build`` (data config -> file),
``schedule_io`` (the file).  No faiss and no torch: numpy and pyarrow only.
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
from vis_embed.sampling.scheduler import plan_schedule
from vis_embed.sampling.settings import SamplingOptions, ScheduleSettings
from vis_embed.sampling.types import DatasetStats, Schedule, ScheduleStats, SubDataset

__all__ = [
    "COLUMNS", "DatasetStats", "SamplingOptions", "Schedule", "ScheduleInfo", "ScheduleSettings",
    "ScheduleStats", "ScheduledBatch", "ScheduledMember", "SubDataset", "build_schedule",
    "check_data_fingerprint", "iter_batches", "plan_schedule", "rank_rows", "read_schedule_info",
    "subdatasets_from_config", "write_schedule",
]
