"""What the task forbids, and the first step that does it anyway.

The task's prohibitions ("no X", "do not / don't / never / must not / should not X",
"without X", "avoid X", ", not X", "except X", "X is not allowed"; not in a conditional
clause) are read as the words a step must use to do X, less stop words and light verbs
("use"); case, compounds ("fail over" = "failover") and -s, -ed, -ing do not matter. A
step breaks one when it calls a tool whose name and short arguments hold all those words
(not a search or a check, not under a falsy value or an "exclude"), or says in a clause
holding them that it does it ("I'll fail over to replica-2 now", "Booking the red-eye
flight AF 77") without negating, declining, quoting, asking or hedging ("we will not",
"avoiding replica-2 as asked", "should we…?"). Only a prohibition's first breach counts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import ClassVar

from faultfinder.attributors.excerpts import quoted
from faultfinder.attributors.model import Step
from faultfinder.attributors.provenance import tool_calls

__all__ = ["BrokenConstraint", "Constraint", "TaskConstraints", "broken_by", "task_constraints"]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_STOP = _words("""
    a an the to of in on at for from with by into onto via about as or and nor but be is are was
    were been being am do does did have has had you your we our us they their he she his her i me
    my it its this that these those there here any all each every some other such more less than
    very also just only ever again please yet still even anything something same own one way not
    no can could will would shall should may might must then so too what which who where how
""")
_LIGHT_VERBS = _words("use make get go take let put give try need want allow include keep bring")
_SUBJECTS = _words("i we you they it he she there this that these those the a an my our")
_DESCRIBING = _words("is are was were has have had does did been being")
_IDIOMS = _words("more less later earlier longer need matter one doubt problem other further")
_STATE_VERBS = _words("know have need remember recall think see understand care mind hesitate")
_ACTIONS = _words("""
    book reserve buy purchase order pay charge refund cancel delete remove deploy restart reboot
    rollback switch migrate use send email call contact notify post publish merge push run execute
    apply approve grant transfer move upgrade downgrade install enable disable route redirect scale
    kill terminate promote select choose pick take assign escalate share create add update change
    set open close ship go proceed submit fail failover restore drop wipe reset stop start launch
    trigger issue offer forward upload write provide accept authorize sign release point connect
""")
_LOOKING = _words("""
    check look search find verify confirm review consider evaluate compare investigate ask query
    examine assess analyze analyse explore inspect read list fetch get see test monitor describe
    show view browse lookup status validate estimate calculate
