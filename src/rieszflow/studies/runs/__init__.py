"""Working with run files: ``rieszflow status`` (progress of any file, live or finished) and
``rieszflow compare`` (test metrics side by side, McNemar on shared test predictions)."""
