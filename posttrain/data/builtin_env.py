"""Agent domain: tool-use environments and their generated tasks.

An environment is plain JSON state (`EnvState`: a key-value store, the calls made, the
final answer) plus five tools, so it travels in the partial-rollout queue and in
checkpoints like any other data. The model calls a tool by writing

    <tool_call>{"name": "calculator", "arguments": {"expression": "3 * (4 + 5)"}}</tool_call>

(the Hermes / Qwen convention, the serialization template of posttrain/data/chat.py, where
the call syntax lives); the environment answers with a `tool` message. A call
that cannot be parsed or executed gets an error message as its result, never an
exception. A turn without a tool call is the final answer.

Tools: `calculator(expression)`, `kv_set(key, value)`, `kv_get(key)`, `kv_delete(key)`,
`search(query)` over a small generated document set (fictional places, so the answers
cannot be known without searching).

Task families, each with a gold solution (the calls that solve it) for SFT and a check
of the final answer or of the final store:
- `calculator`: compute an expression; checked on the answer.
- `kv_store`: save given values under given keys; checked on the final store.
- `kv_recall`: read a key from a pre-filled store; checked on the answer.
- `lookup`: find a fact in the documents; checked on the answer.
- `lookup_store`: find a fact and save it under a key; checked on the final store.
"""

from __future__ import annotations

import ast
import json
import math
import operator
import random
import re
import warnings
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from posttrain.data.chat import TOOL_CALL, format_call, parse_calls, wants_tools  # noqa: F401 (the template's syntax)

MAX_CALLS_PER_TURN = 4
MAX_RESULT_CHARS = 400

SYSTEM_PROMPT = (
    'You can use tools. Call one with <tool_call>{"name": NAME, "arguments": {...}}</tool_call> '
    "and wait for its result. Tools: calculator(expression), kv_set(key, value), kv_get(key), "
    "kv_delete(key), search(query). When you are done, reply with the answer and no tool call."
)


# ---------------------------------------------------------------- environment state


@dataclass
class ToolCall:
    name: str  # empty for a call that could not be parsed
    arguments: dict[str, Any]
    result: str
    ok: bool


@dataclass
class EnvState:
    """Everything an episode changed; JSON-serializable through `asdict`."""

    kv: dict[str, str] = field(default_factory=dict)
    calls: list[dict] = field(default_factory=list)
    turns: int = 0
    final: str | None = None

    @classmethod
    def from_dict(cls, data: dict) -> EnvState:
        return cls(
            kv=dict(data.get("kv", {})),
            calls=list(data.get("calls", [])),
            turns=int(data.get("turns", 0)),
            final=data.get("final"),
        )

    def to_dict(self) -> dict:
        return asdict(self)


def initial_state(entry: dict) -> EnvState:
    return EnvState(kv={str(k): str(v) for k, v in entry.get("initial_kv", {}).items()})


# ---------------------------------------------------------------- tools


_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def calculate(expression: str) -> str:
    """Arithmetic on numbers only (no names, calls or attributes); bounded so that no
    expression can take long or grow huge."""
    if len(expression) > 200:
        raise ValueError("expression longer than 200 characters")
    try:
        with warnings.catch_warnings():  # e.g. "invalid decimal literal" for `2x`: an error below anyway
            warnings.simplefilter("ignore")
            tree = ast.parse(expression.replace("^", "**"), mode="eval")
    except (SyntaxError, ValueError):
        raise ValueError(f"cannot parse {expression!r}") from None

    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](walk(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 1e6):
                raise ValueError("power too large")
            value = _BINARY[type(node.op)](left, right)
            if abs(value) > 1e18:
                raise ValueError("result too large")
            return value
        raise ValueError(f"only numbers and + - * / // % ** ( ) are allowed, not {type(node).__name__}")

    try:
        value = walk(tree)
    except ZeroDivisionError:
        raise ValueError("division by zero") from None
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("result is not finite")
        if value.is_integer():
            return str(int(value))
        return f"{value:.6g}"
    return str(value)


TOOLS: dict[str, tuple[str, ...]] = {  # name -> required arguments
    "calculator": ("expression",),
    "kv_set": ("key", "value"),
    "kv_get": ("key",),
    "kv_delete": ("key",),
    "search": ("query",),
}


def run_tool(state: EnvState, name: str, arguments: dict[str, Any], corpus_seed: int) -> str:
    """Execute one call on `state`; raises ValueError with a message for the model."""
    if name not in TOOLS:
        raise ValueError(f"unknown tool {name!r} (tools: {', '.join(TOOLS)})")
    missing = [a for a in TOOLS[name] if a not in arguments]
    extra = [a for a in arguments if a not in TOOLS[name]]
    if missing or extra:
        raise ValueError(
            f"{name} takes arguments {', '.join(TOOLS[name])}"
            + (f"; missing {', '.join(missing)}" if missing else "")
            + (f"; unexpected {', '.join(map(str, extra))}" if extra else "")
        )
    args = {k: _text(v) for k, v in arguments.items()}
    if name == "calculator":
        return calculate(args["expression"])
    if name == "kv_set":
        if len(state.kv) >= 64 and args["key"] not in state.kv:
            raise ValueError("the store is full (64 keys)")
        state.kv[args["key"][:100]] = args["value"][:200]
        return "ok"
    if name == "kv_get":
        if args["key"] not in state.kv:
            raise ValueError(f"no key {args['key']!r} (keys: {', '.join(sorted(state.kv)) or 'none'})")
        return state.kv[args["key"]]
    if name == "kv_delete":
        if state.kv.pop(args["key"], None) is None:
            raise ValueError(f"no key {args['key']!r}")
        return "ok"
    return search(corpus(corpus_seed), args["query"])


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float, bool)) or value is None:
        return json.dumps(value)
    raise ValueError(f"arguments must be strings or numbers, got {type(value).__name__}")


