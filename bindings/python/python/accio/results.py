"""Reading ``accio bench`` results (the JSON documented in docs/RESULTS.md).

``load(path)`` returns one row per figure: a pandas DataFrame when pandas is installed,
a list of plain dicts otherwise. Columns: bench, metric, unit, median, min, max, n,
ceiling, ceiling_value, ratio, and one ``param.<name>`` column per parameter.
"""

from __future__ import annotations

import json as _json
import os as _os
import typing as _typing

__all__ = ["SCHEMA", "VERSION", "load", "load_rows"]

SCHEMA = "accio-results"
VERSION = 1


def load_rows(path: _typing.Union[str, "_os.PathLike[str]"]) -> _typing.List[_typing.Dict[str, _typing.Any]]:
    """The figures of the results file at ``path`` as a list of flat dicts."""
    with open(path, encoding="utf-8") as f:
        doc = _json.load(f)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"{_os.fspath(path)}: not an accio results document (no \"schema\": \"{SCHEMA}\")")
    version = doc.get("version")
    if not isinstance(version, int) or not 1 <= version <= VERSION:
        raise ValueError(
            f"{_os.fspath(path)}: results schema version {version!r}; this reader knows 1 to {VERSION}"
        )
    rows = []
    for fig in doc.get("figures", []):
        summary = fig.get("summary", {})
        ceiling = fig.get("ceiling") or {}
        row: _typing.Dict[str, _typing.Any] = {
            "bench": fig.get("bench"),
            "metric": fig.get("metric"),
            "unit": fig.get("unit"),
            "median": summary.get("median"),
            "min": summary.get("min"),
            "max": summary.get("max"),
            "n": summary.get("n"),
            "ceiling": ceiling.get("name"),
            "ceiling_value": ceiling.get("value"),
            "ratio": ceiling.get("ratio"),
        }
        for k, v in (fig.get("params") or {}).items():
            row[f"param.{k}"] = v
        rows.append(row)
    return rows


def load(path: _typing.Union[str, "_os.PathLike[str]"]) -> _typing.Any:
    """The figures of the results file at ``path``: a pandas DataFrame (one row per
    figure) when pandas is installed, else a list of dicts (see ``load_rows``)."""
    rows = load_rows(path)
    try:
        import pandas as pd
    except ImportError:
        return rows
    return pd.DataFrame(rows)


del annotations
