"""Undoing an OTLP body's `Content-Encoding` without ever inflating more than the body
limit allows (a zip bomb stops at the limit, a stack of encodings is refused unread)."""

from __future__ import annotations

import zlib

from faultfinder.server.errors import BodyTooLargeError, DecodeError, UnsupportedEncodingError

__all__ = ["decompress"]


def decompress(body: bytes, content_encoding: str | None, *, max_size: int) -> bytes:
    """Undo `Content-Encoding` (gzip, deflate or identity; one of them, not a stack).

    Raises BodyTooLargeError as soon as the output would exceed `max_size` bytes (so a
    zip bomb is never fully inflated), UnsupportedEncodingError for other encodings and
    DecodeError for corrupt or truncated data.
    """
    encodings = [e.strip().lower() for e in (content_encoding or "").split(",") if e.strip()]
    encodings = [e for e in encodings if e != "identity"]
    if len(encodings) > 1:
        # Each layer may inflate a thousandfold: 426 bytes gzipped twice are 64 MiB.
        # Exporters compress once; a stack of encodings is refused before inflating.
        raise UnsupportedEncodingError(
            f"Content-Encoding {content_encoding!r} stacks {len(encodings)} encodings;"
            " send one of gzip, deflate or identity"
        )
    data = body
    for encoding in reversed(encodings):
        if encoding == "identity":
            continue
        if encoding in ("gzip", "x-gzip"):
            data = _inflate(data, max_size, wbits=16 + zlib.MAX_WBITS, name="gzip", members=True)
        elif encoding == "deflate":
            data = _inflate_deflate(data, max_size)
        else:
            raise UnsupportedEncodingError(
                f"unsupported Content-Encoding {encoding!r}; use gzip, deflate or identity"
            )
    if len(data) > max_size:
        raise BodyTooLargeError(max_size)
    return data


def _inflate_deflate(data: bytes, max_size: int) -> bytes:
    # HTTP "deflate" means a zlib-wrapped stream, but some clients send raw deflate;
    # a zlib header (method 8, header checksum divisible by 31) tells them apart.
    zlib_wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
    wbits = zlib.MAX_WBITS if zlib_wrapped else -zlib.MAX_WBITS
    return _inflate(data, max_size, wbits=wbits, name="deflate", members=False)


def _inflate(data: bytes, max_size: int, *, wbits: int, name: str, members: bool) -> bytes:
    out = bytearray()
    remaining = data
    while True:
        inflater = zlib.decompressobj(wbits=wbits)
        try:
            # Never inflate more than one byte past the limit.
            out += inflater.decompress(remaining, max_size - len(out) + 1)
        except zlib.error as exc:
            raise DecodeError(f"corrupt {name} body: {exc}") from None
        if len(out) > max_size:
            raise BodyTooLargeError(max_size)
        if not inflater.eof:
            raise DecodeError(f"truncated {name} body")
        remaining = inflater.unused_data
        if not remaining:
            return bytes(out)
        if not members:  # only gzip allows several concatenated members
            raise DecodeError(f"{len(remaining)} bytes of trailing data after the {name} stream")
