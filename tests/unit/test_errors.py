"""The server's one error tree: every exception class the server defines belongs to it, and
each answers the same on HTTP and gRPC, as the OTLP specification pairs them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import grpc
import pytest

import faultfinder.server
from faultfinder.server import errors
from faultfinder.server.errors import ServerError, answer_for


def _server_exception_classes() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for module_info in pkgutil.walk_packages(faultfinder.server.__path__, "faultfinder.server."):
        if ".migrations" in module_info.name:
            continue  # alembic's revision scripts: no classes, run only by alembic
        module = importlib.import_module(module_info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == module.__name__:
                found.append(cls)
    return found


def test_every_exception_the_server_defines_belongs_to_the_tree() -> None:
    classes = _server_exception_classes()
    assert len(classes) >= 17, classes
    outside = [
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in classes
        if not issubclass(cls, ServerError)
    ]
    assert outside == []


@pytest.mark.parametrize(
    ("error", "http_status", "grpc_code"),
    [
        (errors.DecodeError("bad"), 400, grpc.StatusCode.INVALID_ARGUMENT),
        (errors.UnsupportedEncodingError("br"), 400, grpc.StatusCode.INVALID_ARGUMENT),
        (errors.BodyTooLargeError(10), 413, grpc.StatusCode.RESOURCE_EXHAUSTED),
        (errors.TooManySpansError(3, 2), 413, grpc.StatusCode.RESOURCE_EXHAUSTED),
        (errors.BodyTimeoutError("slow"), 408, grpc.StatusCode.DEADLINE_EXCEEDED),
        (errors.Refused("full", 2), 503, grpc.StatusCode.UNAVAILABLE),
        (errors.IngestUnavailableError("down"), 503, grpc.StatusCode.UNAVAILABLE),
        (errors.UnknownRunError("no run"), 404, grpc.StatusCode.NOT_FOUND),
        (errors.InvalidCursorError("cursor"), 400, grpc.StatusCode.INVALID_ARGUMENT),
        (errors.SettingsError("port"), 500, grpc.StatusCode.INTERNAL),
    ],
)
def test_each_error_has_one_answer_on_both_transports(
    error: ServerError, http_status: int, grpc_code: grpc.StatusCode
) -> None:
    answer = answer_for(error)
    assert (answer.http_status, answer.grpc_code) == (http_status, grpc_code.value[0])


def test_an_exception_outside_the_tree_is_a_server_error() -> None:
    assert answer_for(KeyError("x")).http_status == 500
