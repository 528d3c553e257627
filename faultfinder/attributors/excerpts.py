"""Short quotations of a run's text inside a sentence a person reads.

A quotation is cut at word boundaries, marked with "…" where the text goes on, set in
typographic quotes (never a Python repr's), and loses the punctuation a cut leaves
hanging at its edge (`",'` of a JSON or repr value cut short). File paths keep only
their last part: where a file lives on the machine that ran the agent says nothing to
the reader.
"""

from __future__ import annotations

import re

__all__ = ["around", "quoted"]

ELLIPSIS = "…"
_HANGING_HEAD = "\"'`,;:}])>\\ "
_HANGING_TAIL = "\"'`,;:{[(<\\ "
"""What a cut leaves hanging at an excerpt's start and end: quoting, separators, a
bracket closed before or opened after the cut."""
_PATH = re.compile(r"(?<![\w.])(?:[A-Za-z]:)?(?:[/\\][\w.@+-]+){2,}[/\\]([\w.@+-]+)")


def around(text: str, start: int, end: int, margin: int = 40) -> str:
    """The words around `text[start:end]`, up to `margin` characters either side, each
    side cut at a word boundary and marked with "…" where the text goes on."""
    left, right = max(0, start - margin), min(len(text), end + margin)
    if left > 0 and not text[left - 1].isspace():
        gap = re.search(r"\s", text[left:start])
        left = left + gap.end() if gap else start
    if right < len(text) and not text[right].isspace():
        gaps = list(re.finditer(r"\s", text[end:right]))
        right = end + gaps[-1].start() if gaps else end
    return _trimmed(" ".join(text[left:right].split()), left > 0, right < len(text))


def quoted(text: str, limit: int = 100) -> str:
    """`text` as a quotation of at most about `limit` characters: “…”."""
    flat = _PATH.sub(r"\1", " ".join(text.split()))
    head = flat.startswith(ELLIPSIS)
    tail = flat.endswith(ELLIPSIS)
    body = flat.strip(ELLIPSIS)
    if len(body) > limit:
        cut = body.rfind(" ", 0, limit)
        body = body[: cut if cut > limit // 2 else limit - 1]
        tail = True
    return f"“{_trimmed(body, head, tail)}”"


def _trimmed(body: str, head: bool, tail: bool) -> str:
    """`body` without what a cut left hanging at a cut edge, "…" marking each cut. A
    double quote left unpaired by a cut at the start is dropped (one left open before a
    closing "…" reads as the quoted text going on)."""
    if head:
        body = body.lstrip(_HANGING_HEAD)
    if tail:
        body = body.rstrip(_HANGING_TAIL)
    if head and body.count('"') % 2:
        at = body.find('"')
        body = (body[:at] + body[at + 1 :]).strip()
    return f"{ELLIPSIS if head else ''}{body}{ELLIPSIS if tail else ''}"
