"""`semworld batch`: folders of videos -> one output folder per clip, a states corpus and a summary, resumable.

jobs.py lists the clips and names their folders; clip.py holds the stages and the one writer both engines share;
local.py runs them in worker processes on this machine; ray.py runs them as Ray Data stages on a cluster.
"""

from pipeline.batch.clip import ClipResult, finish_run, is_complete
from pipeline.batch.jobs import STAGE_NAMES, BatchSettings, ClipJob, collect_jobs

__all__ = [
    "STAGE_NAMES",
    "BatchSettings",
    "ClipJob",
    "ClipResult",
    "collect_jobs",
    "finish_run",
    "is_complete",
]
