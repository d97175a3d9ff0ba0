"""The fixed wording of the verifier's text: the prompt's instruction, the chain of thought's sentence templates
and the verdict line; and :func:`template_corpus`, those templates filled in, for a tokenizer to learn from.

No imports beyond the standard library: the ``base`` stage reads :func:`template_corpus` when
``model.tokenizer_extra`` names ``verification`` (the tiny tokenizer then learns these phrases; docs/vegas.md §6),
and :mod:`.text` builds prompts and chains of thought from the same strings.
"""

from __future__ import annotations

from collections.abc import Iterator

VERDICT_KEY = "action_is_correct"
# how many times the base stage repeats template_corpus() in the tokenizer's corpus (model.tokenizer_extra):
# enough for its phrases to win BPE merges against the distilled corpus (measured in docs/vegas.md §6)
TEMPLATE_REPEAT = 20

INSTRUCTION = (
    "Is the candidate action correct now? Reason in one or two short sentences, then end with the line "
    f"'{VERDICT_KEY}: yes' or the line '{VERDICT_KEY}: no'."
)
PROMPT_FIELDS = ("Candidate reasoning: ", "Candidate action: ")

# one sentence each, several wordings; {g} goal, {h} held, {p} place, {a} action, {why} the simulator's reason
GOAL = ("The task: {g}.", "Goal: {g}.", "I need to {g}.")
STATE = (
    "Holding {h}; at {p}.",
    "In hand: {h}. Place: {p}.",
    "The robot holds {h} and stands at {p}.",
)
EXEC_OK = ("'{a}' can be done here.", "'{a}' is possible now.", "The simulator would accept '{a}'.")
EXEC_BAD = ("'{a}' would fail: {why}.", "'{a}' is not possible now: {why}.", "The simulator would reject '{a}': {why}.")
# a find's argument and the task ({o} the object), for ``synth.find_sentence: relevance``: whether a find executes
# depends on objects the prompt does not list, its relevance to the task does not
FIND_ROLE = {
    "task": ("The task needs the {o}.", "The {o} is part of the task.", "The goal names the {o}."),
    "tool": ("The task uses the {o}.", "The {o} is needed to do the task.", "The task needs the {o} as a tool."),
    "here": ("The robot is already at the {o}.", "It stands at the {o} already.", "The {o} is already here."),
    "other": ("The task does not need the {o}.", "The {o} is not part of the task.", "The goal does not name the {o}."),
}
BY_REASON = {
    "goal": ("It completes the task.", "After it the goal is reached.", "This finishes the task."),
    "shortens": ("It brings the goal closer.", "It is a step toward the goal.", "It makes progress on the task."),
    "tidy": (
        "It closes what was opened, as the task's expert would.",
        "Closing it keeps the room tidy.",
        "It tidies up after using it.",
    ),
    "no_progress": (
        "It does not bring the goal closer.",
        "It makes no progress on the task.",
        "It leaves the task where it was.",
    ),
    "lengthens": (
        "It leads away from the goal and must be undone.",
        "It makes the task longer.",
        "It would have to be undone later.",
    ),
    "unplannable": (
        "After it the task can no longer be done.",
        "It makes the goal unreachable.",
        "It ruins the task.",
    ),
    "invalid": ("A failed action wastes a step.", "It would only add an invalid action.", "It cannot help."),
}
GOAL_PHRASES = (
    "put a {o} in the {p}",
    "clean a {o} and put it in the {p}",
    "heat a {o} and put it in the {p}",
    "cool a {o} and put it in the {p}",
    "put two {o} in the {p}",
    "hold a {o} under a lit {p}",
)
WHY = (
    "cannot pick up the {o}: it is not within reach",
    "robot is currently holding {o}",
    "the {p} is closed; open it first",
    "{o} is not visible because it is in {p}",
    "the {p} is not within reach; find it first",
)

# a few EB type names to fill the templates with (the phrases around them are what the tokenizer should learn)
_OBJECTS = ("Apple", "Mug", "Cloth", "Book", "KeyChain", "Plate", "Vase", "RemoteControl")
_PLACES = ("CounterTop", "Drawer", "Shelf", "Sink", "Desk", "DeskLamp", "SideTable", "Cabinet_2")


def template_corpus() -> Iterator[str]:
    """Every template filled with a few type names: the verification prompt's fixed lines, each chain-of-thought
    sentence in each wording, both verdict lines (each text at least twice: a BPE merge needs a frequency of 2)."""
    for i, (o, p) in enumerate(zip(_OBJECTS, _PLACES, strict=True)):
        q = _PLACES[(i + 3) % len(_PLACES)]
        yield INSTRUCTION
        yield f"{PROMPT_FIELDS[0]}{i} done, {i + 2} left; next find the {o.lower()}.\n{PROMPT_FIELDS[1]}{i} find a {o}"
        for g in GOAL_PHRASES:
            for t in GOAL:
                yield t.format(g=g.format(o=o, p=p))
        for t in STATE:
            yield t.format(h=f"the {o}", p=f"the {q}")
            yield t.format(h="nothing", p="the middle of the room")
        for t in EXEC_OK:
            yield t.format(a=f"find a {o}")
        for t in EXEC_BAD:
            for why in WHY:
                yield t.format(a=f"pick up the {o}", why=why.format(o=o, p=q))
        for wordings in (*BY_REASON.values(), *FIND_ROLE.values()):
            for t in wordings:
                yield t.format(o=o)
        yield f"{VERDICT_KEY}: yes"
        yield f"{VERDICT_KEY}: no"


__all__ = [
    "BY_REASON",
    "EXEC_BAD",
    "EXEC_OK",
    "FIND_ROLE",
    "GOAL",
    "GOAL_PHRASES",
    "INSTRUCTION",
    "PROMPT_FIELDS",
    "STATE",
    "TEMPLATE_REPEAT",
    "VERDICT_KEY",
    "WHY",
    "template_corpus",
]
