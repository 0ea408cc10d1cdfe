"""Results I/O and reports."""

from harness.report.results import (
    FORMAT_VERSION,
    ResultsWriter,
    Run,
    load_run,
    new_run_id,
    read_csv_gz,
)

__all__ = ["FORMAT_VERSION", "ResultsWriter", "Run", "load_run", "new_run_id", "read_csv_gz"]