""")
_CONDITIONAL = re.compile(r"(?i)\b(?:if|unless|until|before|after|when|once|while|yet|first)\b")
_CUE = re.compile(
    r"(?i)\b(?P<cue>do not|don['’]t|never|must not|mustn['’]t|should not|shouldn['’]t|may not|"
    r"cannot|can['’]t|no|without|avoid(?:ing)?|except(?: for)?|not)\s+(?P<rest>[^,;:.!?()\n]+)"
)
_BANNED = re.compile(
    r"(?i)(?P<rest>[^,;:.!?()\n]+?)\s+(?:is|are)\s+(?:not (?:allowed|permitted|acceptable|an "
    r"option)|forbidden|prohibited|off[- ]limits|banned|disallowed|to be avoided)\b"
)
_CLAUSE_END = re.compile(r"(?i)\s+(?:and|but|because|so|as|which|or (?:else|any\w*|other))\b.*")
_CLAUSES = re.compile(
    r"(?i)(?<=[.!?])\s+|\n+|;\s*|\s+(?:because|since|as|while|whereas|although|though|but)\s+"
)
_DECLINED = re.compile(
    r"(?i)\b(?:not|no|never|none|nor|without|instead|rather|except|excluding|exclude[sd]?|"
    r"avoid\w*|skip\w*|refus\w*|declin\w*|forbid\w*|prohibit\w*|disallow\w*|banned|constraint|"
    r"rule|instructions?|asked|instructed|requested|unable|off[- ]limits|away from|than|versus|"
    r"vs|unlike|compared|preferr\w*|over (?:the|a|an))\b|n['’]t\b"
)
_HEDGED = re.compile(
    r"(?i)\?|\b(?:if|unless|whether|in case|would|could|might|should|shall|may|maybe|perhaps|"
    r"options?|alternatively|otherwise|once|consider\w*|suggest\w*|recommend\w*|propos\w*)\b"
)
_MARKER = re.compile(
    r"(?i)\b(?:(?:i|we)(?:['’]m| am|['’]re| are)? going to|(?:i|we)(?:['’]ve| have)? decided "
    r"to|i['’]ll|i will|we['’]ll|we will|let['’]s|let me|let us|i['’]m|i am|we['’]re|we are|"
    r"i['’]ve|i have|we['’]ve|we have|i|we)\s+(?:(?:now|just|also|then|go ahead and)\s+)*"
    r"(?P<verb>[a-z]+)(?:\s+(?P<next>[a-z]+))?"
)
_OPENING = re.compile(r"^\s*(?:[\w@.-]+(?: [\w@.-]+)?:\s+)?(?:(?:ok|okay|so|now|please),?\s+)*")
_QUOTED = re.compile(r"\"[^\"]*\"|“[^”]*”|‘[^’]*’|`[^`]*`")
_NAME_PARTS = re.compile(r"[_.\-\s]|(?<=[a-z])(?=[A-Z])")  # "web_search", "bookFlight"
_CODE_BLOCK = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_FALSY = _words("false no none null 0")
_EXCLUDED = re.compile(  # an argument keeping something out: "exclude": "red-eye", "no_redeye"
    r"(?i)(?:\b|_)(?:not|no|never|without|except|exclud\w*|avoid\w*|skip\w*|block\w*|deny)(?:\b|_)"
)


def _stem(word: str) -> str:
    """`word` without -s, -es, -ed, -ing and a final e: "booking", "books" → "book"."""
    word = original = word.lower()
    for suffixes in (("ies", "ing", "ed", "es", "s"), ("ing", "ed")):  # "bookings"
        for suffix in suffixes:
            rest = word[: -len(suffix)]
            if word.endswith(suffix) and len(rest) >= 2 and not word.endswith(("ss", "us", "is")):
                word = rest + ("y" if suffix == "ies" else "")
                break
    if word != original and re.search(r"([bdgkmnprt])\1$", word):
        word = word[:-1]  # "stopped" → "stop"
    return word[:-1] if len(word) >= 3 and word.endswith("e") else word


_ACTION_STEMS = frozenset(map(_stem, _ACTIONS))
_LIGHT_STEMS = frozenset(map(_stem, _LIGHT_VERBS))
_LOOKING_STEMS = frozenset(map(_stem, _LOOKING))


def _units(text: str) -> set[str]:
    """The words of `text`, stemmed, and each two or three joined ("fail over": "failover")."""
    stems = [_stem(word) for word in re.findall(r"[a-z0-9]+", text.lower())]
    return {"".join(stems[i : i + n]) for n in (1, 2, 3) for i in range(len(stems) - n + 1)}


@dataclass(frozen=True)
class Constraint:
    """A prohibition of the task: its wording and the words a step must use to break it."""

    said: str
    words: tuple[str, ...]


def _content(phrase: str) -> tuple[str, ...]:
    """The words of a forbidden phrase a step must use (see the module's docstring)."""
    phrase = re.sub(r"\b([A-Z]{1,4}) (\d+)\b", r"\1\2", phrase)  # "AF 77"
    phrase = re.sub(  # "fail over", "roll back"
        r"(?i)\b([a-z]+) (over|back|up|down|off|out)\b",
        lambda m: m[0] if m[1].lower() in _STOP else _stem(m[1]) + m[2],
        phrase,
    )
    out: list[str] = []
    for word in re.findall(r"[A-Za-z0-9]+(?:[-'’][A-Za-z0-9]+)*", phrase):
        low = re.sub(r"['’]s$", "", word.lower())
        if low not in _STOP and _stem(low) not in _LIGHT_STEMS and not re.match(r"\w{3,}ly$", low):
            out.append("".join(map(_stem, re.split(r"[-'’]", low))))
    return tuple(dict.fromkeys(out))


def _accepted(cue: str, before: str, rest: str) -> bool:
    """Whether a cue states a prohibition: said to the agents ("you must not", an imperative),
    not describing ("the app has no …") nor a double negative ("do not … without …")."""
    clause = re.split(r"[,;:(]", before)[-1]
    words = clause.lower().split()
    if _DECLINED.search(clause) or _DECLINED.search(rest):
        return False
    if cue.startswith(("avoid", "except", "no", "without")) or cue == "not":
        imperative = not (words and words[0] in _SUBJECTS) and not _DESCRIBING & set(words)
        if _DESCRIBING & set(rest.lower().split()) or rest.lower().split()[0] in _IDIOMS:
            return False
        if cue == "not":
            return (not words or words[-1] in ("and", "but", "or")) and imperative
        return cue.startswith(("avoid", "except")) or not words or imperative
    first = rest.lower().split()[0]
    return len(words) <= 4 and not _DESCRIBING & set(words) and first not in _STATE_VERBS


def task_constraints(task: str) -> list[Constraint]:
    """The prohibitions `task` states (see the module's docstring), in order."""
    out: list[Constraint] = []
    for clause in _CLAUSES.split(task):
        if _CONDITIONAL.search(clause):
            continue
        found = [(m["cue"], clause[: m.start()], m["rest"], m[0]) for m in _CUE.finditer(clause)]
        found += [("is not allowed", "", m["rest"], m[0]) for m in _BANNED.finditer(clause)]
        for cue, before, rest, said in found:
            rest = _CLAUSE_END.sub("", rest).strip()
            if not rest or not _accepted(cue.lower(), before, rest):
                continue
            if rest.lower().startswith("be "):  # "replica-2 must not be used"
                subject = re.split(r"[,;:(]", before)[-1]
                rest, said = f"{subject} {rest[3:]}", f"{subject.strip()} {cue} {rest}"
            words = _content(rest)
            if 0 < len(words) <= 5 and not set(words) <= _ACTION_STEMS:
                out.append(Constraint(_CLAUSE_END.sub("", said).strip(), words))
    return out


def _acts(clause: str, words: tuple[str, ...]) -> str | None:
    """How `clause` says its agent does something, if it does: a first-person decision ("I'll",
    "let's") or an opening verb ("Booking …") that is an action or a forbidden word."""
    start = _OPENING.sub("", clause, count=1)
    candidates = [(m["verb"], m["next"] or "", m.start("verb")) for m in _MARKER.finditer(clause)]
    head = [*start.split()[:2], "", ""]
    candidates.append((head[0], head[1], len(clause) - len(start)))
    for verb, after, at in candidates:
        stems = {_stem(verb), _stem(verb) + _stem(after)}
        if stems & set(words) or (stems & _ACTION_STEMS and not stems & _LOOKING_STEMS):
            if verb.lower().endswith(("ing", "ed", "s")) or verb.lower() in ("sent", "done"):
                return f"wrote {quoted(clause, 80)}"
            did = quoted(clause[at:].rstrip(".! "), 80)[1:-1]
            return f"decided to {did[0].lower()}{did[1:]}"
    return None


def broken_by(step: Step, constraint: Constraint) -> str | None:
    """What `step` does that `constraint` forbids, in words (long arguments read as prose)."""
    words = set(constraint.words)
    prose = [_CODE_BLOCK.sub(" ", step.content)]
    for tool, arguments in tool_calls(step):
        short = [re.sub(r"[_.]", " ", tool)]
        for key, value in json.loads(arguments).items():
            text = value if isinstance(value, str) else json.dumps(value)
            if len(text.split()) > 3:
                prose.append(text)
            elif text and text.lower() not in _FALSY:
                short.append(f"{key}={text}")
        said, names = " ".join(short), set(map(_stem, _NAME_PARTS.split(tool)))
        looking = names & _LOOKING_STEMS and not names & words
        if words <= _units(said) and not looking and not _EXCLUDED.search(said):
            shown = ", ".join(short[1:])
            return f"called {tool} with {quoted(shown, 60)}" if shown else f"called {tool}"
    for clause in (part for text in prose for part in _CLAUSES.split(text)):
        bare = _QUOTED.sub(" ", clause)
        if words <= _units(bare) and not _DECLINED.search(bare) and not _HEDGED.search(bare):
            did = _acts(bare.strip(), constraint.words)
            if did is not None:
                return did
    return None


@dataclass(frozen=True)
class BrokenConstraint:
    """A step doing what the task forbids."""

    kind: ClassVar[str] = "breaks-task-constraint"
    constraint: Constraint
    did: str

    def said_by(self, agent: str) -> str:
        """One sentence: what the agent did and what the task says."""
        return f"{agent} {self.did} although the task says {quoted(self.constraint.said, 80)}"


class TaskConstraints:
    """Walks a run: each acting step is checked against the prohibitions not broken yet."""

    def __init__(self, task: str = "") -> None:
        self._open = task_constraints(task)

    def push(self, step: Step, *, acting: bool) -> BrokenConstraint | None:
        found = [(c, d) for c in self._open if acting and (d := broken_by(step, c)) is not None]
        self._open = [c for c in self._open if c not in {c for c, _ in found}]
        return BrokenConstraint(*found[0]) if found else None
