"""Working with run files: ``rieszflow status`` (state, liveness of the writer, progress and ETA of
any file, live or finished; ``--verify`` checks every chunk), ``rieszflow compare`` (test metrics
side by side, McNemar on shared test predictions), ``rieszflow report`` (a Markdown page of results)
and ``rieszflow plot`` (the standard figure of a main-job file)."""
