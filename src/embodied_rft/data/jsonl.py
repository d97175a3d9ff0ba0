"""Line-checked JSONL reading (:mod:`embodied_rft.core.jsonl`, where it lives so that ``schema.py`` and ``world/``
read files without importing this package), by the name the project's readers import it."""

from embodied_rft.core.jsonl import DataError, iter_jsonl, read_jsonl, require

__all__ = ["DataError", "iter_jsonl", "read_jsonl", "require"]