def step(state: EnvState, turn_text: str, corpus_seed: int) -> str | None:
    """Apply one model turn. Returns the tool message to send back, or None when the turn
    is the final answer (recorded in `state.final`)."""
    state.turns += 1
    if not wants_tools(turn_text):
        state.final = turn_text.strip()
        return None
    calls, errors = parse_calls(turn_text)
    results = list(errors)
    state.calls += [asdict(ToolCall("", {}, error, False)) for error in errors]  # malformed: no name
    for name, arguments in calls[:MAX_CALLS_PER_TURN]:
        try:
            result, ok = run_tool(state, name, arguments, corpus_seed), True
        except ValueError as exc:
            result, ok = f"error: {exc}", False
        state.calls.append(asdict(ToolCall(name, arguments, result, ok)))
        results.append(result)
    if len(calls) > MAX_CALLS_PER_TURN:
        results.append(f"error: at most {MAX_CALLS_PER_TURN} tool calls per turn; the rest were ignored")
    message = "\n".join(results)
    return message if len(message) <= MAX_RESULT_CHARS else message[:MAX_RESULT_CHARS] + " ...(cut)"


# ---------------------------------------------------------------- documents


_SYLLABLES = ["zor", "bia", "quel", "tan", "mir", "os", "ka", "lun", "dor", "vex", "ari", "pel", "sun", "tho", "ren"]
_KINDS = ["island", "city", "valley", "kingdom", "river town", "mountain village"]
_COLORS = ["red", "blue", "green", "amber", "violet", "white", "black", "silver"]
ATTRIBUTES = {
    "population": "the population of {}",
    "founded": "the year {} was founded",
    "flag color": "the flag color of {}",
    "mayor": "the mayor of {}",
}


@dataclass(frozen=True)
class Document:
    doc_id: str
    name: str
    facts: tuple[tuple[str, str], ...]  # (attribute, value)

    @property
    def text(self) -> str:
        facts = dict(self.facts)
        article = "an" if facts["kind"][0] in "aeiou" else "a"
        return (
            f"{self.name} is {article} {facts['kind']}. Its population is {facts['population']}. "
            f"It was founded in {facts['founded']}. Its flag color is {facts['flag color']}. "
            f"Its mayor is {facts['mayor']}."
        )


