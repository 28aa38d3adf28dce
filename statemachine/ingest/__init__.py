"""Rebuild a trial history from the files Ray Tune wrote, for experiments run without the
``EventLogCallback`` (``trial-replay ingest RAY_EXPERIMENT_DIR``).

Layers, each its own module: :mod:`~statemachine.ingest.files` (a local folder, or one on
storage through pyarrow), :mod:`~statemachine.ingest.ray_files` and
:mod:`~statemachine.ingest.reader` (parse Ray's files, never unpickling anything),
:mod:`~statemachine.ingest.timeline` and :mod:`~statemachine.ingest.reconstruct` (attempts,
checkpoints and failures in order, turned into domain events through the fold),
:mod:`~statemachine.ingest.writer` (one ``ingest`` driver session in the event log) and
:mod:`~statemachine.ingest.provenance` (what every view says of a reconstructed history).
None of them imports Ray.
"""

from statemachine.ingest.run import IngestResult, default_log, ingest_experiment

__all__ = ["IngestResult", "default_log", "ingest_experiment"]
