"""One replica's job worker alone in a process, for tests that kill it:
`python -m tests.api.replica DATA_DIR DATABASE_URL`. Prints its owner id as its first line, then runs jobs with
the stand-in pipeline (FAKE_RENDER_DELAY seconds per render batch) under a 1 s lease, heartbeat every 0.2 s."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from api.engine import Engine
from api.jobs import JobStore, JobWorker
from api.metrics import Metrics
from api.schemas import predict_payload
from tests.fakes import make_pipeline


def main() -> None:
    logging.basicConfig(level=logging.INFO)
    data_dir, url = sys.argv[1:3]
    store = JobStore(Path(data_dir), url)
    worker = JobWorker(
        store,
        Engine(make_pipeline(), Metrics(), 1),
        job_timeout_s=120,
        result_payload=lambda output, _params: predict_payload(output),
        poll_s=0.05,
        lease_s=1.0,
        heartbeat_s=0.2,
        max_attempts=3,
    )
    print(store.owner, flush=True)
    worker.start()
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
