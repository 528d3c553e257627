"""Typed access to a dataset file's parsed JSON, with errors that name the file and the
field."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faultfinder.datasets.records import DatasetError


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; any unreadable, invalid or non-object file is an error."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DatasetError(f"{path}: file not found") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read file: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DatasetError(
            f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text ({exc.reason})") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: must hold a JSON object, got {type_name(data)}")
    return data


def type_name(value: Any) -> str:
    """The JSON name of `value`'s type."""
    names = {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def shown(value: Any) -> str:
    """`value` as it is quoted in an error message (at most 60 characters)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Fields:
    """A JSON object plus the file and field path it came from."""

    path: Path
    data: Mapping[str, Any]
    prefix: str = ""

    def error(self, name: str, problem: str) -> DatasetError:
        return DatasetError(f"{self.path}: field '{self.prefix}{name}' {problem}")

    def has(self, name: str) -> bool:
        return self.data.get(name) is not None

    def _require(self, name: str) -> Any:
        if name not in self.data:
            raise self.error(name, "is missing")
        return self.data[name]

    def string(self, name: str, *, non_empty: bool = False) -> str:
        value = self._require(name)
        if not isinstance(value, str):
            raise self.error(name, f"must be a string, got {type_name(value)}")
        if non_empty and not value.strip():
            raise self.error(name, "must be a non-empty string")
        return value

    def optional_string(self, name: str) -> str | None:
        return self.string(name) if self.has(name) else None

    def text(self, name: str) -> str:
        """A string, or a number written as one (answers are sometimes numbers)."""
        value = self._require(name)
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise self.error(name, f"must be a string, got {type_name(value)}")

    def optional_text(self, name: str) -> str:
        """`text(name)`, or the empty string when the field is absent or null."""
        return self.text(name) if self.has(name) else ""

    def integer(self, name: str) -> int:
        """An integer, also accepted as a string of digits."""
        value = self._require(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().isdigit():
            return int(value.strip())
        raise self.error(name, f"must be an integer, got {shown(value)}")

    def integer_string(self, name: str) -> int:
        value = self._require(name)
        if isinstance(value, str) and value.strip().isdigit():
            return int(value.strip())
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        raise self.error(name, f"must be an integer string, got {shown(value)}")

    def items(self, name: str) -> list[Any]:
        value = self._require(name)
        if not isinstance(value, list):
            raise self.error(name, f"must be a list, got {type_name(value)}")
        return value

    def mapping(self, name: str) -> Fields:
        value = self._require(name)
        if not isinstance(value, dict):
            raise self.error(name, f"must be an object, got {type_name(value)}")
        return Fields(self.path, value, f"{self.prefix}{name}.")

    def mappings(self, name: str) -> list[Fields]:
        items: list[Fields] = []
        for position, value in enumerate(self.items(name)):
            where = f"{name}[{position}]"
            if not isinstance(value, dict):
                raise self.error(where, f"must be an object, got {type_name(value)}")
            items.append(Fields(self.path, value, f"{self.prefix}{where}."))
        return items

    def check_step_in_range(self, name: str, step: int, length: int, of: str) -> None:
        """Fail unless `step` (read from field `name`) indexes a list of `length`."""
        if not 0 <= step < length:
            raise self.error(name, f"is step {step}, outside {of} (0..{length - 1})")