def _name(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


@lru_cache(maxsize=16)
def corpus(seed: int, size: int = 40) -> tuple[Document, ...]:
    rng = random.Random(seed)
    names: list[str] = []
    while len(names) < size:
        name = _name(rng)
        if name not in names:
            names.append(name)
    return tuple(
        Document(
            f"d{i}",
            name,
            (
                ("kind", rng.choice(_KINDS)),
                ("population", str(rng.randint(100, 99999))),
                ("founded", str(rng.randint(1000, 1999))),
                ("flag color", rng.choice(_COLORS)),
                ("mayor", _name(rng)),
            ),
        )
        for i, name in enumerate(names)
    )


def search(docs: tuple[Document, ...], query: str, top: int = 2) -> str:
    words = set(re.findall(r"[a-z0-9]+", query.lower()))
    if not words:
        raise ValueError("empty query")
    scored = sorted(
        ((len(words & set(re.findall(r"[a-z0-9]+", d.text.lower()))), i) for i, d in enumerate(docs)),
        key=lambda x: (-x[0], x[1]),
    )
    hits = [docs[i] for score, i in scored[:top] if score > 0]
    if not hits:
        return "no results"
    return "\n".join(f"[{d.doc_id}] {d.text}" for d in hits)


# ---------------------------------------------------------------- tasks


@dataclass(frozen=True)
class AgentTaskSpec:
    """One generated task: the prompt, how it is checked, and its gold calls."""

    family: str
    prompt: str
    check: dict[str, Any]  # {"answer": str} and/or {"kv": {key: value}}, {"tools": [name]}
    gold_calls: tuple[tuple[str, dict], ...]
    initial_kv: dict[str, str] = field(default_factory=dict)


def _expression(rng: random.Random, max_operand: int, max_terms: int) -> str:
    terms = [str(rng.randint(2, max_operand)) for _ in range(rng.randint(2, max_terms))]
    ops = [rng.choice(["+", "-", "*"]) for _ in terms[1:]]
    return terms[0] + "".join(f" {op} {t}" for op, t in zip(ops, terms[1:]))


def _key(rng: random.Random) -> str:
    return rng.choice(["color", "size", "city", "code", "note", "owner", "level", "score"]) + str(rng.randint(1, 9))


def _fact(rng: random.Random, docs: tuple[Document, ...]) -> tuple[Document, str, str]:
    doc = rng.choice(docs)
    attribute = rng.choice(sorted(ATTRIBUTES))
    return doc, attribute, dict(doc.facts)[attribute]


def generate_task(
    family: str, rng: random.Random, corpus_seed: int, max_operand: int = 99, max_terms: int = 3
) -> AgentTaskSpec:
    if family == "calculator":
        expr = _expression(rng, max_operand, max_terms)
        return AgentTaskSpec(
            family,
            f"Use the calculator to compute {expr}. Reply with the number only.",
            {"answer": calculate(expr), "tools": ["calculator"]},
            (("calculator", {"expression": expr}),),
        )
    if family == "kv_store":
        pairs = {_key(rng): rng.choice(_COLORS + [str(rng.randint(1, 999))]) for _ in range(rng.randint(1, 2))}
        asks = " and ".join(f"{v!r} under the key {k!r}" for k, v in pairs.items())
        return AgentTaskSpec(
            family,
            f"Save {asks}. Reply done when finished.",
            {"kv": pairs},
            tuple(("kv_set", {"key": k, "value": v}) for k, v in pairs.items()),
        )
    if family == "kv_recall":
        store = {_key(rng): str(rng.randint(1, 999)) for _ in range(4)}
        key = rng.choice(sorted(store))
        return AgentTaskSpec(
            family,
            f"What value is stored under the key {key!r}? Reply with the value only.",
            {"answer": store[key], "tools": ["kv_get"]},
            (("kv_get", {"key": key}),),
            initial_kv=store,
        )
    docs = corpus(corpus_seed)
    doc, attribute, value = _fact(rng, docs)
    if family == "lookup":
        return AgentTaskSpec(
            family,
            f"Search the documents for {ATTRIBUTES[attribute].format(doc.name)}. Reply with the answer only.",
            {"answer": value, "tools": ["search"]},
            (("search", {"query": f"{doc.name} {attribute}"}),),
        )
    if family == "lookup_store":
        key = _key(rng)
        return AgentTaskSpec(
            family,
            f"Find {ATTRIBUTES[attribute].format(doc.name)} in the documents and save it "
            f"under the key {key!r}. Reply done when finished.",
            {"kv": {key: value}, "tools": ["search"]},
            (("search", {"query": f"{doc.name} {attribute}"}), ("kv_set", {"key": key, "value": value})),
        )
    raise ValueError(f"unknown agent task family {family!r} (families: {', '.join(FAMILIES)})")


FAMILIES = ("calculator", "arithmetic", "kv_store", "kv_recall", "lookup", "lookup_store")


def gold_turns(spec: AgentTaskSpec, corpus_seed: int) -> list[tuple[str, str]]:
    """The gold episode as (role, content) turns after the prompt: one call per turn,
    the environment's real results, then the final answer."""
    state = EnvState(kv=dict(spec.initial_kv))
    turns = []
    for name, arguments in spec.gold_calls:
        turns.append(("assistant", format_call(name, arguments)))
        result = step(state, turns[-1][1], corpus_seed)
        turns.append(("tool", result or ""))
    turns.append(("assistant", spec.check.get("answer", "done")))
    return turns


def normalize_answer(text: str) -> str:
    text = text.strip().strip(".").strip()
    text = re.sub(r"^(the answer is|answer:)\s*", "", text, flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", text.strip("'\"` ")).lower()


def final_line(text: str) -> str:
    """The answer of a final turn: its last non-empty line (a scratchpad may come before it)."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def check_episode(check: dict, state: EnvState) -> tuple[float, str, dict]:
    """Score 1 only if every check holds: the final answer and/or the final store."""
    failures = []
    details: dict[str, Any] = {"final": state.final, "kv": state.kv, "calls": len(state.calls), "turns": state.turns}
    if "answer" in check:
        if state.final is None:
            failures.append("no final answer (the episode ended on a tool call or ran out of turns or tokens)")
        elif normalize_answer(final_line(state.final)) != normalize_answer(str(check["answer"])):
            failures.append(f"answer {state.final[:80]!r} != expected {check['answer']!r}")
    for key, value in check.get("kv", {}).items():
        if state.kv.get(key) != str(value):
            failures.append(f"store[{key!r}] = {state.kv.get(key)!r}, expected {value!r}")
    failures += _ungrounded(check, state)
    if failures:
        return 0.0, "; ".join(failures), details
    return 1.0, "success: " + ", ".join(f"{k} checked" for k in check), details


def _ungrounded(check: dict, state: EnvState) -> list[str]:
    """Why the episode did not use the tools its task requires (`check["tools"]`), or []:
    each must have been called without error, and a checked answer must be read from one
    of their real results (a `<tool_response>` the model wrote itself, a failed call or a
    call whose argument is the answer (`calculator("781")`) grounds nothing)."""
    tools = check.get("tools", [])
    done = [c for c in state.calls if c.get("ok") and c.get("name") in tools]
    missing = [t for t in tools if t not in {c["name"] for c in done}]
    if missing:
        return [f"the task requires a successful call of {', '.join(missing)}; none was made"]
    if "answer" not in check or not tools or state.final is None:
        return []
    answer = normalize_answer(str(check["answer"]))
    pattern = re.compile(rf"(?<![\w.-]){re.escape(answer)}(?![\w]|\.\d)")
    for call in done:
        if pattern.search(str(call.get("result", "")).lower()) and answer not in {
            normalize_answer(str(v)) for v in call.get("arguments", {}).values()
        }:
            return []
    return [f"the answer {answer!r} is in no result of the required tools ({', '.join(tools)})"]


# ---------------------------------------------------------------- task source


def agent_tasks(source) -> list:
    """`AgentTasks` config -> `Task`s (verifier `agent`) of the source's part; the entry
    carries the check, the initial store, the document set's seed, the turn limit and the
    gold episode (and, for arithmetic, the scratchpads of answering without the tool)."""
    from posttrain.data.reasoning import chain_entry, chain_problems, in_eval_part, keep
    from posttrain.types import Message, Task

    rng = random.Random(source.seed)
    prompt = SYSTEM_PROMPT if source.system_prompt is None else source.system_prompt
    system = (Message("system", prompt),) if prompt else ()
    count = sum(source.families[i % len(source.families)] == "arithmetic" for i in range(source.size))
    problems = iter(chain_problems(count, source.seed, source.part, *source.terms) if count else [])
    tasks = []
    for i in range(source.size):
        family = source.families[i % len(source.families)]
        extra = {}
        if family == "arithmetic":
            terms = next(problems)
            spec = arithmetic_task(terms)
            extra = {"scratchpads": chain_entry(terms)["scratchpads"]}
        else:
            spec = generate_task(family, rng, source.corpus_seed, source.max_operand, source.max_terms)
            while not keep(source.part, in_eval_part(spec.prompt)):
                spec = generate_task(family, rng, source.corpus_seed, source.max_operand, source.max_terms)
        gold = gold_turns(spec, source.corpus_seed)
        entry = {
            "check": spec.check,
            "initial_kv": spec.initial_kv,
            "corpus_seed": source.corpus_seed,
            "max_turns": source.max_turns,
            "gold": [list(t) for t in gold],
            **extra,
        }
        tasks.append(
            Task(
                task_id=f"agent/{family}/{source.seed}/{i}",
                family=f"agent_{family}",
                messages=system + (Message("user", spec.prompt),),
                answer=gold[-1][1],
                entry=entry,
                verifier="agent",
            )
        )
    return tasks


def arithmetic_task(terms: tuple[int, ...]) -> AgentTaskSpec:
    """A chain of additions: one calculator call solves it; answering without the tool takes
    a running sum in the head (the task's scratchpads)."""
    expr = " + ".join(map(str, terms))
    return AgentTaskSpec(
        "arithmetic", f"Compute {expr}", {"answer": calculate(expr)}, (("calculator", {"expression": expr}),)
    )
